"""VM nodes (tools/local_cluster/vm.py): names, MACs, the config disk's tree, QEMU's command, the host checks."""

from pathlib import Path

import pytest

from local_cluster import ClusterError, vm
from local_cluster.cluster import Cluster


def test_taps_fit_linux_names_and_differ_per_node_and_cluster():
    taps = {tap for cluster in ("vmt", "a-very-long-cluster-name") for i in range(1, 65)
            for tap in vm.vm_taps(cluster, i)}
    assert len(taps) == 2 * 2 * 64
    assert max(len(tap) for tap in taps) <= 15
    assert vm.vm_taps("vmt", 2) == ("vmvmt-2", "vfvmt-2")


def test_macs_are_local_unicast_and_distinct():
    macs = [mac for i in range(1, 65) for mac in vm.vm_macs("vmt", i)]
    assert len(set(macs)) == len(macs)
    for mac in macs:
        first = int(mac.split(":")[0], 16)
        assert first & 2 and not first & 1, mac
    assert vm.vm_macs("vmt", 1) != vm.vm_macs("vmdev", 1)


def test_node_names_are_checked():
    assert vm.node_index("node12") == 12
    for bad in ("node0", "node", "nodeX", "../node1"):
        with pytest.raises(ClusterError, match="not a node name"):
            vm.node_index(bad)


def test_identity_tree_names_nics_by_mac_and_keeps_keys_private():
    node = {"name": "node2", "address": "10.150.0.2", "fabric": "10.150.1.2"}
    files = vm.identity_files(node, "10.150.0.254", ("52:54:aa:bb:00:02", "52:54:aa:bb:01:02"),
                              {"ed25519": ("PRIVATE\n", "ssh-ed25519 AAAA root@node2\n")}, "ssh-ed25519 CTRL c\n")
    assert files["etc/hostname"] == (0o644, "node2\n")
    assert files["etc/ssh/ssh_host_ed25519_key"] == (0o600, "PRIVATE\n")
    assert files["root/.ssh/authorized_keys"] == (0o600, "ssh-ed25519 CTRL c\n")
    assert "MACAddress=52:54:aa:bb:00:02\n\n[Link]\nName=mgmt0" in files["etc/systemd/network/10-mgmt0.link"][1]
    assert "MACAddress=52:54:aa:bb:01:02\n\n[Link]\nName=fab0" in files["etc/systemd/network/10-fab0.link"][1]
    assert "Address=10.150.0.2/24" in files["etc/systemd/network/20-mgmt0.network"][1]
    assert "Address=10.150.1.2/24" in files["etc/systemd/network/20-fab0.network"][1]
    assert '"http://10.150.0.254:3142"' in files["etc/apt/apt.conf.d/01local-cluster-proxy"][1]
    # Every file's folder has a mode of its own in the tree (cp -a gives it to the node's folder).
    for path in files:
        parent = str(Path(path).parent)
        assert ("" if parent == "." else parent) in vm.IDENTITY_DIRS
    assert vm.IDENTITY_DIRS["root"] == 0o700 and vm.IDENTITY_DIRS[""] == 0o755


def test_qemu_argv_is_tcg_with_fixed_disks_and_a_durable_data_disk(tmp_path):
    node = {"name": "node1", "address": "10.150.0.1", "fabric": "10.150.1.1"}
    argv = vm.qemu_argv("vmt", node, tmp_path / "n1", tmp_path / "img", vm.vm_taps("vmt", 1), vm.vm_macs("vmt", 1))
    joined = " ".join(argv)
    assert argv[argv.index("-accel") + 1] == "tcg,tb-size=256"
    assert "kvm" not in joined
    assert argv[argv.index("-m") + 1] == "1536" and argv[argv.index("-smp") + 1] == "1"
    drives = [argv[i + 1] for i, word in enumerate(argv) if word == "-drive"]
    assert "root.qcow2" in drives[0] and "cache=unsafe" in drives[0]
    assert "data.qcow2" in drives[1] and "cache=writeback" in drives[1]
    assert "config.img" in drives[2] and "readonly=on" in drives[2]
    append = argv[argv.index("-append") + 1]
    assert "root=/dev/vda" in append and "systemd.hostname=node1" in append
    assert "ifname=vmvmt-1" in joined and "ifname=vfvmt-1" in joined
    assert "-daemonize" in argv and f"{tmp_path / 'n1' / 'qemu.pid'}" in argv
    # The config disk's serial is what the image's first-boot unit looks for.
    assert f"serial={vm.CONFIG_SERIAL}" in joined


def test_meminfo_and_room_checks():
    assert vm.mem_available_mib("MemTotal: 100 kB\nMemAvailable:    4194304 kB\n") == 4096
    with pytest.raises(ClusterError, match="no MemAvailable"):
        vm.mem_available_mib("MemTotal: 1 kB\n")
    vm.check_host_room(2, 2 * vm.VM_HOST_MIB, 2 * vm.VM_DISK_NEED_MIB, "/x")
    with pytest.raises(ClusterError, match=r"2 VM\(s\) may take 3584 MiB of memory .* 3000 MiB available"):
        vm.check_host_room(2, 3000, 10 ** 6, "/x")
    with pytest.raises(ClusterError, match="need about 6144 MiB free under /x"):
        vm.check_host_room(2, 10 ** 6, 100, "/x")
    vm.check_host_room(0, 0, 0, "/x")


def test_vm_flags_are_refused_before_anything_changes(monkeypatch, tmp_path):
    cluster = Cluster("unit-vm")
    monkeypatch.setattr(cluster, "state_dir", tmp_path / "unit-vm")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    with pytest.raises(ClusterError, match="--ssh-port 2222: VM nodes run sshd on port 22"):
        cluster.up(2, 2222, backend="numpy", machines="vm")
    with pytest.raises(ClusterError, match="--storage 'lustre'"):
        cluster.up(2, 22, backend="numpy", machines="vm", storage="lustre")
    with pytest.raises(ClusterError, match="--machines 'bare'"):
        cluster.up(2, 22, backend="numpy", machines="bare")
    assert not (tmp_path / "unit-vm").exists()


def test_a_cluster_of_containers_is_not_turned_into_vms(monkeypatch, tmp_path):
    cluster = Cluster("unit-vm")
    monkeypatch.setattr(cluster, "has_containers", lambda: True)
    monkeypatch.setattr("os.geteuid", lambda: 0)
    with pytest.raises(ClusterError, match="cluster unit-vm runs containers: take it down first"):
        cluster.up(2, 22, backend="numpy", machines="vm")


def test_a_clashing_cluster_of_the_same_bridge_names_is_refused(tmp_path, monkeypatch):
    cluster = Cluster("clusterabc1")
    monkeypatch.setattr(cluster, "state_dir", tmp_path / "clusterabc1")
    # A short name is its own tag, a long one's tag is 4 characters and 4 of its hash: a cluster named after the
    # long name's tag would share its bridges (cm-<tag>).
    other = vm.netns_tag("clusterabc1")
    (tmp_path / other / "vm").mkdir(parents=True)
    monkeypatch.setattr("local_cluster.vm.run", lambda *a, **k: pytest.fail("no change expected"))
    with pytest.raises(ClusterError, match=f"cluster {other} .* uses the same bridge names"):
        vm.VMs(cluster).check_links([{"name": "node1"}])


def test_poweroff_and_start_name_a_vm_the_cluster_has(capsys, monkeypatch, tmp_path):
    from local_cluster import cli

    monkeypatch.setattr("local_cluster.engine.ENGINE_DIR", tmp_path)
    monkeypatch.setattr("local_cluster.cluster.ENGINE_DIR", tmp_path)
    for verb in ("poweroff", "start"):
        assert cli.main([verb, "node1", "--name", "unit-vm"]) == 2
        assert "cluster unit-vm has no VM node1" in capsys.readouterr().err


def test_a_vm_node_has_one_slot_per_virtual_cpu_in_the_inventory(tmp_path):
    from local_cluster.inventory import render_inventory

    nodes = [{"name": "node1", "address": "10.150.0.1", "fabric": "10.150.1.1",
              "host_vars": {"cluster_slots": vm.VM_CPUS}}]
    text = render_inventory(nodes, 22, tmp_path / "key", tmp_path / "known", tmp_path / "secrets")
    assert "              cluster_mpi_interface: fab0\n              cluster_slots: 1\n" in text
