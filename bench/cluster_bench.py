#!/usr/bin/env python3
"""Measure the local cluster's setup side by side, in one run.

    bench/cluster_bench.py [--nodes 4]

Uses a cluster of its own (`bench`, 127.0.0.31..), so a running local cluster
is left alone. Measures, with the node image already cached (it is built
first if missing, and that build is timed apart):

  1. cluster up from the cached image,
  2. the first `ansible-playbook site.yml` on fresh nodes,
  3. the second `site.yml` on the converged cluster (must report changed=0),
  4. cluster down.

Writes bench/results/cluster.json and bench/results/cluster.md.
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TOOL = [sys.executable, str(ROOT / "scripts" / "local_cluster.py")]
NAME = "bench"
FIRST_ADDRESS = "127.0.0.31"


def timed(cmd, **kwargs):
    start = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, **kwargs)
    seconds = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return seconds, result.stdout


def recap_totals(output):
    """Sum of ok/changed/failed over the PLAY RECAP lines."""
    totals = {"ok": 0, "changed": 0, "unreachable": 0, "failed": 0}
    recap = output.split("PLAY RECAP")[-1]
    for key in totals:
        totals[key] = sum(int(n) for n in re.findall(rf"\b{key}=(\d+)", recap))
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()

    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    playbook = [str(Path(sys.executable).with_name("ansible-playbook")),
                "-i", str(ROOT / ".cluster" / NAME / "inventory"), "site.yml"]
    up = TOOL + ["up", f"--name={NAME}", f"--first-address={FIRST_ADDRESS}", f"--nodes={args.nodes}", "--backend=numpy"]
    down = TOOL + ["down", f"--name={NAME}"]

    timed(down)
    # First up: builds the image if it is missing; not the figure we report.
    image_seconds, _ = timed(up)
    timed(down)

    up_seconds, _ = timed(up)
    first_seconds, first_out = timed(playbook, env=env)
    second_seconds, second_out = timed(playbook, env=env)
    down_seconds, _ = timed(down)

    first, second = recap_totals(first_out), recap_totals(second_out)
    figures = {
        "nodes": args.nodes,
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "first_up_with_image_check_s": round(image_seconds, 1),
        "up_cached_image_s": round(up_seconds, 1),
        "site_first_s": round(first_seconds, 1),
        "site_first_changed": first["changed"],
        "site_second_s": round(second_seconds, 1),
        "site_second_changed": second["changed"],
        "second_to_first_ratio": round(second_seconds / first_seconds, 2),
        "down_s": round(down_seconds, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cluster.json").write_text(json.dumps(figures, indent=2) + "\n")
    rows = [
        ("local cluster up, cached image", f"{figures['up_cached_image_s']} s", ""),
        ("first site.yml", f"{figures['site_first_s']} s", f"changed={first['changed']}"),
        ("second site.yml", f"{figures['site_second_s']} s", f"changed={second['changed']}"),
        ("second / first", f"{figures['second_to_first_ratio']}", ""),
        ("local cluster down", f"{figures['down_s']} s", ""),
    ]
    table = ["| step | time | result |", "| --- | --- | --- |"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    (RESULTS / "cluster.md").write_text(
        f"# Local cluster setup, {args.nodes} nodes\n\n{figures['machine']}, {figures['date']}\n\n"
        + "\n".join(table) + "\n"
    )
    print("\n".join(table))
    if second["changed"] != 0:
        sys.exit(f"second site.yml reported changed={second['changed']}: not idempotent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
