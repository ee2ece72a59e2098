"""Mixed-cluster rejection: Linux nodes with Open MPI or Windows nodes with MS-MPI, never both."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]

from ansible_collections.cntk.cluster.plugins.filter.cluster_platform import (
    cluster_host_is_windows,
    cluster_platform,
    cluster_platform_problem,
    cluster_windows_hosts,
)


def inventory(linux=(), windows_group=(), by_vars=None):
    by_vars = by_vars or {}
    hosts = list(linux) + list(windows_group) + list(by_vars)
    hostvars = {h: {"cluster_slots": 1} for h in hosts}
    for host, extra in by_vars.items():
        hostvars[host].update(extra)
    groups = {"all": hosts, "cluster": hosts, "training": hosts, "ungrouped": []}
    if windows_group:
        groups["windows"] = list(windows_group)
    return hostvars, groups


def test_linux_only_is_accepted():
    hostvars, groups = inventory(linux=["node1", "node2"])
    assert cluster_platform_problem(hostvars, groups) == ""
    assert cluster_platform(hostvars, groups) == "linux"


def test_windows_only_is_accepted():
    hostvars, groups = inventory(windows_group=["win1", "win2"])
    assert cluster_platform_problem(hostvars, groups) == ""
    assert cluster_platform(hostvars, groups) == "windows"


def test_mixed_names_both_sides_and_the_fix():
    hostvars, groups = inventory(linux=["node1", "node2"], windows_group=["win1"])
    problem = cluster_platform_problem(hostvars, groups)
    assert "Linux nodes (node1, node2)" in problem
    assert "Windows nodes (win1)" in problem
    assert "Open MPI" in problem and "MS-MPI" in problem
    assert "inventory of their own" in problem
    assert cluster_platform(hostvars, groups) == "mixed"


def test_windows_recognised_by_connection_and_shell_and_os_family():
    cases = {
        "a": {"ansible_connection": "winrm"},
        "b": {"ansible_connection": "ansible.builtin.psrp"},
        "c": {"ansible_shell_type": "powershell"},
        "d": {"ansible_os_family": "Windows"},
        "e": {"ansible_facts": {"os_family": "Windows"}},
    }
    hostvars, groups = inventory(linux=["node1"], by_vars=cases)
    assert cluster_windows_hosts(hostvars, groups) == ["a", "b", "c", "d", "e"]
    problem = cluster_platform_problem(hostvars, groups)
    assert "Linux nodes (node1)" in problem and "Windows nodes (a, b, c, d, e)" in problem


def test_ssh_to_linux_is_not_windows():
    assert not cluster_host_is_windows({"ansible_connection": "ssh", "ansible_shell_type": "sh"}, ["cluster"])
    assert cluster_host_is_windows({}, ["cluster", "windows"])
    assert cluster_host_is_windows({"group_names": ["windows"]})


def test_long_lists_are_shortened():
    hostvars, groups = inventory(linux=[f"n{i}" for i in range(20)], windows_group=["w1"])
    assert "and 12 more" in cluster_platform_problem(hostvars, groups)


def test_windows_host_outside_cluster_is_named():
    hostvars, groups = inventory(windows_group=["win1"])
    groups["cluster"] = []
    groups["training"] = []
    problem = cluster_platform_problem(hostvars, groups)
    assert "win1 is in the `windows` group but not in `cluster`" in problem


def test_localhost_is_never_a_node():
    hostvars, groups = inventory(windows_group=["win1"])
    groups["cluster"].append("localhost")
    hostvars["localhost"] = {"ansible_connection": "local"}
    assert cluster_platform_problem(hostvars, groups) == ""
