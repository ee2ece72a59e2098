"""End to end on a 4-node cluster of its own (`e2e`, 127.0.0.51..54): site.yml,
then what a user does next: rerun the data step, lose a rank, press
Ctrl-C, and run their own jobs (examples/) on their own data layouts. Bad job
and data input, refused before any node is contacted, is tested without nodes:
tests/unit/playbooks/test_job_input_refusals.py.

Nodes are inspected through `docker exec`, the harness's own channel; every
playbook connects over SSH with host keys checked, as on real hardware.
"""

import hashlib
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
import yaml

import cluster_helpers
from cluster_helpers import LOCAL_CLUSTER, node_shell, playbook_env, recap
from prerequisites import CLUSTER_HOST, requires

ROOT = Path(__file__).resolve().parents[2]
# Another name and address range let a second checkout run this file beside CI's.
NAME = os.environ.get("E2E_CLUSTER_NAME", "e2e")
FIRST_ADDRESS = os.environ.get("E2E_FIRST_ADDRESS", "127.0.0.51")
INVENTORY = ROOT / ".cluster" / NAME / "inventory"
ARTIFACTS = ROOT / ".cluster" / NAME / "artifacts"
TOOL = LOCAL_CLUSTER
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
NODES = ["node1", "node2", "node3", "node4"]
JOB = "digits-softmax"
# A job long enough to be interrupted: about 1 s an epoch on these nodes.
LONG_ARGS = {"model": "mlp", "epochs": 20, "minibatch": 64, "lr": 0.2, "seed": 1, "progress-every": 20}

pytestmark = requires(*CLUSTER_HOST)


def playbook_argv(playbook, *extra):
    return cluster_helpers.playbook_argv(INVENTORY, "playbooks/" + playbook, *extra)


def ansible_playbook(playbook, *extra, check=True, timeout=900):
    return cluster_helpers.ansible_playbook(INVENTORY, "playbooks/" + playbook, *extra, check=check, timeout=timeout)


def on_node(node, command, check=True):
    result = node_shell(NAME, node, command, timeout=60)
    if check and result.returncode != 0:
        pytest.fail(f"{node}: {command}: {result.stderr}")
    return result.stdout


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
    subprocess.run(TOOL + ["up", f"--name={NAME}", f"--first-address={FIRST_ADDRESS}", "--nodes=4",
                           "--backend=numpy"], check=True, capture_output=True, text=True)
    started = time.monotonic()
    try:
        site = subprocess.run([PLAYBOOK, "-i", str(INVENTORY), str(ROOT / "site.yml")], capture_output=True,
                              text=True, env=playbook_env(), cwd=ROOT, timeout=1800)
        if site.returncode != 0:
            pytest.fail(f"site.yml failed:\n{site.stdout[-8000:]}")
        yield {"site": site.stdout, "seconds": time.monotonic() - started}
    finally:
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
    cluster_helpers.check_rank_timing(run, summary)


def test_each_node_holds_only_its_ranks_shards(cluster):
    for index, node in enumerate(NODES):
        files = sorted(on_node(node, "ls /srv/cntk/data/digits").split())
        expected = [f"shard-{rank:05d}.ctf" for rank in (2 * index, 2 * index + 1)] + ["manifest.json"]
        if index == 0:
            expected.append("test.ctf")
        assert files == sorted(expected), node
        assert on_node(node, "stat -c %U /srv/cntk/data/digits/" + expected[0]).strip() == "cntk"


def data_files(node):
    """{name: (inode, size, mtime)} of a node's digits folder: a file sent again is a new inode or mtime."""
    listed = on_node(node, "find /srv/cntk/data/digits -type f -printf '%P %i %s %T@\\n'")
    return {name: rest for name, *rest in (line.split() for line in listed.splitlines())}


def plans(report):
    """{node: the data step's plan on it} (dataset_files state=planned) from a JSON report."""
    return {host: result for _, _, host, result in cluster_helpers.task_results(report)
            if result.get("action") == "cntk.cluster.dataset_files" and "send" in result}


def literal_bytes(report):
    """{host: the bytes rsync sent as literal data} over every rsync the run started."""
    sent = {}
    for host, result in cluster_helpers.rsync_results(report):
        sent[host] = sent.get(host, 0) + rsync_bytes(result["stdout"], "Literal data")
    return sent


def test_second_data_run_moves_no_bytes(cluster):
    before = {node: data_files(node) for node in NODES}
    result, report = cluster_helpers.playbook_report(INVENTORY, "playbooks/data.yml")
    assert result.returncode == 0, result.stdout[-3000:]
    assert set(cluster_helpers.changed_counts(report).values()) == {0}, report["stats"]
    # Every node's plan looked and found nothing to send or remove; so no rsync ran, and no byte went.
    found = plans(report)
    assert sorted(found) == NODES, sorted(found)
    assert all(plan["send"] == [] and plan["stale"] == [] for plan in found.values()), found
    assert sum(literal_bytes(report).values()) == 0, literal_bytes(report)
    assert {node: data_files(node) for node in NODES} == before


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


def test_ctrl_c_leaves_no_training_process(cluster):
    proc = start_training("e2e-interrupted", "-e", "train_job_force=true")
    read_until_progress(proc, min_epoch=2)
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=120)
    assert cluster_helpers.wait_for_job_processes_gone(NAME, NODES, 20) == {}


def test_shards_on_a_shared_filesystem_are_not_sent(cluster):
    # Every node mounts .cluster/e2e/shared at /shared, as it would an NFS export.
    source = ROOT / ".cluster" / NAME / "shared" / "src"
    source.mkdir(parents=True, exist_ok=True)
    # The shared folder outlives the cluster (a folder of this machine): start with no shards there, so that
    # the first data step has to make them.
    shutil.rmtree(ROOT / ".cluster" / NAME / "shared" / "shards", ignore_errors=True)
    for name in ("train.ctf", "test.ctf"):
        (source / name).write_bytes((ROOT / ".cache" / "datasets" / "digits" / name).read_bytes())
    shared = json.dumps({"cluster_dataset_shared_dir": "/shared/shards",
                         "dataset_shared_source": "/shared/src/train.ctf",
                         "dataset_shared_test": "/shared/src/test.ctf", "train_job_name": "e2e-shared"})
    before = {node: on_node(node, "ls -l --time-style=+%s /srv/cntk/data/digits") for node in NODES}
    result, report = cluster_helpers.playbook_report(INVENTORY, "playbooks/data.yml", "-e", shared)
    assert result.returncode == 0, result.stdout[-6000:]
    # The shards are cut into the shared folder on node1, and no rsync sends any node a file.
    assert cluster_helpers.changed_counts(report)["node1"] > 0, report["stats"]
    assert cluster_helpers.rsync_results(report) == []
    assert (ROOT / ".cluster" / NAME / "shared" / "shards" / "manifest.json").is_file()
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


EXAMPLES = ROOT / "examples"


def job_file(tmp_path, settings):
    """The job's settings as a user writes them: a YAML file given with -e @job.yml."""
    path = tmp_path / "job.yml"
    path.write_text(yaml.safe_dump(settings))
    return f"@{path}"


def test_presplit_binary_parts_train_a_numpy_mpi4py_job(cluster, tmp_path):
    """examples/presplit_numpy: the user's own .npz parts, one per rank, any format."""
    subprocess.run([sys.executable, str(EXAMPLES / "presplit_numpy" / "make_parts.py"), "--out",
                    str(tmp_path / "logistic"), "--parts", "8"], check=True, capture_output=True)
    job = job_file(tmp_path, {
        "cluster_dataset_name": "logistic", "dataset_layout": "presplit",
        "dataset_train_source": str(tmp_path / "logistic" / "train"),
        "dataset_test_source": str(tmp_path / "logistic" / "test.npz"),
        "train_job_source": "examples/presplit_numpy", "train_job_entry": "train.py",
        "train_job_args": ["--epochs", "5"]})
    ansible_playbook("data.yml", "-e", job)
    # Each node holds its two ranks' parts (and the head node the test set) only.
    assert on_node("node2", "ls /srv/cntk/data/logistic").split() == [
        "manifest.json", "shard-00002.npz", "shard-00003.npz"]
    assert "test.npz" in on_node("node1", "ls /srv/cntk/data/logistic").split()
    assert all(counts["changed"] == 0 for counts in recap(ansible_playbook("data.yml", "-e", job).stdout).values())
    train = ansible_playbook("train.yml", "-e", job)
    assert "logistic-train | " in train.stdout
    run = ARTIFACTS / "logistic-train" / "latest"
    summary = json.loads((run / "summary.json").read_text())
    # examples/presplit_numpy/README.md: 0.840 on 8 ranks; the true weights score about 0.845.
    assert summary["test_accuracy"] >= 0.80 and summary["ranks"] == 8
    assert (run / "model.npz").stat().st_size > 0
    assert json.loads((run / "job.json").read_text())["job_env"]["JOB_DATA_LAYOUT"] == "presplit"


def test_a_plain_mpi4py_job_runs_on_a_sharded_text_file(cluster, tmp_path):
    """examples/mpi4py_kmeans: no training framework, a one-point-a-line .txt cut into slices."""
    subprocess.run([sys.executable, str(EXAMPLES / "mpi4py_kmeans" / "make_points.py"), "--out",
                    str(tmp_path / "points")], check=True, capture_output=True)
    job = job_file(tmp_path, {
        "cluster_dataset_name": "points", "dataset_layout": "shard",
        "dataset_train_source": str(tmp_path / "points" / "points.txt"),
        "dataset_test_source": str(tmp_path / "points" / "test.txt"),
        "train_job_source": "examples/mpi4py_kmeans", "train_job_entry": "kmeans.py",
        "train_job_args": ["--k", "5"], "train_job_secret_env": {"API_TOKEN": "s3cr3t-t0ken"}})
    ansible_playbook("data.yml", "-e", job)
    assert on_node("node3", "ls /srv/cntk/data/points").split() == [
        "manifest.json", "shard-00004.txt", "shard-00005.txt"]
    train = ansible_playbook("train.yml", "-e", job)
    # Progress from the job's own metrics file.
    assert re.search(r"points-kmeans \| epoch \d+ \| step \d+ \| samples [\d,]+ \| loss ", train.stdout), \
        train.stdout[-3000:]
    run = ARTIFACTS / "points-kmeans" / "latest"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["converged"] and summary["ranks"] == 8 and len(summary["cluster_sizes"]) == 5
    # cluster_dataset_name is decided once (role cluster): the data play wrote the folder the job reads.
    assert json.loads((run / "job.json").read_text())["job_env"]["JOB_DATA_DIR"] == "/srv/cntk/data/points"
    assert (run / "centroids.txt").is_file()
    # A secret reaches the ranks (run.sh, the training user's) and is recorded nowhere else.
    assert json.loads((run / "job.json").read_text())["secret_env"] == ["API_TOKEN"]
    assert "s3cr3t-t0ken" not in train.stdout
    assert not [path for path in run.rglob("*") if path.is_file() and b"s3cr3t-t0ken" in path.read_bytes()]
    run_sh = f"/srv/cntk/jobs/points-kmeans/runs/{run.resolve().name}/run.sh"
    assert on_node("node1", f"stat -c '%U %a' {run_sh}; grep -c s3cr3t-t0ken {run_sh}").split() == ["cntk", "750", "1"]
    assert (run / "plot.png").stat().st_size > 0 and 'src="plot.png"' in (run / "report.html").read_text()


def test_a_failing_job_names_the_rank_and_quotes_its_error(cluster, tmp_path):
    source = tmp_path / "failing"
    source.mkdir()
    (source / "job.py").write_text(
        "import os\nfrom mpi4py import MPI\n"
        "if MPI.COMM_WORLD.Get_rank() == 5:\n"
        "    open(os.path.join(os.environ['JOB_DATA_DIR'], 'no-such-file.bin'))\n"
        "MPI.COMM_WORLD.Barrier()\n")
    started = time.monotonic()
    result = ansible_playbook("train.yml", "-e", job_file(tmp_path, {
        "train_job_source": str(source), "train_job_entry": "job.py", "train_job_args": []}), check=False)
    assert result.returncode != 0
    # The rank that failed ends at once (files/run_rank.py): no hang in MPI_Finalize.
    assert time.monotonic() - started < 180
    assert "rank 5 on node3 exited with code 1" in result.stdout, result.stdout[-3000:]
    assert "Rank 5 on node3 said:" in result.stdout
    assert "FileNotFoundError: [Errno 2] No such file or directory: '/srv/cntk/data/digits/no-such-file.bin'" \
        in result.stdout


def test_one_job_at_a_time_and_stop_yml_stops_the_running_one(cluster):
    # Long enough to outlast the second train step and stop.yml on a loaded machine.
    proc = start_training("e2e-running", "-e", json.dumps({"train_job_args": dict(LONG_ARGS, epochs=400)}))
    read_until_progress(proc, min_epoch=2)
    second = ansible_playbook("train.yml", "-e", "train_job_name=e2e-second", check=False)
    assert second.returncode != 0
    assert re.search(r"node1: job e2e-running run \d{8}T\d{6}Z is running there; the cluster runs one job at a "
                     r"time", second.stdout), second.stdout[-3000:]
    assert all(counts["changed"] == 0 for counts in recap(second.stdout).values())
    stopped = ansible_playbook("stop.yml")
    assert "job e2e-running run " in stopped.stdout
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode != 0
    assert "it was asked to stop (playbooks/stop.yml)" in output, output[-3000:]
    assert cluster_helpers.wait_for_job_processes_gone(NAME, NODES, 20) == {}


def test_code_on_a_shared_filesystem_is_run_where_it_is(cluster, tmp_path):
    # Every node mounts .cluster/e2e/shared at /shared, as it would an NFS export.
    code = ROOT / ".cluster" / NAME / "shared" / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "count.py").write_text(
        "import json, os\nfrom mpi4py import MPI\n"
        "lines = sum(1 for name in os.listdir(os.environ['JOB_DATA_DIR']) if name.startswith('shard-')\n"
        "            for _ in open(os.path.join(os.environ['JOB_DATA_DIR'], name)))\n"
        "total = MPI.COMM_WORLD.allreduce(lines)\n"
        "if MPI.COMM_WORLD.Get_rank() == 0:\n"
        "    json.dump({'lines': total}, open(os.path.join(os.environ['JOB_OUTPUT_DIR'], 'count.json'), 'w'))\n")
    ansible_playbook("train.yml", "-e", job_file(tmp_path, {
        "train_job_source": "/shared/code", "train_job_source_shared": True, "train_job_entry": "count.py"}))
    # Each node's shards counted once per rank on it: 2 ranks a node, each node holds 2 shards.
    assert json.loads((ARTIFACTS / "digits-count" / "latest" / "count.json").read_text())["lines"] == 2 * 1438
    assert "digits-count" not in on_node("node2", "ls /var/lib/cntk-cluster/jobs").split()


def test_a_replicated_set_leaves_the_controller_once_and_the_nodes_relay_it(cluster):
    """dataset_layout: replicate: the controller sends node1 its copy; node2 takes it from node1, node3 and node4
    from node1 and node2 (waves of relay_wave), each checked against the manifest's sha256; a node's damaged copy
    is mended from its parent, not from the controller, and a damaged leftover in .incoming/ is never taken for a good
    copy."""
    digits = ROOT / ".cache" / "datasets" / "digits"
    replicated = json.dumps({"cluster_dataset_name": "digitsrep", "dataset_layout": "replicate",
                             "dataset_train_source": str(digits / "train.ctf"),
                             "dataset_test_source": str(digits / "test.ctf")})
    result = ansible_playbook("data.yml", "-e", replicated, "-v")

    def changed_hosts(task):
        section = result.stdout.split(f"TASK [dataset : {task}")[1].split("TASK [")[0]
        return sorted(re.findall(r"^changed: \[(node\d)", section, re.M))

    assert changed_hosts("Send the missing or damaged data files") == ["node1"]
    assert changed_hosts("Take the data files from a node that holds them (wave 1)") == ["node2"]
    assert changed_hosts("Take the data files from a node that holds them (wave 2)") == ["node3", "node4"]
    sums = {node: on_node(node, "sha256sum /srv/cntk/data/digitsrep/train.ctf").split()[0] for node in NODES}
    assert len(set(sums.values())) == 1, sums

    on_node("node4", "echo '|features 1 |labels 1' >> /srv/cntk/data/digitsrep/train.ctf")
    # node3 lost its copy and holds, in .incoming/, a damaged leftover with the good file's size and mtime (an
    # interrupted relay's): rsync's quick check must not take it for the good file.
    on_node("node3", "cd /srv/cntk/data/digitsrep && cp -p train.ctf .incoming/train.ctf"
                     " && printf X | dd of=.incoming/train.ctf bs=1 seek=100 conv=notrunc status=none"
                     " && touch -r train.ctf .incoming/train.ctf && rm train.ctf")
    result = ansible_playbook("data.yml", "-e", replicated, "-v")
    assert changed_hosts("Send the missing or damaged data files") == []
    assert changed_hosts("Take the data files from a node that holds them (wave 2)") == ["node3", "node4"]
    for node in ("node3", "node4"):
        assert on_node(node, "sha256sum /srv/cntk/data/digitsrep/train.ctf").split()[0] == sums["node1"]
    for node in NODES:
        on_node(node, "rm -rf /srv/cntk/data/digitsrep")


def test_a_full_data_disk_stops_the_data_step_naming_the_node_and_no_partial_file_is_used(cluster):
    """node3's data folder is a 64 KiB disk (a tmpfs mounted into its mount namespace from the host, as a small
    partition would be): the data step refuses before sending, names the node, the folder and the free space;
    node3 holds no file under a name the job reads. With the disk gone the rerun places everything."""
    folder = "/srv/cntk/data/tight"
    digits = ROOT / ".cache" / "datasets" / "digits"
    tight = json.dumps({"cluster_dataset_name": "tight", "dataset_train_source": str(digits / "train.ctf"),
                        "dataset_test_source": str(digits / "test.ctf"), "dataset_generate": ""})
    pid = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", f"cntk-{NAME}-node3"], check=True,
                         capture_output=True, text=True).stdout.strip()
    # The mount point is the training user's, as the data step makes it.
    owner = on_node("node3", f"runuser -u cntk -- mkdir -p {folder} && id -u cntk && id -g cntk").split()
    mount = ["nsenter", "-t", pid, "-m", "--"]
    subprocess.run(mount + ["mount", "-t", "tmpfs", "-o", f"size=64k,mode=0750,uid={owner[0]},gid={owner[1]}",
                            "tmpfs", folder], check=True)
    try:
        full = ansible_playbook("data.yml", "-e", tight, check=False)
        assert full.returncode != 0
        assert re.search(r"node3: /srv/cntk/data/tight has [\d.]+ KiB free, and the 2 data files to send need "
                         r"[\d.]+ KiB\. Nothing was sent", full.stdout), full.stdout[-3000:]
        assert on_node("node3", f"ls {folder}").split() == []
        assert recap(full.stdout)["node3"]["failed"] == 1
    finally:
        subprocess.run(mount + ["umount", folder], check=True)
    ansible_playbook("data.yml", "-e", tight)
    assert sorted(on_node("node3", f"ls {folder}").split()) == ["manifest.json", "shard-00004.ctf", "shard-00005.ctf"]
    for node in NODES:
        on_node(node, f"rm -rf {folder}")


def test_a_controller_killed_during_the_data_step_leaves_no_partial_file_in_use_and_the_rerun_completes(
        cluster, tmp_path):
    """The controller dies (SIGKILL to ansible-playbook's whole process group) while its rsyncs send 8 parts of
    24 MiB: no node holds a file under a name the job reads; the rerun sends what is missing and every file in
    place has the source's sha256."""
    parts = tmp_path / "big"
    parts.mkdir()
    rng = np.random.default_rng(7)
    digests = {}
    for index in range(8):
        data = rng.bytes(24 << 20)
        (parts / f"part-{index}.bin").write_bytes(data)
        digests[f"shard-{index:05d}.bin"] = hashlib.sha256(data).hexdigest()
    job = job_file(tmp_path, {"cluster_dataset_name": "big", "dataset_layout": "presplit",
                              "dataset_train_source": str(parts), "dataset_test_source": ""})
    proc = subprocess.Popen(playbook_argv("data.yml", "-e", job), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=playbook_env(), cwd=ROOT, start_new_session=True)
    deadline = time.monotonic() + 300
    # The controller's rsync, in the playbook's session: the step is sending.
    while subprocess.run(["pgrep", "-s", str(proc.pid), "-f", "rsync .*--files-from"],
                         capture_output=True).returncode != 0:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.05)
    # Then until bytes have reached node1 (rsync's temporary file in .incoming/), or the step moved on.
    while proc.poll() is None and not on_node("node1", "ls -A /srv/cntk/data/big/.incoming").strip() \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    # Mitogen's connection processes run in sessions of their own; a controller that dies takes them too.
    subprocess.run(["pkill", "-KILL", "-f", job[1:]], check=False)
    proc.communicate()
    for node in NODES:
        assert not [name for name in on_node(node, "ls /srv/cntk/data/big").split() if name.startswith("shard-")], node

    ansible_playbook("data.yml", "-e", job)
    for index, node in enumerate(NODES):
        names = [f"shard-{rank:05d}.bin" for rank in (2 * index, 2 * index + 1)]
        sums = on_node(node, "cd /srv/cntk/data/big && sha256sum " + " ".join(names)).split()[::2]
        assert sums == [digests[name] for name in names], node
        assert on_node(node, "ls -A /srv/cntk/data/big/.incoming").strip() == "", node
    for node in NODES:
        on_node(node, "rm -rf /srv/cntk/data/big")


def address_of(node):
    first = FIRST_ADDRESS.rsplit(".", 1)
    return f"{first[0]}.{int(first[1]) + int(node.removeprefix('node')) - 1}"


def task_outputs(output, task):
    """{host: its result's text} of one task in a -v run's output."""
    section = output.split(f"TASK [{task}")[1].split("TASK [")[0]
    return {match.group(1): chunk for chunk in re.split(r"^(?=(?:changed|ok|skipping|failed): \[)", section, flags=re.M)
            if (match := re.match(r"\w+: \[(node\d+)", chunk))}


def changed_tasks(output):
    """{host: sorted names of the tasks that changed it} in a playbook's output."""
    tasks = {}
    for section in output.split("\nTASK [")[1:]:
        name = section.split("]", 1)[0]
        for host in set(re.findall(r"^changed: \[(node\d+)", section, re.M)):
            tasks.setdefault(host, []).append(name)
    return {host: sorted(names) for host, names in tasks.items()}


def rsync_bytes(text, what):
    """A figure of rsync --stats ("Literal data", "Matched data") in bytes."""
    return int(re.search(rf"{what}: ([\d,]+) bytes", text).group(1).replace(",", ""))


def test_growing_to_six_nodes_provisions_only_the_new_ones_and_sends_only_the_new_ranks_shards(cluster):
    """4 -> 6 nodes, 8 -> 12 ranks: the old nodes' provisioning changes nothing; each old rank keeps a prefix of
    its shard (rsync matches it against the node's copy), the new ranks take the cut tails, and the job trains
    on 12 ranks. Before the reinstall test, which takes the cluster down to 3 nodes."""
    grown = [f"node{i}" for i in range(1, 7)]
    started = time.monotonic()
    subprocess.run(TOOL + ["up", f"--name={NAME}", f"--first-address={FIRST_ADDRESS}", "--nodes=6",
                           "--backend=numpy"], check=True, capture_output=True, text=True)
    provision = subprocess.run([PLAYBOOK, "-i", str(INVENTORY), str(ROOT / "site.yml"), "--tags", "provision"],
                               capture_output=True, text=True, env=playbook_env(), cwd=ROOT, timeout=1800)
    assert provision.returncode == 0, provision.stdout[-4000:]
    # The old nodes only learn the new ones' names: no package, user or venv is touched there.
    membership = ["base : Ensure every cluster node resolves by name",
                  "openmpi : Ensure the default hostfile lists the training nodes"]
    changed = changed_tasks(provision.stdout)
    assert {node: changed.get(node) for node in NODES} == dict.fromkeys(NODES, membership), provision.stdout[-4000:]
    counts = recap(provision.stdout)
    assert all(counts[node]["changed"] == len(membership) for node in NODES)
    assert counts["node5"]["changed"] > 5 and counts["node6"]["changed"] > 5
    assert changed["node5"] == changed["node6"] and set(membership) < set(changed["node5"])
    print(f"\ngrow 4->6: provisioning {time.monotonic() - started:.0f} s")

    # The rest of site.yml: the mesh takes the new nodes in, the data step re-places the shards, the job runs.
    site = subprocess.run([PLAYBOOK, "-i", str(INVENTORY), str(ROOT / "site.yml"), "--skip-tags", "provision", "-v"],
                          capture_output=True, text=True, env=playbook_env(), cwd=ROOT, timeout=1800)
    assert site.returncode == 0, site.stdout[-4000:]
    manifest = json.loads((ROOT / ".cache" / "shards" / NAME / "digits" / "manifest.json").read_text())
    shard_bytes = {entry["rank"]: entry["bytes"] for entry in manifest["shards"]}
    assert manifest["ranks"] == 12 and sorted(shard_bytes) == list(range(12))
    for index, node in enumerate(grown):
        expected = [f"shard-{rank:05d}.ctf" for rank in (2 * index, 2 * index + 1)] + ["manifest.json"]
        assert sorted(on_node(node, "ls /srv/cntk/data/digits").split()) == sorted(expected + ["test.ctf"] * (
            index == 0)), node

    sends = task_outputs(site.stdout, "dataset : Send the missing or damaged data files")
    literal = {node: rsync_bytes(sends[node], "Literal data") for node in grown}
    held = {node: shard_bytes[2 * index] + shard_bytes[2 * index + 1] for index, node in enumerate(grown)}
    # An old rank's shard only shrank: all of it matches the node's copy but the last partial rsync block
    # (700 bytes below 490 kB), which goes as literal data; the new nodes have no basis and take it all.
    for node in NODES:
        assert literal[node] < 2 * 700 and literal[node] < 0.05 * held[node], (node, literal, held)
        assert rsync_bytes(sends[node], "Matched data") + literal[node] == held[node], node
    assert literal["node5"] == held["node5"] and literal["node6"] == held["node6"]
    new_bytes = sum(shard_bytes[rank] for rank in range(8, 12))
    old_literal = sum(literal[node] for node in NODES)
    print(f"grow 4->6: old nodes literal {old_literal} of {sum(held[n] for n in NODES)} shard bytes; "
          f"all literal {sum(literal.values())}, new ranks' shard bytes {new_bytes}")

    run = ARTIFACTS / JOB / "latest"
    hostfile = on_node("node1", f"cat /srv/cntk/jobs/{JOB}/runs/{run.resolve().name}/hostfile")
    assert re.findall(r"^(node\d) slots=(\d+)$", hostfile, re.M) == [(node, "2") for node in grown]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ranks"] == 12 and summary["hosts"] == [node for node in grown for _ in range(2)]
    assert summary["test_accuracy"] >= 0.90

    again = ansible_playbook("data.yml")
    assert all(counts["changed"] == 0 for counts in recap(again.stdout).values())
    print(f"grow 4->6: {time.monotonic() - started:.0f} s")



def test_a_reinstalled_node_is_refused_until_its_key_is_accepted_and_a_removed_node_leaves_no_trace(cluster):
    """Last in this file: it changes the cluster's shape. node3 is reinstalled (new disk, new host keys) and the
    nodes after it (node4, and node5 and node6 of the growing test) taken out; node3 then loses power during its
    provisioning, comes back, and site.yml runs on the three nodes left."""
    subprocess.run(TOOL + ["rebuild", f"--name={NAME}", "node3"], check=True, capture_output=True, text=True)
    refused = subprocess.run([PLAYBOOK, "-i", str(INVENTORY), str(ROOT / "site.yml")], capture_output=True,
                             text=True, env=playbook_env(), cwd=ROOT, timeout=900)
    assert refused.returncode != 0
    assert f"node3 at {address_of('node3')}:22 presents a host key that" in refused.stdout
    assert all(counts["changed"] == 0 for counts in recap(refused.stdout).values())

    printed = subprocess.run(TOOL + ["fingerprints", f"--name={NAME}", "node3"], check=True, capture_output=True,
                             text=True).stdout
    new = next(line.split()[1] for line in printed.splitlines() if line.endswith("(ED25519)"))
    other = on_node("node1", "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub").split()[1]
    accept = ["playbooks/accept_host_key.yml", "-e", "node=node3"]
    wrong = cluster_helpers.ansible_playbook(INVENTORY, *accept, "-e", f"fingerprint={other}", check=False)
    assert wrong.returncode != 0 and f"not {other}: nothing was accepted" in wrong.stdout
    cluster_helpers.ansible_playbook(INVENTORY, *accept, "-e", f"fingerprint={new}")

    subprocess.run(TOOL + ["up", f"--name={NAME}", f"--first-address={FIRST_ADDRESS}", "--nodes=3",
                           "--backend=numpy"], check=True, capture_output=True, text=True)

    # node3 loses power while its packages install (the container killed); the steps that need every node
    # do not start, and no job is launched: no new run on node1 or on the controller.
    runs = on_node("node1", f"ls /srv/cntk/jobs/{JOB}/runs").split()
    latest = (ARTIFACTS / JOB / "latest").resolve()
    proc = subprocess.Popen([PLAYBOOK, "-i", str(INVENTORY), str(ROOT / "site.yml")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=playbook_env(), cwd=ROOT)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("TASK [base : Ensure the base packages are installed]"):
            subprocess.run(["docker", "kill", f"cntk-{NAME}-node3"], check=True, capture_output=True)
            break
    output = "".join(seen) + proc.communicate(timeout=900)[0]
    assert proc.returncode != 0
    assert "node3 failed or could not be reached earlier in this run, and this step works on every node of " \
        "`cluster` at once: it was not started" in output, output[-4000:]
    assert "PLAY [Data" in output
    assert on_node("node1", f"ls /srv/cntk/jobs/{JOB}/runs").split() == runs
    assert (ARTIFACTS / JOB / "latest").resolve() == latest
    # Powered on again: the local cluster's `up` starts the stopped container and waits for its sshd.
    restarted = subprocess.run(TOOL + ["up", f"--name={NAME}", f"--first-address={FIRST_ADDRESS}", "--nodes=3",
                                       "--backend=numpy"], capture_output=True, text=True)
    assert restarted.returncode == 0 and f"started cntk-{NAME}-node3" in restarted.stdout, \
        (restarted.stdout, restarted.stderr, node_shell(NAME, "node3", "true").stderr,
         subprocess.run(["docker", "logs", "--tail", "20", f"cntk-{NAME}-node3"], capture_output=True, text=True))

    site = subprocess.run([PLAYBOOK, "-i", str(INVENTORY), str(ROOT / "site.yml")], capture_output=True,
                          text=True, env=playbook_env(), cwd=ROOT, timeout=1800)
    assert site.returncode == 0, site.stdout[-4000:]
    new_key = on_node("node3", "cat /etc/ssh/ssh_host_ed25519_key.pub").split()[1]
    for node in NODES[:3]:
        known = on_node(node, "cat /etc/ssh/ssh_known_hosts")
        authorized = on_node(node, "cat /home/cntk/.ssh/authorized_keys")
        assert new_key in known, node
        for gone in ("node4", "node5", "node6"):
            assert address_of(gone) not in known and gone not in known, (node, gone)
            assert address_of(gone) not in authorized, (node, gone)
    assert sorted(on_node("node3", "ls /srv/cntk/data/digits").split()) == [
        "manifest.json", "shard-00004.ctf", "shard-00005.ctf"]
    run = ARTIFACTS / JOB / "latest"
    assert [entry["host"] for entry in json.loads((run / "job.json").read_text())["layout"]] == NODES[:3]
    assert json.loads((run / "summary.json").read_text())["test_accuracy"] >= 0.90
