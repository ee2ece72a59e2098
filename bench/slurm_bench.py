#!/usr/bin/env python3
"""The train step with and without Slurm, side by side, on the same cluster and job, in one run.

    bench/slurm_bench.py [--repeat 3] [--nodes 4] [--epochs 20] [--keep]

  none   cluster_scheduler: none, the train step starts mpirun itself
  slurm  cluster_scheduler: slurm, the same run script submitted with sbatch,
         mpirun inside the allocation

One netns cluster of its own (`slurmb`: 4 nodes, numpy backend) is brought up
with --scheduler slurm and converged once (site.yml); then playbooks/train.yml
runs the demo job --repeat times per scheduler, alternating which goes first,
each a fresh run (train_job_force, train_job_fresh). For each run: the time
from ansible-playbook's start to rank 0's first progress line in its output
(the launch's cost, the playbook's own steps included), the whole train.yml,
and the training loop's samples/s from the run's summary.json. Medians, and
the ratios slurm/none of the medians. Every node shares this machine's cores.

Taken down at the end unless --keep. Writes bench/results/slurm.json and
bench/results/slurm.md.
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from cluster_bench import local_cluster_tool  # bench/, beside this script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
NAME = "slurmb"
STATE = ROOT / ".cluster" / NAME
INVENTORY = STATE / "inventory"
ARTIFACTS = STATE / "artifacts"
TOOL = local_cluster_tool(ROOT)
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
JOB = "bench-slurm"
PROGRESS = re.compile(rf"^{JOB} \| epoch")


def env():
    return dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")


def check(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env(), **kwargs)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed:\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}")
    return result.stdout


def train(scheduler, epochs):
    args = {"model": "mlp", "hidden": 64, "epochs": epochs, "minibatch": 64, "lr": 0.1, "seed": 1,
            "progress-every": 5}
    cmd = [PLAYBOOK, "-i", str(INVENTORY), "playbooks/train.yml", "-e", f"cluster_scheduler={scheduler}",
           "-e", f"train_job_name={JOB}", "-e", "train_job_force=true", "-e", "train_job_fresh=true",
           "-e", json.dumps({"train_job_args": args})]
    started = time.monotonic()
    first = None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env())
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if first is None and PROGRESS.match(line):
            first = time.monotonic() - started
    proc.wait()
    total = time.monotonic() - started
    if proc.returncode != 0 or first is None:
        raise SystemExit(f"train.yml ({scheduler}) failed or showed no progress:\n{''.join(lines[-80:])}")
    run = ARTIFACTS / JOB / "latest"
    summary = json.loads((run / "summary.json").read_text())
    record = json.loads((run / "job.json").read_text())
    if (scheduler == "slurm") != ("slurm_job" in record):
        raise SystemExit(f"the {scheduler} run's job.json says otherwise: {record.get('command', '')[:200]}")
    return {"to_first_step_s": round(first, 2), "train_yml_s": round(total, 2),
            "samples_per_sec": summary["samples_per_sec"], "test_accuracy": summary["test_accuracy"],
            "ranks": summary["ranks"]}


def report(figures):
    rows = ["| scheduler | start to first step (s) | whole train.yml (s) | samples/s | runs |",
            "| --- | --- | --- | --- | --- |"]
    for scheduler in ("none", "slurm"):
        entry = figures["median"][scheduler]
        rows.append(f"| {scheduler} | {entry['to_first_step_s']:.1f} | {entry['train_yml_s']:.1f} | "
                    f"{entry['samples_per_sec']:,.0f} | {len(figures['runs'][scheduler])} |")
    ratio = figures["ratio_slurm_to_none"]
    return "\n".join([
        "# The train step with and without Slurm",
        "",
        f"{figures['date']}, {figures['host']}, load {figures['load_average'][0]:.1f} at the start; "
        f"`bench/slurm_bench.py` took {figures['seconds']:.0f} s.",
        f"The demo job (numpy backend, mlp with 64 hidden units, {figures['epochs']} epochs, "
        f"{figures['ranks']} ranks on {figures['nodes']} netns nodes sharing this machine's "
        f"{figures['cpus']} cores), {figures['repeat']} fresh runs per scheduler, alternating; medians.",
        "",
        *rows,
        "",
        f"Slurm/none, of the medians: start to first step {ratio['to_first_step_s']:.2f}x, whole train.yml "
        f"{ratio['train_yml_s']:.2f}x, samples/s {ratio['samples_per_sec']:.2f}x.",
        "",
    ])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    began = time.monotonic()
    load = list(os.getloadavg())
    check(TOOL + ["up", f"--name={NAME}", f"--nodes={args.nodes}", "--backend=numpy", "--network=netns",
                  "--scheduler=slurm"])
    try:
        check([PLAYBOOK, "-i", str(INVENTORY), "site.yml", "--skip-tags", "train"], timeout=3600)
        runs = {"none": [], "slurm": []}
        for index in range(args.repeat):
            order = ("none", "slurm") if index % 2 == 0 else ("slurm", "none")
            for scheduler in order:
                runs[scheduler].append(train(scheduler, args.epochs))
                print(scheduler, runs[scheduler][-1], flush=True)
    finally:
        if not args.keep:
            subprocess.run(TOOL + ["down", f"--name={NAME}"], capture_output=True)
    keys = ("to_first_step_s", "train_yml_s", "samples_per_sec")
    median = {s: {k: statistics.median(r[k] for r in runs[s]) for k in keys} for s in runs}
    figures = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": platform.node(),
        "cpus": os.cpu_count(), "load_average": load, "nodes": args.nodes, "epochs": args.epochs,
        "repeat": args.repeat, "ranks": runs["none"][0]["ranks"], "runs": runs, "median": median,
        "ratio_slurm_to_none": {k: round(median["slurm"][k] / median["none"][k], 3) for k in keys},
        "seconds": round(time.monotonic() - began, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "slurm.json").write_text(json.dumps(figures, indent=2) + "\n")
    text = report(figures)
    (RESULTS / "slurm.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
