"""The node image: apt sources, the Debian mirror, image tags, the init script."""

import pytest

from local_cluster import ClusterError, image

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
    entries = image.parse_apt_sources({"debian.sources": DEB822})
    assert ("http://mirror.example/debian", "bookworm", ["main"]) in entries
    assert ("http://mirror.example/debian", "bookworm-updates", ["main"]) in entries
    assert ("http://mirror.example/debian-security", "bookworm-security", ["main"]) in entries


def test_one_line_sources_with_options_and_comments():
    text = (
        "# deb http://commented.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\n"
    )
    assert image.parse_apt_sources({"sources.list": text}) == [
        ("http://mirror.example/debian", "bookworm", ["main", "contrib"])
    ]


def test_disabled_deb822_stanza_is_ignored():
    text = "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n"
    assert image.parse_apt_sources({"off.sources": text}) == []


def test_mirror_is_the_main_archive_not_security_or_updates():
    entries = [
        ("http://mirror.example/debian-security", "bookworm-security", ["main"]),
        ("https://deb.nodesource.example/node_20.x", "nodistro", ["main"]),
        ("http://mirror.example/debian", "bookworm", ["main"]),
    ]
    assert image.debian_mirror(entries) == "http://mirror.example/debian"


def test_no_debian_archive_is_a_clear_error():
    with pytest.raises(ClusterError, match="no Debian archive"):
        image.debian_mirror([("http://mirror.example/debian-security", "bookworm-security", ["main"])])


def test_image_tag_follows_the_recipe():
    base = image.image_tag("bookworm", ["python3", "openssh-server"], "init")
    assert base == image.image_tag("bookworm", ["openssh-server", "python3"], "init")
    assert base != image.image_tag("bookworm", ["openssh-server", "python3", "rsync"], "init")
    assert base != image.image_tag("bookworm", ["openssh-server", "python3"], "init2")
    assert base != image.image_tag("trixie", ["openssh-server", "python3"], "init")


def test_each_debian_release_has_its_own_node_image():
    assert image.image_ref() == image.image_ref("bookworm")
    assert image.image_ref("trixie") != image.image_ref("bookworm")
    assert image.NODE_SUITES[image.NODE_SUITE] == "12"


def test_node_init_listens_on_both_networks_in_netns_and_binds_its_address_on_loopback():
    netns, loopback = image.NODE_INIT.split("\nelse\n")
    netns = netns.split('if [ -n "${NODE_FABRIC_ADDRESS:-}" ]; then')[1]
    assert 'ListenAddress %s:%s\\nListenAddress %s:%s' in netns
    assert "Acquire::http::Proxy" in netns
    # Its own namespace: ssh leaves from the address the route gives, no BindAddress.
    assert "BindAddress" not in netns and "rm -f /etc/ssh/ssh_config.d/10-local-cluster.conf" in netns
    # One network stack for all: each node leaves from its own address.
    assert "printf 'BindAddress %s\\n' \"$NODE_ADDRESS\"" in loopback
    assert "Proxy" not in loopback
    # systemd becomes PID 1 last, after the boot id and the host keys.
    assert image.NODE_INIT.rstrip().endswith("exec /sbin/init")
    assert image.NODE_INIT.index("/proc/sys/kernel/random/boot_id") < image.NODE_INIT.index("ssh-keygen -A")
