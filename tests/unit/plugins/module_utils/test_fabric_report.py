"""The fabric check's page: fabric.json, heatmap.png, allreduce.png and index.html from a probe's report."""

import json
import os

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import fabric_report

from test_fabric_matrix import NODES, report as probe_report

PNG = b"\x89PNG\r\n\x1a\n"


def write_probe(run_dir, raw):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / fabric_report.PROBE_FILE).write_text(json.dumps(raw))
    return run_dir


def test_a_throttled_node_is_on_the_page_the_figures_and_fabric_json(tmp_path):
    slow = {("node1", "node4"): 19.0, ("node2", "node4"): 20.0, ("node3", "node4"): 18.5}
    tcp = {(a, b): 2400.0 for a in NODES for b in NODES if a != b}
    tcp.update({("node4", b): 20.0 for b in NODES[:3]})
    raw = probe_report(slow, tcp=tcp)
    raw["versions"]["mpi"] = "<script>alert(1)</script>"
    run = write_probe(tmp_path / "fabric" / "20261207T214800Z", raw)
    path, lines = fabric_report.report(str(run), NODES, [2] * 4, {"cluster": "fab46", "run_id": run.name,
                                                                    "interface": "fab0"})
    assert path == str(run / "index.html")
    assert "Slow node: node4 (all its 3 pairs named)" in lines
    for name in (fabric_report.HEATMAP_FILE, fabric_report.ALLREDUCE_FILE):
        assert (run / name).read_bytes()[:8] == PNG, name
    document = json.loads((run / "fabric.json").read_text())
    assert [pair["nodes"] for pair in document["pairs"] if pair["named"]] == [["node1", "node4"], ["node2", "node4"],
                                                                          ["node3", "node4"]]
    # node4 sends at 20 Mbit/s: its pairs' TCP rate is the slower way, and 19 Mbit/s is not under half of it.
    assert document["pairs"][2]["tcp_mbps"] == [2400.0, 20.0]
    assert document["pairs"][2]["reasons"] == ["under 0.25 of the cluster's typical link, 2000 Mbit/s"]
    page = (run / "index.html").read_text()
    assert '<img src="heatmap.png"' in page and '<img src="allreduce.png"' in page
    assert "Slow pair: node1 - node4: 19 Mbit/s (TCP 20)" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert '<tr class="hot"><td class="l">node1 \u2013 node4</td>' in page


def test_a_report_that_cannot_be_used_writes_nothing(tmp_path):
    run = write_probe(tmp_path / "run", probe_report(pairs=[]))
    with pytest.raises(ValueError, match="not measured"):
        fabric_report.report(str(run), NODES, [2] * 4, {})
    assert sorted(os.listdir(run)) == ["probe.json"]


def test_an_oversized_probe_report_is_not_read(tmp_path, monkeypatch):
    run = write_probe(tmp_path / "run", probe_report())
    monkeypatch.setattr(fabric_report, "MAX_PROBE_BYTES", 100)
    with pytest.raises(ValueError, match="more than 100"):
        fabric_report.report(str(run), NODES, [2] * 4, {})


def test_the_latest_page_is_the_newest_complete_run(tmp_path):
    assert fabric_report.latest_page(str(tmp_path)) is None
    base = tmp_path / "fabric"
    for name, files in (("20261207T200000Z", ["index.html", "fabric.json"]), ("20261207T210000Z", ["index.html",
                                                                                                  "fabric.json"]),
                        ("20261207T220000Z", ["probe.json"])):
        (base / name).mkdir(parents=True)
        for file in files:
            (base / name / file).write_text("x")
    (base / "latest").symlink_to("20261207T220000Z")
    assert fabric_report.latest_page(str(tmp_path)) == str(base / "20261207T210000Z" / "index.html")


def test_by_hand(tmp_path, capsys):
    run = write_probe(tmp_path / "run", probe_report(names=NODES[:2]))
    assert fabric_report.main([str(run), "node1=2", "node2=2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == str(run / "index.html") and "No slow pair or node" in out
    assert fabric_report.main([str(tmp_path / "none"), "node1=2"]) == 2
