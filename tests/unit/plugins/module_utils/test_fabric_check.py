"""The fabric check with real sockets on 127.0.0.0/8 (plugins/module_utils/fabric_check.py)."""

import socket
import threading
import time

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import fabric_check

NODES = {"node1": "127.0.0.151", "node2": "127.0.0.152", "node3": "127.0.0.153"}


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.151", 0))
        return sock.getsockname()[1]


def _listeners(nodes, port, lifetime=30):
    heard, threads = {}, []
    for name, address in nodes.items():
        def work(name=name, address=address):
            heard[name] = fabric_check.listen(address, port, lifetime)
        thread = threading.Thread(target=work)
        thread.start()
        threads.append(thread)
    time.sleep(0.3)
    return heard, threads


def _stop(nodes, port, threads):
    for address in nodes.values():
        fabric_check.stop(address, port)
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()


def _reach_all(nodes, port, timeout):
    """Every node's reach() at once, as Ansible runs the task on every node."""
    reports, threads = {}, []
    for name in nodes:
        def work(name=name):
            reports[name] = {"blocked": fabric_check.reach(name, dict(nodes), port, timeout)}
        thread = threading.Thread(target=work)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return reports


def test_every_pair_connects_and_the_listeners_stop_when_told():
    port = _free_port()
    heard, threads = _listeners(NODES, port)
    started = time.time()
    reports = _reach_all(NODES, port, 5)
    assert time.time() - started < 3
    assert all(report["blocked"] == {} for report in reports.values())
    assert fabric_check.blocked_pairs(reports, NODES, port, "fab0") == []
    _stop(NODES, port, threads)
    assert heard["node1"] == ["node1", "node2", "node3"]


def test_a_node_without_a_listener_is_named_by_every_other_within_the_timeout():
    port = _free_port()
    up = {name: address for name, address in NODES.items() if name != "node3"}
    _heard, threads = _listeners(up, port)
    started = time.time()
    reports = _reach_all(NODES, port, 2)
    assert time.time() - started < 4
    _stop(up, port, threads)
    lines = fabric_check.blocked_pairs(reports, NODES, port, "fab0")
    assert lines[0] == ("node1 cannot reach node3 at 127.0.0.153:{0} (fab0): connection refused (nothing listening, "
                        "or a firewall rejects it)".format(port))
    assert lines[1].startswith("node2 cannot reach node3 at 127.0.0.153")
    assert lines[2].startswith("node3's own listener at 127.0.0.153:{0} did not answer".format(port))
    assert len(lines) == 3


def test_a_listener_that_starts_late_is_still_reached():
    port = _free_port()
    late = {}

    def start_late():
        time.sleep(1)
        late["heard"] = fabric_check.listen(NODES["node2"], port, 5)
    thread = threading.Thread(target=start_late)
    thread.start()
    assert fabric_check.reach("node1", {"node2": NODES["node2"]}, port, 4) == {}
    fabric_check.stop(NODES["node2"], port)
    thread.join(5)
    assert late["heard"] == ["node1"]


def test_the_timeout_counts_from_when_the_nodes_own_listener_answered():
    """Emulated machines: every listener starts 2 s late, beyond a 1 s timeout; waiting for its own first the node
    reaches them all, and a node whose own never starts is told so within the wait's bound."""
    port = _free_port()
    up = {name: address for name, address in NODES.items() if name != "node3"}
    heard, threads = {}, []
    for name, address in up.items():
        def start_late(name=name, address=address):
            time.sleep(2)
            heard[name] = fabric_check.listen(address, port, 10)
        threads.append(threading.Thread(target=start_late))
        threads[-1].start()
    assert fabric_check.own_listener_up("node1", up["node1"], port, 10) == ""
    assert fabric_check.reach("node1", dict(up), port, 1) == {}
    started = time.time()
    assert fabric_check.own_listener_up("node3", NODES["node3"], port, 1.5).startswith("connection refused")
    assert time.time() - started < 3
    _stop(up, port, threads)
    assert heard["node1"] == ["node1"] and heard["node2"] == ["node1"]


def test_a_listener_ends_by_itself_after_its_lifetime():
    port = _free_port()
    started = time.time()
    assert fabric_check.listen(NODES["node1"], port, 1) == []
    assert time.time() - started < 2
    assert fabric_check.stop(NODES["node1"], port) is False


def test_a_node_that_did_not_run_is_named():
    assert fabric_check.blocked_pairs({"node1": {"blocked": {}}}, {"node1": "a", "node2": "b"}, 1, "fab0") == [
        "node2 did not run the check"]


def test_a_port_already_taken_is_named():
    port = _free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.151", port))
        holder.listen(1)
        with pytest.raises(OSError, match="cannot listen on 127.0.0.151:.*firewall_fabric_check_port"):
            fabric_check.listen("127.0.0.151", port, 1)
