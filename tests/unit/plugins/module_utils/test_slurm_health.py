"""The Slurm health gate's judgements: iperf3's rate, slow links against the cluster's median, held nodes."""

import json

import pytest

from ansible_collections.cntk.cluster.plugins.filter import slurm as slurm_filters
from ansible_collections.cntk.cluster.plugins.module_utils import slurm_health


def iperf(mbps):
    return json.dumps({"end": {"sum_received": {"bits_per_second": mbps * 1e6}}})


def test_iperf_rate_is_what_the_client_received():
    assert slurm_health.iperf_rate(iperf(9400)) == pytest.approx(9400)


def test_an_iperf_error_is_named():
    with pytest.raises(ValueError, match="unable to connect"):
        slurm_health.iperf_rate(json.dumps({"error": "unable to connect to server"}))


def test_a_slow_link_is_judged_against_the_clusters_median_not_a_fixed_number():
    median, slow = slurm_health.slow_links({"node1": 900, "node2": 1000, "node3": 1100, "node4": 9.8}, 0.25)
    assert median == pytest.approx(950)
    assert slow == [("node4", 9.8)]
    # The same rates on a fast fabric are slow; on a cluster of slow links none is.
    assert slurm_health.slow_links({"a": 9.8, "b": 10.2, "c": 9.9}, 0.25)[1] == []


def test_the_filter_gives_each_slow_node_a_reason_naming_rate_and_median():
    verdict = slurm_filters.slurm_slow_links({"node1": iperf(8000), "node2": iperf(8200), "node3": iperf(10),
                                              "node4": iperf(7900)}, 0.25)
    assert [slow["node"] for slow in verdict["slow"]] == ["node3"]
    reason = verdict["slow"][0]["reason"]
    assert reason.startswith(slurm_health.LINK_REASON)
    assert "node3 sends 10 Mbit/s" in reason and "median 7950 Mbit/s" in reason


def test_held_names_drained_down_and_unlisted_nodes_with_their_reasons():
    lines = ["node1|idle|none", "node2|drained|cntk-health: data: /srv full", "node3|down*|Not responding",
             "node5|mixed|none", "node6|draining|cntk-health-link: fabric: slow", "node7|allocated|none"]
    held = slurm_health.held(lines, ["node1", "node2", "node3", "node4", "node5", "node6", "node7"])
    assert held == [("node2", "drained", "cntk-health: data: /srv full"), ("node3", "down*", "Not responding"),
                    ("node4", "not listed", ""), ("node6", "draining", "cntk-health-link: fabric: slow")]
    assert slurm_filters.slurm_held_words({"node": "node2", "state": "drained", "reason": "x"}) == "node2 (drained: x)"
