"""Findings 5, 6 and 7 (issue 27) on the security tests' 2-node cluster
(conftest.py): a second run while the first holds the lock is refused naming
the first (main ran both); data and provisioning are refused while a job runs;
a run interrupted by Ctrl-C is continued from its checkpoint (main started
fresh over it); a job of another code folder under the same name is refused,
and another cluster's record is not taken for this one's."""

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from cluster_helpers import ansible_playbook, node_shell, read_until, recap, start_playbook

ROOT = Path(__file__).resolve().parents[2]
NAME = "sec"
INVENTORY = ROOT / ".cluster" / NAME / "inventory"
ARTIFACTS = ROOT / ".cluster" / NAME / "artifacts"

pytestmark = pytest.mark.cluster
# roles/cluster/vars/main.yml's cluster_lock_dir: a folder holding the holder's holder.json.
LOCK = "/var/lib/cntk-cluster/lock"
ARGS = {"model": "mlp", "epochs": 60, "minibatch": 64, "lr": 0.2, "seed": 1, "progress-every": 20}


def flat(text):
    """Output with the YAML callback's line wrapping undone."""
    return " ".join(text.split())


def on_node(node, command):
    result = node_shell(NAME, node, command)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def start(job, **args):
    return start_playbook(INVENTORY, "playbooks/train.yml", "-e", f"train_job_name={job}",
                          "-e", json.dumps({"train_job_args": dict(ARGS, **args)}))


def interrupt(proc):
    os.killpg(proc.pid, signal.SIGINT)
    return proc.communicate(timeout=120)[0]


def wait_for_lock(proc, timeout=180):
    """Until node1's cluster lock names the started playbook `proc` as its holder; the test fails when the
    playbook ends or `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        holder = node_shell(NAME, "node1", f"cat {LOCK}/holder.json").stdout
        if holder and json.loads(holder).get("pid") == proc.pid:
            return
        time.sleep(0.2)
    pytest.fail(f"the cluster lock never named ansible-playbook pid {proc.pid} (it ended: {proc.poll()})")


def training_processes():
    return [on_node(node, "pgrep -u cntk -f 'train.py|orted|mpirun' || true").split() for node in ("node1", "node2")]


def test_a_second_run_a_second_later_is_refused_and_data_and_provision_wait_for_the_job(sec_cluster):
    # Long enough to be still running through both refusals below (it is interrupted at the end).
    first = start("sec-first", epochs=600)
    wait_for_lock(first)
    second = ansible_playbook(INVENTORY, "playbooks/train.yml", "-e", "train_job_name=sec-second",
                              "-e", "train_job_force=true", check=False)
    assert second.returncode != 0
    assert re.search(rf"node1: .*The cluster is locked by train run by \S+@\S+ \(ansible-playbook pid {first.pid},",
                     flat(second.stdout)), second.stdout[-3000:]
    assert all(counts["changed"] == 0 for counts in recap(second.stdout).values())
    assert not (ARTIFACTS / "sec-second").exists()
    read_until(first, r"\| epoch ([3-9]|\d\d+) \|")
    for step in (["playbooks/data.yml"], ["site.yml", "--tags", "base"]):
        refused = ansible_playbook(INVENTORY, *step, check=False)
        assert refused.returncode != 0
        assert re.search(r"node1: job sec-first run \d{8}T\d{6}Z is running there; the cluster runs one job at a "
                         r"time\. The cluster is locked by train", flat(refused.stdout)), refused.stdout[-3000:]
    interrupt(first)


def test_an_interrupted_run_is_continued_from_its_checkpoint(sec_cluster):
    first = start("sec-resume")
    read_until(first, r"\| epoch ([5-9]|\d\d) \|")
    interrupt(first)
    deadline = time.monotonic() + 30
    while any(training_processes()) and time.monotonic() < deadline:
        time.sleep(1)
    interrupted = json.loads((ARTIFACTS / "sec-resume" / "latest" / "job.json").read_text())
    assert "rc" not in interrupted  # on record as started, never ended
    # The next run takes the stale lock over (same controller, its process gone) and continues the run.
    rerun = ansible_playbook(INVENTORY, "playbooks/train.yml", "-e", "train_job_name=sec-resume",
                             "-e", json.dumps({"train_job_args": ARGS}))
    assert "took over the cluster lock from train run by" in flat(rerun.stderr)
    assert (f"sec-resume continues run {interrupted['run_id']}, which was interrupted, from its last checkpoint."
            in flat(rerun.stdout))
    latest = ARTIFACTS / "sec-resume" / "latest"
    record = json.loads((latest / "job.json").read_text())
    assert record["resuming"] is True and record["rc"] == 0 and record["run_id"] != interrupted["run_id"]
    logs = "".join(path.read_text(errors="replace") for path in (latest / "logs").rglob("*") if path.is_file())
    assert re.search(r"resuming from \S+checkpoint.npz after epoch ([5-9]|\d\d)", logs), logs[-3000:]


def test_the_same_name_from_another_code_folder_is_refused_and_another_cluster_is_not_up_to_date(
        sec_cluster, tmp_path):
    ansible_playbook(INVENTORY, "playbooks/train.yml")  # digits-softmax, this checkout's training/
    theirs = tmp_path / "their-job"
    shutil.copytree(ROOT / "training", theirs, ignore=shutil.ignore_patterns("__pycache__"))
    refused = ansible_playbook(INVENTORY, "playbooks/train.yml", "-e", f"train_job_source={theirs}", check=False)
    assert refused.returncode != 0
    assert re.search(r"job digits-softmax holds the checkpoint of run \d{8}T\d{6}Z, started by root from "
                     rf"{ROOT}/training; this is root's {theirs}", flat(refused.stdout)), refused.stdout[-3000:]
    assert all(counts["changed"] == 0 for counts in recap(refused.stdout).values())
    # Another cluster recording into the same folder is not told it is up to date (main showed it this one's report):
    # it trains, a run of its own on record.
    ours = json.loads((ARTIFACTS / "digits-softmax" / "latest" / "job.json").read_text())
    ansible_playbook(INVENTORY, "playbooks/train.yml", "-e", "cluster_name=sec-other")
    other = json.loads((ARTIFACTS / "digits-softmax" / "latest" / "job.json").read_text())
    assert other["cluster"] == "sec-other" and other["run_id"] != ours["run_id"] and other["rc"] == 0
    # sec-other's run is not this cluster's: this one trains again too.
    ansible_playbook(INVENTORY, "playbooks/train.yml")
    again = json.loads((ARTIFACTS / "digits-softmax" / "latest" / "job.json").read_text())
    assert again["cluster"] == "sec" and again["run_id"] not in (ours["run_id"], other["run_id"]) and again["rc"] == 0
