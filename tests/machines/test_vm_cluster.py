"""The machine tier's first checks: the VMs are machines (their own systemd, kernel boot, emulated hardware and data
disk), and site.yml converges on them, a second run changing nothing."""

import json
import re
import time
from pathlib import Path

from cluster_helpers import recap

HOST_BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_vms_are_machines_with_their_own_kernel_and_a_blank_data_disk(vm_cluster):
    boot_ids = set()
    for node in vm_cluster.nodes:
        out = vm_cluster.ssh(node, "cat /proc/1/comm; cat /proc/sys/kernel/random/boot_id; "
                                   "systemd-detect-virt || true; hostname; cat /sys/block/vdb/serial; echo; "
                                   "lsblk -ndo NAME,SIZE,FSTYPE /dev/vdb; ip -4 -o addr show", check=True).stdout
        comm, boot_id, virt, hostname, serial, disk = out.splitlines()[:6]
        assert comm == "systemd", out
        assert re.fullmatch(r"[0-9a-f-]{36}", boot_id) and boot_id != HOST_BOOT_ID, out
        boot_ids.add(boot_id)
        assert virt == "qemu", out
        assert hostname == node, out
        # The data disk: the second virtio disk, 4 GiB, no filesystem on it yet.
        assert serial == "data", out
        assert disk.split() == ["vdb", "4G"], out
        assert re.search(rf"mgmt0\s+inet {re.escape(vm_cluster.address[node])}/24", out), out
        assert re.search(rf"fab0\s+inet {re.escape(vm_cluster.fabric[node])}/24", out), out
    assert len(boot_ids) == len(vm_cluster.nodes)
    # The nodes reach each other over the fabric.
    first, second = vm_cluster.nodes[:2]
    vm_cluster.ssh(first, f"ping -c1 -W5 {vm_cluster.fabric[second]} >/dev/null 2>&1 || "
                          f"timeout 5 bash -c '</dev/tcp/{vm_cluster.fabric[second]}/22'", check=True)


def test_site_converges_and_a_second_run_changes_nothing(vm_cluster):
    timings = dict(vm_cluster.timings)
    started = time.monotonic()
    first = vm_cluster.site()
    timings["site_first"] = round(time.monotonic() - started, 1)
    started = time.monotonic()
    second = vm_cluster.site()
    timings["site_second"] = round(time.monotonic() - started, 1)
    (vm_cluster.inventory.parent / "timings.json").write_text(json.dumps(timings, indent=1) + "\n")
    print(f"VM cluster timings (s): {timings}")
    first_recap, second_recap = recap(first.stdout), recap(second.stdout)
    assert set(vm_cluster.nodes) <= set(first_recap), first.stdout[-3000:]
    for host, counts in second_recap.items():
        assert counts["failed"] == 0 and counts["unreachable"] == 0, second.stdout[-3000:]
        assert counts["changed"] == 0, f"{host} changed on the second run:\n{second.stdout[-6000:]}"
    assert set(vm_cluster.nodes) <= set(second_recap)


def test_power_loss_keeps_what_the_guest_flushed_and_loses_what_it_did_not(vm_cluster):
    """`poweroff` is a power loss: kill -9 of QEMU. On the data disk (cache=writeback), a block the guest wrote
    with O_DIRECT and fsync survives it; a block left in the guest's page cache (dirty pages are written back
    after 30 s) does not. Raw blocks at 3 GiB into /dev/vdb, zeroed again afterwards: the disk stays blank for the
    disk role's tests."""
    node = vm_cluster.nodes[-1]
    flushed_at, cached_at = 3072, 3073  # MiB
    write = ("head -c 1048576 /dev/urandom > /root/block && "
             f"dd if=/root/block of=/dev/vdb bs=1M seek={flushed_at} oflag=direct conv=fsync status=none && "
             f"dd if=/root/block of=/dev/vdb bs=1M seek={cached_at} status=none && "
             "sha256sum </root/block && sync -f /root/block && cat /proc/sys/kernel/random/boot_id")
    digest, boot_id = vm_cluster.ssh(node, write, check=True).stdout.split()[0::2]
    vm_cluster.poweroff(node)
    assert vm_cluster.ssh(node, "true", timeout=30).returncode != 0
    vm_cluster.start(node)
    read = (f"dd if=/dev/vdb bs=1M skip={flushed_at} count=1 status=none | sha256sum; "
            f"dd if=/dev/vdb bs=1M skip={cached_at} count=1 status=none | sha256sum; "
            "test -s /root/block && sha256sum </root/block; cat /proc/sys/kernel/random/boot_id")
    out = vm_cluster.ssh(node, read, check=True).stdout.split()
    vm_cluster.ssh(node, f"dd if=/dev/zero of=/dev/vdb bs=1M seek={flushed_at} count=2 oflag=direct conv=fsync "
                         "status=none; rm -f /root/block", check=True)
    flushed, cached, kept, new_boot_id = out[0], out[2], out[4], out[-1]
    assert flushed == digest, "a block written with fsync was lost in the power loss"
    assert cached != digest, "a block left in the page cache survived: the loss was not a power loss"
    # The root disk's file was synced (sync -f): it is there too, and the kernel is a new one.
    assert kept == digest
    assert new_boot_id != boot_id
