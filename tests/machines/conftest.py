"""The machine tier: two Debian 12 QEMU virtual machines (`python -m local_cluster up --machines vm`, cluster `vmt`),
booted once for the session, for what containers cannot show: own kernels, clocks, disks and firewalls, power
loss. Software emulation (TCG): a module costs seconds, so the inventory's Mitogen strategy (ansible.cfg) matters.

The fixture `vm_cluster` (session scope) gives a `VMCluster`:

    vm_cluster.name         'vmt'
    vm_cluster.inventory    Path of the inventory folder (hosts.yml, group_vars/all.yml): -i for ansible-playbook
    vm_cluster.nodes        ['node1', 'node2']
    vm_cluster.address      {node: management address (mgmt0; Ansible and ssh() go there)}
    vm_cluster.fabric       {node: fabric address (fab0; MPI, the mesh, the data)}
    vm_cluster.ssh(node, command, timeout=120, check=False)
                            `command` as root on the node over the management network, host key pinned
                            (a CompletedProcess, text output; check=True fails the test on a non-zero exit)
    vm_cluster.poweroff(node)   a power loss: kill -9 of the node's QEMU, disks left as the loss left them
    vm_cluster.start(node)      boots it again with the same disks and waits for its SSH
    vm_cluster.wait_for_slurm(node)  until Slurm has the node idle again, after a test cut it off (seconds taken)
    vm_cluster.site(*extra, check=True, timeout=...)
                            ansible-playbook site.yml on the VMs (cluster_helpers.ansible_playbook)
    vm_cluster.timings      {'image': s, 'boot_to_ssh': s, 'up': s}: what bringing it up cost

The inventory: numpy backend, cluster_scheduler: slurm, cluster_shared_storage: nfs (STORAGE below); each node has a
blank data disk /dev/vdb (4 GiB). Nothing is converged by the fixture: the tests run in ORDER below, and
test_vm_cluster.py's site.yml test converges the VMs (and runs it again); a test that needs a converged cluster
after it runs only the steps it needs. Tests that change a node (power loss, clocks, firewall rules) put it back
or say so in their docstring. The cluster is taken down at the session's end; VMT_KEEP=1 leaves it up to look at,
VMT_REUSE=1 takes the running one as it is (up only reconciles it) and leaves it up, VMT_NAME=NAME runs the tier on a cluster of
another name.
"""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cluster_helpers import LOCAL_CLUSTER, ansible_playbook
from prerequisites import require

ROOT = Path(__file__).resolve().parents[2]
# VMT_NAME: another cluster name for a run beside the tier's own (a developer's, while CI or a colleague uses vmt).
NAME = os.environ.get("VMT_NAME") or "vmt"
NODES = ["node1", "node2"]
# The shared filesystem the inventory names: NFS, the kernel's (containers have none), exported by node1.
STORAGE = "nfs"
SCHEDULER = "slurm"
INVENTORY = ROOT / ".cluster" / NAME / "inventory"
ARTIFACTS = ROOT / ".cluster" / NAME / "artifacts"


class VMCluster:
    """The session's VM cluster; see the module's docstring."""

    def __init__(self, name, nodes, inventory, timings):
        from local_cluster.cluster import Cluster
        from local_cluster.vm import VMs

        self.name = name
        self.nodes = list(nodes)
        self.inventory = inventory
        self.timings = timings
        self._vms = VMs(Cluster(name))
        records = self._vms.recorded()
        self.address = {node: records[node]["address"] for node in self.nodes}
        self.fabric = {node: records[node]["fabric"] for node in self.nodes}

    def ssh(self, node, command, timeout=120, check=False):
        result = self._vms.ssh(node, command, timeout=timeout)
        if check and result.returncode != 0:
            pytest.fail(f"{node}: {command!r} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    def poweroff(self, node):
        subprocess.run(LOCAL_CLUSTER + ["poweroff", node, f"--name={self.name}"], check=True, capture_output=True)

    def start(self, node):
        subprocess.run(LOCAL_CLUSTER + ["start", node, f"--name={self.name}"], check=True, capture_output=True,
                       timeout=900)

    def wait_for_slurm(self, node, seconds=300):
        """Until slurmctld (node1) has `node` idle again: a test that cut the node off (its clock, a dropped
        fabric: Slurm marks it DOWN, not responding) waits here for Slurm to take it back (ReturnToService=2)."""
        deadline, state = time.monotonic() + seconds, ""
        while time.monotonic() < deadline:
            state = self.ssh("node1", f"sinfo -h -N -n {node} -o %T").stdout.strip()
            if state == "idle":
                return time.monotonic() - (deadline - seconds)
            time.sleep(5)
        pytest.fail(f"{node} is {state!r} in Slurm {seconds} s after the test put it back")

    def site(self, *extra, check=True, timeout=3600):
        return ansible_playbook(self.inventory, "site.yml", *extra, check=check, timeout=timeout)


# The tier's tests share two VMs, in this order: the blank data disk first (what the VMs are, a power loss on its
# raw blocks), then the disk role on it while the data folder is still empty, then site.yml (its data on that
# disk), then the roles that change a converged node and put it back.
ORDER = ("test_vms_are_machines_with_their_own_kernel_and_a_blank_data_disk",
         "test_power_loss_keeps_what_the_guest_flushed_and_loses_what_it_did_not",
         "test_a_used_disk_is_refused_and_a_blank_one_made_and_mounted_by_uuid",
         "test_site_converges_and_a_second_run_changes_nothing")


def pytest_collection_modifyitems(items):
    """The machine tier's tests in ORDER, the rest of the tier after them; tests elsewhere keep their place."""
    def rank(item):
        if "tests/machines/" not in item.nodeid:
            return -1
        return ORDER.index(item.name) if item.name in ORDER else len(ORDER)
    items.sort(key=rank)


@pytest.fixture(scope="session")
def vm_cluster():
    # QEMU itself the tool installs with apt-get when it is missing (qemu-system-x86, qemu-utils).
    require(os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("debootstrap") is not None,
            "VM nodes need root (tap devices, bridges), iproute2 and debootstrap")
    started = time.monotonic()
    reuse = os.environ.get("VMT_REUSE") == "1" and subprocess.run(
        LOCAL_CLUSTER + ["status", f"--name={NAME}"], capture_output=True).returncode == 0
    if not reuse:
        subprocess.run(LOCAL_CLUSTER + ["down", f"--name={NAME}"], check=True, capture_output=True)
        shutil.rmtree(ARTIFACTS, ignore_errors=True)
    up = subprocess.run(LOCAL_CLUSTER + ["up", f"--name={NAME}", "--machines=vm", f"--nodes={len(NODES)}",
                                         "--backend=numpy", f"--scheduler={SCHEDULER}", f"--storage={STORAGE}"],
                        capture_output=True, text=True, timeout=3600)
    if up.returncode != 0:
        subprocess.run(LOCAL_CLUSTER + ["down", f"--name={NAME}"], capture_output=True)
        pytest.fail(f"python -m local_cluster up --machines vm failed:\n{up.stdout}\n{up.stderr}")
    timings = json.loads((ROOT / ".cluster" / NAME / "vm" / "timings.json").read_text())
    timings["up"] = round(time.monotonic() - started, 1)
    try:
        yield VMCluster(NAME, NODES, INVENTORY, timings)
    finally:
        if not reuse and os.environ.get("VMT_KEEP") != "1":
            subprocess.run(LOCAL_CLUSTER + ["down", f"--name={NAME}"], check=True, capture_output=True)
