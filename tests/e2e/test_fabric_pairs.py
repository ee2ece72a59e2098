"""playbooks/fabric.yml end to end (issue 46): every pair of training nodes measured over the fabric NIC, the
Allreduce curve at the job's layout, the page; with one node's fabric veth throttled (`tc tbf` in its network
namespace, as tests/e2e/test_slurm.py throttles a link), that node's pairs and the node itself are named and no
other.

By default on the session's real-CNTK cluster (`cntkreal`, tests/e2e/conftest.py: 4 netns nodes, the probe under
CNTK's CPython 3.6 with its mpi4py and Debian's Open MPI under the 1.10 sonames), before test_slurm.py turns
Slurm on there (the file names sort so). FABRIC_E2E_CLUSTER names a running netns cluster of one's own instead
(`python -m local_cluster up --name NAME --network netns` and site.yml on it); the throttled-node test needs
three nodes or more (two nodes are shown, not judged).

Nodes are read through `docker exec` and `nsenter` (the harness's channels); the playbook connects over SSH."""

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cluster_helpers
from cluster_helpers import node_pid
from prerequisites import NETNS, requires

ROOT = cluster_helpers.ROOT
PNG = b"\x89PNG\r\n\x1a\n"
# A tenth or less of what a veth carries here (MPI's 4 MiB ping-pong measured 1-3 Gbit/s between nodes).
THROTTLE = ["rate", "100mbit", "burst", "128kbit", "latency", "200ms"]

pytestmark = requires(*NETNS)


def training_nodes(inventory):
    listed = subprocess.run([str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(inventory),
                             "--list"], capture_output=True, text=True, check=True,
                            env=cluster_helpers.playbook_env()).stdout
    groups = json.loads(listed)
    return groups["training"]["hosts"]


@pytest.fixture(scope="module")
def cluster(request):
    name = os.environ.get("FABRIC_E2E_CLUSTER")
    if not name:
        request.getfixturevalue("cntk_cluster")
        name = cluster_helpers.CNTK_CLUSTER
    inventory = ROOT / ".cluster" / name / "inventory"
    if not (inventory / "hosts.yml").is_file():
        pytest.fail(f"FABRIC_E2E_CLUSTER={name}: no running cluster of that name ({inventory}/hosts.yml)")
    return {"name": name, "inventory": inventory, "nodes": training_nodes(inventory)}


def fabric(cluster):
    """fabric.yml to its end: (its output, the page's run folder, fabric.json)."""
    result = cluster_helpers.ansible_playbook(cluster["inventory"], "playbooks/fabric.yml", timeout=900)
    found = re.findall(r"Fabric report: (\S+?)\"?$", result.stdout, re.M)
    assert found, result.stdout[-3000:]
    run = Path(found[-1]).parent
    return result, run, json.loads((run / "fabric.json").read_text())


def test_every_pair_inside_every_node_and_the_allreduce_curve_on_the_page(cluster):
    nodes = cluster["nodes"]
    result, run, document = fabric(cluster)
    print("\n".join(document["lines"]))
    assert [pair["nodes"] for pair in document["pairs"]] == [list(p) for p in itertools.combinations(nodes, 2)]
    assert [item["node"] for item in document["intra"]] == nodes
    for pair in document["pairs"]:
        assert pair["bandwidth_mbps"] > 0 and pair["latency_us"] > 0, pair
        assert all(rate and rate > 0 for rate in pair["tcp_mbps"]), (pair, document["tcp_errors"])
    reduced = document["allreduce"]
    assert reduced["ranks"] == sum(document["slots"])
    sizes = [item["bytes"] for item in reduced["sizes"]]
    assert sizes[0] == 8 and all(b == 4 * a for a, b in zip(sizes, sizes[1:])) and len(sizes) >= 6, sizes
    for name in ("heatmap.png", "allreduce.png"):
        assert (run / name).read_bytes()[:8] == PNG, name
    page = (run / "index.html").read_text()
    assert '<img src="heatmap.png"' in page and '<img src="allreduce.png"' in page
    assert (run.parent / "latest").resolve() == run.resolve()
    # An even cluster: nothing named (the judgement is relative to its own links).
    assert document["verdict"]["named_pairs"] == [] and document["verdict"]["named_nodes"] == [], document["lines"]
    # A measurement, not a change: the nodes and the controller's page report changed=0 on a second run.
    again, _, _ = fabric(cluster)
    counts = cluster_helpers.recap(again.stdout)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts


def test_a_throttled_nodes_pairs_and_the_node_are_named_and_no_other(cluster):
    nodes = cluster["nodes"]
    if len(nodes) < 3:
        pytest.skip("two nodes are shown, not judged: the throttled node needs three nodes or more")
    slow = nodes[-1]
    tc = ["nsenter", "-t", node_pid(cluster["name"], slow), "-n", "--", "tc", "qdisc"]
    subprocess.run(tc + ["add", "dev", "fab0", "root", "tbf"] + THROTTLE, check=True)
    try:
        _, run, document = fabric(cluster)
    finally:
        subprocess.run(tc + ["del", "dev", "fab0", "root"], check=True)
    print("\n".join(document["lines"]))
    verdict = document["verdict"]
    assert sorted(tuple(item["nodes"]) for item in verdict["named_pairs"]) == \
        sorted(pair for pair in itertools.combinations(nodes, 2) if slow in pair), document["lines"]
    assert verdict["named_nodes"] == [{"node": slow, "pairs": len(nodes) - 1}]
    assert f"Slow node: {slow} (all its {len(nodes) - 1} pairs named)" in document["lines"]
    # The throttled pairs' TCP rate is the tbf's, about 100 Mbit/s; the others' well above it.
    for pair in document["pairs"]:
        assert (min(pair["tcp_mbps"]) < 150) == (slow in pair["nodes"]), pair
    assert "Slow pair: " in (run / "index.html").read_text()
