"""The report's text and plot helpers: values from a run's files as short,
HTML-safe text, and the loss/accuracy plot (plugins/module_utils/job_report.py
lays them out)."""

import html
import json
import math
import os
import re
from collections import OrderedDict
from urllib.parse import quote

from ansible_collections.cntk.cluster.plugins.module_utils.job_files import number

MAX_METRIC_ROWS = 20
LOG_TAIL_LINES = 25
PLOT_SIZE_PX = (1000, 500)
PLOT_DPI = 100


CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def esc(value):
    """Text from a file, safe in HTML: escaped, and without control characters
    (Open MPI's version string ends in a NUL)."""
    text = CONTROL_CHARACTERS.sub("", "" if value is None else str(value))
    return html.escape(text, quote=True)


def url_path(relative_path):
    """A path relative to RUN_DIR as a link target (the template escapes it)."""
    return quote(relative_path, safe="/")


# Files a job writes that a browser shows as text or a picture, never runs: linked to open. Any other (HTML, SVG,
# a model, a rank's stdout: no extension, which a browser may sniff as a page) is linked for download only, so a
# page a job wrote never opens beside the report; a failed rank's last lines are shown in the report itself.
VIEWABLE = frozenset((".log", ".txt", ".out", ".err", ".json", ".csv", ".tsv", ".png", ".jpg", ".jpeg"))


def viewable(relative_path):
    return os.path.splitext(relative_path)[1].lower() in VIEWABLE


def fmt_int(value):
    value = number(value)
    return "{:,d}".format(int(round(value))) if value is not None else None


def fmt_float(value, digits=4):
    value = number(value)
    return "{:.{}f}".format(value, digits) if value is not None else None


def fmt_percent(value, digits=1):
    value = number(value)
    return "{:.{}f}%".format(100.0 * value, digits) if value is not None else None


def fmt_duration(seconds):
    seconds = number(seconds)
    if seconds is None:
        return None
    if seconds < 10:
        return "{:.2f} s".format(seconds)
    if seconds < 60:
        return "{:.1f} s".format(seconds)
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return "{:d} min {:02d} s".format(minutes, secs)
    hours, minutes = divmod(minutes, 60)
    return "{:d} h {:02d} min {:02d} s".format(hours, minutes, secs)


def fmt_size(size):
    if size < 1024:
        return "{:d} B".format(size)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024.0
        if size < 1024 or unit == "GiB":
            return "{:.1f} {}".format(size, unit)


def fmt_value(value):
    """Any JSON value, as short text."""
    if value is None:
        return "\u2013"
    if isinstance(value, float):
        return "{:.6g}".format(value)
    if isinstance(value, (dict, list)):
        text = json.dumps(value, sort_keys=True)
        return text if len(text) <= 300 else text[:297] + "..."
    return str(value)


def nodes_text(summary):
    """'2 nodes x 2 ranks: node1 (ranks 0-1), node2 (ranks 2-3)' from hosts by rank."""
    hosts = summary.get("hosts")
    ranks = summary.get("ranks")
    if not isinstance(hosts, list) or not hosts:
        return None if number(ranks) is None else "{:d} ranks (hosts not recorded)".format(int(ranks))
    per_node = OrderedDict()
    for rank, host in enumerate(hosts):
        per_node.setdefault(str(host), []).append(rank)
    counts = set(len(r) for r in per_node.values())
    head = "{:d} node{}".format(len(per_node), "" if len(per_node) == 1 else "s")
    if len(counts) == 1:
        head += " \u00d7 {:d} rank{} per node".format(counts.pop(), "" if len(hosts) == len(per_node) else "s")
    else:
        head += ", {:d} ranks (uneven)".format(len(hosts))
    detail = ", ".join("{} (rank{} {})".format(host, "" if len(r) == 1 else "s", rank_ranges(r))
                       for host, r in per_node.items())
    if number(ranks) is not None and int(ranks) != len(hosts):
        detail += "; summary says {:d} ranks".format(int(ranks))
    return "{}: {}".format(head, detail)


def rank_ranges(ranks):
    """[0, 1, 2, 5] -> '0-2, 5'."""
    parts, start = [], None
    for i, rank in enumerate(ranks):
        if start is None:
            start = rank
        if i + 1 == len(ranks) or ranks[i + 1] != rank + 1:
            parts.append(str(start) if start == rank else "{}\u2013{}".format(start, rank))
            start = None
    return ", ".join(parts)


def versions_text(versions):
    if isinstance(versions, dict):
        return " \u00b7 ".join("{} {}".format(k, fmt_value(v)) for k, v in sorted(versions.items())) or None
    return None if versions is None else fmt_value(versions)


def ordinal(n):
    if 10 <= n % 100 <= 20:
        return "{}th".format(n)
    return "{}{}".format(n, {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th"))


def pick_rows(count, most=MAX_METRIC_ROWS):
    """Indices of the metric records to tabulate: the first, every k-th, the last."""
    if count <= most:
        return list(range(count))
    step = int(math.ceil(count / float(most - 1)))
    rows = list(range(0, count, step))
    if rows[-1] != count - 1:
        rows.append(count - 1)
    return rows


def tail(path, lines=LOG_TAIL_LINES, most_bytes=64 * 1024):
    try:
        with open(path, "rb") as source:
            source.seek(0, os.SEEK_END)
            size = source.tell()
            source.seek(max(0, size - most_bytes))
            text = source.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    return "\n".join(text.splitlines()[-lines:])


# ---------------------------------------------------------------- the plot

def write_plot(path, records, job, test_accuracy=None):
    """Loss and training accuracy against step, side by side; None when written,
    else why not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator, PercentFormatter
    except ImportError as error:
        return "matplotlib is not available ({})".format(error)

    points = [(number(r.get("step")), number(r.get("loss")), number(r.get("metric")), r.get("epoch"))
              for r in records]
    loss = [(s, l) for s, l, _, _ in points if l is not None]
    accuracy = [(s, 1.0 - m) for s, _, m, _ in points if m is not None]
    if not loss and not accuracy:
        return "no record has a loss or a metric"

    figure = Figure(figsize=(PLOT_SIZE_PX[0] / float(PLOT_DPI), PLOT_SIZE_PX[1] / float(PLOT_DPI)),
                    dpi=PLOT_DPI, layout="constrained")
    figure.suptitle(job.plot_title().replace("$", r"\$"), fontsize=14)
    loss_axes, accuracy_axes = figure.subplots(1, 2)
    marker = "o" if len(points) <= 60 else None

    def draw(axes, series, colour, label, ylabel):
        if series:
            axes.plot([s for s, _ in series], [v for _, v in series], color=colour,
                      marker=marker, markersize=3, linewidth=1.6, label=label)
        else:
            axes.text(0.5, 0.5, "no {} recorded".format(label), ha="center", va="center",
                      transform=axes.transAxes, color="0.4")
        axes.set_xlabel("step", fontsize=11)
        axes.set_ylabel(ylabel, fontsize=11)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(True, color="0.88", linewidth=0.8)
        axes.tick_params(labelsize=10)

    draw(loss_axes, loss, "#1f77b4", "training loss", "loss (global minibatch)")
    loss_axes.set_title("training loss", fontsize=12)
    draw(accuracy_axes, accuracy, "#2ca02c", "training accuracy", "accuracy (1 \u2212 error rate)")
    accuracy_axes.set_title("training accuracy", fontsize=12)
    accuracy_axes.yaxis.set_major_formatter(PercentFormatter(1.0))
    if number(test_accuracy) is not None and accuracy:
        accuracy_axes.axhline(test_accuracy, color="#d62728", linestyle="--", linewidth=1.2,
                              label="final test accuracy {:.1f}%".format(100.0 * test_accuracy))
    if accuracy:
        accuracy_axes.legend(loc="lower right", fontsize=10)

    # Epoch boundaries, where there are few enough to tell apart.
    boundaries = [(points[i - 1][0] + points[i][0]) / 2.0 for i in range(1, len(points))
                  if points[i][3] != points[i - 1][3]
                  and points[i][0] is not None and points[i - 1][0] is not None]
    if 0 < len(boundaries) <= 30:
        for axes in (loss_axes, accuracy_axes):
            for step in boundaries:
                axes.axvline(step, color="0.75", linestyle=":", linewidth=0.9, zorder=0)
        loss_axes.text(0.99, 0.98, "dotted: epoch boundaries", transform=loss_axes.transAxes,
                       ha="right", va="top", fontsize=9, color="0.45")

    temporary = path + ".tmp.png"
    figure.savefig(temporary, dpi=PLOT_DPI, format="png")
    os.replace(temporary, path)
    return None


def write_timing_plot(path, rows, stragglers, title):
    """Per-rank timing, side by side: each rank's step split into compute, communication and the rest (ms a
    step, stacked bars, a straggler's bar outlined in red), and each rank's compute per step over the run
    (a straggler's line red). None when written, else why not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as error:
        return "matplotlib is not available ({})".format(error)
    if not rows:
        return "no rank timing"

    slow = {item["rank"] for item in stragglers}
    figure = Figure(figsize=(PLOT_SIZE_PX[0] / float(PLOT_DPI), PLOT_SIZE_PX[1] / float(PLOT_DPI)),
                    dpi=PLOT_DPI, layout="constrained")
    figure.suptitle(title.replace("$", r"\$"), fontsize=13)
    bars, lines = figure.subplots(1, 2)

    ranks = [row["rank"] for row in rows]
    bottom = [0.0] * len(rows)
    parts = (("compute", "compute", "#1f77b4"), ("comm", "communication and waiting", "#ff7f0e"),
             ("other", "rest of the step", "#c7c7c7"))
    for key, label, colour in parts:
        values = [1000.0 * (row.get(key) or 0.0) for row in rows]
        if not any(values):
            continue
        bars.bar(ranks, values, bottom=bottom, color=colour, label=label, width=0.8,
                 edgecolor=["#d62728" if rank in slow else colour for rank in ranks],
                 linewidth=[2.0 if rank in slow else 0.0 for rank in ranks])
        bottom = [b + v for b, v in zip(bottom, values)]
    for rank, height in zip(ranks, bottom):
        if rank in slow:
            bars.annotate("straggler", (rank, height), ha="center", va="bottom", fontsize=9, color="#d62728")
    bars.set_xlabel("rank", fontsize=11)
    bars.set_ylabel("ms a step (mean)", fontsize=11)
    bars.set_title("where each rank's step went", fontsize=12)
    bars.xaxis.set_major_locator(MaxNLocator(integer=True))
    bars.grid(True, axis="y", color="0.88", linewidth=0.8)
    # Headroom above the bars for the legend and the straggler's label.
    bars.set_ylim(0, 1.3 * max(bottom) if max(bottom) > 0 else 1.0)
    bars.legend(loc="upper center", fontsize=9, ncol=3)

    drawn = 0
    # Few ranks and none slow: a colour each; otherwise the straggler red against grey.
    palette = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
    coloured = not slow and len(rows) <= len(palette)
    for index, row in enumerate(rows):
        series = row.get("series") or []
        if not series:
            continue
        hot = row["rank"] in slow
        colour = "#d62728" if hot else (palette[index] if coloured else "0.6")
        lines.plot([s for s, _ in series], [1000.0 * v for _, v in series],
                   color=colour, linewidth=2.0 if hot else 1.0, zorder=3 if hot else 2,
                   label="rank {}{}".format(row["rank"], " (straggler)" if hot else "") if hot or len(rows) <= 8
                   else None)
        drawn += 1
    if drawn:
        top = max(1000.0 * v for row in rows for _, v in row.get("series") or [])
        lines.set_ylim(0, 1.35 * top if top > 0 else 1.0)
        lines.legend(loc="upper center", fontsize=8, ncol=3)
    else:
        lines.text(0.5, 0.5, "no compute series recorded", ha="center", va="center",
                   transform=lines.transAxes, color="0.4")
    lines.set_xlabel("step", fontsize=11)
    lines.set_ylabel("compute, ms a step", fontsize=11)
    lines.set_title("compute per step over the run, by rank", fontsize=12)
    lines.grid(True, color="0.88", linewidth=0.8)

    temporary = path + ".tmp.png"
    figure.savefig(temporary, dpi=PLOT_DPI, format="png")
    os.replace(temporary, path)
    return None
