#!/usr/bin/env python3
"""Bring a run's results back two ways, side by side, against the same logs.

    bench/collect_bench.py [--slots 4,32] [--repeat 3] [--name bench] [--first-address 127.0.0.31] [--keep]

  fetch  the role's collect-Linux.yml before issue 13: one ansible.builtin.fetch
         per file (every rank's stdout and stderr, rank 0's output, the run's
         records), kept below as FETCH_TASKS
  rsync  roles/train_job/tasks/collect-Linux.yml now: one rsync per node for
         the logs, two more on the head node for rank 0's output and records

For each --slots value, 2 nodes run the demo job with that many ranks each
(playbooks/data.yml and train.yml, cluster_slots set, train_job_force); then
both task files bring that run's results back from the same run folder on
the nodes, each into a folder of its own, --repeat times, alternating which
goes first. The time is the task file alone (from a fact set just before its
include to a task just after, under the train play's linear strategy), not
ansible-playbook's start. Both must bring back the same files, byte for byte.
Every node here shares this machine's cores: ranks beyond them are
oversubscribed, and labelled so.

Uses a cluster of its own (`bench`, 127.0.0.31..; --name and --first-address
for another), taken down at the end unless --keep.
Writes bench/results/collect.json and bench/results/collect.md.
"""

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ansible_collections.cntk.cluster.plugins.module_utils import job_files  # PYTHONPATH=.collections (make bench)

from cluster_bench import local_cluster_tool  # bench/, beside this script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# The cluster tool, tools/ on its import path (given here, so that the bench runs without make too).
TOOL = local_cluster_tool(ROOT)
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
NODES = 2

# roles/train_job/tasks/collect-Linux.yml as it was before issue 13 (commit 1dbb0d6).
FETCH_TASKS = """---
- name: Find every rank's log on its node
  ansible.builtin.find:
    paths: "{{ train_job_run_dir }}/{{ train_job_files.logs_dir }}"
    recurse: true
    file_type: file
    size: "-{{ train_job_fetch_max_mb }}m"
  become: true
  become_user: "{{ cluster_training_user }}"
  register: train_job_logs

- name: Fetch every rank's log
  ansible.builtin.fetch:
    src: "{{ item.src }}"
    dest: "{{ train_job_local_dir }}/{{ train_job_files.logs_dir }}/{{ inventory_hostname }}/{{ item.dest }}"
    flat: true
  become: true
  become_user: "{{ cluster_training_user }}"
  loop: >-
    {{ [train_job_logs | combine({'item': {'path': train_job_run_dir ~ '/' ~ train_job_files.logs_dir}})]
       | train_job_fetch_list(train_job_run_dir ~ '/' ~ train_job_files.logs_dir, []) }}
  loop_control:
    label: "{{ item.dest }}"

- name: Find rank 0's output and the run's records on the head node
  ansible.builtin.find:
    paths: "{{ item.path }}"
    patterns: "{{ item.patterns }}"
    recurse: "{{ item.recurse }}"
    file_type: file
    size: "-{{ train_job_fetch_max_mb }}m"
  become: true
  become_user: "{{ cluster_training_user }}"
  loop:
    - {path: "{{ train_job_run_dir }}/{{ train_job_files.output_dir }}", patterns: ["*"], recurse: true}
    - {path: "{{ train_job_run_dir }}", patterns: "{{ train_job_files.records }}", recurse: false}
  loop_control:
    label: "{{ item.path | relpath(train_job_run_dir) }}"
  register: train_job_outputs
  when: inventory_hostname == train_job_head

- name: Fetch rank 0's output and the run's records
  ansible.builtin.fetch:
    src: "{{ item.src }}"
    dest: "{{ train_job_local_dir }}/{{ item.dest }}"
    flat: true
  become: true
  become_user: "{{ cluster_training_user }}"
  loop: >-
    {{ train_job_outputs.results | train_job_fetch_list(train_job_run_dir + '/' + train_job_files.output_dir,
                                                         train_job_files.reserved) }}
  loop_control:
    label: "{{ item.dest }}"
  when: inventory_hostname == train_job_head

- name: Take the run's outcome from the follower
  ansible.builtin.set_fact:
    train_job_outcome: >-
      {{ hostvars[train_job_head].train_job_result | default({'rc': None, 'reason': 'the job did not start'})
         | dict2items | rejectattr('key', 'in', ['changed', 'failed', 'invocation', 'mpirun_log_tail'])
         | items2dict }}
  run_once: true
"""

# Times one task file on the training nodes, as the train play runs it.
BENCH_PLAY = """---
- name: Bench - bring a run's results back with one task file
  hosts: training
  strategy: linear
  gather_facts: false
  become: true
  tasks:
    - name: Note the start
      ansible.builtin.set_fact:
        bench_start: "{{ now().timestamp() }}"

    - name: Bring the results back
      ansible.builtin.include_tasks: "{{ bench_tasks }}"

    - name: Note the time it took
      ansible.builtin.copy:
        dest: "{{ bench_times }}"
        content: "{{ {'seconds': now().timestamp() - bench_start | float} | to_json }}"
        mode: "0644"
      delegate_to: localhost
      become: false
      run_once: true
"""


def run(cmd, env=None):
    start = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if result.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))[:300]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return time.monotonic() - start


def tree(folder):
    """{relative path: sha256} of every file under folder."""
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(Path(folder).rglob("*")) if path.is_file()}


def latest_run(artifacts):
    """The newest run on the controller: (job name, run id, job.json)."""
    latest = max(artifacts.glob("*/latest"), key=lambda link: link.lstat().st_mtime)
    job = json.loads((latest / job_files.JOB).read_text())
    return latest.parent.name, os.readlink(latest), job


def summarized(entry):
    """The median and the fastest of each way's runs, and fetch's time over rsync's by both."""
    for name, pick in (("median", statistics.median), ("fastest", min)):
        entry[f"{name}_s"] = {variant: pick(seconds) for variant, seconds in entry["seconds"].items()}
        entry[f"fetch_vs_rsync_{name}"] = round(entry[f"{name}_s"]["fetch"] / entry[f"{name}_s"]["rsync"], 2)
    return entry


def report(figures):
    table = ["| ranks | files (logs + output and records) | fetch: transfers, median (each run) "
             "| rsync: transfers, median (each run) | fetch / rsync: median, fastest |",
             "| --- | --- | --- | --- | --- |"]
    for entry in figures["runs"]:
        label = (f"{entry['ranks']} ({figures['nodes']} nodes x {entry['slots_per_node']}"
                 + (f", oversubscribed on {figures['cores']} cores" if entry["oversubscribed"] else "") + ")")
        cells = [f"{entry['transfers'][variant]}, {entry['median_s'][variant]} s "
                 f"({', '.join(str(s) for s in entry['seconds'][variant])})" for variant in ("fetch", "rsync")]
        table.append(f"| {label} | {entry['files']['logs']} + {entry['files']['output_and_records']} "
                     f"| {cells[0]} | {cells[1]} "
                     f"| {entry['fetch_vs_rsync_median']}x, {entry['fetch_vs_rsync_fastest']}x |")
    return (f"# Results back to the controller: one fetch per file vs one rsync per node\n\n"
            f"{figures['machine']}, {figures['date']}; load average {figures['load_before'][0]} before, "
            f"{figures['load_after'][0]} after. Time: the collect task file alone, {figures['repeat']} runs "
            f"each, alternating which goes first, against the same run's files on the nodes; both ways "
            f"brought back the same files, byte for byte. The nodes share this machine's cores with each "
            f"other and with whatever else runs: the runs vary, so the fastest of each way is compared "
            f"too.\n\n" + "\n".join(table) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", default="4,32", help="ranks per node, one measurement each (comma-separated)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--name", default="bench")
    parser.add_argument("--first-address", default="127.0.0.31")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    slot_counts = [int(s) for s in args.slots.split(",")]

    state = ROOT / ".cluster" / args.name
    site = [PLAYBOOK, "-i", str(state / "inventory")]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    # The bench play loads no role: the filters the task files use, by path.
    bench_env = dict(env, ANSIBLE_FILTER_PLUGINS=f"{ROOT / 'plugins' / 'filter'}:"
                                                 f"{ROOT / 'roles' / 'train_job' / 'filter_plugins'}")
    work = ROOT / ".cache" / "bench-collect"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    variants = {"fetch": work / "collect-fetch.yml",
                "rsync": ROOT / "roles" / "train_job" / "tasks" / "collect-Linux.yml"}
    variants["fetch"].write_text(FETCH_TASKS)
    play = work / "bench.yml"
    play.write_text(BENCH_PLAY)
    defaults = yaml.safe_load((ROOT / "roles" / "cluster" / "defaults" / "main.yml").read_text())
    job_defaults = yaml.safe_load((ROOT / "roles" / "train_job" / "defaults" / "main.yml").read_text())

    run(TOOL + ["up", f"--name={args.name}", f"--first-address={args.first_address}", f"--nodes={NODES}",
                "--backend=numpy"])
    run(site + ["playbooks/preflight.yml", "playbooks/provision.yml", "playbooks/ssh.yml"], env=env)

    figures = {"nodes": NODES, "repeat": args.repeat, "cores": os.cpu_count(),
               "machine": f"{platform.node()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d %H:%M"),
               "load_before": [round(x, 1) for x in os.getloadavg()], "runs": []}
    for slots in slot_counts:
        run(site + ["playbooks/data.yml", "playbooks/train.yml", "-e", json.dumps(
            {"cluster_slots": slots, "train_job_force": True})], env=env)
        job, run_id, description = latest_run(state / "artifacts")
        run_dir = f"{defaults['cluster_jobs_dir']}/{job}/runs/{run_id}"
        ranks = NODES * slots
        entry = {"ranks": ranks, "slots_per_node": slots, "oversubscribed": ranks > os.cpu_count(),
                 "job": job, "run_id": run_id, "rc": description.get("rc"), "seconds": {}, "trees": {}}
        for repeat in range(args.repeat):
            order = list(variants) if repeat % 2 == 0 else list(reversed(variants))
            for variant in order:
                local = work / str(ranks) / f"{variant}-{repeat}"
                times = work / f"{variant}-{ranks}-{repeat}.json"
                run(site + [str(play), "-e", json.dumps({
                    "bench_tasks": str(variants[variant]), "bench_times": str(times),
                    "train_job_run_dir": run_dir, "train_job_local_dir": str(local),
                    "train_job_head": description["head"], "train_job_files": job_files.run_files("Linux"),
                    "train_job_fetch_max_mb": job_defaults["train_job_fetch_max_mb"]})], env=bench_env)
                entry["seconds"].setdefault(variant, []).append(round(json.loads(times.read_text())["seconds"], 2))
                entry["trees"].setdefault(variant, []).append(tree(local))
        trees = entry.pop("trees")
        first = trees["fetch"][0]
        entry["same_files"] = all(found == first for variant in trees for found in trees[variant])
        if not entry["same_files"] or not first:
            sys.exit(f"{ranks} ranks: the two ways brought back different files (or none): {trees}")
        logs = [name for name in first if name.startswith(job_files.LOGS_DIR + "/")]
        entry["files"] = {"logs": len(logs), "output_and_records": len(first) - len(logs)}
        # One fetch per file; one rsync per node, two more on the head node (output, records).
        entry["transfers"] = {"fetch": len(first), "rsync": NODES + 2}
        figures["runs"].append(summarized(entry))
    figures["load_after"] = [round(x, 1) for x in os.getloadavg()]

    if not args.keep:
        run(TOOL + ["down", f"--name={args.name}"])
    shutil.rmtree(work, ignore_errors=True)

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "collect.json").write_text(json.dumps(figures, indent=2) + "\n")
    text = report(figures)
    (RESULTS / "collect.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
