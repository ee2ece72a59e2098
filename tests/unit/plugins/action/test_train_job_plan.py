"""The cntk.cluster.train_job_plan action, run as a task would run it (ansible
ad hoc on the controller): it reads the job's records itself and returns the
run's id, fingerprint, digests, decision and launcher."""

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import train_plan

ROOT = Path(__file__).resolve().parents[4]
PARTS = {"backend": "numpy", "cluster": "c1", "env": {}, "secret_env": [], "layout": [["node1", 2]], "mca": {},
         "platform": "Linux", "program": ["train.py", []], "code": "abc", "data": ["m1"]}


def plan(tmp_path, **args):
    spec = dict(dict(name="digits", parts=PARTS, artifacts_dir=str(tmp_path), source="/src", owner="me"), **args)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STRATEGY="linear", ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_LOCAL_TEMP=str(tmp_path / ".tmp"))
    run = subprocess.run([str(Path(sys.executable).with_name("ansible")), "localhost", "-i", "localhost,",
                          "-c", "local", "-m", "cntk.cluster.train_job_plan", "-a", json.dumps(spec)],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    head, _, body = run.stdout.partition(" => ")
    return dict(json.loads(body), failed="FAILED" in head)


def write(path, record):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_a_new_job_runs_with_the_platforms_launcher(tmp_path):
    result = plan(tmp_path)
    assert not result["failed"], result
    assert result["must_run"] and not result["resuming"] and result["launcher"] == "mpirun"
    assert result["fingerprint"] == train_plan.fingerprint(PARTS)
    assert result["parts"] == train_plan.part_digests(PARTS)
    assert re.fullmatch(r"\d{8}T\d{6}Z", result["run_id"])
    assert not result["changed"]


def test_the_last_success_with_its_report_is_up_to_date_and_force_runs_it_again(tmp_path):
    write(tmp_path / "last_success.json", {"run_id": "R1", "fingerprint": train_plan.fingerprint(PARTS)})
    assert plan(tmp_path)["must_run"], "no report yet: the run is not taken as done"
    write(tmp_path / "R1" / "report.html", {})
    result = plan(tmp_path)
    assert not result["must_run"] and result["previous"]["run_id"] == "R1"
    assert plan(tmp_path, force=True)["must_run"]


def test_an_interrupted_run_of_the_same_fingerprint_is_continued(tmp_path):
    write(tmp_path / "latest" / "job.json", {"run_id": "R2", "fingerprint": train_plan.fingerprint(PARTS),
                                               "source": "/src", "owner": "me"})
    result = plan(tmp_path)
    assert result["must_run"] and result["resuming"] and "continues run R2" in result["why"]
    assert not plan(tmp_path, resume=False)["resuming"]


def test_a_record_it_cannot_read_is_named_with_the_way_out(tmp_path):
    (tmp_path / "last_success.json").write_text("{not json")
    result = plan(tmp_path)
    assert result["failed"] and str(tmp_path / "last_success.json") in result["msg"] and "move it aside" in result["msg"]


@pytest.mark.parametrize("platform, launcher", [("Linux", "mpirun"), ("Windows", "mpiexec")])
def test_each_platform_has_one_launcher(platform, launcher):
    assert train_plan.launcher(platform) == launcher


def test_a_slurm_cluster_submits_with_sbatch(tmp_path):
    result = plan(tmp_path, scheduler="slurm")
    assert not result["failed"], result
    assert result["must_run"] and result["launcher"] == "sbatch"


@pytest.mark.parametrize("platform, scheduler, message", [
    ("Windows", "slurm", "cluster_scheduler=slurm has no launcher for Windows nodes"),
    ("Linux", "pbs", "cluster_scheduler must be one of none, slurm, not 'pbs'"),
])
def test_a_scheduler_without_a_launcher_is_refused(platform, scheduler, message):
    with pytest.raises(ValueError, match=message):
        train_plan.launcher(platform, scheduler)


def test_an_unknown_platform_is_refused(tmp_path):
    with pytest.raises(ValueError, match="platform must be one of Linux, Windows"):
        train_plan.launcher("Plan9")


def node_manifest(ranks, total=4):
    shards = [{"shard": f"shard-{r:05d}.ctf", "rank": r, "bytes": 10, "sha256": f"{r:064x}"} for r in ranks]
    return base64.b64encode(json.dumps({"name": "digits", "layout": "shard", "ranks": total,
                                        "shards": shards}).encode()).decode()


# node4 dead: its two ranks on a spare, node5; the same shards each rank read.
ON_NODE4 = dict(PARTS, layout=[["node1", 2], ["node4", 2]], data=[node_manifest([0, 1]), node_manifest([2, 3])])
ON_NODE5 = dict(PARTS, layout=[["node1", 2], ["node5", 2]], data=[node_manifest([0, 1]), node_manifest([2, 3])])


def failed_run(tmp_path, parts):
    write(tmp_path / "latest" / "job.json", {
        "run_id": "R3", "rc": 1, "fingerprint": train_plan.fingerprint(parts), "source": "/src", "owner": "me",
        "parts": train_plan.part_digests(parts), "rank_data": train_plan.rank_data(parts["data"])})


def test_a_failed_run_continues_with_its_ranks_on_a_spare_node(tmp_path):
    failed_run(tmp_path, ON_NODE4)
    result = plan(tmp_path, parts=ON_NODE5)
    assert not result["failed"], result
    assert result["fingerprint"] != train_plan.fingerprint(ON_NODE4)
    assert result["resuming"] and "continues run R3, which failed (rc 1)" in result["why"]
    assert "its ranks are on other nodes now" in result["why"]
    assert result["rank_data"] == train_plan.rank_data(ON_NODE4["data"]) != ""


@pytest.mark.parametrize("change, word", [
    # Other ranks read other shards: the checkpoint's reader positions are not theirs.
    ({"data": [node_manifest([0, 1, 2], total=6), node_manifest([3, 4, 5], total=6)],
      "layout": [["node1", 3], ["node5", 3]]}, "data, placement"),
    # The same shards, but other code: not a placement change alone.
    ({"code": "def"}, "code, placement"),
])
def test_a_failed_run_starts_fresh_when_more_than_the_placement_changed(tmp_path, change, word):
    failed_run(tmp_path, ON_NODE4)
    result = plan(tmp_path, parts=dict(ON_NODE5, **change))
    assert not result["resuming"] and f"its checkpoint is of other {word} than this run's" in result["why"]


def test_a_record_without_rank_data_or_a_missing_manifest_is_not_taken_for_the_same_shards(tmp_path):
    failed_run(tmp_path, ON_NODE4)
    record = json.loads((tmp_path / "latest" / "job.json").read_text())
    write(tmp_path / "latest" / "job.json", {k: v for k, v in record.items() if k != "rank_data"})
    assert not plan(tmp_path, parts=ON_NODE5)["resuming"], "an older record has no rank_data"
    assert train_plan.rank_data([node_manifest([0, 1]), ""]) == ""
    assert train_plan.rank_data(["m1"]) == ""
