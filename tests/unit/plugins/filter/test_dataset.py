"""plugins/filter/dataset.py: which files a node holds, which of its files are stale,
and what its manifest.json says."""

import math
from ansible_collections.cntk.cluster.plugins.filter.dataset import (
    dataset_files_for, node_manifest, relay_wave, relay_waves, shards_to_send)

SHARDS = [{"shard": "shard-%05d.ctf" % r, "rank": r, "samples": 10, "bytes": 100, "sha256": "h%d" % r}
          for r in range(4)]
REPLICATED = [{"shard": "train.ctf", "ranks": "all", "bytes": 50, "sha256": "a", "samples": 5},
              {"shard": "vocab.bin", "ranks": "all", "bytes": 9, "sha256": "b"}]
PRESPLIT = [{"shard": "shard-%05d.bin" % r, "rank": r, "source_file": "part-%d.bin" % r, "bytes": 7, "sha256": "p"}
            for r in range(4)]


def test_a_node_holds_the_files_of_its_ranks():
    assert [e["shard"] for e in dataset_files_for(SHARDS, [2, 3])] == ["shard-00002.ctf", "shard-00003.ctf"]
    assert [e["shard"] for e in dataset_files_for(PRESPLIT, [0])] == ["shard-00000.bin"]
    assert dataset_files_for(SHARDS, [7]) == []


def test_every_node_holds_every_replicated_file():
    assert dataset_files_for(REPLICATED, [0, 1]) == REPLICATED
    assert dataset_files_for(REPLICATED, [5]) == REPLICATED
    assert dataset_files_for(REPLICATED, []) == []  # a host that runs no rank holds nothing


def test_only_missing_or_damaged_files_are_sent():
    results = [{"item": SHARDS[0], "stat": {"exists": True, "checksum": "h0"}},
               {"item": SHARDS[1], "stat": {"exists": True, "checksum": "other"}},
               {"item": SHARDS[2], "stat": {"exists": False}}]
    assert shards_to_send(results) == [SHARDS[1], SHARDS[2]]


def test_the_node_manifest_says_layout_test_set_and_files():
    wanted = PRESPLIT[:1] + [{"shard": "test.ctf", "sha256": "t", "bytes": 3, "src": "/controller/test.ctf"}]
    manifest = node_manifest(wanted, "digits", "presplit", "test.ctf")
    assert manifest == {"name": "digits", "layout": "presplit", "test": "test.ctf", "shards": [
        {"shard": "shard-00000.bin", "rank": 0, "source_file": "part-0.bin", "bytes": 7, "sha256": "p"},
        {"shard": "test.ctf", "bytes": 3, "sha256": "t"}]}  # no controller path
    assert node_manifest(REPLICATED, "d", "replicate", "")["test"] is None
    assert node_manifest(REPLICATED, "d", "replicate", None)["shards"][0]["ranks"] == "all"


def test_relay_waves_form_a_binomial_tree_where_each_parent_is_served_first():
    for count in range(1, 20):
        nodes = ["n%d" % i for i in range(count)]
        waves = relay_waves(nodes)
        assert waves == 1 + math.ceil(math.log2(count)) if count > 1 else waves == 1
        served = {}
        for node in nodes:
            wave, parent = relay_wave(nodes, node)
            assert 0 <= wave < waves
            assert (parent is None) == (node == nodes[0])
            if parent is not None:
                assert served[parent] < wave, (count, node, parent)
            served[node] = wave
        # Each wave at most doubles the nodes that hold the files.
        for wave in range(waves):
            assert sum(1 for w in served.values() if w <= wave) <= 2 ** wave
