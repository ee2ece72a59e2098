"""Turn a fetched training run into a plot and a one-page HTML report.

The train_job role's collect step writes it through the cntk.cluster.train_job_report
action; to render a fetched run again by hand (PYTHONPATH=.collections, as make sets it):

    python -m ansible_collections.cntk.cluster.plugins.module_utils.job_report RUN_DIR

RUN_DIR (artifacts/<cluster>/<job>/<run-id>/ on the controller) holds what the job
fetched back, as plugins/module_utils/job_files.py names it and roles/train_job/README.md
("The run directory") specifies it; every file is optional:

    metrics.jsonl     rank 0's progress records, one JSON object a line:
                      step, epoch, samples, loss, metric (training error
                      rate), samples_per_sec and allreduce_share (or null)
    summary.json      backend, model, ranks, hosts (by rank), versions,
                      epochs, samples, seconds, samples_per_sec,
                      allreduce_share, final_loss, test_accuracy; the cntk
                      backend writes more keys (shown as they are) and no
                      allreduce_share; both write rank_timing, timing_method,
                      timing_probe_every and comm_share (per-rank timing)
    model.npz | model.cntk
    logs/...          every rank's log files, in any nested layout
                      (logs/node1/rank.0/stdout, logs/node2/1/rank.3/stderr)
    job.json          the job: job (its name), run_id, command (a string),
                      hostfile, fingerprint, stand_ins, rc (the launcher's
                      exit code), failed_rank, failed_host

It writes RUN_DIR/plot.png (loss and training accuracy against step,
1000x500 px, matplotlib's Agg), RUN_DIR/timing.png when summary.json has
rank_timing (each rank's step split into compute and communication, and its
compute over the run; the straggler, if any, in red: rank_timing.py) and
RUN_DIR/report.html (one page, inline CSS,
the plot as a relative <img src="plot.png">, links relative to RUN_DIR, no
external resource; laid out by roles/train_job/templates/report.html.j2,
from what page_context computes; it links the cluster's latest fabric page,
artifacts/<cluster>/fabric/<run>/index.html from playbooks/fabric.yml, when
there is one), and prints the absolute path of report.html as its last
line on stdout.

A failed run gets a report too: whatever is missing (summary, metrics, model,
logs) is named in it, the failed rank and host are shown at the top with the
tail of that rank's logs. The exit status is 0 whenever a report was
written, 2 when RUN_DIR does not exist (or is not a directory).

Python 3; the standard library, Jinja2 (ansible-core's own dependency, so
the Python that runs ansible-playbook has it) and matplotlib.
"""

import argparse
import datetime
import json
import os
import re
import sys
import tempfile

import jinja2
from markupsafe import Markup

from ansible_collections.cntk.cluster.plugins.module_utils import fabric_report, job_files, rank_timing
from ansible_collections.cntk.cluster.plugins.module_utils.job_files import number, read_json, read_metrics
from ansible_collections.cntk.cluster.plugins.module_utils.job_report_text import (  # noqa: F401 (re-exported)
    MAX_METRIC_ROWS, PLOT_SIZE_PX, esc, fmt_duration, fmt_float, fmt_int, fmt_percent, fmt_size, fmt_value, nodes_text,
    ordinal, pick_rows, rank_ranges, tail, url_path, versions_text, viewable, write_plot, write_timing_plot)

METRICS_FILE = job_files.METRICS
SUMMARY_FILE = job_files.SUMMARY
JOB_FILE = job_files.JOB
LOGS_DIR = job_files.LOGS_DIR
PLOT_FILE = job_files.PLOT
TIMING_PLOT_FILE = job_files.TIMING_PLOT
REPORT_FILE = job_files.REPORT
MODEL_FILES = job_files.MODELS


# summary.json keys the summary table shows; the rest go under "more".
SUMMARY_KEYS_SHOWN = {
    "backend", "model", "ranks", "hosts", "versions", "epochs", "samples", "seconds",
    "samples_per_sec", "allreduce_share", "final_loss", "test_accuracy",
    # Shown in "Where the time went" instead.
    "rank_timing", "timing_method", "timing_probe_every", "comm_share",
}
# job.json keys the job table shows; the rest go under "more".
JOB_KEYS_SHOWN = {
    job_files.JOB_NAME, job_files.JOB_RUN_ID, job_files.JOB_COMMAND, job_files.JOB_HOSTFILE,
    job_files.JOB_FINGERPRINT, job_files.JOB_RC, job_files.JOB_FAILED_RANK, job_files.JOB_FAILED_HOST,
    job_files.JOB_STAND_INS, "attempts", "lost_nodes", "held_out",
}


# ---------------------------------------------------------------- reading

def list_files(run_dir, top):
    """Every regular file under run_dir/top, as (relative path, size), sorted
    with numbers in their numeric order (rank.2 before rank.10)."""
    base = os.path.join(run_dir, top) if top else run_dir
    found = []
    for directory, subdirs, files in os.walk(base):
        subdirs.sort()
        for name in files:
            full = os.path.join(directory, name)
            if not os.path.isfile(full):
                continue
            try:
                size = os.path.getsize(full)
            except OSError:
                continue
            found.append((os.path.relpath(full, run_dir).replace(os.sep, "/"), size))
    return sorted(found, key=lambda item: natural_key(item[0]))


def natural_key(text):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


RANK_PATTERN = re.compile(r"(?:^|[^a-z])rank[._-]?(\d+)(?:$|[^0-9])", re.IGNORECASE)


def log_rank(relative_path):
    """The rank a log file belongs to, from its path (rank.3, rank-3, rank3), or None."""
    matches = RANK_PATTERN.findall(relative_path)
    return int(matches[-1]) if matches else None


def log_node(relative_path):
    """The first directory under logs/, which is the node in the fetched layout."""
    parts = relative_path.split("/")
    return parts[1] if len(parts) > 2 else None


# ---------------------------------------------------------------- the job

class Job(object):
    """What the report says about the run as a whole, from job.json, the
    summary and RUN_DIR's own path (artifacts/<cluster>/<job>/<run-id>/)."""

    def __init__(self, run_dir, job, summary):
        job = job or {}
        summary = summary or {}
        self.name = str(job.get(job_files.JOB_NAME) or os.path.basename(os.path.dirname(run_dir)) or "job")
        self.run_id = str(job.get(job_files.JOB_RUN_ID) or os.path.basename(run_dir))
        command = job.get(job_files.JOB_COMMAND)
        self.command = None if command is None else str(command)
        self.failed_rank = job.get(job_files.JOB_FAILED_RANK)
        self.failed_host = job.get(job_files.JOB_FAILED_HOST)
        self.exit_status = job.get(job_files.JOB_RC)
        exit_number = number(self.exit_status)
        self.failed = (self.failed_rank is not None or self.failed_host is not None
                       or (exit_number is not None and exit_number != 0))
        if self.failed:
            self.status = "failed"
        elif self.exit_status is not None:
            self.status = "succeeded"
        else:
            self.status = None
        self.backend = summary.get("backend")
        self.ranks = summary.get("ranks")
        if number(self.ranks) is None and isinstance(summary.get("hosts"), list):
            self.ranks = len(summary["hosts"])

    def title(self):
        return "{} run {}".format(self.name, self.run_id)

    def plot_title(self):
        parts = [self.name]
        if self.backend:
            parts.append("{} backend".format(self.backend))
        if number(self.ranks) is not None:
            parts.append("{:d} ranks".format(int(self.ranks)))
        if self.failed:
            parts.append("FAILED")
        return " \u2014 ".join(parts)


# ---------------------------------------------------------------- formatting

# ---------------------------------------------------------------- the page

# The collection's roles/train_job/templates (the action plugin finds it the same way).
TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "roles", "train_job", "templates")
TEMPLATE_FILE = "report.html.j2"


def finalize(value):
    """Every {{ value }} the template prints passes through esc(); Markup
    (what the template itself built) is left alone. Autoescaping stays on
    behind it, so a value that skips this is still escaped."""
    return value if isinstance(value, Markup) else Markup(esc(value))


def template_environment():
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        autoescape=True, finalize=finalize, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    environment.filters["url_path"] = url_path
    environment.tests["viewable"] = viewable
    return environment


def or_dash(value):
    return "\u2013" if value is None else value


def missing_items(summary_problem, metrics_problem, skipped, plot_problem, models, logs, job_problem):
    """What is missing from the run, one sentence each, so that a partial report explains itself."""
    missing = []
    if summary_problem:
        missing.append("{}: {} \u2013 no summary figures (the run did not finish, or was not fetched)".format(
            SUMMARY_FILE, summary_problem))
    if metrics_problem:
        missing.append("{}: {} \u2013 no progress table or plot".format(METRICS_FILE, metrics_problem))
    elif skipped:
        missing.append("{}: {} unreadable line{} skipped".format(METRICS_FILE, skipped, "" if skipped == 1 else "s"))
    if plot_problem and not metrics_problem:
        missing.append("{}: not drawn ({})".format(PLOT_FILE, plot_problem))
    if not models:
        missing.append("model file: none of {}".format(", ".join(MODEL_FILES)))
    if not logs:
        missing.append("{}/: no log files".format(LOGS_DIR))
    if job_problem and job_problem != "missing":
        missing.append("{}: {}".format(JOB_FILE, job_problem))
    return missing


def summary_rows(summary):
    """(label, text) for the summary table, and (key, text) for the rest of summary.json."""
    throughput = fmt_int(summary.get("samples_per_sec"))
    rows = [
        ("backend", summary.get("backend")),
        ("model", summary.get("model") if summary.get("hidden") is None
         else "{} ({} hidden)".format(summary.get("model"), summary.get("hidden"))),
        ("nodes and ranks", nodes_text(summary)),
        ("versions", versions_text(summary.get("versions"))),
        ("epochs", fmt_value(summary.get("epochs")) if summary.get("epochs") is not None else None),
        ("samples", fmt_int(summary.get("samples"))),
        ("wall time (training)", fmt_duration(summary.get("seconds"))),
        ("throughput", None if throughput is None else "{} samples/s".format(throughput)),
        ("Allreduce share", fmt_percent(summary.get("allreduce_share"))),
        ("final loss", fmt_float(summary.get("final_loss"))),
        ("final test accuracy", fmt_percent(summary.get("test_accuracy"), 2)),
    ]
    # The cntk backend does not measure the Allreduce share: no row rather than a dash.
    rows = [(label, or_dash(value)) for label, value in rows if value is not None or label != "Allreduce share"]
    more = [(key, fmt_value(value)) for key, value in sorted(summary.items())
            if key not in SUMMARY_KEYS_SHOWN and key != "hidden"]
    return rows, more


def job_rows(job, job_doc):
    """(label, text) for the job table, the hostfile ({text, multiline}) and the rest of job.json."""
    rows = [("job", job.name), ("run", job.run_id)]
    if job.status:
        rows.append(("status", job.status))
    if job.exit_status is not None:
        rows.append(("exit status", job.exit_status))
    if job.failed_rank is not None:
        rows.append(("failed rank", job.failed_rank))
    if job.failed_host is not None:
        rows.append(("failed host", job.failed_host))
    if job_doc.get(job_files.JOB_FINGERPRINT) is not None:
        rows.append(("fingerprint", fmt_value(job_doc[job_files.JOB_FINGERPRINT])))
    hostfile = job_doc.get(job_files.JOB_HOSTFILE)
    if hostfile is not None:
        text = str(hostfile).strip()
        hostfile = {"text": text, "multiline": "\n" in text}
    more = [(key, fmt_value(value)) for key, value in sorted(job_doc.items()) if key not in JOB_KEYS_SHOWN]
    return rows, hostfile, more


def failed_rank_log(run_dir, job, logs):
    """{rank, path, text}: the last lines of the failed rank's first non-empty log
    (stderr first: that is where a traceback goes), or None."""
    if not (job.failed and job.failed_rank is not None and logs):
        return None
    try:
        failed_rank = int(job.failed_rank)
    except (TypeError, ValueError):
        return None
    theirs = [(p, s) for p, s in logs if log_rank(p) == failed_rank]
    if job.failed_host is not None and any(log_node(p) == str(job.failed_host) for p, _ in theirs):
        theirs = [(p, s) for p, s in theirs if log_node(p) == str(job.failed_host)]
    theirs.sort(key=lambda item: (0 if "err" in item[0].rsplit("/", 1)[-1] else 1, item[0]))
    for relative, size in theirs:
        if size == 0:
            continue
        text = tail(os.path.join(run_dir, relative))
        if text:
            return {"rank": failed_rank, "path": relative, "text": text}
    return None


def progress_table(records):
    """The progress table: {shown, total, every, headers, rows}, rows of cell texts."""
    shown = pick_rows(len(records))
    has_share = any(number(r.get("allreduce_share")) is not None for r in records)
    headers = ["step", "epoch", "samples", "loss", "error", "accuracy", "samples/s"]
    if has_share:
        headers.append("Allreduce")
    rows = []
    for index in shown:
        record = records[index]
        metric = number(record.get("metric"))
        cells = [fmt_int(record.get("step")), fmt_int(record.get("epoch")), fmt_int(record.get("samples")),
                 fmt_float(record.get("loss")), fmt_float(metric),
                 None if metric is None else fmt_percent(1.0 - metric), fmt_int(record.get("samples_per_sec"))]
        if has_share:
            cells.append(fmt_percent(record.get("allreduce_share")))
        rows.append([or_dash(cell) for cell in cells])
    return {"shown": len(shown), "total": len(records),
            "every": ordinal(shown[1] - shown[0]) if len(shown) < len(records) else None,
            "headers": headers, "rows": rows}


def log_rows(job, logs):
    """{path, name, node, rank, size, hot} for every log file; hot: the failed rank's."""
    failed_rank_text = None if job.failed_rank is None else str(job.failed_rank)
    rows = []
    for relative, size in logs:
        rank = log_rank(relative)
        node = log_node(relative)
        hot = (failed_rank_text is not None and rank is not None and str(rank) == failed_rank_text
               and (job.failed_host is None or node in (None, str(job.failed_host))))
        rows.append({"path": relative, "name": relative[len(LOGS_DIR) + 1:], "node": or_dash(node),
                     "rank": or_dash(rank), "size": fmt_size(size), "hot": hot})
    return rows


def attempt_rows(job_doc, summary):
    """One row per attempt of a job Slurm requeued after a node's failure or started without a node it held out
    (job.json's attempts, from the follower): its nodes, those it lost, rank 0's last step seen, and for the one
    before the last attempt the steps the last one did again (its last step less the checkpoint's, summary.json's
    resumed_at_step)."""
    attempts = job_doc.get("attempts") if isinstance(job_doc, dict) else None
    if not isinstance(attempts, list) or not attempts or (len(attempts) < 2 and not held_out(job_doc)):
        return []
    resumed_at = job_files.number((summary or {}).get("resumed_at_step"))
    rows = []
    for index, attempt in enumerate(attempts):
        attempt = attempt if isinstance(attempt, dict) else {}
        last = job_files.number(attempt.get("last_step"))
        redone = None
        if index == len(attempts) - 2 and last is not None and resumed_at is not None:
            redone = max(0, int(last - resumed_at))
        rows.append({"number": index + 1, "nodes": " ".join(map(str, attempt.get("nodes") or [])) or or_dash(None),
                     "lost": " ".join(map(str, attempt.get("lost") or [])) or or_dash(None),
                     "last_step": or_dash(None if last is None else int(last)), "redone": or_dash(redone)})
    return rows


def held_out(job_doc):
    """The nodes Slurm held out when it started the job (job.json's held_out), as text; '' when none."""
    nodes = job_doc.get("held_out") if isinstance(job_doc, dict) else None
    return " ".join(map(str, nodes)) if isinstance(nodes, list) else ""


TIMING_METHODS = {
    "measured": "Each rank timed its own steps: communication is its wait in the gradient Allreduce after its "
                "own compute (waiting for slower ranks included; with overlap, the part hidden behind the "
                "hidden layer's gradient is not counted), compute the rest of the step.",
    "probe": "CNTK aggregates the gradients inside train_minibatch, where no timer reaches: every {every} steps "
             "each rank timed a forward and backward pass over its own minibatch (the compute probe, no "
             "aggregation; the first pass, set-up, not counted). Communication and waiting is the rank's step "
             "time less that compute: an estimate.",
}


def timing_section(summary, stragglers_found, rows, plot_problem):
    """The per-rank timing section ({rows, stragglers, comm_share, method, margin, plot, plot_problem}), or None
    when the run recorded no rank_timing (a failed run, an older train.py, a job of one's own)."""
    if not rows:
        return None
    slow = {item["rank"] for item in stragglers_found}

    def ms(value):
        return or_dash(None if value is None else "{:.3f}".format(1000.0 * value))

    table = [{"hot": row["rank"] in slow,
              "cells": [row["rank"], or_dash(row["host"]), or_dash(fmt_int(row["steps"])), ms(row["step"]),
                        ms(row["compute"]), ms(row["compute_median"]), ms(row["comm"]), ms(row["other"]),
                        or_dash(fmt_percent(row["comm_share"])), or_dash(fmt_percent(row["cpu_share"], 0))]}
             for row in rows]
    method = summary.get("timing_method")
    every = summary.get("timing_probe_every")
    plot = None
    if plot_problem is None:
        plot = {"src": TIMING_PLOT_FILE, "width": PLOT_SIZE_PX[0], "height": PLOT_SIZE_PX[1]}
    return {
        "rows": table,
        "stragglers": [rank_timing.straggler_text(item) for item in stragglers_found],
        "comm_share": or_dash(fmt_percent(rank_timing.job_comm_share(summary, rows))),
        "method": TIMING_METHODS.get(method, "").format(every=every if every is not None else "N"),
        "margin": "a rank whose mean compute a step is more than {:g}\u00d7 the other ranks' median and longer "
                  "than it by at least {:.0%} of the job's median step".format(rank_timing.STRAGGLER_FACTOR,
                                                                             rank_timing.STRAGGLER_STEP_SHARE),
        "plot": plot, "plot_problem": plot_problem,
    }


def fabric_section(run_dir):
    """The cluster's latest fabric page (playbooks/fabric.yml: artifacts/<cluster>/fabric/<run>/index.html, beside
    this run's artifacts/<cluster>/<job>/<run-id>/) as a link relative to RUN_DIR and its verdict lines; None when
    the cluster has none."""
    page = fabric_report.latest_page(os.path.dirname(os.path.dirname(os.path.abspath(run_dir))))
    if page is None:
        return None
    document, _ = read_json(os.path.join(os.path.dirname(page), fabric_report.RESULT_FILE))
    lines = document.get("lines") if isinstance(document, dict) else None
    lines = [str(line) for line in lines[:12]] if isinstance(lines, list) else []
    return {"href": os.path.relpath(page, os.path.abspath(run_dir)), "lines": lines,
            "run_id": os.path.basename(os.path.dirname(page))}


def page_context(run_dir, job_doc, job_problem, summary, summary_problem, records, skipped,
                 metrics_problem, plot_problem, timing_plot_problem="not drawn"):
    """Everything report.html.j2 shows, computed, in the page's order; the
    template only lays it out."""
    job = Job(run_dir, job_doc, summary)
    summary = summary or {}
    logs = list_files(run_dir, LOGS_DIR) if os.path.isdir(os.path.join(run_dir, LOGS_DIR)) else []
    models = [(name, os.path.getsize(os.path.join(run_dir, name)))
              for name in MODEL_FILES if os.path.isfile(os.path.join(run_dir, name))]
    # Stand-ins (e.g. the Open MPI 1.10 stand-in on a test cluster) are named
    # where no reader can miss them.
    stand_ins = job_doc.get(job_files.JOB_STAND_INS) if isinstance(job_doc, dict) else None
    rows, more = summary_rows(summary) if not summary_problem else ([], [])
    job_table = None
    if job_doc is not None:
        table_rows, hostfile, job_more = job_rows(job, job_doc)
        job_table = {"rows": table_rows, "hostfile": hostfile, "more": job_more, "command": job.command}
    plot = None
    if os.path.isfile(os.path.join(run_dir, PLOT_FILE)) and not plot_problem and records:
        plot = {"src": PLOT_FILE, "width": PLOT_SIZE_PX[0], "height": PLOT_SIZE_PX[1]}
    known = {METRICS_FILE, SUMMARY_FILE, JOB_FILE, PLOT_FILE, TIMING_PLOT_FILE, REPORT_FILE} | set(MODEL_FILES)
    timing_rows = rank_timing.rank_rows(summary)
    others = [(p, fmt_size(s)) for p, s in list_files(run_dir, None)
              if p not in known and not p.startswith(LOGS_DIR + "/") and not p.endswith(".tmp")
              and not p.endswith(".tmp.png")]
    return {
        "files": {"metrics": METRICS_FILE, "summary": SUMMARY_FILE, "logs": LOGS_DIR, "models": MODEL_FILES},
        "title": job.title(), "headline": job.plot_title(), "status": job.status,
        "run_dir": os.path.abspath(run_dir),
        # A failed run says so first, naming what is known of the rank, host and exit status.
        "failed": job.failed,
        "failure": [(what, value) for what, value in (("rank", job.failed_rank), ("host", job.failed_host),
                                                      ("exit status", job.exit_status)) if value is not None],
        "stand_ins": stand_ins if isinstance(stand_ins, list) else [],
        "missing": missing_items(summary_problem, metrics_problem, skipped, plot_problem, models, logs,
                                 job_problem),
        "summary_problem": summary_problem, "summary_rows": rows, "summary_more": more,
        "job": job_table,
        "attempts": attempt_rows(job_doc, summary), "held_out": held_out(job_doc),
        "failed_log": failed_rank_log(run_dir, job, logs),
        "plot": plot,
        "progress": progress_table(records) if records else None, "metrics_problem": metrics_problem,
        "timing": timing_section(summary, rank_timing.find_stragglers(timing_rows), timing_rows,
                                 timing_plot_problem),
        "fabric": fabric_section(run_dir),
        "logs": log_rows(job, logs),
        "models": [(name, fmt_size(size)) for name, size in models],
        "others": others,
        "raw": [name for name in (METRICS_FILE, SUMMARY_FILE, JOB_FILE) if os.path.isfile(os.path.join(run_dir, name))],
        "written": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }


def build_page(run_dir, job_doc, job_problem, summary, summary_problem, records, skipped,
               metrics_problem, plot_problem, timing_plot_problem="not drawn"):
    context = page_context(run_dir, job_doc, job_problem, summary, summary_problem, records, skipped,
                           metrics_problem, plot_problem, timing_plot_problem)
    return template_environment().get_template(TEMPLATE_FILE).render(context)


def write_text_atomic(path, text):
    directory = os.path.dirname(path)
    handle, temporary = tempfile.mkstemp(prefix=".report-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as target:
            target.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_timing(run_dir, job_doc, summary):
    """Draw timing.png from summary.json's rank_timing; None when drawn, else why not (a stale one is removed,
    so the page never shows another run's figure)."""
    path = os.path.join(run_dir, TIMING_PLOT_FILE)
    rows = rank_timing.rank_rows(summary)
    if not rows:
        if os.path.isfile(path):
            os.unlink(path)
        return "no rank timing"
    found = rank_timing.find_stragglers(rows)
    title = Job(run_dir, job_doc, summary).plot_title() + " \u2014 " + (
        "straggler: " + ", ".join("rank {}{}".format(item["rank"], " on " + item["host"] if item["host"] else "")
                                  for item in found) if found else "no straggler")
    try:
        return write_timing_plot(path, rows, found, title)
    except Exception as error:  # a report without this figure beats no report
        return "plotting failed: {}: {}".format(type(error).__name__, error)


def report(run_dir):
    """Write plot.png (when there are metrics) and report.html; return report.html's path."""
    run_dir = os.path.abspath(run_dir)
    job_doc, job_problem = read_json(os.path.join(run_dir, JOB_FILE))
    summary, summary_problem = read_json(os.path.join(run_dir, SUMMARY_FILE))
    records, skipped, metrics_problem = read_metrics(os.path.join(run_dir, METRICS_FILE))
    plot_path = os.path.join(run_dir, PLOT_FILE)
    plot_problem = None
    if records:
        try:
            plot_problem = write_plot(plot_path, records, Job(run_dir, job_doc, summary),
                                      (summary or {}).get("test_accuracy"))
        except Exception as error:  # a report without its plot beats no report
            plot_problem = "plotting failed: {}: {}".format(type(error).__name__, error)
    else:
        plot_problem = "no metrics"
    timing_plot_problem = write_timing(run_dir, job_doc, summary)
    page = build_page(run_dir, job_doc, job_problem, summary, summary_problem, records, skipped,
                      metrics_problem, plot_problem, timing_plot_problem)
    report_path = os.path.join(run_dir, REPORT_FILE)
    write_text_atomic(report_path, page)
    return report_path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a fetched run: artifacts/<cluster>/<job>/<run-id>/")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.run_dir):
        what = "is not a directory" if os.path.exists(args.run_dir) else "does not exist"
        print("job_report: RUN_DIR {} {}".format(args.run_dir, what), file=sys.stderr)
        return 2
    path = report(args.run_dir)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
