"""Names from the inventory that become paths, shell words or file lines are
refused by preflight, naming the value and the allowed form, before any node
is contacted (the filter preflight runs, on hostile values)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "roles" / "preflight" / "filter_plugins"))
from cluster_inventory import cluster_inventory_problems  # noqa: E402

GOOD = {"cluster_name": "rack1", "cluster_training_user": "cntk", "cluster_training_uid": 2000,
        "cluster_mpi_interface": "eth1", "cluster_slots": 1, "ansible_host": "10.9.0.1"}


def problems(**overrides):
    host = overrides.pop("host", "node1")
    return cluster_inventory_problems({host: {**GOOD, **overrides}},
                                      {"all": [host], "cluster": [host], "training": [host]})


def test_a_sound_inventory_passes():
    assert problems() == []


@pytest.mark.parametrize("value", ["../../..", "..", "a/b", "digits\nrm -rf /", "digits name", "/etc", ""])
def test_a_traversal_or_multiline_dataset_name_is_refused(value):
    [problem] = problems(cluster_dataset_name=value)
    assert problem.startswith(f"cluster_dataset_name={value!r} names a folder")


@pytest.mark.parametrize("value", ["../x", "job\nnode9 slots=64", "a b"])
def test_a_hostile_job_name_is_refused(value):
    [problem] = problems(train_job_name=value)
    assert f"train_job_name={value!r}" in problem


def test_a_model_name_with_a_slash_is_refused():
    [problem] = problems(train_job_args={"model": "../../x"})
    assert "train_job_args.model='../../x'" in problem


@pytest.mark.parametrize("key", ["A\nrm -rf ~", "A;B", "1ABC", "A B", "$(id)"])
def test_an_environment_name_that_would_be_shell_code_is_refused(key):
    [problem] = problems(train_job_env={key: "1"})
    assert f"train_job_env has the name {key!r}" in problem


def test_a_host_name_with_a_newline_is_refused():
    found = problems(host="node1\nnode9")
    assert any("is not a host name" in problem for problem in found)
