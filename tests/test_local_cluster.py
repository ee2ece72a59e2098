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


def test_netns_link_names_fit_linux_and_stay_apart_per_cluster():
    short = lc.netns_links("nsdev", 2)
    assert short == {"mgmt_bridge": "cm-nsdev", "fabric_bridge": "cf-nsdev",
                     "veths": [("mnsdev-1", "fnsdev-1"), ("mnsdev-2", "fnsdev-2")]}
    long_a = lc.netns_links("a-very-long-cluster-name", lc.MAX_NODES)
    long_b = lc.netns_links("a-very-long-cluster-other", lc.MAX_NODES)
    names = [long_a["mgmt_bridge"], long_a["fabric_bridge"], *[n for pair in long_a["veths"] for n in pair]]
    assert max(len(name) for name in names) <= 15
    assert len(set(names)) == len(names)
    assert long_a["mgmt_bridge"] != long_b["mgmt_bridge"]


def test_netns_nodes_get_a_management_and_a_fabric_address_the_host_254():
    nodes, host_mgmt, host_fabric = lc.netns_nodes(2, "nsdev")
    mgmt, fabric = lc.netns_subnets("nsdev")
    assert [n["name"] for n in nodes] == ["node1", "node2"]
    assert [n["address"] for n in nodes] == [str(mgmt[1]), str(mgmt[2])]
    assert [n["fabric"] for n in nodes] == [str(fabric[1]), str(fabric[2])]
    assert (host_mgmt, host_fabric) == (str(mgmt[254]), str(fabric[254]))
    assert mgmt.is_private and fabric.is_private and not mgmt.overlaps(fabric)
    with pytest.raises(lc.ClusterError, match="--nodes"):
        lc.netns_nodes(lc.MAX_NODES + 1, "nsdev")


def test_netns_networks_never_shadow_a_route_of_the_host():
    mgmt, _ = lc.netns_subnets("nsdev", ["192.0.2.0/24"])
    with pytest.raises(lc.ClusterError, match="overlap this machine's route 10.0.0.0/8"):
        lc.netns_subnets("nsdev", ["192.0.2.0/24", "10.0.0.0/8"])
    with pytest.raises(lc.ClusterError, match="choose another --name"):
        lc.netns_subnets("nsdev", [str(mgmt)])


def test_netns_inventory_reaches_nodes_on_management_and_runs_mpi_on_the_fabric(tmp_path):
    nodes, _, _ = lc.netns_nodes(2, "nsdev")
    text = lc.render_inventory(nodes, 22, tmp_path / "key", tmp_path / "known_hosts", tmp_path / "secrets")
    hosts = yaml.safe_load(text)["all"]["children"]["cluster"]["children"]["training"]["hosts"]
    assert hosts["node1"] == {"ansible_host": nodes[0]["address"], "cluster_address": nodes[0]["fabric"],
                              "cluster_data_host": nodes[0]["fabric"], "cluster_mpi_interface": "fab0"}


def test_interface_bytes_reads_ip_json_counters():
    shown = ('[{"ifname": "lo", "stats64": {"rx": {"bytes": 10}, "tx": {"bytes": 11}}},'
             ' {"ifname": "fab0", "stats64": {"rx": {"bytes": 2500000}, "tx": {"bytes": 2400000}}},'
             ' {"ifname": "tunl0"}]')
    assert lc.interface_bytes(shown) == {"lo": (10, 11), "fab0": (2500000, 2400000)}


def test_apt_proxy_listens_on_the_management_bridge_only_and_keeps_its_cache_in_the_state_dir(tmp_path):
    config = lc.apt_proxy_config(tmp_path, "10.147.0.254")
    assert f"CacheDir: {tmp_path}/cache" in config
    assert "BindAddress: 10.147.0.254\n" in config
    assert "Port: 3142" in config
    # No Remap: the proxy fetches what the node's sources name (the machine's own mirror).
    assert "Remap" not in config


def test_node_init_listens_on_both_networks_in_netns_and_binds_its_address_on_loopback():
    netns, loopback = lc.NODE_INIT.split("\nelse\n")
    netns = netns.split('if [ -n "${NODE_FABRIC_ADDRESS:-}" ]; then')[1]
    assert 'ListenAddress %s:%s\\nListenAddress %s:%s' in netns
    assert "Acquire::http::Proxy" in netns
    # Its own namespace: ssh leaves from the address the route gives, no BindAddress.
    assert "BindAddress" not in netns and "rm -f /etc/ssh/ssh_config.d/10-local-cluster.conf" in netns
    # One network stack for all: each node leaves from its own address.
    assert "printf 'BindAddress %s\\n' \"$NODE_ADDRESS\"" in loopback
    assert "Proxy" not in loopback
    # systemd becomes PID 1 last, after the boot id and the host keys.
    assert lc.NODE_INIT.rstrip().endswith("exec /sbin/init")
    assert lc.NODE_INIT.index("/proc/sys/kernel/random/boot_id") < lc.NODE_INIT.index("ssh-keygen -A")


def option(argv, name):
    """Every value given to a docker run option."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == name]


def test_a_node_boots_systemd_with_what_it_needs_and_no_privileged(tmp_path):
    node = {"name": "node1", "address": "127.0.0.11"}
    argv = lc.node_run_argv("cntk-x-node1", node, 22, "img:tag", "io.cntk-cluster=x", tmp_path / "shared",
                            tmp_path / "hosts" / "node1")
    assert argv[-1] == "img:tag"  # the image's CMD: the init script, which execs systemd
    assert "--privileged" not in argv and "--init" not in argv
    assert option(argv, "--cap-add") == ["SYS_ADMIN", "SYS_BOOT"]
    assert option(argv, "--tmpfs") == ["/run", "/run/lock"]
    assert "/sys/fs/cgroup:/sys/fs/cgroup:rw" in option(argv, "--volume")
    assert option(argv, "--cgroupns") == ["host"]
    assert "container=docker" in option(argv, "-e")
    assert option(argv, "--stop-signal") == ["SIGRTMIN+3"]
    # A reboot inside (exit 129) starts it again; docker stop/kill leaves it stopped.
    assert option(argv, "--restart") == ["on-failure"]
    assert option(argv, "--network") == ["host"] and option(argv, "--hostname") == ["node1"]
    assert f"{tmp_path / 'hosts' / 'node1'}:/etc/hosts" in option(argv, "--volume")
    assert "NODE_FABRIC_ADDRESS" not in " ".join(argv)


def test_a_netns_node_joins_its_holders_namespace(tmp_path):
    node = {"name": "node2", "address": "10.147.0.2", "fabric": "10.147.1.2"}
    holder = lc.holder_run_argv("cntk-x-node2", node, "img:tag", "io.cntk-cluster=x")
    assert lc.holder_name("cntk-x-node2") == "cntk-x-node2-net"
    assert option(holder, "--name") == ["cntk-x-node2-net"]
    assert option(holder, "--network") == ["none"] and option(holder, "--hostname") == ["node2"]
    assert "io.cntk-cluster.holder-of=cntk-x-node2" in option(holder, "--label")
    assert holder[-3:] == ["img:tag", "sleep", "infinity"] and "--init" in holder
    argv = lc.node_run_argv("cntk-x-node2", node, 22, "img:tag", "io.cntk-cluster=x", tmp_path, tmp_path / "h")
    assert option(argv, "--network") == ["container:cntk-x-node2-net"]
    assert option(argv, "--hostname") == []  # Docker refuses it with a joined namespace; the holder's is used
    assert {"NODE_FABRIC_ADDRESS=10.147.1.2", "NODE_APT_PROXY=http://10.147.0.254:3142"} <= set(option(argv, "-e"))
    assert {"io.cntk-cluster.network=netns", "io.cntk-cluster.fabric=10.147.1.2"} <= set(option(argv, "--label"))
