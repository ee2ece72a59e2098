"""The fabric matrix: the probe's report read and checked, and the pairs and nodes judged against the cluster."""

import json

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import fabric_matrix

NODES = ["node1", "node2", "node3", "node4"]


def link(mbps, latency=50.0):
    return {"latency_us": latency, "latency_min_us": latency * 0.8, "bandwidth_mbps": mbps,
            "bandwidth_max_mbps": mbps * 1.1, "reps": [20, 3], "message_bytes": [8, 4194304]}


def report(rates=None, names=NODES, slots=2, tcp=None, **changes):
    """A probe report: rates {(a, b): Mbit/s} (default 2000 each), tcp {(sender, receiver): Mbit/s}."""
    rates, nodes = rates or {}, names
    pairs = [dict(link(rates.get((a, b), 2000.0)), nodes=[a, b])
             for i, a in enumerate(nodes) for b in nodes[i + 1:]]
    ranks = slots * len(nodes)
    sizes = []
    for size in (8, 32, 128, 512):
        seconds = 1e-4 * size
        sizes.append({"bytes": size, "seconds": seconds, "reps": 5, "algbw_mbps": 999999, "busbw_mbps": 999999,
                      "sum_right": True})
    raw = {"probe": fabric_matrix.PROBE, "version": fabric_matrix.VERSION, "problems": [],
           "nodes": [{"name": n, "hostname": n, "ranks": slots, "slots": slots} for n in nodes],
           "pairs": pairs, "intra": [dict(link(20000.0, 1.0), node=n) for n in nodes],
           "tcp": [{"sender": s, "receiver": r, "mbps": v} for (s, r), v in (tcp or {}).items()],
           "allreduce": {"ranks": ranks, "sizes": sizes, "skipped_bytes": [2048]},
           "versions": {"mpi": "Open MPI v4.1.4", "mpi4py": "3.1.4", "numpy": "1.24.2", "python": "3.11.2"},
           "seconds": 12.5}
    raw.update(changes)
    return raw


def parse(raw, nodes=NODES, slots=None):
    return fabric_matrix.parse_probe(json.dumps(raw), nodes, slots or [2] * len(nodes))


def test_a_report_reads_with_every_pair_and_allreduce_worked_out_again():
    probe = parse(report())
    assert sorted(probe["pairs"]) == [("node1", "node2"), ("node1", "node3"), ("node1", "node4"),
                                      ("node2", "node3"), ("node2", "node4"), ("node3", "node4")]
    assert set(probe["intra"]) == set(NODES)
    first = probe["allreduce"]["sizes"][0]
    # The node's own bandwidths (999999) are not taken: bytes over time, x 2(n-1)/n for 8 ranks.
    assert first["algbw_mbps"] == pytest.approx(8 * 8 / 8e-4 / 1e6)
    assert first["busbw_mbps"] == pytest.approx(first["algbw_mbps"] * 2 * 7 / 8)
    assert probe["allreduce"]["skipped_bytes"] == [2048]


@pytest.mark.parametrize("change, message", [
    ({"pairs": []}, "not measured: node1 - node2"),
    ({"probe": "other"}, "not a report of"),
    ({"problems": ["the ranks are not laid out\x1b[31m"]}, "the probe stopped: the ranks are not laid out?"),
    ({"nodes": [{"name": n} for n in ["node1", "node2", "node4", "node3"]]}, "other nodes than the inventory's"),
    ({"allreduce": {"ranks": 6, "sizes": []}}, "ran on 6 ranks, not the job's 8"),
])
def test_a_report_that_does_not_match_the_inventory_is_refused_naming_why(change, message):
    with pytest.raises(ValueError, match=message.replace("?", r"\?")):
        parse(report(**change))


def test_every_figure_is_checked():
    raw = report()
    raw["pairs"][0]["bandwidth_mbps"] = -3
    raw["pairs"][1]["latency_us"] = "fast"
    raw["pairs"][2]["nodes"] = ["node1", "nodeX"]
    raw["pairs"][5] = dict(raw["pairs"][3])
    raw["allreduce"]["sizes"][1]["bytes"] = 8
    raw["allreduce"]["sizes"][2]["sum_right"] = False
    raw["tcp"] = [{"sender": "node1", "receiver": "node1", "mbps": 5}]
    with pytest.raises(ValueError) as error:
        parse(raw)
    text = str(error.value)
    for expected in ("bandwidth_mbps: -3 is out of range", "latency_us: 'fast' is not a number",
                     "pairs[2]: does not name two training nodes", "pairs[5]: node2 and node3 are measured twice",
                     "sizes are not in increasing order", "the sum across the ranks came out wrong",
                     "tcp[0]: does not name a sender and a receiver"):
        assert expected in text, text


def test_too_many_entries_are_refused():
    raw = report()
    raw["pairs"].append(dict(raw["pairs"][3]))
    with pytest.raises(ValueError, match="pairs: has 7 entries, more than the 6 it can have"):
        parse(raw)


def test_nan_and_oversized_reports_are_refused():
    raw = report()
    raw["pairs"][0]["bandwidth_mbps"] = float("nan")
    with pytest.raises(ValueError, match="out of range"):
        parse(raw)
    with pytest.raises(ValueError, match="more than"):
        fabric_matrix.parse_probe(" " * (fabric_matrix.MAX_TEXT + 1), NODES, [2] * 4)
    with pytest.raises(ValueError, match="not JSON"):
        fabric_matrix.parse_probe("{", NODES, [2] * 4)


def test_an_even_cluster_names_nothing():
    rates = {("node1", "node2"): 1900.0, ("node1", "node3"): 2100.0, ("node2", "node4"): 1500.0}
    verdict = fabric_matrix.judge(parse(report(rates)))
    assert verdict["named_pairs"] == [] and verdict["named_nodes"] == [] and verdict["named_intra"] == []
    # The median of each node's fastest pair: 2100, 2000, 2100, 2000.
    assert verdict["typical"] == pytest.approx(2050.0)
    assert fabric_matrix.verdict_lines(parse(report(rates)), verdict)[1] == "No slow pair or node"


def test_a_throttled_node_has_its_pairs_and_itself_named_and_no_other():
    slow = {("node1", "node4"): 19.0, ("node2", "node4"): 20.0, ("node3", "node4"): 18.5}
    probe = parse(report(slow))
    verdict = fabric_matrix.judge(probe)
    assert [item["nodes"] for item in verdict["named_pairs"]] == [["node1", "node4"], ["node2", "node4"],
                                                                  ["node3", "node4"]]
    assert verdict["named_nodes"] == [{"node": "node4", "pairs": 3}]
    # Half the pairs are slow; the typical link is still the fast one (the median of each node's fastest pair).
    assert verdict["typical"] == pytest.approx(2000.0)
    lines = fabric_matrix.verdict_lines(probe, verdict)
    assert "Slow node: node4 (all its 3 pairs named)" in lines
    assert ("Slow pair: node1 - node4: 19 Mbit/s, under 0.25 of the cluster's typical link, 2000 Mbit/s"
            in lines)


def test_three_nodes_one_throttled_still_names_it():
    nodes = NODES[:3]
    verdict = fabric_matrix.judge(parse(report({("node1", "node3"): 30.0, ("node2", "node3"): 31.0}, names=nodes),
                                        nodes=nodes))
    assert verdict["named_nodes"] == [{"node": "node3", "pairs": 2}]
    assert len(verdict["named_pairs"]) == 2


def test_one_slow_pair_names_the_pair_not_its_nodes():
    verdict = fabric_matrix.judge(parse(report({("node2", "node3"): 400.0})))
    assert [item["nodes"] for item in verdict["named_pairs"]] == [["node2", "node3"]]
    assert verdict["named_nodes"] == []


def test_the_judgement_is_relative_a_slow_fabric_everywhere_names_nothing():
    rates = {(a, b): 9.0 for i, a in enumerate(NODES) for b in NODES[i + 1:]}
    assert fabric_matrix.judge(parse(report(rates)))["named_pairs"] == []


def test_two_nodes_are_shown_not_judged():
    nodes = NODES[:2]
    probe = parse(report({("node1", "node2"): 300.0}, names=nodes,
                         tcp={("node1", "node2"): 2000.0, ("node2", "node1"): 1800.0}), nodes=nodes)
    verdict = fabric_matrix.judge(probe)
    assert verdict["named_pairs"] == [] and verdict["named_nodes"] == []
    assert verdict["typical"] == 300.0


def tcp_everywhere(rate, **changes):
    rates = {(a, b): rate for a in NODES for b in NODES if a != b}
    rates.update(changes.get("rates", {}))
    return rates


def test_a_tcp_rate_above_the_typical_mpi_link_is_no_limit_mpi_is_held_to():
    """veth: iperf3 moves 20000 Mbit/s, MPI's ping-pong 2000 on every pair: the CPU bounds both, nothing named."""
    assert fabric_matrix.judge(parse(report(tcp=tcp_everywhere(20000.0))))["named_pairs"] == []


def test_a_throttled_link_is_named_as_slow_not_for_missing_its_own_tcp_rate():
    slow = {("node1", "node4"): 90.0, ("node2", "node4"): 92.0, ("node3", "node4"): 91.0}
    tcp = tcp_everywhere(20000.0, rates={(a, b): 95.0 for a in NODES for b in NODES if "node4" in (a, b) and a != b})
    verdict = fabric_matrix.judge(parse(report(slow, tcp=tcp)))
    assert [item["reasons"] for item in verdict["named_pairs"]] == [
        ["under 0.25 of the cluster's typical link, 2000 Mbit/s"]] * 3
    assert verdict["named_nodes"] == [{"node": "node4", "pairs": 3}]


def test_mpi_under_half_of_a_slow_links_own_tcp_rate_says_so_too():
    tcp = tcp_everywhere(20000.0, rates={("node2", "node3"): 400.0, ("node3", "node2"): 380.0})
    verdict = fabric_matrix.judge(parse(report({("node2", "node3"): 80.0}, tcp=tcp)))
    assert verdict["named_pairs"] == [{"nodes": ["node2", "node3"], "mbps": 80.0, "tcp": 380.0, "reasons": [
        "under 0.25 of the cluster's typical link, 2000 Mbit/s", "under 0.25 of its own TCP rate, 380 Mbit/s"]}]


def test_iperf_errors_are_kept_in_words_and_one_way_is_not_a_limit():
    raw = report(tcp={("node1", "node2"): 10.0})
    raw["tcp"].append({"sender": "node2", "receiver": "node1", "error": "iperf3: unable to connect\n"})
    probe = parse(raw)
    assert probe["tcp_errors"] == {("node2", "node1"): "iperf3: unable to connect?"}
    assert fabric_matrix.pair_tcp(probe["tcp"], "node1", "node2") is None
    assert fabric_matrix.judge(probe)["named_pairs"] == []


def test_a_slow_node_inside_is_named_against_the_other_nodes():
    raw = report()
    raw["intra"][2]["bandwidth_mbps"] = 3000.0
    verdict = fabric_matrix.judge(parse(raw))
    assert [item["node"] for item in verdict["named_intra"]] == ["node3"]


def test_the_matrix_is_symmetric_with_inside_the_node_on_the_diagonal():
    grid = fabric_matrix.matrix(parse(report({("node2", "node4"): 20.0})))
    assert grid[1][3] == grid[3][1] == 20.0
    assert grid[0][0] == 20000.0 and grid[0][1] == 2000.0


def test_size_words():
    assert [fabric_matrix.size_words(s) for s in (8, 2048, 32 << 20)] == ["8 B", "2 KiB", "32 MiB"]


def test_the_typical_tcp_rate_is_taken_as_the_typical_link_is():
    tcp = {(a, b): 12000.0 for a in NODES for b in NODES if a != b}
    tcp.update({("node4", b): 98.0 for b in NODES[:3]})
    assert fabric_matrix.typical_tcp(parse(report(tcp=tcp))) == 12000.0
    assert fabric_matrix.typical_tcp(parse(report())) is None
