"""The machines step on VMs (playbooks/machines.yml, docs/machines.md): what containers cannot show, because they
share this machine's clock, disks and (in the loopback layout) firewall.

Order matters and the tests run in file order on the session's VMs (tests/machines/conftest.py):
- the data disk test runs first, on blank disks: it leaves /dev/vdb made and mounted at the data folder on every
  node, which the rest of the session then uses (as a user's cluster would);
- the clock test sets node2's clock 10 minutes ahead, sees preflight refuse it, and leaves it fixed by time_sync;
- the firewall test turns cluster_firewall on for its own runs and puts the rules back off at its end; its drop
  rule on node2's fabric is removed in a finally; it and the clock test wait for Slurm to have node2 idle again
  (cut off, Slurm marks it DOWN);
- the Slurm test converges the scheduler step (cluster_scheduler: slurm on the VMs).
"""

import re
import socket
import time

import pytest

from cluster_helpers import (ansible_playbook, fabric_message, fabric_reach_seconds, playbook_report, recap,
                             task_results)

DATA_DIR = "/srv/cntk/data"
FIREWALL_ON = ("-e", '{"cluster_firewall": true}')


def _failures(report):
    return [" ".join(str(result.get("msg", "")).split()) for _, _, _, result in task_results(report)
            if result.get("failed")]


def test_a_used_disk_is_refused_and_a_blank_one_made_and_mounted_by_uuid(vm_cluster):
    """After provision (the training user exists, the data folder is empty: site.yml's order), node2's /dev/vdb
    gets someone's filesystem: refused naming it, node1's blank disk made and mounted; then node2's is listed in
    disks_wipe and made too; a second run changes nothing."""
    ansible_playbook(vm_cluster.inventory, "playbooks/provision.yml", timeout=3600)
    vm_cluster.ssh("node2", "mkfs.ext4 -q -F -L precious /dev/vdb", check=True)
    disk = ("-e", "disks_data_device=/dev/vdb")
    result, report = playbook_report(vm_cluster.inventory, "playbooks/machines.yml", "--tags", "disks", *disk)
    assert result.returncode != 0
    refused = " ".join(_failures(report))
    assert ("node2: /dev/vdb holds a ext4 filesystem labelled 'precious', which this project did not make; "
            "nothing was changed") in refused, refused
    assert "disks_wipe: [/dev/vdb]" in refused
    # Refused before any change: node2's filesystem is still the one it had.
    assert vm_cluster.ssh("node2", "blkid -s LABEL -o value /dev/vdb", check=True).stdout.strip() == "precious"
    mounted = vm_cluster.ssh("node1", f"findmnt -no SOURCE,FSTYPE,LABEL {DATA_DIR}; grep ' {DATA_DIR} ' /etc/fstab",
                             check=True).stdout
    assert re.search(r"^/dev/vdb\s+ext4\s+cntk-data$", mounted, re.M), mounted
    assert re.search(rf"^UUID=[0-9a-f-]{{36}} {DATA_DIR} ext4 ", mounted, re.M), mounted

    wipe = disk + ("-e", '{"disks_wipe": ["/dev/vdb"]}')
    ansible_playbook(vm_cluster.inventory, "playbooks/machines.yml", "--tags", "disks", *wipe)
    for node in vm_cluster.nodes:
        out = vm_cluster.ssh(node, f"findmnt -no FSTYPE,LABEL {DATA_DIR}; stat -c '%U %a' {DATA_DIR}",
                             check=True).stdout.split()
        assert out == ["ext4", "cntk-data", "cntk", "750"], out
    again = ansible_playbook(vm_cluster.inventory, "playbooks/machines.yml", "--tags", "disks", *wipe)
    assert all(counts["changed"] == 0 for counts in recap(again.stdout).values()), again.stdout[-4000:]


def test_a_clock_ten_minutes_off_is_refused_then_time_sync_fixes_it(vm_cluster):
    vm_cluster.ssh("node2", "date -s @$(( $(date +%s) + 600 )) >/dev/null", check=True)
    result, report = playbook_report(vm_cluster.inventory, "playbooks/preflight.yml")
    assert result.returncode != 0
    refused = " ".join(_failures(report))
    found = re.search(r"node2's clock is (\d+\.\d) s ahead of the controller's", refused)
    assert found and 590 < float(found.group(1)) < 700, refused
    assert "ansible-playbook playbooks/machines.yml --tags time" in refused
    assert "node1's clock" not in refused

    started = time.monotonic()
    ansible_playbook(vm_cluster.inventory, "playbooks/machines.yml", "--tags", "time")
    print(f"time_sync on the VMs: {time.monotonic() - started:.0f} s")
    result, report = playbook_report(vm_cluster.inventory, "playbooks/preflight.yml")
    assert result.returncode == 0, " ".join(_failures(report))
    offsets = [result_.get("offset") for path, _, host, result_ in task_results(report)
               if path.endswith("roles/preflight/tasks/clock.yml") and "offset" in result_]
    assert offsets and all(abs(offset) < 5 for offset in offsets), offsets
    # node2 follows node1 over the fabric, node1 serves its own clock (no upstream inside the namespace).
    sources = vm_cluster.ssh("node2", "chronyc -n sources", check=True).stdout
    assert re.search(rf"^\^\*\s+{re.escape(vm_cluster.fabric['node1'])}\s", sources, re.M), sources
    conf = vm_cluster.ssh("node1", "cat /etc/chrony/chrony.conf", check=True).stdout
    assert "local stratum 10" in conf and f"allow {vm_cluster.fabric['node2']}" in conf, conf
    # munge refused node2's credentials while its clock was off: Slurm takes it back once they agree.
    print(f"node2 idle in Slurm again after {vm_cluster.wait_for_slurm('node2'):.0f} s")


def test_firewall_admits_the_cluster_only_and_a_blocked_fabric_is_named_in_seconds(vm_cluster):
    """cluster_firewall on: the rules are in place; a port open on node1 answers node2 and not this machine (not a
    cluster address). A drop rule on node2's fabric NIC: the fabric check names both pairs within seconds. The
    drop rule is removed at the end and the firewall taken off again."""
    try:
        ansible_playbook(vm_cluster.inventory, "playbooks/machines.yml", "--tags", "firewall,kernel", *FIREWALL_ON)
        again = ansible_playbook(vm_cluster.inventory, "playbooks/machines.yml", "--tags", "firewall,kernel",
                                 *FIREWALL_ON)
        assert all(counts["changed"] == 0 for counts in recap(again.stdout).values()), again.stdout[-4000:]
        for node in vm_cluster.nodes:
            rules = vm_cluster.ssh(node, "nft list table inet cntk_cluster; systemctl is-enabled nftables",
                                   check=True).stdout
            assert "policy drop" in rules and "ip saddr @cluster_v4 accept" in rules, rules
            for address in list(vm_cluster.fabric.values()) + list(vm_cluster.address.values()):
                assert address in rules, (address, rules)
        # A service on node1 that is not the cluster's: node2 reaches it, this machine does not.
        vm_cluster.ssh("node1", "systemd-run --unit=cntk-fw-test python3 -m http.server 8099", check=True)
        time.sleep(3)
        from_node2 = vm_cluster.ssh("node2", f"timeout 5 bash -c '</dev/tcp/{vm_cluster.address['node1']}/8099' "
                                             "&& echo open")
        assert from_node2.stdout.strip() == "open", from_node2
        with pytest.raises(OSError):
            socket.create_connection((vm_cluster.address["node1"], 8099), timeout=3).close()

        result, report = playbook_report(vm_cluster.inventory, "playbooks/check.yml", "--tags", "fabric")
        verdict = fabric_message(report)
        assert result.returncode == 0 and "Fabric check: 2 training nodes reach each other" in verdict, verdict
        for node in vm_cluster.nodes:
            scope = vm_cluster.ssh(node, "cat /proc/sys/kernel/yama/ptrace_scope", check=True).stdout.strip()
            assert re.search(rf"{node}: ptrace_scope {scope}\b[^;]*, memlock unlimited", verdict), verdict
            if scope != "0":
                assert "btl_vader_single_copy_mechanism = none" in vm_cluster.ssh(
                    node, "cat /etc/openmpi/openmpi-mca-params.conf", check=True).stdout

        vm_cluster.ssh("node2", "nft add table inet cntk_test; "
                                "nft add chain inet cntk_test input '{ type filter hook input priority -10; }'; "
                                "nft add rule inet cntk_test input iifname fab0 drop", check=True)
        result, report = playbook_report(vm_cluster.inventory, "playbooks/check.yml", "--tags", "fabric")
        took = fabric_reach_seconds(report)
        assert result.returncode != 0
        message = fabric_message(report)
        assert re.search(rf"node1 cannot reach node2 at {re.escape(vm_cluster.fabric['node2'])}:47470 \(fab0\): no "
                         r"answer", message), message
        assert re.search(rf"node2 cannot reach node1 at {re.escape(vm_cluster.fabric['node1'])}:47470", message)
        print(f"blocked fabric: the connecting step took {took:.1f} s on the slowest node")
        assert took is not None and took < 12, took
    finally:
        vm_cluster.ssh("node2", "nft delete table inet cntk_test 2>/dev/null; true")
        vm_cluster.ssh("node1", "systemctl stop cntk-fw-test 2>/dev/null; true")
        for node in vm_cluster.nodes:
            vm_cluster.ssh(node, "nft delete table inet cntk_cluster 2>/dev/null; systemctl disable nftables; true")
    # The dropped fabric cut node2 off from slurmctld too: Slurm takes it back once it answers.
    print(f"node2 idle in Slurm again after {vm_cluster.wait_for_slurm('node2'):.0f} s")


def test_slurm_on_pure_cgroup_v2_kills_a_job_past_its_memory(vm_cluster):
    """The VMs boot the unified hierarchy only: the slurm role picks cgroup/v2 with ConstrainRAMSpace, and memory
    is a consumable resource (CR_Core_Memory, a DefMemPerCPU share), so a job that writes more than its --mem is
    killed by the cgroup, Slurm calling it OUT_OF_MEMORY (with CR_Core, seen on the containers, a 64 MiB job wrote
    400 MiB and COMPLETED: the limit was the node's RealMemory).
    The scheduler step alone converges Slurm (each step runs alone; the rest of site.yml is not needed here)."""
    ansible_playbook(vm_cluster.inventory, "playbooks/scheduler.yml", timeout=3600)
    for node in vm_cluster.nodes:
        assert vm_cluster.ssh(node, "stat -fc %T /sys/fs/cgroup", check=True).stdout.strip() == "cgroup2fs"
        conf = vm_cluster.ssh(node, "cat /etc/slurm/cgroup.conf; grep -E '^(ProctrackType|TaskPlugin|"
                                    "SelectTypeParameters|DefMemPerCPU)=' /etc/slurm/slurm.conf", check=True).stdout
        assert "CgroupPlugin=cgroup/v2" in conf and "ConstrainRAMSpace=yes" in conf, conf
        assert "ProctrackType=proctrack/cgroup" in conf and "TaskPlugin=task/cgroup" in conf, conf
        assert "SelectTypeParameters=CR_Core_Memory" in conf and re.search(r"^DefMemPerCPU=[1-9]\d*$", conf, re.M), conf
    vm_cluster.ssh("node1", "for i in $(seq 1 60); do sinfo -h -N -o '%N %T' | grep -qv idle || exit 0; "
                            "sleep 2; done; sinfo -N; exit 1", check=True, timeout=180)
    submit = vm_cluster.ssh("node1", "cd /tmp && sudo -u cntk sbatch --parsable -N1 -w node2 --mem=64 --wrap "
                                     "\"python3 -c 'import time; b = b\\\"x\\\" * (400 * 2**20); time.sleep(5)'\"",
                            check=True)
    job = submit.stdout.strip().split(";")[0]
    state = ""
    for _ in range(60):
        state = vm_cluster.ssh("node1", f"scontrol show job {job} -o", check=True).stdout
        if re.search(r"JobState=(OUT_OF_MEMORY|COMPLETED|FAILED|CANCELLED|TIMEOUT)", state):
            break
        time.sleep(3)
    assert "JobState=OUT_OF_MEMORY" in state, state
    assert "MinMemoryNode=64M" in state, state
