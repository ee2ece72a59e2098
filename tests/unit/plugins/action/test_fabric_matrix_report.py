"""The cntk.cluster.fabric_matrix_report action, run as a task would run it (ansible ad hoc on the controller):
the page from a fetched probe report, and what it refuses."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
NODES = ["node1", "node2", "node3"]


def probe_report():
    pairs = [{"nodes": [a, b], "latency_us": 40.0, "latency_min_us": 30.0,
              "bandwidth_mbps": 90.0 if "node3" in (a, b) else 2000.0, "bandwidth_max_mbps": 2100.0}
             for i, a in enumerate(NODES) for b in NODES[i + 1:]]
    return {"probe": "cntk-cluster-fabric-probe", "version": 1, "problems": [],
            "nodes": [{"name": n, "hostname": n, "ranks": 2, "slots": 2} for n in NODES], "pairs": pairs,
            "intra": [], "tcp": [], "allreduce": {"ranks": 6, "sizes": [{"bytes": 8, "seconds": 1e-4, "reps": 3,
                                                                          "sum_right": True}], "skipped_bytes": []},
            "versions": {}, "seconds": 3.0}


def action(tmp_path, **changes):
    spec = dict(dict(run_dir=str(tmp_path / "run"), nodes=NODES, slots=[2, 2, 2], cluster="c1", run_id="R1",
                     interface="fab0", pair_fraction=0.5, tcp_fraction=0.5), **changes)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_STRATEGY="linear",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_LOCAL_TEMP=str(tmp_path / ".tmp"))
    run = subprocess.run([str(Path(sys.executable).with_name("ansible")), "localhost", "-i", "localhost,",
                          "-c", "local", "-m", "cntk.cluster.fabric_matrix_report", "-a", json.dumps(spec)],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    head, _, body = run.stdout.partition(" => ")
    return dict(json.loads(body), failed="FAILED" in head)


def test_the_page_is_written_and_the_verdict_returned(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "probe.json").write_text(json.dumps(probe_report()))
    result = action(tmp_path)
    assert not result["failed"], result
    assert result["page"] == str(tmp_path / "run" / "index.html")
    assert "Slow node: node3 (all its 2 pairs named)" in result["lines"]


def test_a_probe_report_that_cannot_be_used_is_named_and_kept(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "probe.json").write_text(json.dumps(dict(probe_report(), pairs=[])))
    result = action(tmp_path)
    assert result["failed"]
    assert "The fabric probe's report from the head node cannot be used" in result["msg"]
    assert "not measured: node1 - node2" in result["msg"] and "It is kept in" in result["msg"]


def test_a_fraction_out_of_range_or_no_report_is_refused(tmp_path):
    assert "fabric_matrix_pair_fraction=1.5: give a fraction" in action(tmp_path, pair_fraction=1.5)["msg"]
    assert "holds no probe.json" in action(tmp_path)["msg"]
