#!/usr/bin/env python3
"""A converged site.yml under Ansible's linear strategy and under mitogen_linear, in one run.

    bench/strategy_bench.py [--pairs 3]

Uses a 4-node numpy cluster of its own (`speed`, 127.0.0.91..), converges it
with one site.yml, then runs site.yml PAIRS times under each strategy,
interleaved (linear, mitogen_linear, mitogen_linear_pinned, linear, ...), so
that a change in the machine's load falls on each. mitogen_linear is the
project's shim (plugins/strategy/), which turns Mitogen's CPU pinning off;
mitogen_linear_pinned is Mitogen's own plugin from its package, pinning on.
Each run gets a fresh SSH control socket folder: linear pays for its own
connections, as mitogen does. The cluster is removed
at the end.

Writes bench/results/strategy.json and bench/results/strategy.md.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import ansible_mitogen

# bench/ is the script's own folder, first on the import path.
from cluster_bench import local_cluster_tool, recap_totals, timed

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# The cluster tool, tools/ on its import path (given here, so that the bench runs without make too).
TOOL = local_cluster_tool(ROOT)
NAME = "speed"
NODES = 4
STRATEGIES = ("linear", "mitogen_linear", "mitogen_linear_pinned")


def changed(output):
    """changed= summed over the last PLAY RECAP."""
    return recap_totals(output)["changed"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()

    playbook = [str(Path(sys.executable).with_name("ansible-playbook")),
                "-i", str(ROOT / ".cluster" / NAME / "inventory"), "site.yml"]
    down = TOOL + ["down", f"--name={NAME}"]
    sockets = Path(tempfile.mkdtemp(prefix="strategy-bench-"))

    def site(strategy, label):
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_STRATEGY=strategy, ANSIBLE_SSH_CONTROL_PATH_DIR=str(sockets / label))
        if strategy == "mitogen_linear_pinned":
            # Mitogen's own strategy plugins in place of ansible.cfg's strategy_plugins.
            env.update(ANSIBLE_STRATEGY="mitogen_linear",
                       ANSIBLE_STRATEGY_PLUGINS=str(Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"))
        seconds, output = timed(playbook, env=env)
        return {"strategy": strategy, "seconds": round(seconds, 1), "changed": changed(output)}

    timed(down)
    timed(TOOL + ["up", f"--name={NAME}", "--first-address=127.0.0.91", f"--nodes={NODES}", "--backend=numpy"])
    load_before = os.getloadavg()[0]
    try:
        converge = site("mitogen_linear", "converge")
        runs = [site(strategy, f"{pair}-{strategy}") for pair in range(args.pairs) for strategy in STRATEGIES]
    finally:
        timed(down)

    medians = {s: statistics.median(r["seconds"] for r in runs if r["strategy"] == s) for s in STRATEGIES}
    figures = {
        "nodes": NODES,
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average_1m_before": round(load_before, 2),
        "converge": converge,
        "runs": runs,
        "median_s": medians,
        "mitogen_to_linear_ratio": round(medians["mitogen_linear"] / medians["linear"], 2),
        "unpinned_to_pinned_ratio": round(medians["mitogen_linear"] / medians["mitogen_linear_pinned"], 2),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "strategy.json").write_text(json.dumps(figures, indent=2) + "\n")
    table = ["| run | strategy | time | changed |", "| --- | --- | --- | --- |"]
    table += [f"| {n} | {r['strategy']} | {r['seconds']} s | {r['changed']} |" for n, r in enumerate(runs, 1)]
    table += [f"| median | {s} | {medians[s]} s | |" for s in STRATEGIES]
    (RESULTS / "strategy.md").write_text(
        f"# Converged site.yml, {NODES} nodes: linear vs mitogen_linear (pinning off, the project's) vs "
        "mitogen_linear_pinned (Mitogen's own plugin)\n\n"
        f"{figures['machine']}, {figures['date']}, 1-minute load average {figures['load_average_1m_before']}"
        " before the first run\n\n"
        f"Converging run (mitogen_linear): {converge['seconds']} s, changed={converge['changed']}\n\n"
        + "\n".join(table) + "\n\n"
        f"mitogen_linear / linear (medians): {figures['mitogen_to_linear_ratio']}\n"
        f"mitogen_linear / mitogen_linear_pinned (medians): {figures['unpinned_to_pinned_ratio']}\n"
    )
    print("\n".join(table))
    print(f"mitogen_linear / linear: {figures['mitogen_to_linear_ratio']}")
    print(f"mitogen_linear / mitogen_linear_pinned: {figures['unpinned_to_pinned_ratio']}")
    dirty = [r for r in runs if r["changed"]]
    if dirty:
        sys.exit(f"converged runs reported changes: {dirty}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
