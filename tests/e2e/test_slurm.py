"""Slurm on the real-CNTK cluster (`cntkreal`, the session's: tests/e2e/conftest.py), after test_cntk_cluster.py
has run its direct-mpirun checks there. `python -m local_cluster up --scheduler slurm` writes
`cluster_scheduler: slurm` into the inventory, as `make cluster SCHEDULER=slurm` does, and site.yml provisions
Debian's Slurm on the same 4 systemd nodes: one munge key, slurmctld on node1, slurmd everywhere, slurm.conf from
each node's `slurmd -C`. The train step then submits with sbatch and mpirun runs inside the allocation.

Nodes are read through `docker exec` (the harness's channel); the playbooks connect over SSH, host keys checked.
"""

import base64
import hashlib
import json
import re
import shlex
import signal
import subprocess
import time

import pytest

import cluster_helpers
from cluster_helpers import (CNTK_ARTIFACTS, CNTK_CLUSTER, CNTK_INVENTORY, CNTK_NODES, node_pid, node_shell,
                             start_playbook)

ROOT = cluster_helpers.ROOT
USER = "cntk"
# Short real-CNTK runs: softmax on digits, 8 ranks.
QUICK = {"model": "softmax", "epochs": 6, "minibatch": 64, "lr": 0.5, "seed": 1, "progress-every": 5}


def ansible_playbook(playbook, *extra, **options):
    return cluster_helpers.ansible_playbook(CNTK_INVENTORY, playbook, *extra, **options)


def on_node(node, command):
    result = node_shell(CNTK_CLUSTER, node, command, timeout=60)
    assert result.returncode == 0, (node, command, result.stdout, result.stderr)
    return result.stdout


def as_user(node, command):
    # Quoted for the node's outer shell: $HOME is the training user's.
    return on_node(node, f"runuser -u {USER} -- sh -c {shlex.quote(command)}")


def slurm_jobs():
    """The training user's jobs Slurm's accounting (slurmdbd, turned on with the scheduler here) has on record,
    queued, running or ended: a submission, however short, shows here."""
    return as_user("node1", "sacct --noheader --allocations --starttime=2000-01-01 --format=JobID").split()


def job_args(job, **args):
    return ["-e", f"train_job_name={job}", "-e", json.dumps({"train_job_args": dict(QUICK, **args)})]


def latest(job, name):
    return json.loads((CNTK_ARTIFACTS / job / "latest" / name).read_text())


def start_train(*extra):
    return start_playbook(CNTK_INVENTORY, "playbooks/train.yml", *extra)


def read_until(proc, pattern, timeout=300):
    return cluster_helpers.read_until(proc, pattern, timeout)


@pytest.fixture(scope="module")
def slurm(cntk_cluster):
    return cluster_helpers.turn_on("--scheduler=slurm", "--accounting")


def test_sinfo_lists_every_node_idle_with_its_real_cpus(slurm):
    listed = as_user("node1", "sinfo --noheader --Node --format='%N %T %c'").split("\n")
    cpus = {node: on_node(node, "nproc --all").strip() for node in CNTK_NODES}
    assert sorted(line for line in listed if line) == [f"{node} idle {cpus[node]}" for node in CNTK_NODES]
    assert as_user("node1", "squeue --noheader") == ""
    assert on_node("node1", "grep ^PartitionName /etc/slurm/slurm.conf").startswith(
        "PartitionName=training Nodes=node[1-4] Default=YES")
    # The local cluster's slurm_requeue_delay, as slurmctld reads it.
    assert re.search(r"(?m)^AuthInfo\s+= cred_expire=30$", as_user("node1", "scontrol show config"))


def test_one_munge_key_on_every_node_0400_never_shown(slurm):
    key = (ROOT / ".secrets" / CNTK_CLUSTER / "munge.key").read_bytes()
    assert len(key) == 1024
    seen = {on_node(node, "sha256sum /etc/munge/munge.key; stat -c '%a %U %G' /etc/munge/munge.key")
            for node in CNTK_NODES}
    assert len(seen) == 1, seen
    digest, mode = seen.pop().split("\n")[:2]
    assert digest.split()[0] == hashlib.sha256(key).hexdigest()
    assert mode == "400 munge munge"
    assert base64.b64encode(key).decode()[:40] not in slurm["site"]
    # One key: a credential made on node1 decodes on node4 (sent over the training user's SSH mesh).
    assert re.search(r"STATUS:\s+Success", as_user("node1", "munge -n | ssh -o BatchMode=yes node4 unmunge"))


def test_real_cntk_trains_through_sbatch_with_every_ranks_log_back(slurm):
    job = "digits-slurm"
    result = ansible_playbook("playbooks/train.yml", *job_args(job, epochs=10))
    summary = latest(job, "summary.json")
    record = latest(job, "job.json")
    assert summary["backend"] == "cntk" and summary["ranks"] == 8
    assert summary["hosts"] == [node for node in CNTK_NODES for _ in range(2)]
    assert summary["test_accuracy"] >= 0.90
    assert record["rc"] == 0 and isinstance(record["slurm_job"], int)
    assert record["command"].startswith("sbatch ") and "--nodelist=node1,node2,node3,node4" in record["command"]
    assert "--hostfile" not in record["command"], "mpirun takes its nodes from the allocation"
    assert f"is Slurm job {record['slurm_job']}." in result.stdout
    run = CNTK_ARTIFACTS / job / "latest"
    for rank in range(8):
        node = CNTK_NODES[rank // 2]
        log = (run / "logs" / node / "1" / f"rank.{rank}" / "stdout").read_text()
        assert f"rank {rank}/8 {node} " in log, (rank, log[:500])
    # Slurm ran it as the training user, on the 4 nodes.
    shown = as_user("node1", f"scontrol show job --oneliner {record['slurm_job']}")
    assert "JobState=COMPLETED" in shown and "NodeList=node[1-4]" in shown and f"UserId={USER}(" in shown


def test_accounting_answers_for_the_finished_job_and_its_password_stays_private(slurm):
    """slurm_accounting (the fixture's --accounting): slurmdbd with its database in MariaDB on node1; sacct
    answers for the job the sbatch test ran; the database password is made once on the controller, 0400, and is
    never in site.yml's output; slurmdbd.conf, which holds it, is the slurm user's, 0600."""
    record = latest("digits-slurm", "job.json")
    rows = as_user("node1", f"sacct --noheader --parsable2 --allocations --jobs={record['slurm_job']} "
                            "--format=JobID,JobName,User,State,ExitCode,NodeList")
    assert f"{record['slurm_job']}|digits-slurm|{USER}|COMPLETED|0:0|node[1-4]" in rows, rows
    password_file = ROOT / ".secrets" / CNTK_CLUSTER / "slurmdbd.pass"
    assert password_file.stat().st_mode & 0o777 == 0o400
    password = password_file.read_text().strip()
    assert len(password) >= 32 and password not in slurm["site"]
    assert on_node("node1", "stat -c '%U %a' /etc/slurm/slurmdbd.conf").strip() == "slurm 600"
    assert on_node("node1", "systemctl is-active mariadb slurmdbd").split() == ["active", "active"]


def slurm_node(node):
    return as_user("node1", f"sinfo --noheader --Node --nodes={node} --format='%T|%E'").strip()


def settled(node, want, timeout=30):
    """The node's sinfo state once it reads want (a resumed node shows idle* for a moment), else the last one."""
    deadline = time.monotonic() + timeout
    while (state := slurm_node(node)) != want and time.monotonic() < deadline:
        time.sleep(1)
    return state


def test_a_node_whose_data_disk_is_too_small_is_drained_named_and_kept_out(slurm):
    """node3's data folder becomes a 64 KiB disk (a tmpfs mounted into its mount namespace from the host): its
    health check drains it, naming the folder and the free space; the train step stops naming node3 and submits
    nothing. With the disk gone, the next check returns node3 to service."""
    folder = "/srv/cntk/data/digits"
    # The last good check records what node3 holds for its ranks.
    assert on_node("node3", "/usr/local/sbin/cntk-node-health") == ""
    owner = on_node("node3", "id -u cntk && id -g cntk").split()
    mount = ["nsenter", "-t", node_pid(CNTK_CLUSTER, "node3"), "-m", "--"]
    subprocess.run(mount + ["mount", "-t", "tmpfs", "-o", f"size=64k,mode=0750,uid={owner[0]},gid={owner[1]}",
                            "tmpfs", folder], check=True)
    jobs = slurm_jobs()
    try:
        refused = ansible_playbook("playbooks/train.yml", *job_args("digits-slurm", epochs=10), check=False)
        assert refused.returncode != 0
        assert re.search(r"Slurm holds node3 out of the job: node3 \(drained: cntk-health: data: "
                         rf"{folder} has [\d.]+ KiB free, [\d.]+ KiB short of the 2 files", refused.stdout), \
            refused.stdout[-3000:]
        assert slurm_jobs() == jobs and as_user("node1", "squeue --noheader") == ""
        state, reason = slurm_node("node3").split("|", 1)
        assert state == "drained" and reason.startswith("cntk-health: data: "), (state, reason)
    finally:
        subprocess.run(mount + ["umount", folder], check=True)
    assert "healthy again, resumed" in on_node("node3", "/usr/local/sbin/cntk-node-health")
    assert settled("node3", "idle|none") == "idle|none"


def test_a_throttled_fabric_link_is_drained_named_and_kept_out_until_it_is_fast_again(slurm):
    """A tbf of 20 Mbit/s on node4's fabric NIC: the train step's link check measures it against the cluster's
    median, drains node4 naming both rates, and submits nothing; with the tbf gone the next train run returns
    node4 to service (and finds the job up to date)."""
    tc = ["nsenter", "-t", node_pid(CNTK_CLUSTER, "node4"), "-n", "--", "tc", "qdisc"]
    subprocess.run(tc + ["add", "dev", "fab0", "root", "tbf", "rate", "20mbit", "burst", "32kbit", "latency",
                         "400ms"], check=True)
    jobs = slurm_jobs()
    try:
        refused = ansible_playbook("playbooks/train.yml", *job_args("digits-slurm", epochs=10), check=False)
        assert refused.returncode != 0
        found = re.search(r"node4 \(drained: cntk-health-link: fabric: node4 sends (\d+) Mbit/s, under 0.25 of the "
                          r"cluster's median (\d+) Mbit/s", refused.stdout)
        assert found, refused.stdout[-3000:]
        assert int(found.group(1)) <= 25 and int(found.group(2)) > 100, found.groups()
        assert slurm_jobs() == jobs
        assert slurm_node("node4").startswith("drained|cntk-health-link: fabric: node4 sends")
    finally:
        subprocess.run(tc + ["del", "dev", "fab0", "root"], check=True)
    again = ansible_playbook("playbooks/train.yml", *job_args("digits-slurm", epochs=10))
    assert "digits-slurm is up to date" in again.stdout, again.stdout[-3000:]
    assert settled("node4", "idle|none") == "idle|none"


def test_a_job_queues_behind_one_that_holds_the_nodes_and_runs_when_it_ends(slurm):
    """Another job of the training user's holds every node (--exclusive, as a colleague's would): the train step's
    job is queued, says so and why, and starts once that one ends."""
    holder = as_user("node1", "cd $HOME && sbatch --parsable --exclusive -N4 --job-name=holder --output=/dev/null "
                              "--wrap 'sleep 900'").strip()
    holder = holder.split(";")[0]
    assert holder.isdigit(), holder
    proc = None
    try:
        deadline = time.monotonic() + 120
        while as_user("node1", f"squeue --noheader -j {holder} -o %T").strip() != "RUNNING":
            assert time.monotonic() < deadline, as_user("node1", f"squeue; scontrol show job {holder}")
            time.sleep(2)
        proc = start_train(*job_args("queued"))
        read_until(proc, r"queued: Slurm job \d+ is queued \((Resources|Priority)\)")
    finally:
        as_user("node1", f"scancel {holder}")
    output = proc.communicate(timeout=900)[0]
    assert proc.returncode == 0, output[-4000:]
    queued = latest("queued", "job.json")["slurm_job"]
    times = {}
    for job_id in (holder, queued):
        fields = dict(re.findall(r"(\w+)=(\S+)", as_user("node1", f"scontrol show job --oneliner {job_id}")))
        times[job_id] = (fields["StartTime"], fields["EndTime"])
    assert times[queued][0] >= times[holder][1], times


def test_the_same_job_twice_is_refused_naming_the_queued_one_and_stop_yml_cancels_it(slurm):
    job = "digits-twice"
    first = start_train(*job_args(job, epochs=300))
    try:
        read_until(first, r"is Slurm job \d+\.")
        job_id = as_user("node1", f"squeue --noheader --name={job} --format=%i").strip()
        assert job_id.isdigit(), job_id
        again = ansible_playbook("playbooks/train.yml", *job_args(job, epochs=300), check=False)
        assert again.returncode != 0
        assert f"Slurm job {job_id} (" in again.stdout and f"is {job} already" in again.stdout, again.stdout[-3000:]
        stopped = ansible_playbook("playbooks/stop.yml")
        assert "Cancel them with scancel" in stopped.stdout and "changed: [node1]" in stopped.stdout
    finally:
        output = first.communicate(timeout=600)[0]
    assert first.returncode != 0
    assert re.search(rf"{job} run \S+ failed: (Slurm ended job {job_id}: CANCELLED|stopping the job: it was asked "
                     r"to stop)", output), output[-3000:]
    assert as_user("node1", "squeue --noheader") == ""


def test_the_data_step_waits_for_a_hand_submitted_job_it_would_change_the_data_under(slurm):
    """Issue 44: the lock saw only the project's own run; a job queued by hand (held here, as a pending job is)
    is named and data.yml changes nothing until it is gone."""
    job_id = as_user("node1", "sbatch --parsable --hold --job-name=hand-held --wrap 'sleep 1'").strip()
    assert job_id.isdigit(), job_id
    try:
        refused = ansible_playbook("playbooks/data.yml", check=False)
        assert refused.returncode != 0
        assert f"{job_id} (PENDING, {USER}, hand-held)" in refused.stdout, refused.stdout[-3000:]
        assert "The data step changes what they read" in refused.stdout
    finally:
        as_user("node1", f"scancel {job_id}")
    assert ansible_playbook("playbooks/data.yml").returncode == 0


def test_ctrl_c_cancels_the_slurm_job_and_leaves_no_process(slurm):
    proc = start_train(*job_args("digits-ctrlc", epochs=200))
    read_until(proc, r"digits-ctrlc \| epoch")
    job_id = re.search(r"(\d+)", as_user("node1", "squeue --noheader --name=digits-ctrlc --format=%i")).group(1)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=180)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = {node: node_shell(CNTK_CLUSTER, node, "pgrep -u cntk -f 'train.py|orted' || true").stdout.strip()
                for node in CNTK_NODES}
        if not any(left.values()) and job_id not in as_user("node1", "squeue --noheader --format=%i"):
            break
        time.sleep(2)
    assert not any(left.values()), left
    assert "JobState=CANCELLED" in as_user("node1", f"scontrol show job --oneliner {job_id}")


def test_a_users_own_sbatch_from_the_documented_template_gets_the_job_contract(slurm):
    """examples/slurm/train.sbatch (docs/slurm.md), copied to the training user's home on node1 and submitted
    by hand: the demo train.py finds its shards, writes its results and checkpoints where the contract says."""
    template = (ROOT / "examples" / "slurm" / "train.sbatch").read_text()
    on_node("node1", f"cat > /home/{USER}/train.sbatch <<'TEMPLATE'\n{template}TEMPLATE\n"
                     f"chown {USER}: /home/{USER}/train.sbatch")
    args = "--model softmax --epochs 5 --minibatch 64 --lr 0.5 --seed 1"
    submitted = as_user("node1", f"cd $HOME && sbatch --wait --parsable train.sbatch {args}").strip()
    job_id = submitted.split(";")[0]
    assert job_id.isdigit(), submitted
    out = as_user("node1", f"cat $HOME/my-job-{job_id}.out")
    summary = json.loads(as_user("node1", f"cat $HOME/runs/my-job/{job_id}/output/summary.json"))
    assert summary["ranks"] == 8 and summary["backend"] == "cntk", out[-3000:]
    assert summary["hosts"] == [node for node in CNTK_NODES for _ in range(2)]
    assert summary["test_accuracy"] >= 0.80
    for rank in range(8):
        node = CNTK_NODES[rank // 2]
        log = on_node(node, f"cat /home/{USER}/runs/my-job/{job_id}/logs/1/rank.{rank}/stdout")
        assert f"rank {rank}/8 {node} " in log, (rank, log[:500])
