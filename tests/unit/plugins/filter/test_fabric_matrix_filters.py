"""The fabric check's launch: ranks per node, addresses, hostfile and mpirun's argv for the probe."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.filter import fabric_matrix as filters

SPEC = {"mpirun": "/usr/bin/mpirun", "hostfile": "/tmp/x/hostfile", "nodes": ["node1", "node2"], "launched": [2, 2],
        "slots": [1, 2], "interface": "fab0", "python": "/usr/bin/python3", "probe": "/var/lib/p.py",
        "addresses": ["10.0.1.1", "10.0.1.2"], "iperf": "/usr/bin/iperf3", "port": 47610, "iperf_seconds": 1,
        "max_bytes": 33554432, "budget": 20, "out": "/tmp/x/probe.json", "timeout": 600, "export": []}


def test_two_ranks_at_least_on_a_node():
    assert [filters.fabric_matrix_launch(n) for n in (1, "2", 4)] == [2, 2, 4]


def test_addresses_as_the_fabric_check_takes_them():
    hostvars = {"a": {"cluster_address": "10.0.1.1", "ansible_host": "192.0.2.1"}, "b": {"ansible_host": "127.0.0.12"},
                "c": {}}
    assert filters.fabric_matrix_addresses(["a", "b", "c"], hostvars) == ["10.0.1.1", "127.0.0.12", "c"]


def test_hostfile_in_order():
    assert filters.fabric_matrix_hostfile(["node1", "node2"], [2, 3]) == "node1 slots=2\nnode2 slots=3\n"
    with pytest.raises(AnsibleFilterError):
        filters.fabric_matrix_hostfile(["node1"], [2, 2])


def test_the_probe_runs_under_timeout_over_the_fabric_interface_with_the_jobs_python():
    argv = filters.fabric_matrix_probe_argv(SPEC)
    assert argv[:4] == ["timeout", "--kill-after=10", "600", "/usr/bin/mpirun"]
    assert argv[4:10] == ["--hostfile", "/tmp/x/hostfile", "-np", "4", "--map-by", "slot"]
    assert "btl_tcp_if_include fab0" in " ".join(argv) and "oob_tcp_if_include fab0" in " ".join(argv)
    tail = argv[argv.index("/usr/bin/python3"):]
    assert tail == ["/usr/bin/python3", "/var/lib/p.py", "--nodes", "node1,node2", "--launched", "2,2", "--slots",
                    "1,2", "--max-bytes", "33554432", "--budget", "20", "--out", "/tmp/x/probe.json",
                    "--addresses", "10.0.1.1,10.0.1.2", "--iperf", "/usr/bin/iperf3", "--port", "47610",
                    "--iperf-seconds", "1"]


def test_without_iperf_no_addresses_or_port_and_exports_passed_on():
    argv = filters.fabric_matrix_probe_argv(dict(SPEC, iperf="", export=["LD_LIBRARY_PATH"]))
    assert "--iperf" not in argv and "--port" not in argv
    assert argv[argv.index("-x") + 1] == "LD_LIBRARY_PATH"


def test_a_node_name_that_would_split_is_refused():
    with pytest.raises(AnsibleFilterError, match="cannot go in"):
        filters.fabric_matrix_probe_argv(dict(SPEC, nodes=["node1,node3", "node2"]))
