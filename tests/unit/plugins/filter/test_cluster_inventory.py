"""Preflight's inventory checks: a sound inventory passes, each fault is named with its fix."""

import copy

import pytest

from ansible_collections.cntk.cluster.plugins.filter.cluster_inventory import cluster_inventory_problems, mpi_interface_problem

CLUSTER = {"cluster_name": "rack1", "cluster_training_user": "cntk", "cluster_training_uid": 2000,
           "cluster_mpi_interface": "eth1", "cluster_slots": 2}


def inventory(n=3, **overrides):
    hostvars = {}
    for i in range(1, n + 1):
        hostvars[f"gpu0{i}"] = dict(CLUSTER, ansible_host=f"192.0.2.1{i}", cluster_address=f"198.51.100.1{i}")
    for host, values in overrides.items():
        hostvars[host].update(values)
    names = list(hostvars)
    groups = {"all": list(names), "cluster": list(names), "training": list(names), "ungrouped": []}
    return hostvars, groups


def everywhere(**values):
    """Cluster-wide values set for the group (a per-host override of them is refused)."""
    return inventory(**{f"gpu0{i}": values for i in range(1, 4)})


def problems(hostvars, groups):
    return cluster_inventory_problems(hostvars, groups)


def test_sound_inventory_has_no_problems():
    assert problems(*inventory()) == []


def test_missing_cluster_group():
    hostvars, groups = inventory()
    del groups["cluster"]
    assert "no `cluster` group" in problems(hostvars, groups)[0]


def test_empty_training_group():
    hostvars, groups = inventory()
    groups["training"] = []
    assert any("`training` group is empty" in p for p in problems(hostvars, groups))


def test_host_in_no_group_is_named():
    hostvars, groups = inventory()
    hostvars["stray"] = dict(CLUSTER)
    groups["all"].append("stray")
    groups["ungrouped"] = ["stray"]
    [problem] = problems(hostvars, groups)
    assert problem.startswith("stray is in no cluster group")


@pytest.mark.parametrize("slots", [0, -2, "4", 1.5, True, None])
def test_slots_must_be_a_positive_integer(slots):
    hostvars, groups = inventory(gpu02={"cluster_slots": slots})
    if slots is None:
        del hostvars["gpu02"]["cluster_slots"]
    [problem] = problems(hostvars, groups)
    assert problem.startswith("gpu02: cluster_slots")


def test_duplicate_addresses_name_both_hosts():
    hostvars, groups = inventory(gpu03={"cluster_address": "198.51.100.11"})
    [problem] = problems(hostvars, groups)
    assert "gpu03 and gpu01 have the same cluster_address 198.51.100.11" in problem


def test_duplicate_ssh_endpoints():
    hostvars, groups = inventory(gpu02={"ansible_host": "192.0.2.11"})
    [problem] = problems(hostvars, groups)
    assert "gpu02 and gpu01 are both reached at 192.0.2.11:22" in problem


def test_duplicate_short_hostnames():
    hostvars, groups = inventory(2)
    hostvars["GPU01.rack.example"] = dict(CLUSTER, ansible_host="192.0.2.99", cluster_address="198.51.100.99")
    for group in ("all", "cluster", "training"):
        groups[group].append("GPU01.rack.example")
    [problem] = problems(hostvars, groups)
    assert "same short host name 'gpu01'" in problem


def test_address_must_be_an_ip():
    [problem] = problems(*inventory(gpu01={"cluster_address": "not-an-ip"}))
    assert "gpu01: cluster_address='not-an-ip' is not an IP address" in problem


def test_loopback_interface_needs_loopback_addresses():
    hostvars, groups = inventory()
    for hv in hostvars.values():
        hv["cluster_mpi_interface"] = "lo"
    found = problems(hostvars, groups)
    assert len(found) == 3 and all("is not a loopback address" in p for p in found)


@pytest.mark.parametrize("name,value,expected", [
    ("cluster_name", None, "cluster_name is not set"),
    ("cluster_name", "Rack 1", "is not a short name"),
    ("cluster_training_user", "root", "other than root"),
    ("cluster_training_user", None, "cluster_training_user is not set"),
    ("cluster_training_uid", 0, "between 1000 and 59999"),
    ("cluster_training_uid", "2000", "between 1000 and 59999"),
    ("cluster_mpi_interface", "", "name the network interface"),
])
def test_cluster_wide_settings(name, value, expected):
    hostvars, groups = inventory()
    for hv in hostvars.values():
        if value is None:
            hv.pop(name)
        else:
            hv[name] = value
    found = problems(hostvars, groups)
    assert len(found) == 1 and expected in found[0]


def test_checks_change_nothing():
    hostvars, groups = inventory(gpu02={"cluster_slots": 0})
    before = copy.deepcopy((hostvars, groups))
    problems(hostvars, groups)
    assert (hostvars, groups) == before


def test_unknown_backend_is_named():
    [problem] = problems(*inventory(gpu01={"cluster_backend": "torch"}))
    assert "cluster_backend='torch'" in problem


def test_openmpi_standin_only_when_asked_by_name():
    [problem] = problems(*everywhere(cluster_backend="cntk", cluster_mpi_method="standin"))
    assert "cluster_openmpi_standin: true" in problem
    assert problems(*everywhere(cluster_backend="cntk", cluster_mpi_method="standin",
                                cluster_openmpi_standin=True)) == []


def test_openmpi_standin_needs_the_cntk_backend():
    [problem] = problems(*everywhere(cluster_backend="numpy", cluster_openmpi_standin=True))
    assert "cluster_backend='numpy'" in problem and "set cluster_backend: cntk" in problem


# A netns node's facts, as `setup` (gather_subset min,interfaces) gives them.
NETNS_FACTS = {
    "interfaces": ["mgmt0", "lo", "fab0"],
    "lo": {"device": "lo", "ipv4": {"address": "127.0.0.1", "netmask": "255.0.0.0"}},
    "mgmt0": {"device": "mgmt0", "ipv4": {"address": "10.147.0.1", "netmask": "255.255.255.0"}},
    "fab0": {"device": "fab0", "ipv4": {"address": "10.147.1.1", "netmask": "255.255.255.0"},
             "ipv4_secondaries": [{"address": "10.99.0.1", "netmask": "255.255.0.0"}]},
}


def test_mpi_interface_holding_the_cluster_address_is_sound():
    assert mpi_interface_problem(NETNS_FACTS, "fab0", "10.147.1.1", "node1") == ""
    assert mpi_interface_problem(NETNS_FACTS, "fab0", "10.99.3.4", "node1") == ""   # a secondary address's network


def test_loopback_layout_address_lies_on_lo():
    facts = {"interfaces": ["lo", "eth0"], "lo": NETNS_FACTS["lo"]}
    assert mpi_interface_problem(facts, "lo", "127.0.0.11", "node1") == ""


def test_missing_mpi_interface_names_host_value_and_what_the_node_has():
    problem = mpi_interface_problem(NETNS_FACTS, "eth9", "10.147.1.1", "node1")
    assert problem.startswith("node1 has no interface eth9 (cluster_mpi_interface); it has fab0, lo, mgmt0.")


def test_mpi_interface_that_does_not_hold_the_address_names_the_one_that_does():
    problem = mpi_interface_problem(NETNS_FACTS, "mgmt0", "10.147.1.1", "node1")
    assert "node1: cluster_address 10.147.1.1 is not on mgmt0 (cluster_mpi_interface, 10.147.0.1/24)" in problem
    assert "it is on fab0" in problem


def test_address_or_interface_without_facts_is_left_to_other_checks():
    assert mpi_interface_problem(NETNS_FACTS, "fab0", "node1.example", "node1") == ""
    assert mpi_interface_problem({"interfaces": ["ib0"]}, "ib0", "10.0.0.1", "node1") == ""
