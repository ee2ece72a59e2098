"""NFS on the VMs (cluster_shared_storage: nfs, tests/machines/conftest.py), after site.yml converged them: node1
exports its folder to the cluster's fabric addresses only, root squashed; every node mounts it at /cluster with
nosuid,nodev, at boot too. The data and the job's checkpoints live there (the code stays on each node: root,
squashed, cannot write it there). A power loss of node2 in the middle of a job: the node boots, mounts the
export again, and the next run continues from the checkpoint rank 0 left on NFS."""

import json
import re

from cluster_helpers import ansible_playbook, read_until, start_playbook

MOUNT = "/cluster"
EXPORT = "/srv/cntk/brick/cntk"
USER = "cntk"
JOB = "digits-nfs"
# 1 epoch of the demo's softmax is a few seconds here; rank 0 checkpoints after each one.
ARGS = {"model": "softmax", "epochs": 40, "minibatch": 64, "lr": 0.5, "seed": 1, "progress-every": 5}


def mounted(vm_cluster, node):
    """(fstype, source, options) of what is mounted at /cluster on the node, or None."""
    found = vm_cluster.ssh(node, f"findmnt -n -o FSTYPE,SOURCE,OPTIONS --mountpoint {MOUNT}", timeout=60)
    return tuple(found.stdout.split()) if found.returncode == 0 and found.stdout.strip() else None


def test_nfs_is_exported_to_the_cluster_only_root_squashed_and_mounted_nosuid_at_boot(vm_cluster):
    exports = vm_cluster.ssh("node1", "exportfs -v", check=True).stdout
    clients = re.findall(rf"^{re.escape(EXPORT)}\s+(\S+)\(([^)]*)\)", " ".join(exports.split("\n\t\t")), re.M)
    assert sorted(client for client, _ in clients) == sorted(vm_cluster.fabric.values()), exports
    assert all("root_squash" in options.split(",") and "no_root_squash" not in options for _, options in clients)
    for node in vm_cluster.nodes:
        fstype, source, options = mounted(vm_cluster, node)
        assert fstype == "nfs4" and source == f"node1:{EXPORT}", (node, source)
        assert {"nosuid", "nodev"} <= set(options.split(",")), options
        fstab = vm_cluster.ssh(node, f"grep ' {MOUNT} ' /etc/fstab", check=True).stdout
        assert "_netdev" in fstab and "nosuid" in fstab, fstab
        # Root is nobody there: it can neither write nor look into the training user's folders.
        squashed = vm_cluster.ssh(node, f"touch {MOUNT}/data/root-was-here; ls {MOUNT}/checkpoints")
        assert squashed.returncode != 0 and "Permission denied" in squashed.stderr, squashed
        vm_cluster.ssh(node, f"runuser -u {USER} -- test -r {MOUNT}/data/digits/manifest.json", check=True)


def test_a_power_loss_in_a_job_and_the_next_run_continues_from_the_checkpoint_on_nfs(vm_cluster):
    """node2's QEMU killed in the middle of the job (ranks on both nodes, Slurm's job): the run fails; node2 boots,
    mounts the export and returns to Slurm; the next run of the job continues from rank 0's checkpoint on NFS."""
    args = ("-e", f"train_job_name={JOB}", "-e", json.dumps({"train_job_args": ARGS}))
    train = start_playbook(vm_cluster.inventory, "playbooks/train.yml", *args)
    read_until(train, rf"{JOB} \| epoch ([3-9]|\d\d) \|", timeout=900)
    vm_cluster.poweroff("node2")
    try:
        out, _ = train.communicate(timeout=900)
    finally:
        vm_cluster.start("node2")
    assert train.returncode != 0, out[-4000:]
    checkpoints = vm_cluster.ssh("node1", f"ls -ln {EXPORT}/checkpoints/{JOB}", check=True).stdout
    assert re.search(r"\s2000\s+2000\s.*checkpoint", checkpoints), checkpoints
    # Slurm takes node2 back once its health check finds the data, which it reads through the mount.
    vm_cluster.wait_for_slurm("node2")
    assert (mounted(vm_cluster, "node2") or ())[:2] == ("nfs4", f"node1:{EXPORT}"), \
        "node2 did not mount the export at boot"

    rerun = ansible_playbook(vm_cluster.inventory, "playbooks/train.yml", *args, timeout=1800)
    said = " ".join(rerun.stdout.split())
    assert f"{JOB} continues run" in said and "from its last checkpoint" in said, rerun.stdout[-4000:]
    latest = vm_cluster.inventory.parent / "artifacts" / JOB / "latest"
    record = json.loads((latest / "job.json").read_text())
    assert record["resuming"] is True and record["rc"] == 0, record
    logs = "".join(path.read_text(errors="replace") for path in (latest / "logs").rglob("*") if path.is_file())
    assert re.search(rf"resuming from {MOUNT}/checkpoints/{JOB}/\S*checkpoint.npz after epoch ([3-9]|\d\d)", logs), \
        logs[-3000:]
