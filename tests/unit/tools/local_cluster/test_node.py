"""`docker run` of a node and of its namespace holder."""

from local_cluster.node import holder_name, holder_run_argv, node_run_argv


def option(argv, name):
    """Every value given to a docker run option."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == name]


def test_a_node_boots_systemd_with_what_it_needs_and_no_privileged(tmp_path):
    node = {"name": "node1", "address": "127.0.0.11"}
    argv = node_run_argv("cntk-x-node1", node, 22, "img:tag", "io.cntk-cluster=x", tmp_path / "shared",
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
    assert "NET_ADMIN" not in option(argv, "--cap-add")


def test_a_netns_node_joins_its_holders_namespace(tmp_path):
    node = {"name": "node2", "address": "10.147.0.2", "fabric": "10.147.1.2"}
    holder = holder_run_argv("cntk-x-node2", node, "img:tag", "io.cntk-cluster=x")
    assert holder_name("cntk-x-node2") == "cntk-x-node2-net"
    assert option(holder, "--name") == ["cntk-x-node2-net"]
    assert option(holder, "--network") == ["none"] and option(holder, "--hostname") == ["node2"]
    assert "io.cntk-cluster.holder-of=cntk-x-node2" in option(holder, "--label")
    assert holder[-3:] == ["img:tag", "sleep", "infinity"] and "--init" in holder
    argv = node_run_argv("cntk-x-node2", node, 22, "img:tag", "io.cntk-cluster=x", tmp_path, tmp_path / "h")
    assert option(argv, "--network") == ["container:cntk-x-node2-net"]
    assert option(argv, "--hostname") == []  # Docker refuses it with a joined namespace; the holder's is used
    # Its own namespace's firewall; the loopback layout's nodes share the host's stack and never get NET_ADMIN.
    assert "NET_ADMIN" in option(argv, "--cap-add")
    assert {"NODE_FABRIC_ADDRESS=10.147.1.2", "NODE_APT_PROXY=http://10.147.0.254:3142"} <= set(option(argv, "-e"))
    assert {"io.cntk-cluster.network=netns", "io.cntk-cluster.fabric=10.147.1.2"} <= set(option(argv, "--label"))


def test_a_node_gets_the_hosts_fuse_device_only_when_asked_and_says_so(tmp_path):
    node = {"name": "node3", "address": "10.147.0.3", "fabric": "10.147.1.3"}
    plain = node_run_argv("cntk-x-node3", node, 22, "img:tag", "io.cntk-cluster=x", tmp_path, tmp_path / "h")
    assert "--device" not in plain and "io.cntk-cluster.fuse=yes" not in option(plain, "--label")
    fused = node_run_argv("cntk-x-node3", node, 22, "img:tag", "io.cntk-cluster=x", tmp_path, tmp_path / "h",
                          fuse=True)
    # GlusterFS's client mounts through /dev/fuse; a container may not mknod it, and --privileged is refused here.
    assert option(fused, "--device") == ["/dev/fuse"] and "--privileged" not in fused
    assert "io.cntk-cluster.fuse=yes" in option(fused, "--label")
