#!/usr/bin/env python3
"""What one task costs on 4 nodes: a ping, a `cntk.cluster` module and a `cntk.cluster` filter, under the
project's strategy shim and under the same shim without its once-per-run work, in one run.

    bench/task_cost_bench.py [--pairs 3] [--tasks 10]

Uses a 4-node numpy cluster of its own (`taskcost`, 127.0.0.121..). One playbook holds TASKS tasks of each
kind, in turn: `ansible.builtin.ping`, `cntk.cluster.owned_directory` in check mode (a collection's module)
and `ansible.builtin.set_fact` through `cntk.cluster.relay_waves` (a collection's filter). It runs PAIRS times
under each strategy, interleaved, so that a change in the machine's load falls on both:

- mitogen_linear: the project's (plugins/strategy/mitogen_linear.py), which lists the installed collections
  and imports this collection's filter files once, before Ansible forks its workers;
- mitogen_linear_cold: bench/strategies/mitogen_linear_cold.py, the same shim without that, as it was: each
  task's worker lists the collections (for a collection's module) and imports the filter files anew.

Each task's time is ansible.posix.profile_tasks's. The first task of a run (the connections) is left out.
Writes bench/results/task_cost.json and bench/results/task_cost.md. The cluster is removed at the end.
"""

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

# bench/ is the script's own folder, first on the import path.
from cluster_bench import local_cluster_tool, timed

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TOOL = local_cluster_tool(ROOT)
NAME = "taskcost"
NODES = 4
STRATEGIES = ("mitogen_linear", "mitogen_linear_cold")
KINDS = {
    "ping": {"ansible.builtin.ping": None},
    "collection module": {"cntk.cluster.owned_directory": {"path": "/srv", "owner": "root", "group": "root",
                                                           "mode": "0755"}, "check_mode": True},
    "collection filter": {"ansible.builtin.set_fact": {
        "waves": "{{ ansible_play_hosts_all | cntk.cluster.relay_waves }}"}},
}


def playbook(folder, tasks):
    plays = [{"name": "Task cost", "hosts": "training", "gather_facts": False, "tasks": [
        {"name": "connect", "ansible.builtin.ping": None}] + [
        dict({"name": f"{kind} {n}"}, **task) for kind, task in KINDS.items() for n in range(tasks)]}]
    path = Path(folder) / "task_cost.yml"
    path.write_text(json.dumps(plays))  # JSON is YAML
    return path


def task_seconds(output):
    """{task name: seconds} from profile_tasks's recap."""
    recap = output.split("TASKS RECAP")[-1]
    return {match.group(1): float(match.group(2))
            for match in re.finditer(r"^(\S.*?) -+ ([\d.]+)s$", recap, re.M)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=10)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="task-cost-bench-"))
    book = playbook(folder, args.tasks)
    command = [str(Path(sys.executable).with_name("ansible-playbook")),
               "-i", str(ROOT / ".cluster" / NAME / "inventory"), str(book)]
    down = TOOL + ["down", f"--name={NAME}"]

    def run(strategy):
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_STRATEGY=strategy, ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
                   PROFILE_TASKS_TASK_OUTPUT_LIMIT="all", PROFILE_TASKS_SORT_ORDER="none")
        if strategy == "mitogen_linear_cold":
            env["ANSIBLE_STRATEGY_PLUGINS"] = str(ROOT / "bench" / "strategies")
        seconds, output = timed(command, env=env)
        found = task_seconds(output)
        missing = [f"{kind} {n}" for kind in KINDS for n in range(args.tasks) if f"{kind} {n}" not in found]
        if missing or "failed=0" not in output:
            sys.exit(f"{strategy}: the run failed or its recap lacks {missing[:3]}:\n{output[-3000:]}")
        return {"strategy": strategy, "seconds": round(seconds, 2),
                "mean_task_s": {kind: round(statistics.mean(found[f"{kind} {n}"] for n in range(args.tasks)), 3)
                                for kind in KINDS}}

    timed(down)
    timed(TOOL + ["up", f"--name={NAME}", "--first-address=127.0.0.121", f"--nodes={NODES}", "--backend=numpy"])
    load_before = os.getloadavg()[0]
    try:
        runs = [run(strategy) for _ in range(args.pairs) for strategy in STRATEGIES]
    finally:
        timed(down)
    load_after = os.getloadavg()[0]

    medians = {s: {kind: statistics.median(r["mean_task_s"][kind] for r in runs if r["strategy"] == s)
                   for kind in KINDS} for s in STRATEGIES}
    to_ping = {s: {kind: round(medians[s][kind] / medians[s]["ping"], 2) for kind in KINDS} for s in STRATEGIES}
    figures = {
        "nodes": NODES, "tasks_per_kind": args.tasks, "pairs": args.pairs,
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "load_average": [round(load_before, 2), round(load_after, 2)],
        "runs": runs, "median_task_s": medians, "to_ping": to_ping,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "task_cost.json").write_text(json.dumps(figures, indent=2) + "\n")
    table = ["| strategy | " + " | ".join(KINDS) + " |", "| --- |" + " --- |" * len(KINDS)]
    table += [f"| {s} | " + " | ".join(f"{medians[s][k]:.3f} s ({to_ping[s][k]}x a ping)" for k in KINDS) + " |"
              for s in STRATEGIES]
    (RESULTS / "task_cost.md").write_text(
        f"# One task on {NODES} nodes: a ping, a cntk.cluster module, a cntk.cluster filter\n\n"
        f"{figures['machine']}, {figures['date']}, 1-minute load average {load_before:.1f} at the start and "
        f"{load_after:.1f} at the end. Each figure: the median over {args.pairs} runs of the mean of "
        f"{args.tasks} tasks (ansible.posix.profile_tasks), the runs of the two strategies interleaved.\n\n"
        + "\n".join(table) + "\n\n"
        "- mitogen_linear: the project's shim, with the installed collections listed and this collection's "
        "filter files imported once per run, before the workers fork\n"
        "- mitogen_linear_cold: the same shim without that (bench/strategies/mitogen_linear_cold.py)\n"
    )
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
