"""slurm.conf's parts: hostlists, node lines from `slurmd -C`, releases, cgroup plugins, registration."""

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import slurm_conf
from bounded import call_within

REPORT = ("NodeName=node1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105\n"
          "UpTime=0-01:02:03\n")


@pytest.mark.parametrize("names, expected", [
    (["node1", "node2", "node3", "node4"], "node[1-4]"),
    (["node3", "node1", "node2", "node5"], "node[1-3,5]"),
    (["node1"], "node1"),
    (["gpu7", "node2", "node1", "login"], "gpu7,login,node[1-2]"),
    (["node01", "node02", "node1"], "node1,node[01-02]"),
    (["rack1-n9", "rack1-n10", "rack1-n11"], "rack1-n[9-11]"),
])
def test_hostlist_compresses_runs_of_numbers(names, expected):
    assert slurm_conf.hostlist(names) == expected


@pytest.mark.parametrize("text, expected", [
    ("node[1-3,7],gpu01", ["node1", "node2", "node3", "node7", "gpu01"]),
    ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]), ("node1", ["node1"]), ("", []), ("a,b", ["a", "b"])])
def test_hostnames_expand_a_hostlist_in_its_order(text, expected):
    assert slurm_conf.hostnames(text) == expected
    assert slurm_conf.hostlist(slurm_conf.hostnames(text)) == slurm_conf.hostlist(expected)


def test_hardware_reads_slurmd_report():
    assert slurm_conf.hardware(REPORT) == {"CPUs": 2, "Boards": 1, "SocketsPerBoard": 1, "CoresPerSocket": 2,
                                           "ThreadsPerCore": 1, "RealMemory": 24105}


def test_hardware_refuses_a_report_without_cpus_or_memory():
    with pytest.raises(ValueError, match="CPUs and RealMemory"):
        slurm_conf.hardware("slurmd: error: something broke\n")


def test_nodes_of_one_shape_share_a_line_and_gpu_nodes_get_gres():
    small = slurm_conf.hardware(REPORT)
    big = dict(small, CPUs=64, CoresPerSocket=32, Boards=1, SocketsPerBoard=2)
    nodes = ([{"name": f"node{i}", "hardware": small} for i in (3, 1, 2)]
             + [{"name": "gpu1", "hardware": big, "gpus": 8}, {"name": "gpu2", "hardware": big, "gpus": 8}])
    assert slurm_conf.node_lines(nodes) == [
        "NodeName=gpu[1-2] CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=32 ThreadsPerCore=1 RealMemory=24105"
        " Gres=gpu:8 State=UNKNOWN",
        "NodeName=node[1-3] CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"
        " State=UNKNOWN",
    ]


def test_the_default_memory_per_cpu_is_the_smallest_share_of_any_node():
    small = slurm_conf.hardware(REPORT)
    big = dict(small, CPUs=64, RealMemory=512000)
    nodes = [{"name": "node1", "hardware": small}, {"name": "gpu1", "hardware": big}]
    assert slurm_conf.default_mem_per_cpu(nodes) == 512000 // 64
    assert slurm_conf.default_mem_per_cpu([{"name": "n", "hardware": dict(small, CPUs=4, RealMemory=3)}]) == 1


def test_release_reads_installed_and_candidate():
    policy = "slurmd:\n  Installed: (none)\n  Candidate: 22.05.8-4+deb12u3\n  Version table:\n"
    assert slurm_conf.release(policy) == ("", "22.05.8")
    assert slurm_conf.release("slurmd:\n  Installed: 1:24.11.5-2\n  Candidate: 1:24.11.5-2\n") == ("24.11.5", "24.11.5")
    assert slurm_conf.release("N: Unable to locate package slurmd\n") == ("", "")


def test_one_release_on_every_node():
    assert slurm_conf.release_problems({"node1": "22.05.8", "node2": "22.05.8"}) == []
    problems = slurm_conf.release_problems({"node1": "22.05.8", "node2": "24.11.5", "node3": "22.05.8"})
    assert problems == ["the nodes would run different Slurm releases (22.05.8 on node1, node3; 24.11.5 on node2): "
                        "a cluster runs one release on every node; put them on one distribution release, or hold "
                        "slurmd at one version"]


def test_a_release_too_old_or_missing_is_named():
    problems = slurm_conf.release_problems({"node1": "20.11.2", "node2": ""})
    assert any(p.startswith("node2: no slurmd package") for p in problems)
    assert any(p.startswith("node1 (20.11.2): Slurm older than 20.11.3") for p in problems)
    assert not any("20.11.3" in p and "node1" in p for p in slurm_conf.release_problems({"node1": "20.11.3"}))


@pytest.mark.parametrize("mounts, expected", [
    ([("tmpfs", True)] * 2, {"proctrack": "proctrack/cgroup", "task": "task/cgroup", "cgroup": "cgroup/v1"}),
    ([("cgroup2fs", False)], {"proctrack": "proctrack/cgroup", "task": "task/cgroup", "cgroup": "cgroup/v2"}),
    ([("cgroup2fs", False), ("tmpfs", True)], {"proctrack": "proctrack/cgroup", "task": "task/cgroup",
                                               "cgroup": "autodetect"}),
    ([("tmpfs", True), ("tmpfs", False)], {"proctrack": "proctrack/linuxproc", "task": "task/none", "cgroup": ""}),
])
def test_one_cgroup_choice_for_the_cluster(mounts, expected):
    assert slurm_conf.cgroup_plugins([slurm_conf.cgroup_kind(*mount) for mount in mounts]) == expected


def test_not_ready_names_nodes_slurm_does_not_list_as_up():
    lines = ["node1 idle none", "node2 down* Not responding", "node3 drained check failed: disk", "node5 idle* none"]
    assert slurm_conf.not_ready(lines, ["node1", "node2", "node3", "node4", "node5"]) == [
        "node2 (down*: Not responding)", "node4 (not listed)", "node5 (idle*)"]


MU = "ansible_collections.cntk.cluster.plugins.module_utils."


@pytest.mark.parametrize("text", ["a" * (1 << 20) + "]", "node[1-3" + ",1" * (1 << 19), "x," * (1 << 19) + "[",
                                  "node[" + "1" * (1 << 20)])
def test_a_malformed_hostlist_is_refused_in_one_pass(text):
    """A malformed hostlist (1 MB) is refused, naming where, within a bound a backtracking scan would pass."""
    answer = call_within(20, MU + "slurm_conf", "hostnames", text)
    assert answer["error"].startswith("not a Slurm hostlist"), answer


def test_a_hostlist_of_more_names_than_any_cluster_is_refused_before_it_is_expanded():
    answer = call_within(20, MU + "slurm_conf", "hostnames", "node[1-999999999999]")
    assert answer["error"].startswith("a Slurm hostlist of more than 65536 names"), answer


def test_long_node_names_are_compressed_in_one_pass():
    names = ["a" + "1" * (1 << 20) + "x", "n" * (1 << 20) + "7", "node1", "node2"]
    answer = call_within(20, MU + "slurm_conf", "hostlist", names)
    assert answer["result"].split(",")[-1] == "node[1-2]"
