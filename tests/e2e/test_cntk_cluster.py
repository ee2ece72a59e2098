"""Real CNTK 2.7 across a 4-node cluster of its own (`cntkreal`) on the layout `make cluster` brings up: systemd
nodes, each in a network namespace of its own with a management NIC (mgmt0: the controller, Ansible, SSH) and a
fabric NIC (fab0: MPI, the SSH mesh, the data), each on a host bridge made by tools/local_cluster.

`python -m local_cluster up --backend cntk` writes the inventory a user of the local
cluster gets: CPU nodes, the controller's pyenv CPython 3.6.15 shipped to the
nodes by the cpython role (a prebuilt, relocated to /opt/cntk/python3.6), the
real cntk 2.7.post2 wheel from the matrix (downloaded once, sha256-checked),
and one labelled STAND-IN: Debian's Open MPI 4.1 presented under the 1.10
sonames the wheel links (Open MPI 1.10.7's tarball is out of reach here).
site.yml then trains digits with 8 ranks, 2 per node, for real.

The interface counters of each node, read in its namespace while site.yml runs, show that the data step's and the
training job's bytes went over the fabric, the management network carrying only Ansible's own traffic; a
cluster_mpi_interface that is missing, or that does not hold the node's cluster_address, is refused at preflight.
This is Debian 12's row of the netns checks; tests/e2e/test_fabric_network.py is Debian 13's.

The cluster is the session's (tests/e2e/conftest.py): test_slurm.py turns on Slurm on it afterwards.
Skipped where this machine has no pyenv CPython 3.6.15; under CI=true that fails instead (.ci/run builds it).
"""

import hashlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

import cluster_helpers
from prerequisites import NETNS, PYENV_36, requires
from cluster_helpers import CNTK_ARTIFACTS, CNTK_CLUSTER, CNTK_INVENTORY, node_shell, playbook_argv, playbook_env

ROOT = Path(__file__).resolve().parents[2]
NAME = CNTK_CLUSTER
INVENTORY = CNTK_INVENTORY
ARTIFACTS = CNTK_ARTIFACTS
NODES = ["node1", "node2", "node3", "node4"]
JOB = "digits-softmax"

pytestmark = [requires(*NETNS), requires(*PYENV_36)]


def ansible_playbook(playbook, *extra, **options):
    return cluster_helpers.ansible_playbook(INVENTORY, playbook, *extra, **options)


def on_node(node, command):
    result = node_shell(NAME, node, command, timeout=60)
    assert result.returncode == 0, (node, command, result.stderr)
    return result.stdout


def summary_of(job):
    return json.loads((ARTIFACTS / job / "latest" / "summary.json").read_text())


@pytest.fixture
def cluster(cntk_cluster):
    """The real-CNTK cluster (tests/e2e/conftest.py): up once for this module and test_slurm.py."""
    return cntk_cluster


def test_site_trains_digits_with_real_cntk_on_8_ranks(cluster):
    assert "backend cntk" in cluster["up"]
    summary = summary_of(JOB)
    assert summary["backend"] == "cntk"
    assert summary["versions"]["cntk"] == "2.7"
    assert summary["versions"]["python"] == "3.6.15"
    assert summary["ranks"] == 8
    assert summary["hosts"] == [node for node in NODES for _ in range(2)]
    assert summary["test_accuracy"] >= 0.90
    run = ARTIFACTS / JOB / "latest"
    assert (run / "model.cntk").stat().st_size > 0
    for rank in range(8):
        node = NODES[rank // 2]
        log = (run / "logs" / node / "1" / f"rank.{rank}" / "stdout").read_text()
        assert f"rank {rank}/8 {node} " in log, (rank, log[:500])
    # The stand-in is named in the run's output, its record and its report.
    # (Ansible's YAML output doubles the apostrophe.)
    assert re.search(r"STAND-IN: node1 runs the distribution'?'s Open MPI 4\.1", cluster["site"])
    stand_ins = json.loads((run / "job.json").read_text())["stand_ins"]
    assert len(stand_ins) == 1 and "not Open MPI 1.10.7" in stand_ins[0]
    assert "Stand-ins in this run" in (run / "report.html").read_text()
    assert "MPI check: 8 ranks on node1, node2, node3, node4" in cluster["site"]
    cluster_helpers.check_rank_timing(run, summary)


def test_inventory_reaches_nodes_on_management_and_names_the_fabric_nic(cluster):
    cluster_helpers.check_netns_inventory(NAME, INVENTORY)


def test_the_data_and_the_jobs_bytes_went_over_the_fabric(cluster):
    figures = cluster_helpers.check_bytes_went_over_the_fabric(NAME, NODES, cluster["readings"])
    print(f"site.yml {cluster['seconds']:.0f} s; bytes in+out per window: {json.dumps(figures)}")


def test_an_mpi_interface_the_node_lacks_or_that_misses_its_address_is_refused_at_preflight(cluster, tmp_path):
    cluster_helpers.check_wrong_mpi_interface_refused(INVENTORY, tmp_path)


def test_nodes_run_the_shipped_python_and_the_real_wheel(cluster):
    for node in NODES:
        assert on_node(node, "/opt/cntk/python3.6/bin/python3.6 -c 'import sys; print(sys.prefix)'").strip() \
            == "/opt/cntk/python3.6"
        libs = on_node(node, "ldd /opt/cntk/python3.6/bin/python3.6")
        assert "/opt/cntk/python3.6/lib/libpython3.6m.so.1.0" in libs
        # The 2.7.post2 wheel carries 2.7's metadata.
        assert on_node(node, "/opt/cntk/venv/bin/pip show cntk | sed -n 2p").strip() == "Version: 2.7"
        assert "libmpi.so.40" in on_node(node, "readlink /usr/local/mpi/lib/libmpi.so.12")


def test_venv_holds_the_pinned_packages_built_against_the_clusters_open_mpi(cluster):
    wheel = ROOT / ".cache" / "artifacts" / "cntk-2.7.post2-cp36-cp36m-manylinux1_x86_64.whl"
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert sha256 == "71133245e10cdc1eca0b44b5fe241b2c97d0c16b8e12425896541a94ab1b5589"  # matrix/cntk.yml
    for node in NODES:
        freeze = set(on_node(node, "/opt/cntk/venv/bin/pip freeze").split())
        # The 2.7.post2 wheel carries 2.7's metadata; the venv records the file's sha256.
        assert {"cntk==2.7", "mpi4py==3.1.5", "numpy==1.19.5", "scipy==1.5.4"} <= freeze, (node, freeze)
        assert on_node(node, "cat /opt/cntk/venv/.cntk-wheel.sha256").strip() == sha256
        ldd = on_node(node, "ldd /opt/cntk/venv/lib/python3.6/site-packages/mpi4py/MPI.*.so")
        assert re.search(r"libmpi\.so\.40 => (/usr)?/lib/x86_64-linux-gnu/libmpi\.so\.40", ldd), ldd
        # The venv belongs to root: the job can use it, not change it.
        assert node_shell(NAME, node, "su cntk -s /bin/sh -c 'touch /opt/cntk/venv/x'").returncode != 0


def test_a_node_that_lost_mpi4py_fails_the_check_then_provision_repairs_it(cluster):
    on_node("node2", "rm -rf /opt/cntk/venv/lib/python3.6/site-packages/mpi4py*")
    broken = ansible_playbook("playbooks/check.yml", check=False)
    assert broken.returncode != 0
    assert "The MPI check across the cluster failed (8 ranks wanted" in broken.stdout, broken.stdout[-4000:]
    assert "No module named 'mpi4py'" in broken.stdout
    ansible_playbook("playbooks/provision.yml")
    assert "MPI check: 8 ranks on node1, node2, node3, node4" in ansible_playbook("playbooks/check.yml").stdout


# The second site.yml on these nodes runs once, at the end, with Slurm and the volume turned on (test_storage.py):
# it checks every role of this backend too, and the job up to date.


# 1-bit SGD and block momentum run to the end with the real wheel under mpirun in tests/training/test_cntk_mpi.py;
# across nodes they take the train step's one path, shown here by the demo and the user's own job.


def test_a_killed_rank_fails_fast_and_the_resume_finishes_across_nodes(cluster):
    job = "digits-killed"
    job_args = {"model": "mlp", "hidden": 128, "epochs": 12, "minibatch": 64, "lr": 0.2, "seed": 1,
                "progress-every": 10, "checkpoint-every": 20}
    extra = ["-e", f"train_job_name={job}", "-e", json.dumps({"train_job_args": job_args})]
    proc = subprocess.Popen(playbook_argv(INVENTORY, "playbooks/train.yml", *extra), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=playbook_env(), cwd=ROOT, start_new_session=True)
    seen = []
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        seen.append(line)
        match = re.search(r"\| step (\d+) \|", line)
        if match and int(match.group(1)) >= 60:  # three checkpoints written
            break
        assert time.monotonic() < deadline, "".join(seen[-40:])
    on_node("node3", "pkill -9 -o -f train.py")
    killed = time.monotonic()
    output = "".join(seen) + proc.communicate(timeout=300)[0]
    assert proc.returncode != 0
    assert time.monotonic() - killed < 90
    assert re.search(r"rank [45] on node3 was killed by signal 9", output), output[-3000:]
    # Every node's logs came back, the record names the node, and no rank is left running anywhere.
    run = ARTIFACTS / job / "latest"
    assert all((run / "logs" / node).is_dir() for node in NODES), list((run / "logs").iterdir())
    assert json.loads((run / "job.json").read_text())["failed_host"] == "node3"
    assert cluster_helpers.wait_for_job_processes_gone(NAME, NODES, 30) == {}

    # Rank 0's checkpoint is copied to every node, every rank restores it.
    resumed = ansible_playbook("playbooks/train.yml", *extra)
    assert "failed=0" in resumed.stdout
    summary = summary_of(job)
    assert summary["resumed"] is True and summary["epochs"] == 12
    assert summary["test_accuracy"] >= 0.90
    for node in NODES[1:]:
        assert on_node(node, f"ls /srv/cntk/jobs/{job}/checkpoints").split().count("trainer.ckpt") == 1


def test_a_users_own_cntk_job_from_a_folder_outside_the_project_trains_on_8_ranks(cluster, tmp_path):
    """examples/cntk_distributed copied to a temp folder, as a user's own code:
    training_session with a data-parallel learner over the replicated full set."""
    source = tmp_path / "my-job"
    shutil.copytree(ROOT / "examples" / "cntk_distributed", source)
    (source / ".git").mkdir()
    (source / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    job = tmp_path / "job.yml"
    job.write_text(yaml.safe_dump({
        "cluster_dataset_name": "digitsfull", "dataset_layout": "replicate",
        "dataset_train_source": str(ROOT / ".cache" / "datasets" / "digits" / "train.ctf"),
        "dataset_test_source": str(ROOT / ".cache" / "datasets" / "digits" / "test.ctf"),
        "train_job_source": str(source), "train_job_entry": "distributed_train.py",
        "train_job_args": ["--epochs", "10"]}))
    ansible_playbook("playbooks/data.yml", "-e", f"@{job}")
    # The whole set once on every node (not once per rank), the test set on the head node.
    digest = hashlib.sha256((ROOT / ".cache" / "datasets" / "digits" / "train.ctf").read_bytes()).hexdigest()
    for node in NODES:
        assert on_node(node, "sha256sum /srv/cntk/data/digitsfull/train.ctf").split()[0] == digest
    train = ansible_playbook("playbooks/train.yml", "-e", f"@{job}")
    assert re.search(r"digitsfull-distributed_train \| epoch \d+ \| step \d+", train.stdout), train.stdout[-3000:]
    run = ARTIFACTS / "digitsfull-distributed_train" / "latest"
    summary = json.loads((run / "summary.json").read_text())
    # examples/cntk_distributed/README.md: 0.961 with 8 ranks and the default flags.
    assert summary["test_accuracy"] >= 0.94 and summary["ranks"] == 8
    assert (run / "model.cntk").stat().st_size > 0
    assert (run / "plot.png").stat().st_size > 0 and 'src="plot.png"' in (run / "report.html").read_text()
    # The code went to every node without .git, root's.
    assert on_node("node3", "ls -A /var/lib/cntk-cluster/jobs/digitsfull-distributed_train").split() == [
        "README.md", "distributed_train.py"]
    assert on_node("node3", "stat -c %U /var/lib/cntk-cluster/jobs/digitsfull-distributed_train/"
                            "distributed_train.py").strip() == "root"
