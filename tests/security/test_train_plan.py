"""Findings 5 and 7 (issue 27), at the decision: train_job_plan, from the
controller's records. On main an interrupted run (Ctrl-C, a killed
controller) left no record, so the next run started fresh over its
checkpoint; and a job of another folder or user under the same name resumed
that job's checkpoint. The cluster runs are in test_train_runs.py."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
from ansible_collections.cntk.cluster.plugins.filter import train_job as tj

PARTS = tj.train_job_part_digests({"code": "c1", "data": ["d"], "program": ["train.py", []], "layout": [],
                                   "cluster": "rack1"})


def spec(**changes):
    base = {"name": "digits-mlp", "force": False, "resume": True, "fresh": False, "fingerprint": "F",
            "parts": PARTS, "source": "/home/ann/job", "owner": "ann", "last_success": {}, "latest": {},
            "report_exists": False}
    return {**base, **changes}


def record(rc="absent", **changes):
    base = {"run_id": "20261203T010000Z", "fingerprint": "F", "parts": PARTS, "source": "/home/ann/job",
            "owner": "ann"}
    if rc != "absent":
        base["rc"] = rc
    return {**base, **changes}


def test_an_interrupted_run_with_the_same_fingerprint_is_continued():
    plan = tj.train_job_plan(spec(latest=record()))
    assert plan["must_run"] and plan["resuming"]
    assert plan["why"] == "digits-mlp continues run 20261203T010000Z, which was interrupted, from its last checkpoint."


def test_a_failed_run_is_continued_and_a_succeeded_one_is_not():
    assert tj.train_job_plan(spec(latest=record(rc=1)))["resuming"]
    assert not tj.train_job_plan(spec(latest=record(rc=0)))["resuming"]


def test_an_unfinished_run_of_other_code_is_not_continued_and_says_why():
    other = tj.train_job_part_digests({"code": "c2", "data": ["d"], "program": ["train.py", []], "layout": [],
                                       "cluster": "rack1"})
    plan = tj.train_job_plan(spec(latest=record(fingerprint="G", parts=other)))
    assert plan["must_run"] and not plan["resuming"]
    assert plan["why"] == ("digits-mlp starts fresh: run 20261203T010000Z was interrupted, but its checkpoint is "
                           "of other code than this run's.")


def test_fresh_starts_over_and_resume_false_never_continues():
    assert not tj.train_job_plan(spec(latest=record(), fresh=True))["resuming"]
    assert not tj.train_job_plan(spec(latest=record(), resume=False))["resuming"]


def test_the_same_name_from_another_folder_or_user_is_refused_unless_fresh():
    for theirs in (record(source="/home/bob/job", owner="bob"), record(source="/home/ann/other")):
        plan = tj.train_job_plan(spec(latest=theirs))
        assert "job digits-mlp holds the checkpoint of run 20261203T010000Z" in plan["refused"]
        assert "train_job_name" in plan["refused"] and "train_job_fresh=true" in plan["refused"]
        assert tj.train_job_plan(spec(latest=theirs, fresh=True))["refused"] == ""


def test_an_up_to_date_job_is_skipped_and_force_runs_it():
    done = {"last_success": {"run_id": "r", "fingerprint": "F"}, "latest": record(rc=0), "report_exists": True}
    assert not tj.train_job_plan(spec(**done))["must_run"]
    assert tj.train_job_plan(spec(force=True, **done))["must_run"]
    assert tj.train_job_plan(spec(**dict(done, report_exists=False)))["must_run"]


def test_another_cluster_is_another_fingerprint():
    one = {"code": "c", "cluster": "rack1", "platform": "Linux"}
    assert tj.train_job_fingerprint(one) != tj.train_job_fingerprint(dict(one, cluster="rack2"))
