"""End to end on a 4-node cluster of its own (`e2e`, 127.0.0.51..54): site.yml,
then what a user does next: rerun the data step, lose a rank, resume, press Ctrl-C.

Nodes are inspected through `docker exec`, the harness's own channel; every
playbook connects over SSH with host keys checked, as on real hardware.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster_helpers  # noqa: E402
from cluster_helpers import node_shell, playbook_env, recap  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NAME = "e2e"
INVENTORY = ROOT / ".cluster" / NAME / "inventory"
ARTIFACTS = ROOT / ".cluster" / NAME / "artifacts"
TOOL = [sys.executable, str(ROOT / "scripts" / "local_cluster.py")]
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
NODES = ["node1", "node2", "node3", "node4"]
JOB = "digits-softmax"
# A job long enough to be interrupted: about 1 s an epoch on these nodes.
LONG_ARGS = {"model": "mlp", "epochs": 40, "minibatch": 64, "lr": 0.2, "seed": 1, "progress-every": 20}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the local cluster needs root (Docker, debootstrap)")


def playbook_argv(playbook, *extra):
    return cluster_helpers.playbook_argv(INVENTORY, "playbooks/" + playbook, *extra)


def ansible_playbook(playbook, *extra, check=True, timeout=900):
    return cluster_helpers.ansible_playbook(INVENTORY, "playbooks/" + playbook, *extra, check=check, timeout=timeout)


def on_node(node, command, check=True):
    result = node_shell(NAME, node, command, timeout=60)
    if check and result.returncode != 0:
        pytest.fail(f"{node}: {command}: {result.stderr}")
    return result.stdout


def training_processes():
    return {node: on_node(node, "pgrep -f 'train.py|orted|mpirun' | grep -vx $$ | wc -l").strip()
            for node in NODES}


def wait_for_processes_gone(seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        counts = training_processes()
        # pgrep sees the shell that runs it.
        if all(int(count) <= 1 for count in counts.values()):
            return True
        time.sleep(1)
    return False


def start_training(job, *extra):
    """train.yml in the background, in its own process group (as a terminal would run it)."""
    return subprocess.Popen(
        playbook_argv("train.yml", "-e", f"train_job_name={job}", "-e", json.dumps({"train_job_args": LONG_ARGS}),
                      *extra),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=playbook_env(), cwd=ROOT, start_new_session=True)


def read_until_progress(proc, min_epoch, timeout=240):
    """Read the playbook's output until a progress line at or past min_epoch."""
    seen = []
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        seen.append(line)
        match = re.search(r"\| epoch (\d+) \|", line)
        if match and int(match.group(1)) >= min_epoch:
            return seen
        if time.monotonic() > deadline:
            break
    pytest.fail("no progress line reached epoch %d:\n%s" % (min_epoch, "".join(seen[-40:])))


@pytest.fixture(scope="module")
def cluster():
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
    # New nodes, and no runs on record from an earlier cluster of this name
    # (the controller's last_success.json would say the jobs are up to date).
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    subprocess.run(TOOL + ["up", f"--name={NAME}", "--first-address=127.0.0.51", "--nodes=4", "--backend=numpy"],
                   check=True, capture_output=True, text=True)
    started = time.monotonic()
    site = subprocess.run([PLAYBOOK, "-i", str(INVENTORY), str(ROOT / "site.yml")], capture_output=True,
                          text=True, env=playbook_env(), cwd=ROOT, timeout=1800)
    if site.returncode != 0:
        pytest.fail(f"site.yml failed:\n{site.stdout[-8000:]}")
    yield {"site": site.stdout, "seconds": time.monotonic() - started}
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)


def test_site_trains_digits_to_at_least_90_percent(cluster):
    run = ARTIFACTS / JOB / "latest"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == "numpy"
    assert summary["ranks"] == 8
    assert summary["hosts"] == [node for node in NODES for _ in range(2)]
    assert summary["test_accuracy"] >= 0.90
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [record["step"] for record in metrics]
    assert steps == sorted(steps) and len(steps) > 10
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    model = np.load(run / "model.npz")
    assert len(model.files) > 0
    assert (run / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (run / "report.html").read_text()
    assert f"{summary['test_accuracy'] * 100:.2f}%" in report
    # Every rank's log, fetched from the node it ran on.
    for rank in range(8):
        node = NODES[rank // 2]
        assert (run / "logs" / node / "1" / f"rank.{rank}" / "stdout").is_file(), (node, rank)
    assert "Report: " + str(ARTIFACTS / JOB) in cluster["site"]


def test_each_node_holds_only_its_ranks_shards(cluster):
    for index, node in enumerate(NODES):
        files = sorted(on_node(node, "ls /srv/cntk/data/digits").split())
        expected = [f"shard-{rank:05d}.ctf" for rank in (2 * index, 2 * index + 1)] + ["manifest.json"]
        if index == 0:
            expected.append("test.ctf")
        assert files == sorted(expected), node
        assert on_node(node, "stat -c %U /srv/cntk/data/digits/" + expected[0]).strip() == "cntk"


def test_second_site_run_changes_nothing_and_trains_nothing(cluster):
    result = subprocess.run([PLAYBOOK, "-i", str(INVENTORY), str(ROOT / "site.yml")], capture_output=True,
                            text=True, env=playbook_env(), cwd=ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:]
    assert all(counts["changed"] == 0 for counts in recap(result.stdout).values()), recap(result.stdout)
    assert "is up to date" in result.stdout


def test_second_data_run_moves_no_bytes(cluster):
    result = ansible_playbook("data.yml")
    assert all(counts["changed"] == 0 for counts in recap(result.stdout).values())
    sends = result.stdout.split("Send the missing or damaged shards")[1].split("TASK [")[0]
    assert "changed:" not in sends and "skipping: [node1]" in sends


def test_damaged_and_stale_shards_are_repaired(cluster):
    good = on_node("node3", "sha256sum /srv/cntk/data/digits/shard-00004.ctf").split()[0]
    on_node("node3", "echo '|features 1 |labels 1' >> /srv/cntk/data/digits/shard-00004.ctf")
    on_node("node2", "cp /srv/cntk/data/digits/shard-00002.ctf /srv/cntk/data/digits/shard-00099.ctf")
    result = ansible_playbook("data.yml")
    counts = recap(result.stdout)
    assert counts["node3"]["changed"] > 0 and counts["node2"]["changed"] > 0
    assert counts["node1"]["changed"] == 0 and counts["node4"]["changed"] == 0
    assert on_node("node3", "sha256sum /srv/cntk/data/digits/shard-00004.ctf").split()[0] == good
    assert "shard-00099.ctf" not in on_node("node2", "ls /srv/cntk/data/digits")
    assert on_node("node3", "ls -A /srv/cntk/data/digits/.incoming").strip() == ""


def test_a_killed_rank_fails_the_job_fast_then_resume_finishes(cluster):
    job = "e2e-killed"
    proc = start_training(job)
    read_until_progress(proc, min_epoch=4)
    on_node("node3", "pkill -9 -o -f train.py")
    killed = time.monotonic()
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode != 0
    # Failure noticed, logs collected and the playbook ended within seconds.
    assert time.monotonic() - killed < 60
    assert re.search(r"failed: rank [45] on node3 was killed by signal 9", output), output[-3000:]
    run = ARTIFACTS / job / "latest"
    for node in NODES:
        assert (run / "logs" / node).is_dir(), node
    assert json.loads((run / "job.json").read_text())["failed_host"] == "node3"
    assert wait_for_processes_gone(30), training_processes()

    # Same job, same arguments: continues after the last checkpoint and finishes.
    resumed = ansible_playbook("train.yml", "-e", f"train_job_name={job}",
                               "-e", json.dumps({"train_job_args": LONG_ARGS}))
    assert "failed=0" in resumed.stdout
    rank0 = (ARTIFACTS / job / "latest" / "logs" / "node1" / "1" / "rank.0" / "stdout").read_text()
    match = re.search(r"resuming from \S+ after epoch (\d+)", rank0)
    assert match and int(match.group(1)) >= 3, rank0[:2000]
    summary = json.loads((ARTIFACTS / job / "latest" / "summary.json").read_text())
    assert summary["epochs"] == LONG_ARGS["epochs"]


def test_ctrl_c_leaves_no_training_process(cluster):
    proc = start_training("e2e-interrupted", "-e", "train_job_force=true")
    read_until_progress(proc, min_epoch=2)
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=120)
    assert wait_for_processes_gone(20), training_processes()


def test_shards_on_a_shared_filesystem_are_not_sent(cluster):
    # Every node mounts .cluster/e2e/shared at /shared, as it would an NFS export.
    source = ROOT / ".cluster" / NAME / "shared" / "src"
    source.mkdir(parents=True, exist_ok=True)
    for name in ("train.ctf", "test.ctf"):
        (source / name).write_bytes((ROOT / ".cache" / "datasets" / "digits" / name).read_bytes())
    shared = json.dumps({"cluster_dataset_shared_dir": "/shared/shards",
                         "dataset_shared_source": "/shared/src/train.ctf",
                         "dataset_shared_test": "/shared/src/test.ctf", "train_job_name": "e2e-shared"})
    before = {node: on_node(node, "ls -l --time-style=+%s /srv/cntk/data/digits") for node in NODES}
    result = ansible_playbook("data.yml", "-e", shared)
    assert "Send the missing or damaged shards" not in result.stdout
    assert recap(result.stdout)["node1"]["changed"] > 0
    ansible_playbook("train.yml", "-e", shared)
    run = ARTIFACTS / "e2e-shared" / "latest"
    assert json.loads((run / "summary.json").read_text())["test_accuracy"] >= 0.90
    job_env = json.loads((run / "job.json").read_text())["job_env"]
    assert job_env["JOB_DATA_DIR"] == "/shared/shards"
    # The checkpoints go beside the shards on the shared filesystem.
    assert job_env["JOB_CHECKPOINT_DIR"] == "/shared/checkpoints/e2e-shared"
    assert "checkpoint.npz" in on_node("node1", "ls /shared/checkpoints/e2e-shared")
    assert before == {node: on_node(node, "ls -l --time-style=+%s /srv/cntk/data/digits") for node in NODES}
    again = ansible_playbook("data.yml", "-e", shared)
    assert all(counts["changed"] == 0 for counts in recap(again.stdout).values())


def test_a_renamed_data_set_is_written_and_trained_under_its_name(cluster):
    """cluster_dataset_name is decided once (role cluster): the data play writes
    /srv/cntk/data/<name> and the train play reads it, and the job takes its name."""
    source = ROOT / ".cache" / "datasets" / "speech"
    source.mkdir(parents=True, exist_ok=True)
    for name in ("train.ctf", "test.ctf"):
        (source / name).write_bytes((ROOT / ".cache" / "datasets" / "digits" / name).read_bytes())
    renamed = json.dumps({"cluster_dataset_name": "speech", "dataset_generate": ""})
    ansible_playbook("data.yml", "-e", renamed)
    for node in NODES:
        assert "manifest.json" in on_node(node, "ls /srv/cntk/data/speech").split()
    ansible_playbook("train.yml", "-e", renamed)
    run = ARTIFACTS / "speech-softmax" / "latest"
    assert json.loads((run / "job.json").read_text())["job_env"]["JOB_DATA_DIR"] == "/srv/cntk/data/speech"
    assert json.loads((run / "summary.json").read_text())["test_accuracy"] >= 0.90
