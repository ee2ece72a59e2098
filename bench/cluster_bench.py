#!/usr/bin/env python3
"""Measure the local cluster's setup side by side, in one run.

    bench/cluster_bench.py [--nodes 4] [--backend numpy|cntk] [--compare DIR]

Uses a cluster of its own (`bench`, 127.0.0.31..), so a running local cluster
is left alone. Measures, with the node image already cached (it is built
first if missing, and that build is timed apart):

  1. cluster up from the cached image,
  2. the first `ansible-playbook site.yml` on fresh nodes,
  3. the second `site.yml` on the converged cluster (must report changed=0),
  4. cluster down,

and, on the converged run, the tasks each host walked (ok, skipped) and the
roles they came from: a numpy cluster must walk no task of the cntk stack's
roles and a cntk cluster none of the numpy runtime's.

Ansible's own floor for that converged run is measured too, before the
cluster goes down: a playbook of T `ping` tasks (the least a task can do on
a node: one module round trip) over the same nodes, with the same
ansible.cfg (strategy, forks, SSH options), T being the most tasks a host
ran (ok) in the converged site.yml (bench/ansible_floor.py). The converged
run's time over this floor says how much is the project's own work and how
much Ansible's per-task cost.

--compare DIR runs the same sequence with another checkout of the project
first (e.g. `git worktree add /tmp/before <commit>`), so the two sets of
figures come from one run, side by side.

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

import ansible_floor  # bench/, beside this script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
NAME = "bench"
FIRST_ADDRESS = "127.0.0.31"


def timed(cmd, cwd=ROOT, **kwargs):
    start = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, **kwargs)
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


# Roles only one backend may run.
BACKEND_ROLES = {
    "numpy": {"numpy_runtime"},
    "cntk": {"cpython", "cntk", "nvidia_driver", "nvidia_apt", "cuda", "cudnn", "nccl", "source_build"},
}


def walked(output):
    """Per host: ok and skipped counts of the PLAY RECAP; and the roles whose tasks ran or were skipped."""
    hosts = {host: {"ok": counts.get("ok", 0), "skipped": counts.get("skipped", 0)}
             for host, counts in ansible_floor.recap_per_host(output).items()}
    roles = sorted(set(re.findall(r"^TASK \[([a-z_]+) : ", output, flags=re.M)))
    return hosts, roles


def local_cluster_tool(project):
    """A checkout's cluster tool as a command: python -m local_cluster with the checkout's tools/ on its import
    path (given here, so that the bench runs without make too), or scripts/local_cluster.py in a checkout from
    before the tool moved (--compare)."""
    old = project / "scripts" / "local_cluster.py"
    if old.exists():
        return [sys.executable, str(old)]
    return ["env", f"PYTHONPATH={project / 'tools'}", sys.executable, "-m", "local_cluster"]


def measure(project, args, env):
    """The bench's sequence with the project checkout at `project`."""
    playbook = [str(Path(sys.executable).with_name("ansible-playbook")),
                "-i", str(project / ".cluster" / NAME / "inventory"), "site.yml"]
    tool = local_cluster_tool(project)
    up = tool + ["up", f"--name={NAME}", f"--first-address={FIRST_ADDRESS}", f"--nodes={args.nodes}",
                 f"--backend={args.backend}"]
    down = tool + ["down", f"--name={NAME}"]
    env = dict(env, ANSIBLE_CONFIG=str(project / "ansible.cfg"))

    timed(down, project)
    # First up: builds the image if it is missing; not the figure we report.
    image_seconds, _ = timed(up, project)
    timed(down, project)

    up_seconds, _ = timed(up, project)
    first_seconds, first_out = timed(playbook, project, env=env)
    second_seconds, second_out = timed(playbook, project, env=env)
    hosts, roles = walked(second_out)
    tasks = ansible_floor.most_tasks(second_out)
    floor_seconds, _ = ansible_floor.time_floor(playbook, "site.yml", tasks, hosts="cluster", cwd=project, env=env)
    down_seconds, _ = timed(down, project)

    first, second = recap_totals(first_out), recap_totals(second_out)
    other = "cntk" if args.backend == "numpy" else "numpy"
    commit = subprocess.run(["git", "-C", str(project), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return {
        "project": f"{project} (commit {commit or 'unknown'})",
        "first_up_with_image_check_s": round(image_seconds, 1),
        "up_cached_image_s": round(up_seconds, 1),
        "site_first_s": round(first_seconds, 1),
        "site_first_changed": first["changed"],
        "site_second_s": round(second_seconds, 1),
        "site_second_changed": second["changed"],
        "second_to_first_ratio": round(second_seconds / first_seconds, 2),
        "floor_tasks": tasks,
        "floor_s": round(floor_seconds, 1),
        "second_to_floor_ratio": round(second_seconds / floor_seconds, 2),
        "down_s": round(down_seconds, 1),
        "second_tasks_per_host": hosts,
        "second_roles": roles,
        "second_other_backend_roles": sorted(set(roles) & BACKEND_ROLES[other]),
    }


def rows_of(figures):
    hosts = figures["second_tasks_per_host"]
    ok = sorted({counts["ok"] for counts in hosts.values()})
    skipped = sorted({counts["skipped"] for counts in hosts.values()})
    return [
        ("local cluster up, cached image", f"{figures['up_cached_image_s']} s"),
        ("first site.yml", f"{figures['site_first_s']} s, changed={figures['site_first_changed']}"),
        ("second site.yml", f"{figures['site_second_s']} s, changed={figures['site_second_changed']}"),
        ("second / first", f"{figures['second_to_first_ratio']}"),
        (f"Ansible's floor: {figures.get('floor_tasks', '?')} ping tasks over the same nodes",
         f"{figures['floor_s']} s" if "floor_s" in figures else "not measured"),
        ("second site.yml / floor", str(figures.get("second_to_floor_ratio", "not measured"))),
        ("second site.yml: tasks ok per host", "/".join(map(str, ok))),
        ("second site.yml: tasks skipped per host", "/".join(map(str, skipped))),
        ("second site.yml: other backend's roles walked", ", ".join(figures["second_other_backend_roles"]) or "none"),
        ("local cluster down", f"{figures['down_s']} s"),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--backend", choices=["numpy", "cntk"], default="numpy")
    parser.add_argument("--compare", metavar="DIR", help="another checkout of the project, measured first")
    args = parser.parse_args()

    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    load_start = [round(x, 1) for x in os.getloadavg()]
    runs = {}
    if args.compare:
        runs["before"] = measure(Path(args.compare).resolve(), args, env)
    runs["now"] = measure(ROOT, args, env)

    figures = {
        "nodes": args.nodes,
        "backend": args.backend,
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        # Other work on the machine shows here: the times are noisy, the ratios less so.
        "load_average": load_start,
        "load_average_end": [round(x, 1) for x in os.getloadavg()],
        "runs": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cluster.json").write_text(json.dumps(figures, indent=2) + "\n")
    labels = list(runs)
    table = ["| step | " + " | ".join(labels) + " |", "| --- |" + " --- |" * len(labels)]
    columns = [rows_of(runs[label]) for label in labels]
    for index, (step, _) in enumerate(columns[0]):
        table.append(f"| {step} | " + " | ".join(column[index][1] for column in columns) + " |")
    notes = "".join(f"\n{label}: {runs[label]['project']}" for label in labels)
    (RESULTS / "cluster.md").write_text(
        f"# Local cluster setup, {args.nodes} nodes, {args.backend} backend\n\n{figures['machine']}, "
        f"{figures['date']}, load average {figures['load_average']} at the start, "
        f"{figures['load_average_end']} at the end\n{notes}\n\n" + "\n".join(table) + "\n"
    )
    print("\n".join(table))
    now = runs["now"]
    if now["site_second_changed"] != 0:
        sys.exit(f"second site.yml reported changed={now['site_second_changed']}: not idempotent")
    if now["second_other_backend_roles"]:
        sys.exit(f"the converged {args.backend} run walked tasks of {now['second_other_backend_roles']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
