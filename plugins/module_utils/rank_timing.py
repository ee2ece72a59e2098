"""Where a run's time went, rank by rank, and the straggler if there is one.

Reads summary.json's rank_timing (training/README.md, "Per-rank timing":
one entry per rank, written by rank 0 from every rank's own measurements)
and decides which rank, if any, held the others back. Standard library only;
the report (job_report.py) shows and plots what this returns.

A straggler is a rank whose compute per step (the mean over the run,
compute_seconds: its total compute over its steps, which is what the other
ranks waited for) is both

- more than STRAGGLER_FACTOR times the median of the other ranks' figures, and
- longer than theirs by at least STRAGGLER_STEP_SHARE of the job's median
  step time,

so the margin is relative twice over, never an absolute number of seconds:
the first says the rank is slow against its peers, the second that the
difference matters to the step (in a step of 3 ms, 0.1 ms more compute is
noise from a loaded host, not a slow node: the other ranks barely wait).
With fewer than two ranks timed, no rank is named. The mean, not the median
(compute_median_seconds, shown beside it): a rank throttled by a CPU quota
or stopped now and then is slow in a few long pauses, which a median over
the run would not see, and the others wait through every one of them.
"""

from ansible_collections.cntk.cluster.plugins.module_utils.job_files import number

STRAGGLER_FACTOR = 1.25
STRAGGLER_STEP_SHARE = 0.10


def median(values):
    ordered = sorted(values)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def rank_rows(summary):
    """summary.json's rank_timing as clean rows, by rank: rank, host, steps, and seconds per step
    (step, compute, compute_median, comm, other: the step less compute and comm, never negative; None for
    the cntk probe, whose comm is the step less the compute),
    comm_share, cpu_share, series ([(step, compute seconds)]). [] when the run has none."""
    entries = (summary or {}).get("rank_timing")
    if not isinstance(entries, list):
        return []
    rows = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        rank = number(entry.get("rank"))
        step, compute, comm = (number(entry.get(key)) for key in ("step_seconds", "compute_seconds", "comm_seconds"))
        compute_median = number(entry.get("compute_median_seconds"))
        other = None
        # The probe's communication is the step less the compute: nothing is left over to show.
        if step is not None and compute is not None and comm is not None and summary.get("timing_method") != "probe":
            other = max(0.0, step - compute - comm)
        series = []
        for point in entry.get("compute_series") or []:
            if isinstance(point, (list, tuple)) and len(point) == 2:
                at, value = number(point[0]), number(point[1])
                if at is not None and value is not None:
                    series.append((at, value))
        rows.append({
            "rank": int(rank) if rank is not None else index,
            "host": str(entry.get("host")) if entry.get("host") is not None else None,
            "steps": number(entry.get("steps")),
            "step": step, "compute": compute,
            "compute_median": compute_median,
            "comm": comm, "other": other,
            "comm_share": number(entry.get("comm_share")), "cpu_share": number(entry.get("cpu_share")),
            "series": series,
        })
    return sorted(rows, key=lambda row: row["rank"])


def find_stragglers(rows, factor=STRAGGLER_FACTOR, step_share=STRAGGLER_STEP_SHARE):
    """The ranks that held the others back, slowest first: [{rank, host, compute, others, ratio, excess_share}],
    compute and others (the other ranks' median) in seconds per step, ratio compute / others,
    excess_share (compute - others) / the job's median step time (None where no step time was recorded)."""
    timed = [row for row in rows if row.get("compute") is not None]
    if len(timed) < 2:
        return []
    steps = [row["step"] for row in rows if row.get("step") is not None]
    step_median = median(steps)
    found = []
    for row in timed:
        others = median([other["compute"] for other in timed if other is not row])
        if not others or others <= 0:
            continue
        compute = row["compute"]
        ratio = compute / others
        excess_share = (compute - others) / step_median if step_median else None
        if ratio > factor and (excess_share is None or excess_share >= step_share):
            found.append({"rank": row["rank"], "host": row.get("host"), "compute": compute, "others": others,
                          "ratio": ratio, "excess_share": excess_share})
    return sorted(found, key=lambda item: -item["ratio"])


def job_comm_share(summary, rows):
    """The share of step time spent communicating, over all ranks: summary.json's comm_share (the mean over
    ranks), else the mean of the rows'; None when nothing was measured."""
    share = number((summary or {}).get("comm_share"))
    if share is not None:
        return share
    shares = [row["comm_share"] for row in rows if row.get("comm_share") is not None]
    return sum(shares) / len(shares) if shares else None


def straggler_text(straggler):
    """One sentence naming the straggler and the figure that shows it."""
    where = " on {}".format(straggler["host"]) if straggler.get("host") else ""
    text = "rank {}{}: {:.3g} ms of compute a step, {:.2f}\u00d7 the other ranks' median ({:.3g} ms)".format(
        straggler["rank"], where, 1000.0 * straggler["compute"], straggler["ratio"], 1000.0 * straggler["others"])
    if straggler.get("excess_share") is not None:
        text += ", {:.0%} of a step more".format(straggler["excess_share"])
    return text
