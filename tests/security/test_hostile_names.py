"""Names from the inventory that become paths, shell words or file lines are
refused by preflight, naming the value and the allowed form, before any node
is contacted (the filter preflight runs, on hostile values)."""

from pathlib import Path

import pytest

from ansible_collections.cntk.cluster.plugins.filter.cluster_inventory import cluster_inventory_problems

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


def cluster(**per_host):
    """Two nodes; per_host maps a host to the values only it overrides."""
    hostvars = {host: {**GOOD, "ansible_host": f"10.9.0.{i}", **per_host.get(host, {})}
                for i, host in enumerate(("node1", "node2"), 1)}
    return cluster_inventory_problems(hostvars, {"all": list(hostvars), "cluster": list(hostvars),
                                                 "training": list(hostvars)})


# Issue 27, finding 2: main read the names from the first node only, so a
# hostile value set for another host passed.
@pytest.mark.parametrize("name, value", [("train_job_name", ".."), ("cluster_dataset_name", "../../etc"),
                                         ("train_job_env", {"A;B": "1"})])
def test_a_per_host_override_of_a_cluster_wide_value_is_refused(name, value):
    [problem] = cluster(node2={name: value})
    assert problem.startswith(f"{name} differs between nodes (")
    assert "node2: " + repr(value) in problem and "set it once for the cluster" in problem


def test_a_per_host_secret_environment_is_refused_without_showing_it():
    [problem] = cluster(node2={"train_job_secret_env": {"TOKEN": "s3cret"}})
    assert "train_job_secret_env differs between nodes" in problem and "s3cret" not in problem


@pytest.mark.parametrize("value", ["eth1\nrm -rf /", "eth 1", "", "a" * 16, "$(id)"])
def test_an_mpi_interface_that_is_not_an_interface_name_is_refused(value):
    [problem] = problems(cluster_mpi_interface=value)
    assert problem.startswith(f"cluster_mpi_interface={value!r}")


@pytest.mark.parametrize("name, value", [("cluster_jobs_dir", "srv/jobs"), ("cluster_jobs_dir", "/srv/../etc"),
                                         ("cluster_data_dir", "/srv/data\n/etc"), ("cluster_data_dir", "/")])
def test_a_folder_that_is_not_an_absolute_clean_path_is_refused(name, value):
    [problem] = problems(**{name: value})
    assert problem.startswith(f"{name}={value!r}")


def test_a_cluster_name_with_a_newline_is_refused():
    [problem] = problems(cluster_name="rack1\n127.0.0.1 evil")
    assert "is not a short name" in problem


# Issue 27, finding 9: inputs main accepted.
@pytest.mark.parametrize("slots", [257, 10**6])
def test_unbounded_slots_are_refused(slots):
    [problem] = problems(cluster_slots=slots)
    assert problem == (f"node1: cluster_slots={slots} is more ranks than any node runs (at most 256): set it to "
                       "this node's GPUs (cntk) or cores (numpy)")


@pytest.mark.parametrize("name", ["ansible_host", "cluster_address"])
def test_an_ipv6_address_is_refused(name):
    found = problems(**{name: "fd00::1"})
    assert any(problem.startswith(f"node1: {name}=fd00::1 is an IPv6 address") for problem in found), found


def test_a_per_host_mpi_interface_is_checked_on_its_host():
    [problem] = cluster(node2={"cluster_mpi_interface": "eth1\nx"})
    assert problem.startswith("node2: cluster_mpi_interface='eth1\\nx'")
    assert cluster(node2={"cluster_mpi_interface": "ens5"}) == []  # its facts are checked at preflight
