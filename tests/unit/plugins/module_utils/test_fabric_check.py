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


def _run_all(nodes, port, timeout, skip=()):
    reports, threads = {}, []
    for name, address in nodes.items():
        if name in skip:
            continue
        peers = {peer: peer_address for peer, peer_address in nodes.items() if peer != name}

        def work(name=name, address=address, peers=peers):
            reports[name] = fabric_check.probe(name, address, peers, port, timeout)
        thread = threading.Thread(target=work)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return reports


def test_every_pair_connects_and_is_heard():
    port = _free_port()
    started = time.time()
    reports = _run_all(NODES, port, 5)
    assert time.time() - started < 4
    assert all(report["blocked"] == {} for report in reports.values())
    assert reports["node1"]["heard_from"] == ["node2", "node3"]
    assert fabric_check.blocked_pairs(reports, NODES, port, "fab0") == []


def test_a_node_that_does_not_listen_is_named_by_every_other_within_the_timeout():
    port = _free_port()
    started = time.time()
    reports = _run_all(NODES, port, 2, skip=("node3",))
    assert time.time() - started < 4
    lines = fabric_check.blocked_pairs(reports, NODES, port, "fab0")
    assert lines[0] == "node1 cannot reach node3 at 127.0.0.153:{0} (fab0): connection refused (nothing " \
                       "listening, or a firewall rejects it)".format(port)
    assert lines[1].startswith("node2 cannot reach node3 at 127.0.0.153")
    assert lines[2] == "node3 did not run the check"


def test_a_peer_that_starts_late_is_still_reached():
    port = _free_port()
    reports = {}
    first = threading.Thread(target=lambda: reports.update(
        node1=fabric_check.probe("node1", NODES["node1"], {"node2": NODES["node2"]}, port, 4)))
    first.start()
    time.sleep(1)
    reports["node2"] = fabric_check.probe("node2", NODES["node2"], {"node1": NODES["node1"]}, port, 3)
    first.join()
    assert reports["node1"] == {"blocked": {}, "heard_from": ["node2"]}
    assert reports["node2"] == {"blocked": {}, "heard_from": ["node1"]}


def test_a_port_already_taken_is_named():
    port = _free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.151", port))
        holder.listen(1)
        with pytest.raises(OSError, match="cannot listen on 127.0.0.151:.*firewall_fabric_check_port"):
            fabric_check.probe("node1", "127.0.0.151", {}, port, 1)
