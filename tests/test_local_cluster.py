"""The local cluster tool's logic: apt sources, image tags, addresses, files it writes."""

import socket

import pytest
import yaml

import local_cluster as lc

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_sources_give_every_uri_and_suite():
    entries = lc.parse_apt_sources({"debian.sources": DEB822})
    assert ("http://mirror.example/debian", "bookworm", ["main"]) in entries
    assert ("http://mirror.example/debian", "bookworm-updates", ["main"]) in entries
    assert ("http://mirror.example/debian-security", "bookworm-security", ["main"]) in entries


def test_one_line_sources_with_options_and_comments():
    text = (
        "# deb http://commented.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\n"
    )
    assert lc.parse_apt_sources({"sources.list": text}) == [
        ("http://mirror.example/debian", "bookworm", ["main", "contrib"])
    ]


def test_disabled_deb822_stanza_is_ignored():
    text = "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n"
    assert lc.parse_apt_sources({"off.sources": text}) == []


def test_mirror_is_the_main_archive_not_security_or_updates():
    entries = [
        ("http://mirror.example/debian-security", "bookworm-security", ["main"]),
        ("https://deb.nodesource.example/node_20.x", "nodistro", ["main"]),
        ("http://mirror.example/debian", "bookworm", ["main"]),
    ]
    assert lc.debian_mirror(entries) == "http://mirror.example/debian"


def test_no_debian_archive_is_a_clear_error():
    with pytest.raises(lc.ClusterError, match="no Debian archive"):
        lc.debian_mirror([("http://mirror.example/debian-security", "bookworm-security", ["main"])])


def test_image_tag_follows_the_recipe():
    base = lc.image_tag("bookworm", ["python3", "openssh-server"], "init")
    assert base == lc.image_tag("bookworm", ["openssh-server", "python3"], "init")
    assert base != lc.image_tag("bookworm", ["openssh-server", "python3", "rsync"], "init")
    assert base != lc.image_tag("bookworm", ["openssh-server", "python3"], "init2")
    assert base != lc.image_tag("trixie", ["openssh-server", "python3"], "init")


def test_nodes_get_consecutive_loopback_addresses():
    assert lc.nodes_for(3) == [
        {"name": "node1", "address": "127.0.0.11"},
        {"name": "node2", "address": "127.0.0.12"},
        {"name": "node3", "address": "127.0.0.13"},
    ]
    assert lc.node_addresses(2, "127.0.0.21") == ["127.0.0.21", "127.0.0.22"]


@pytest.mark.parametrize("count", [0, -1, lc.MAX_NODES + 1])
def test_node_count_out_of_range_is_refused(count):
    with pytest.raises(lc.ClusterError, match="--nodes"):
        lc.node_addresses(count)


def test_addresses_never_leave_loopback():
    with pytest.raises(lc.ClusterError, match="outside 127.0.0.0/8"):
        lc.node_addresses(4, "127.255.255.253")


def test_known_hosts_lines_use_ssh_host_patterns():
    keys = ["ssh-ed25519 AAAAkey1 root@node1", "ecdsa-sha2-nistp256 AAAAkey2 root@node1"]
    assert lc.known_hosts_lines("127.0.0.11", 22, keys) == [
        "127.0.0.11 ssh-ed25519 AAAAkey1",
        "127.0.0.11 ecdsa-sha2-nistp256 AAAAkey2",
    ]
    assert lc.known_hosts_lines("127.0.0.11", 2222, keys[:1]) == ["[127.0.0.11]:2222 ssh-ed25519 AAAAkey1"]
    with pytest.raises(lc.ClusterError, match="unreadable host key"):
        lc.known_hosts_lines("127.0.0.11", 22, ["garbage"])


def test_inventory_is_valid_yaml_that_pins_host_keys(tmp_path):
    text = lc.render_inventory(lc.nodes_for(2), 22, tmp_path / "key", tmp_path / "known_hosts", tmp_path / "secrets")
    inventory = yaml.safe_load(text)
    hosts = inventory["all"]["children"]["cluster"]["children"]["training"]["hosts"]
    assert hosts == {
        "node1": {"ansible_host": "127.0.0.11", "cluster_address": "127.0.0.11"},
        "node2": {"ansible_host": "127.0.0.12", "cluster_address": "127.0.0.12"},
    }
    common = inventory["all"]["vars"]["ansible_ssh_common_args"]
    assert f"UserKnownHostsFile={tmp_path / 'known_hosts'}" in common
    assert "StrictHostKeyChecking=yes" in common
    assert inventory["all"]["vars"]["ssh_mesh_key_dir"] == str(tmp_path / "secrets")


def test_address_in_use_sees_a_listener():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert lc.address_in_use("127.0.0.1", port)
    assert not lc.address_in_use("127.0.0.1", port)


def test_cluster_names_are_checked():
    with pytest.raises(lc.ClusterError, match="--name"):
        lc.Cluster("Bad Name")
    assert lc.Cluster("local").inventory_dir == lc.LOCAL_INVENTORY
    assert lc.Cluster("molecule").inventory_dir == lc.ENGINE_DIR / "molecule" / "inventory"


def test_missing_controller_tools_are_installed_from_their_packages(monkeypatch):
    installed = []
    monkeypatch.setattr(lc.shutil, "which", lambda tool: None if tool in ("rsync", "ssh-keygen") else "/usr/bin/" + tool)
    monkeypatch.setattr(lc, "apt_install", lambda *packages: installed.extend(packages))
    lc.ensure_controller_tools()
    assert installed == ["openssh-client", "rsync"]


def test_present_controller_tools_install_nothing(monkeypatch):
    monkeypatch.setattr(lc.shutil, "which", lambda tool: "/usr/bin/" + tool)
    monkeypatch.setattr(lc, "apt_install", lambda *packages: pytest.fail(f"installed {packages}"))
    lc.ensure_controller_tools()


def test_backend_cntk_ships_the_controllers_python_with_the_labelled_stand_in(tmp_path):
    settings, line = lc.backend_settings("auto", cache_dir=tmp_path, python_prefix=tmp_path / "3.6.15")
    assert settings == {"cluster_backend": "cntk", "cluster_device": "cpu", "cluster_openmpi_standin": True,
                        "cpython_prebuilt_prefix": str(tmp_path / "3.6.15")}
    assert line.startswith("backend cntk") and "stand-in" in line
    text = lc.render_inventory(lc.nodes_for(1), 22, tmp_path / "key", tmp_path / "known", tmp_path / "s",
                               backend=settings)
    assert yaml.safe_load(text)["all"]["vars"]["cpython_prebuilt_prefix"] == str(tmp_path / "3.6.15")


def test_backend_cntk_from_cached_sources_without_a_prebuilt(tmp_path):
    assert not lc.cached_python_sources(tmp_path)
    for name in ("Python-3.6.15.tgz", "openssl-1.1.1w.tar.gz"):
        (tmp_path / name).write_bytes(b"")
    settings, _ = lc.backend_settings("cntk", cache_dir=tmp_path, python_prefix=None)
    assert settings["cluster_backend"] == "cntk" and "cpython_prebuilt_prefix" not in settings


def test_backend_cntk_that_cannot_be_had_is_one_line_or_numpy(tmp_path):
    with pytest.raises(lc.ClusterError, match=r"^--backend cntk: no CPython 3\.6\.15 here .*nothing was changed"):
        lc.backend_settings("cntk", cache_dir=tmp_path, python_prefix=None)
    settings, line = lc.backend_settings("auto", cache_dir=tmp_path, python_prefix=None)
    assert settings == {"cluster_backend": "numpy"} and line.startswith("backend numpy, not cntk: no CPython")
    with pytest.raises(lc.ClusterError, match="choose cntk, numpy or auto"):
        lc.backend_settings("torch")


def test_each_debian_release_has_its_own_node_image():
    assert lc.image_ref() == lc.image_ref("bookworm")
    assert lc.image_ref("trixie") != lc.image_ref("bookworm")
    assert lc.NODE_SUITES[lc.NODE_SUITE] == "12"


def test_a_killed_nodes_closed_connections_do_not_hold_its_address():
    """The server side closes first (as a killed node's sshd does): its socket waits in TIME_WAIT on the node's
    address and port; only a listener counts as in use."""
    address = "127.0.0.250"
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, 0))
        port = listener.getsockname()[1]
        listener.listen()
        assert lc.address_in_use(address, port)
        client = socket.create_connection((address, port))
        server, _ = listener.accept()
        server.close()
        client.recv(1)
        client.close()
    assert lc.address_in_use(address, port) is False
