"""The train step's health gate under Slurm (roles/slurm/tasks/gate.yml): the fabric links judged against the
cluster's own median, and the nodes Slurm holds out (drained, down)."""

import json
import statistics

# Reasons the gate gives the nodes it drains for a slow link; the node's own check (cntk-node-health) gives
# "cntk-health: " and resumes only its own.
LINK_REASON = "cntk-health-link: "


def iperf_rate(report):
    """Mbit/s the client received, from `iperf3 -J -R`'s report."""
    data = json.loads(report)
    if data.get("error"):
        raise ValueError(data["error"])
    return data["end"]["sum_received"]["bits_per_second"] / 1e6


def slow_links(rates, fraction):
    """(median, [(node, rate)]) for the nodes whose link moves less than fraction of the cluster's median.
    rates: {node: Mbit/s it sent}."""
    if len(rates) < 2:
        return (next(iter(rates.values())) if rates else 0.0), []
    median = statistics.median(rates.values())
    return median, [(node, rate) for node, rate in sorted(rates.items()) if rate < fraction * median]


def link_reason(node, rate, median, fraction):
    return (f"{LINK_REASON}fabric: {node} sends {rate:.0f} Mbit/s, under {fraction:g} of the cluster's median "
            f"{median:.0f} Mbit/s (iperf3 to the head node)")


def held(sinfo_lines, nodes):
    """[(node, state, reason)] for the nodes Slurm will not give a job: drained, draining, down, failed, not
    answering, or not listed. sinfo_lines: `sinfo --noheader --Node --format=%N|%T|%E`."""
    seen = {}
    for line in sinfo_lines:
        parts = line.split("|", 2)
        if len(parts) == 3:
            seen[parts[0].strip()] = (parts[1].strip(), parts[2].strip())
    out = []
    for node in nodes:
        state, reason = seen.get(node, ("not listed", ""))
        base = state.rstrip("*~#!%$@^-").split("+")[0]
        if (state == "not listed" or state.endswith("*") or "drain" in state
                or base in ("down", "fail", "failing", "unknown", "future", "maint", "reboot_issued")):
            out.append((node, state, "" if reason == "none" else reason))
    return out
