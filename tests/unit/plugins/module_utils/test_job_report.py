"""plugins/module_utils/job_report.py: plot and HTML report of a fetched training run
(run by hand as `python -m ansible_collections.cntk.cluster.plugins.module_utils.job_report RUN_DIR`)."""

import html
import json
import math
import os
import re
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import job_report

ROOT = Path(__file__).resolve().parents[4]
TOOL = ["-m", "ansible_collections.cntk.cluster.plugins.module_utils.job_report"]
TOOL_ENV = dict(os.environ, PYTHONPATH=str(ROOT / ".collections"))
PYTHON = ROOT / ".venv" / "bin" / "python"
if not PYTHON.exists():
    PYTHON = Path(sys.executable)

JOB_NAME = "digits <b>& friends"
HOSTS = ["node1", "node1", "node2", "node2", "node3", "node3"]


def synthetic_metrics(steps=50, ranks=6, minibatch=64, steps_per_epoch=10):
    """A small run's metrics.jsonl records: loss falls, error falls, noise on top."""
    records = []
    for step in range(1, steps + 1):
        wiggle = 0.03 * math.sin(step * 1.7)
        records.append({
            "step": step,
            "epoch": (step - 1) // steps_per_epoch + 1,
            "samples": step * minibatch,
            "loss": 2.3 * math.exp(-step / 12.0) + 0.25 + wiggle,
            "metric": max(0.02, 0.9 * math.exp(-step / 8.0) + 0.06 + wiggle),
            "samples_per_sec": 90000.0 + 500 * step,
            "allreduce_share": 0.3 + 0.01 * math.cos(step),
        })
    return records


def make_run(run_dir, job=None, summary=True, metrics=True, model="model.npz"):
    """A fetched run as Ansible leaves it: files of rank 0, every rank's logs by node."""
    run_dir.mkdir(parents=True)
    if metrics:
        (run_dir / "metrics.jsonl").write_text(
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in synthetic_metrics()))
    if summary:
        (run_dir / "summary.json").write_text(json.dumps({
            "backend": "numpy", "model": "softmax", "ranks": len(HOSTS), "hosts": HOSTS,
            "versions": {"python": "3.11.2", "numpy": "2.4.6", "mpi4py": "4.1.2",
                         "mpi": "Open MPI v4.1.4, package: Debian OpenMPI"},
            "epochs": 5, "samples": 3200, "seconds": 0.0345, "samples_per_sec": 92753.6,
            "allreduce_share": 0.312, "final_loss": 0.3125, "test_accuracy": 0.9220055710306406,
        }, indent=2))
    if model:
        (run_dir / model).write_bytes(b"PK\x03\x04" + b"\0" * 2000)
    for rank, host in enumerate(HOSTS):
        rank_dir = run_dir / "logs" / host / "1" / "rank.{}".format(rank)
        rank_dir.mkdir(parents=True)
        (rank_dir / "stdout").write_text(
            "2024-05-01 10:00:00 rank {}/6 {} start: backend numpy\n".format(rank, host) * (rank + 1))
        (rank_dir / "stderr").write_text("")
    if job is not None:
        (run_dir / "job.json").write_text(json.dumps(job, indent=2))
    return run_dir


def run_tool(*args):
    return subprocess.run([str(PYTHON)] + TOOL + [str(a) for a in args],
                          capture_output=True, text=True, timeout=60, env=TOOL_ENV)


def png_size(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    length, chunk = struct.unpack(">I4s", data[8:16])
    assert chunk == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.images = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a" and "href" in attrs:
            self.hrefs.append(attrs["href"])
        if tag == "img":
            self.images.append(attrs.get("src"))
        assert tag not in ("script", "link", "iframe"), "the page must be self-contained"


def links(page):
    parser = Links()
    parser.feed(page)
    return parser


@pytest.fixture
def good_run(tmp_path):
    job = {"job": JOB_NAME, "run_id": "20240501T100000Z",
           "command": "mpirun -np 6 --hostfile /srv/cntk/jobs/hostfile python train.py --backend numpy --epochs 5",
           "hostfile": "node1 slots=2\nnode2 slots=2\nnode3 slots=2\n",
           "fingerprint": "0123abcd", "rc": 0}
    return make_run(tmp_path / "artifacts" / "digits" / "20240501T100000Z", job=job)


def test_report_of_a_good_run(good_run):
    result = run_tool(good_run)
    assert result.returncode == 0, result.stderr
    report = good_run / "report.html"
    assert result.stdout.strip().splitlines()[-1] == str(report.resolve())

    assert png_size(good_run / "plot.png") == (1000, 500)

    page = report.read_text()
    parsed = links(page)
    assert parsed.images == ["plot.png"]
    assert "92.20%" in page  # final test accuracy
    assert "3 nodes \u00d7 2 ranks per node" in page
    assert "92,754 samples/s" in page and "31.2%" in page  # throughput, Allreduce share
    assert "succeeded" in page and "The job failed" not in page

    # The job name is escaped everywhere it appears.
    assert html.escape(JOB_NAME) in page
    assert "<b>" not in page
    assert "--hostfile /srv/cntk/jobs/hostfile" in page

    # Every rank's log files, linked relative to RUN_DIR, and the links lead somewhere.
    log_links = [unquote(h) for h in parsed.hrefs if h.startswith("logs/")]
    expected = sorted("logs/{}/1/rank.{}/{}".format(host, rank, name)
                      for rank, host in enumerate(HOSTS) for name in ("stdout", "stderr"))
    assert sorted(log_links) == expected
    for href in parsed.hrefs:
        assert not href.startswith(("/", "http:", "https:", "file:"))
        assert (good_run / unquote(href)).is_file(), href
    assert "model.npz" in parsed.hrefs

    # At most about 20 metric rows: the first, every k-th, the last.
    rows = re.findall(r"<tr><td>(\d+)</td><td>\d+</td>", page)
    assert rows[0] == "1" and rows[-1] == "50" and len(rows) <= 21


def test_failed_run_names_rank_and_host(tmp_path):
    run_dir = make_run(tmp_path / "artifacts" / "digits" / "run-2", summary=False, model=None,
                       job={"job": JOB_NAME, "run_id": "run-2", "command": "mpirun -np 6 python train.py",
                            "rc": 1, "failed_rank": 2, "failed_host": "node3"})
    traceback = run_dir / "logs" / "node3" / "1" / "rank.2"
    traceback.mkdir(parents=True)
    (traceback / "stderr").write_text("Traceback (most recent call last):\nValueError: shard-00002.ctf:7: bad <line>\n")
    with (run_dir / "metrics.jsonl").open("a") as metrics:
        metrics.write('{"step": 51, "loss": 0.3')  # the crash cut the last line

    assert job_report.main([str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text()
    banner = re.search(r'<div class="failed">(.*?)</div>', page, re.S).group(1)
    assert "rank <strong>2</strong>" in banner and "<strong>node3</strong>" in banner
    assert "summary.json: missing" in page
    assert "1 unreadable line skipped" in page
    assert "No model file" in page
    assert "ValueError: shard-00002.ctf:7: bad &lt;line&gt;" in page  # the failed rank's own log
    assert "logs/node3/1/rank.2/stderr" in links(page).hrefs
    assert png_size(run_dir / "plot.png") == (1000, 500)


def test_run_with_nothing_but_logs(tmp_path, capsys):
    run_dir = make_run(tmp_path / "run", summary=False, metrics=False, model=None)
    assert job_report.main([str(run_dir)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str((run_dir / "report.html").resolve())
    page = (run_dir / "report.html").read_text()
    assert "summary.json: missing" in page and "metrics.jsonl: missing" in page
    assert not (run_dir / "plot.png").exists() and "<img" not in page
    assert sum(1 for h in links(page).hrefs if h.startswith("logs/")) == 2 * len(HOSTS)


def test_cntk_summary_without_allreduce_share(tmp_path):
    run_dir = make_run(tmp_path / "run", model="model.cntk")
    summary = json.loads((run_dir / "summary.json").read_text())
    del summary["allreduce_share"]
    summary.update(backend="cntk", versions={"python": "3.6.15", "cntk": "2.7"},
                   distributed="data_parallel", quantization_bits=1, hidden=None)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert job_report.main([str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text()
    assert "Allreduce share" not in page
    assert "quantization_bits" in page and "cntk 2.7" in page
    assert "model.cntk" in links(page).hrefs


def test_missing_run_dir_exits_2(tmp_path):
    result = run_tool(tmp_path / "nope")
    assert result.returncode == 2
    assert "does not exist" in result.stderr and str(tmp_path / "nope") in result.stderr


@pytest.mark.parametrize("count", [1, 19, 20, 21, 50, 1000])
def test_pick_rows(count):
    rows = job_report.pick_rows(count)
    assert rows[0] == 0 and rows[-1] == count - 1 and len(rows) <= 20
    assert rows == sorted(set(rows))


def test_stand_ins_are_named_at_the_top(tmp_path):
    stand_in = "Open MPI: the distribution's Open MPI 4.x presented under the 1.10 sonames, not Open MPI 1.10.7"
    run_dir = make_run(tmp_path / "run", model="model.cntk",
                       job={"job": JOB_NAME, "run_id": "run-3", "rc": 0, "stand_ins": [stand_in]})
    assert job_report.main([str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text()
    banner = re.search(r"<strong>Stand-ins in this run</strong><ul>\n<li>(.*?)</li>", page).group(1)
    assert banner == stand_in.replace("'", "&#x27;")
    assert page.index("Stand-ins in this run") < page.index("<h2>Summary</h2>")


def test_a_requeued_jobs_attempts_name_the_failed_node_and_the_steps_done_again(tmp_path):
    attempts = [{"nodes": ["node1", "node2", "node3", "node4"], "last_step": 140, "lost": ["node4"]},
                {"nodes": ["node1", "node2", "node3"], "last_step": 300}]
    run_dir = make_run(tmp_path / "run", job={"job": JOB_NAME, "run_id": "run-4", "rc": 0, "attempts": attempts,
                                              "lost_nodes": ["node4"]})
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps(dict(summary, resumed=True, resumed_at_step=120)))
    assert job_report.main([str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text()
    assert ("<tr><td>1</td><td>node1 node2 node3 node4</td><td>node4</td><td>140</td><td>20</td></tr>" in page)
    assert "<tr><td>2</td><td>node1 node2 node3</td><td>\u2013</td><td>300</td><td>\u2013</td></tr>" in page
    # One run, no attempts table.
    plain = make_run(tmp_path / "plain", job={"job": JOB_NAME, "run_id": "run-5", "rc": 0})
    assert job_report.main([str(plain)]) == 0
    assert "<h2>Attempts</h2>" not in (plain / "report.html").read_text()


def test_a_job_started_without_a_held_out_node_names_it_with_its_one_attempt(tmp_path):
    run_dir = make_run(tmp_path / "run", job={"job": JOB_NAME, "run_id": "run-6", "rc": 0, "held_out": ["node4"],
                                              "attempts": [{"nodes": ["node1", "node2", "node3"], "last_step": 90}],
                                              "lost_nodes": []})
    assert job_report.main([str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text()
    assert "Slurm started the job without node4, which it held out" in " ".join(page.split())
    assert "<tr><td>1</td><td>node1 node2 node3</td><td>\u2013</td><td>90</td><td>\u2013</td></tr>" in page
    assert "Slurm requeued the job" not in page


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)


def test_nothing_a_node_sends_becomes_markup(tmp_path):
    hostile = "<script>alert(1)</script>"
    run_dir = make_run(tmp_path / "run", metrics=False,
                       job={"job": hostile, "run_id": 'a"b', "rc": 1, "failed_rank": 7,
                            "failed_host": "<i>node</i>", "stand_ins": [hostile], hostile: hostile,
                            "hostfile": hostile + "\n<em>", "command": "echo " + hostile})
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["versions"]["mpi"] = "Open MPI v1.10.7\x00"  # Open MPI's version string ends in a NUL
    summary["model"] = "<u>softmax</u>"
    summary[hostile] = hostile
    (run_dir / "summary.json").write_text(json.dumps(summary))
    node = run_dir / "logs" / "<i>node</i>" / "rank.7"
    node.mkdir(parents=True)
    (node / "std\"err").write_text("Traceback\n<img src=x onerror=alert(1)>\n")
    (run_dir / "<b>other.txt").write_text("")

    assert job_report.main([str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text()
    parser = Tags()
    parser.feed(page)
    assert parser.tags <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "span", "div",
                           "strong", "ul", "li", "table", "tr", "th", "td", "details", "summary", "pre",
                           "code", "a", "img"}
    assert {"script", "i", "u", "b", "em"}.isdisjoint(parser.tags)
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "\x00" not in page and "Open MPI v1.10.7" in page
    assert "on host <strong>&lt;i&gt;node&lt;/i&gt;</strong>" in page
    # Link targets are percent-encoded, and still lead to the files.
    for href in links(page).hrefs:
        assert (run_dir / unquote(href)).is_file(), href


@pytest.mark.parametrize("job, banner", [
    ({"failed_host": "node2"}, "<strong>The job failed</strong>: on host <strong>node2</strong></div>"),
    ({"rc": 3}, "<strong>The job failed</strong>: (exit status 3)</div>"),
    ({"failed_rank": 2, "rc": 1},
     "<strong>The job failed</strong>: rank <strong>2</strong> (exit status 1)</div>"),
])
def test_failure_banner_names_what_is_known(tmp_path, job, banner):
    run_dir = make_run(tmp_path / "run", metrics=False, job=job)
    assert job_report.main([str(run_dir)]) == 0
    assert banner in (run_dir / "report.html").read_text()


def test_rc_is_the_only_exit_status(tmp_path):
    """job.json's exit status is rc (roles/train_job/README.md); other spellings are shown, not read."""
    run_dir = make_run(tmp_path / "run", metrics=False,
                       job={"job": "digits", "rc": 0, "exit_status": 1, "exit_code": 1, "status": "failed"})
    assert job_report.main([str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text()
    assert "The job failed" not in page and "succeeded" in page
    assert "exit_status" in page  # under the rest of job.json


def test_template_environment_escapes():
    environment = job_report.template_environment()
    assert environment.autoescape is True
    page = environment.from_string("<p>{{ text }}</p>").render(text="it's <b>\x00")
    assert page == "<p>it&#x27;s &lt;b&gt;</p>"


def test_runs_from_any_working_directory(tmp_path):
    run_dir = make_run(tmp_path / "run", metrics=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run([str(PYTHON)] + TOOL + [str(run_dir)], capture_output=True, text=True,
                            timeout=60, cwd=str(elsewhere), env=TOOL_ENV)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(run_dir / "report.html")
    assert "<h2>Summary</h2>" in (run_dir / "report.html").read_text()


class Anchors(HTMLParser):
    def __init__(self):
        super().__init__()
        self.anchors, self.policy = {}, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a":
            self.anchors[unquote(attrs["href"])] = "download" in attrs
        if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy":
            self.policy = attrs["content"]


def test_a_page_or_picture_a_job_wrote_is_linked_for_download_only_and_the_report_runs_nothing(tmp_path):
    """Issue 44: the report linked files the job wrote, HTML and SVG included, to open beside it."""
    run_dir = make_run(tmp_path / "run")
    for name in ("page.html", "plot.svg", "notes.txt", "curve.png", "NOEXT"):
        (run_dir / name).write_text("<script>alert(1)</script>")
    assert job_report.main([str(run_dir)]) == 0
    parser = Anchors()
    parser.feed((run_dir / "report.html").read_text())
    assert {name: parser.anchors[name] for name in ("page.html", "plot.svg", "notes.txt", "curve.png", "NOEXT",
                                                    "model.npz", "summary.json")} == {
        "page.html": True, "plot.svg": True, "notes.txt": False, "curve.png": False, "NOEXT": True,
        "model.npz": True, "summary.json": False}
    # A rank's stdout is the job's own text with no extension, which a browser may sniff as a page.
    assert all(download for name, download in parser.anchors.items() if name.startswith("logs/"))
    assert parser.policy.startswith("default-src 'none';") and "script-src" not in parser.policy


def timed_summary(run_dir, slow_ranks=(), method="measured"):
    """Add rank_timing to the run's summary.json: every rank alike, or slow_ranks computing at twice the pace
    while the others wait for them in the Allreduce."""
    summary = json.loads((run_dir / "summary.json").read_text())
    entries = []
    for rank, host in enumerate(HOSTS):
        slow = rank in slow_ranks
        compute = (0.020 if slow else 0.010) * (1.0 + 0.01 * rank)
        comm = 0.002 if slow or not slow_ranks else 0.012
        entries.append({"rank": rank, "host": host, "steps": 50, "step_seconds": compute + comm + 0.0005,
                        "compute_seconds": compute, "compute_median_seconds": compute, "comm_seconds": comm,
                        "comm_share": comm / (compute + comm + 0.0005), "cpu_share": 0.98,
                        "wall_seconds": 1.6, "cpu_seconds": 1.55, "observations": 50,
                        "compute_series": [[step, compute] for step in range(5, 51, 5)]})
    summary.update(rank_timing=entries, timing_method=method, timing_probe_every=10 if method == "probe" else None,
                   comm_share=sum(e["comm_share"] for e in entries) / len(entries))
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return summary


def test_rank_timing_names_the_straggler_and_its_host(good_run):
    timed_summary(good_run, slow_ranks=(3,))
    assert job_report.main([str(good_run)]) == 0
    page = (good_run / "report.html").read_text()
    assert png_size(good_run / "timing.png") == (1000, 500)
    assert "timing.png" in links(page).images
    banner = re.search(r'<div class="failed"><strong>Straggler</strong>(.*?)</div>', page, re.S).group(1)
    assert "rank 3 on node2" in banner and "the other ranks&#x27; median" in banner
    hot = re.findall(r'<tr class="hot"><td>(\d+)</td><td>([^<]*)</td>', page)
    assert hot == [("3", "node2")]
    assert "Share of step time spent communicating" in page
    assert "1.25\u00d7 the other ranks&#x27; median" in page  # the margin, documented on the page
    assert "timing.png" not in links(page).hrefs  # the report's own figure, not listed among the job's files


def test_rank_timing_of_an_even_run_names_nobody(good_run):
    summary = timed_summary(good_run)
    assert job_report.main([str(good_run)]) == 0
    page = (good_run / "report.html").read_text()
    assert "No straggler" in page and "<strong>Straggler</strong>" not in page
    assert '<tr class="hot">' not in page
    assert "{:.1f}%".format(100 * summary["comm_share"]) in page
    assert png_size(good_run / "timing.png") == (1000, 500)


def test_cntk_timing_explains_the_probe_and_a_stale_figure_goes(good_run):
    timed_summary(good_run, slow_ranks=(4, 5), method="probe")
    assert job_report.main([str(good_run)]) == 0
    page = (good_run / "report.html").read_text()
    assert "every 10 steps" in page and "an estimate" in page
    assert "rank 4 on node3" in page and "rank 5 on node3" in page

    # Rendered again from a summary without rank_timing (an older train.py): no section, no old figure.
    summary = json.loads((good_run / "summary.json").read_text())
    del summary["rank_timing"]
    (good_run / "summary.json").write_text(json.dumps(summary))
    assert job_report.main([str(good_run)]) == 0
    page = (good_run / "report.html").read_text()
    assert not (good_run / "timing.png").exists() and "Where the time went" not in page


def test_the_clusters_latest_fabric_page_is_linked_when_there_is_one(good_run):
    job_report.report(str(good_run))
    page = (good_run / "report.html").read_text()
    assert "The fabric" not in page
    cluster_dir = good_run.parent.parent
    for run_id, line in (("20240501T080000Z", "old"), ("20240501T090000Z", "Slow node: node3 <b>")):
        folder = cluster_dir / "fabric" / run_id
        folder.mkdir(parents=True)
        (folder / "index.html").write_text("<html></html>")
        (folder / "fabric.json").write_text(json.dumps({"lines": ["6 pairs of 4 nodes", line]}))
    job_report.report(str(good_run))
    page = (good_run / "report.html").read_text()
    href = "../../fabric/20240501T090000Z/index.html"
    assert href in links(page).hrefs and (good_run / href).is_file()
    assert "<li>Slow node: node3 &lt;b&gt;</li>" in page and "<li>old</li>" not in page
