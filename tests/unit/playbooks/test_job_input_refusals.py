"""Bad job and data input refused on the controller in the first play, before any node is contacted: train.yml,
data.yml and site.yml run for real against the local cluster's settings (4 nodes x 2 slots = 8 ranks, the numpy
backend, the demo digits written where missing), its nodes loopback addresses on a port where nothing listens:
a run that went past the check would find them unreachable.

Each step checks the input it uses (train.yml the job's, data.yml the data's, site.yml's preflight both), on the
controller; the head node's look at a shared job script, the one check that needs a node, is not here."""

import pytest
import yaml
from cluster_helpers import ROOT, check_stopped_in_preflight, failure_messages, last_ran, playbook_report
from inventory_helpers import closed_port

NODES = ["node1", "node2", "node3", "node4"]
JOB_CHECK = "roles/train_job/tasks/check.yml"
DATA_CHECK = "roles/dataset/tasks/check.yml"
TEST_SET_CHECK = "roles/dataset/tasks/check_test.yml"


def write_inventory(tmp_path):
    """The local cluster's inventory as tools/local_cluster writes it (inventory/local/group_vars/all.yml, the
    backend in hosts.yml), under a cluster name of its own, its nodes on a closed port."""
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    group_vars = yaml.safe_load((ROOT / "inventory" / "local" / "group_vars" / "all.yml").read_text())
    group_vars["cluster_name"] = "unit-input"
    (inventory / "group_vars" / "all.yml").write_text(yaml.safe_dump(group_vars))
    hosts = {node: {"ansible_host": f"127.0.0.{90 + index}", "cluster_address": f"127.0.0.{90 + index}"}
             for index, node in enumerate(NODES, start=1)}
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_port": closed_port(), "ansible_ssh_common_args": "-o ConnectTimeout=5",
                 "cluster_backend": "numpy", "cluster_artifacts_dir": str(tmp_path / "artifacts")},
        "children": {"cluster": {"children": {"training": {"hosts": hosts}}}}}}))
    return inventory


def run(tmp_path, playbook, settings):
    """playbook with the job's settings as a user gives them (-e @job.yml): (its CompletedProcess, its report)."""
    job = tmp_path / "job.yml"
    job.write_text(yaml.safe_dump(settings))
    return playbook_report(write_inventory(tmp_path), playbook, "-e", f"@{job}", timeout=180)


def parts(tmp_path, count, name="parts"):
    folder = tmp_path / name
    folder.mkdir()
    for index in range(count):
        (folder / f"part-{index}.bin").write_bytes(bytes([index]) * 16)
    return str(folder)


def bad_parts(tmp_path):
    return {"dataset_layout": "presplit", "dataset_train_source": parts(tmp_path, 3)}


def parts_without_test_set(tmp_path):
    return {"cluster_dataset_name": "noteset", "dataset_layout": "presplit",
            "dataset_train_source": parts(tmp_path, 8)}


def few_samples(tmp_path):
    source = tmp_path / "few.ctf"
    source.write_text("|features 1 |labels 1\n" * 5)
    return {"dataset_train_source": str(source)}


# case: (playbook, the job's settings, the message, the check file that stops the run)
BAD_INPUT = {
    "missing source": ("train.yml", lambda tmp: {"train_job_source": "/nonexistent/job"},
                       "train_job_source=/nonexistent/job is not a folder on the controller", JOB_CHECK),
    "missing entry": ("train.yml", lambda tmp: {"train_job_source": "examples/mpi4py_kmeans",
                                                "train_job_entry": "missing.py"},
                      "train_job_entry=missing.py is not a file in train_job_source=", JOB_CHECK),
    "entry outside the source": ("train.yml", lambda tmp: {"train_job_source": "examples/mpi4py_kmeans",
                                                           "train_job_entry": "../presplit_numpy/train.py"},
                                 "is outside train_job_source=", JOB_CHECK),
    "arguments not strings": ("train.yml", lambda tmp: {"train_job_args": ["--epochs", 3]},
                              "train_job_args holds [3]", JOB_CHECK),
    "presplit count": ("data.yml", bad_parts, "3 files for 8 ranks", DATA_CHECK),
    # The local inventory writes the demo data where it is missing (dataset_generate: digits); a user's is not.
    "missing data": ("data.yml", lambda tmp: {"dataset_train_source": str(tmp / "nonexistent" / "train.ctf"),
                                              "dataset_generate": ""},
                     "nonexistent/train.ctf does not exist", DATA_CHECK),
    "fewer samples than ranks": ("data.yml", few_samples, "5 samples", DATA_CHECK),
    # The local inventory's dataset_generate: digits writes no test set beside a user's own training set.
    "own data, no test set": ("data.yml", parts_without_test_set,
                              "noteset/test.ctf is not a file on the controller "
                              "(dataset_generate: digits writes the demo data only where the training set is missing)",
                              TEST_SET_CHECK),
}


def check_refused_before_any_node(result, report, message, check_file):
    assert result.returncode != 0, result.stdout[-3000:]
    assert message in failure_messages(report), failure_messages(report)
    # The run stopped in the controller's check: only the checking plays ran, no node was reached or changed.
    where, name, stopped = last_ran(report)
    assert where == check_file and stopped.get("failed"), (where, name, stopped)
    check_stopped_in_preflight(report)
    assert not any(stats["unreachable"] for stats in report["stats"].values()), report["stats"]


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_job_input_is_refused_before_any_node_is_contacted(tmp_path, case):
    playbook, settings, message, check_file = BAD_INPUT[case]
    result, report = run(tmp_path, "playbooks/" + playbook, settings(tmp_path))
    check_refused_before_any_node(result, report, message, check_file)


def test_site_refuses_bad_data_in_preflight_before_reaching_any_node(tmp_path):
    result, report = run(tmp_path, "site.yml", bad_parts(tmp_path))
    check_refused_before_any_node(result, report, "3 files for 8 ranks", DATA_CHECK)
    # Preflight's own play stopped it, before its reachability check.
    assert report["plays"][-1]["play"]["path"].startswith(str(ROOT / "playbooks" / "preflight.yml")), \
        report["plays"][-1]["play"]["path"]


@pytest.mark.parametrize("playbook, settings", [
    ("train.yml", bad_parts), ("data.yml", lambda tmp: {"train_job_source": "/nonexistent/job"})],
    ids=["train.yml leaves the data alone", "data.yml leaves the job alone"])
def test_a_step_checks_only_its_own_input(tmp_path, playbook, settings):
    # The other step's bad input passes the first play: the run goes on to the nodes, which do not answer.
    result, report = run(tmp_path, "playbooks/" + playbook, settings(tmp_path))
    assert result.returncode != 0
    assert all(stats["unreachable"] for host, stats in report["stats"].items() if host in NODES), report["stats"]
    assert "3 files for 8 ranks" not in failure_messages(report)
    assert "train_job_source=/nonexistent/job" not in failure_messages(report)
