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
