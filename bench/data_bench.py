#!/usr/bin/env python3
"""Distribute a synthetic CTF dataset to 4 nodes three ways, side by side, in one run.

    bench/data_bench.py [--gigabytes 1.0] [--nodes 4]

  project  playbooks/data.yml: shard on the controller, each node gets only
           its ranks' shards over rsync, verified by sha256
  copy     ansible.builtin.copy of the whole dataset to every node
  rsync    plain rsync of the same shards to the same nodes, in parallel

For each: wall time and bytes moved (bytes over loopback, read from
/proc/net/dev: every transfer here crosses lo), then the same again with
nothing changed. For data.yml also the shard bytes its rsync sent (rsync
--stats of the send task, apart from Ansible's own traffic), and, right
after each of its two runs, Ansible's floor for it (bench/ansible_floor.py:
as many `ping` tasks as a host ran, over the same nodes, same command line):
the first run less its floor is the project's own work against plain rsync,
and the rerun, which moves no shard, is bounded by its floor. Plain rsync
neither makes the shards nor checks them, so the run also times that work
done with plain tools: the data step's cutter alone (dataset_cut.shard) into a new folder, and
sha256sum of every node's shards on the nodes, all at once (as data.yml
checks what arrived). Shard + rsync + sha256sum is the same work as data.yml's
first run without Ansible.
Uses a cluster of its own (`bench`, 127.0.0.31..).
Writes bench/results/data.json and bench/results/data.md.
"""

import argparse
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import ansible_floor  # bench/, beside this script
from cluster_bench import local_cluster_tool  # bench/, beside this script
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_cut import shard
from fanout_bench import SEND_TASK, rsync_bytes

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
NAME = "bench"
STATE = ROOT / ".cluster" / NAME
INVENTORY = STATE / "inventory"
# The cluster tool, tools/ on its import path (given here, so that the bench runs without make too).
TOOL = local_cluster_tool(ROOT)
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
DATASET = "synthetic"


def loopback_bytes():
    for line in Path("/proc/net/dev").read_text().splitlines():
        if line.strip().startswith("lo:"):
            return int(line.split(":", 1)[1].split()[0])
    raise SystemExit("no loopback counters in /proc/net/dev")


def measured(cmd, **kwargs):
    """(seconds, loopback bytes, stdout) of a command that must succeed."""
    before, start = loopback_bytes(), time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, **kwargs)
    seconds, moved = time.monotonic() - start, loopback_bytes() - before
    if result.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))[:200]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return round(seconds, 1), moved, result.stdout


def measured_floor(command, output, env):
    """Ansible's floor for the data.yml run that printed `output`: (tasks, seconds, loopback bytes)."""
    tasks = ansible_floor.most_tasks(output)
    before = loopback_bytes()
    # The same hosts as data.yml's play.
    seconds, _ = ansible_floor.time_floor(command, "playbooks/data.yml", tasks, hosts="training:!windows", cwd=ROOT,
                                          env=env)
    return tasks, round(seconds, 1), loopback_bytes() - before


def send_sections(output):
    """What data.yml printed under its send task (the task that rsyncs shards from the controller)."""
    return "".join(section.split("TASK [")[0] for section in output.split(f"TASK [dataset : {SEND_TASK}")[1:])


def rerun_reading(figures):
    """What bounds the unchanged rerun, derived from its figures."""
    project = figures["project"]
    above = round(project["rerun_s"] - project["rerun_floor_s"], 1)
    if above > 0:
        rest = (f"{above} s above the floor are the rerun's own tasks' work"
                + (", not bytes: no shard moved" if project["rerun_shard_bytes"] == 0 else ""))
    else:
        rest = "the rerun took no longer than its floor (some of its tasks cost less than a ping)"
    if figures["rerun_floor_vs_first_time"] > 0.10:
        return f"the floor alone is above the 0.10 goal, so Ansible's per-task cost bounds the rerun here; {rest}"
    return f"the floor is below the 0.10 goal; {rest}"


def write_dataset(path, gigabytes):
    """Dense CTF lines of 64 features and a one-hot label, about `gigabytes` GB."""
    rng = random.Random(1)
    lines = []
    for _ in range(2000):
        features = " ".join(f"{rng.random():.4f}" for _ in range(64))
        label = ["0"] * 10
        label[rng.randrange(10)] = "1"
        lines.append(f"|features {features} |labels {' '.join(label)}\n")
    block = "".join(lines).encode()
    target = int(gigabytes * 1e9)
    with open(path, "wb") as out:
        written = 0
        while written < target:
            out.write(block)
            written += len(block)
    return written


def copy_playbook(path, source, dest):
    path.write_text(f"""---
- name: Bench - copy the whole dataset to every node
  hosts: training
  become: true
  gather_facts: false
  tasks:
    - name: Copy the dataset
      ansible.builtin.copy:
        src: {source}
        dest: {dest}
        mode: "0640"
""")


def plain_rsync(nodes, shard_dir, layout, dest):
    """One rsync per node, all at once, of exactly that node's shards."""
    key = STATE / "controller_ed25519"
    known = STATE / "known_hosts"
    ssh = f"ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={known} -i {key}"
    procs = []
    for node, address in nodes:
        files = [str(shard_dir / f"shard-{rank:05d}.ctf") for rank in layout[node]]
        procs.append(subprocess.Popen(["rsync", "--times", "--rsh", ssh, *files, f"root@{address}:{dest}/"]))
    if any(proc.wait() != 0 for proc in procs):
        sys.exit("plain rsync failed")


def timed_sharding(source, out, ranks):
    """Seconds the data step's cutter alone takes to make the shards (and their manifest) into a new folder."""
    shutil.rmtree(out, ignore_errors=True)
    start = time.monotonic()
    shard(source, ranks, out, name=DATASET)
    seconds = time.monotonic() - start
    shutil.rmtree(out, ignore_errors=True)
    return round(seconds, 1)


def timed_node_hashing(nodes, dest):
    """Seconds for sha256sum of every node's received shards, all nodes at once."""
    start = time.monotonic()
    procs = [subprocess.Popen(["docker", "exec", f"cntk-{NAME}-{node}", "sh", "-c", f"sha256sum {dest}/*"],
                              stdout=subprocess.DEVNULL) for node, _ in nodes]
    if any(proc.wait() != 0 for proc in procs):
        sys.exit("sha256sum on the nodes failed")
    return round(time.monotonic() - start, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()

    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    work = ROOT / ".cache" / "bench-data"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    source, test = work / "train.ctf", work / "test.ctf"
    size = write_dataset(source, args.gigabytes)
    write_dataset(test, 0.001)
    # A first run from scratch: the controller's shards of an earlier bench go too (else data.yml finds them
    # up to date by the source's hash and skips the sharding the plain tools' figure includes).
    shard_dir = ROOT / ".cache" / "shards" / NAME / DATASET
    shutil.rmtree(shard_dir, ignore_errors=True)

    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
    subprocess.run(TOOL + ["up", f"--name={NAME}", "--first-address=127.0.0.31", f"--nodes={args.nodes}", "--backend=numpy"],
                   check=True, capture_output=True)
    nodes = [(f"node{i + 1}", f"127.0.0.{31 + i}") for i in range(args.nodes)]
    site = [PLAYBOOK, "-i", str(INVENTORY)]
    data_vars = ["-e", json.dumps({"cluster_dataset_name": DATASET, "dataset_generate": "",
                                   "dataset_train_source": str(source), "dataset_test_source": str(test)})]
    measured(site + ["playbooks/preflight.yml", "playbooks/provision.yml", "playbooks/ssh.yml"], env=env)

    figures = {"dataset_bytes": size, "nodes": args.nodes, "slots_per_node": 2,
               "machine": f"{platform.node()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d %H:%M"),
               "load_average_at_start": os.getloadavg()[0]}
    # -v: the send task's rsync --stats, the shard bytes apart from Ansible's own traffic.
    data_command = site + ["playbooks/data.yml", "-v"] + data_vars
    project_first = measured(data_command, env=env)
    floor_first = measured_floor(data_command, project_first[2], env)
    project_again = measured(data_command, env=env)
    floor_again = measured_floor(data_command, project_again[2], env)

    layout = {node: [2 * i, 2 * i + 1] for i, (node, _) in enumerate(nodes)}
    for node, _ in nodes:
        subprocess.run(["docker", "exec", f"cntk-{NAME}-{node}", "mkdir", "-p", "/srv/bench-rsync"], check=True)
    start_bytes, start = loopback_bytes(), time.monotonic()
    plain_rsync(nodes, shard_dir, layout, "/srv/bench-rsync")
    rsync_first = (round(time.monotonic() - start, 1), loopback_bytes() - start_bytes)
    start_bytes, start = loopback_bytes(), time.monotonic()
    plain_rsync(nodes, shard_dir, layout, "/srv/bench-rsync")
    rsync_again = (round(time.monotonic() - start, 1), loopback_bytes() - start_bytes)
    # The work plain rsync leaves out, with plain tools: the shards made, and checked where they landed.
    shard_s = timed_sharding(source, work / "shards-alone", 2 * args.nodes)
    hash_s = timed_node_hashing(nodes, "/srv/bench-rsync")

    playbook = work / "copy.yml"
    copy_playbook(playbook, source, "/srv/bench-copy.ctf")
    copy_first = measured(site + [str(playbook)], env=env)
    copy_again = measured(site + [str(playbook)], env=env)

    for key, (first, again) in {"project": (project_first, project_again), "copy": (copy_first, copy_again),
                                "rsync": (rsync_first, rsync_again)}.items():
        figures[key] = {"first_s": first[0], "first_bytes": first[1], "rerun_s": again[0], "rerun_bytes": again[1]}
    for run, output, (tasks, seconds, moved) in (("first", project_first[2], floor_first),
                                                 ("rerun", project_again[2], floor_again)):
        figures["project"].update({
            f"{run}_shard_bytes": rsync_bytes(output, SEND_TASK, "sent"),
            # Nodes whose send task ran (delegated to the controller): none on a rerun with nothing changed.
            f"{run}_shard_sends": len(re.findall(r"^changed: \[", send_sections(output), flags=re.M)),
            f"{run}_floor_tasks": tasks, f"{run}_floor_s": seconds, f"{run}_floor_bytes": moved})
    project = figures["project"]
    figures["project_vs_rsync_time"] = round(project_first[0] / rsync_first[0], 2)
    figures["copy_vs_project_time"] = round(copy_first[0] / project_first[0], 2)
    figures["project_rerun_vs_first_time"] = round(project_again[0] / project_first[0], 2)
    # The bounds: what is left of the first run above Ansible's floor, against rsync; the rerun against its floor,
    # and that floor alone against the first run (the rerun cannot go below it).
    figures["project_less_floor_vs_rsync_time"] = round((project["first_s"] - project["first_floor_s"])
                                                        / rsync_first[0], 2)
    figures["project_rerun_vs_floor_time"] = round(project["rerun_s"] / project["rerun_floor_s"], 2)
    figures["rerun_floor_vs_first_time"] = round(project["rerun_floor_s"] / project["first_s"], 2)
    figures["tools"] = {"shard_s": shard_s, "rsync_s": rsync_first[0], "node_sha256_s": hash_s,
                        "total_s": round(shard_s + rsync_first[0] + hash_s, 1)}
    # The first run less its floor against the same work done with plain tools.
    figures["project_less_floor_vs_tools_time"] = round((project["first_s"] - project["first_floor_s"])
                                                        / figures["tools"]["total_s"], 2)
    figures["load_average_at_end"] = os.getloadavg()[0]

    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
    shutil.rmtree(work, ignore_errors=True)

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "data.json").write_text(json.dumps(figures, indent=2) + "\n")
    mb = 1e6
    rows = [(label, figures[key]) for label, key in (("this project (data.yml)", "project"),
                                                     ("ansible.builtin.copy, whole set to every node", "copy"),
                                                     ("plain rsync of the same shards", "rsync"))]
    table = ["| method | first run | bytes moved | rerun, nothing changed | bytes moved |",
             "| --- | --- | --- | --- | --- |"]
    table += [f"| {label} | {f['first_s']} s | {f['first_bytes'] / mb:,.0f} MB | {f['rerun_s']} s | "
              f"{f['rerun_bytes'] / mb:,.1f} MB |" for label, f in rows]
    table.append(f"| Ansible's floor beside each data.yml run: {project['first_floor_tasks']} / "
                 f"{project['rerun_floor_tasks']} `ping` tasks | {project['first_floor_s']} s | "
                 f"{project['first_floor_bytes'] / mb:,.1f} MB | {project['rerun_floor_s']} s | "
                 f"{project['rerun_floor_bytes'] / mb:,.1f} MB |")
    text = (f"# Dataset distribution, {size / 1e9:.2f} GB to {args.nodes} nodes (2 ranks each)\n\n"
            f"{figures['machine']}, {figures['date']}, load average {figures['load_average_at_start']:.1f} at the "
            f"start and {figures['load_average_at_end']:.1f} at the end. Bytes moved: loopback bytes during the "
            f"step (SSH and Ansible's own traffic included, and any other work's on this machine's loopback). "
            f"Ansible's floor (bench/ansible_floor.py): as many `ping` tasks as a host ran (ok) in the data.yml run "
            f"just before it, over the same nodes with the same command line and ansible.cfg.\n\n"
            + "\n".join(table) + "\n\n"
            f"- this project / plain rsync, time: {figures['project_vs_rsync_time']}x (goal: at most 1.3x); "
            f"less Ansible's floor ({project['first_s']} - {project['first_floor_s']} s), "
            f"{figures['project_less_floor_vs_rsync_time']}x: the project's own work (sharding on the controller, "
            f"sha256 on both ends) against plain rsync of shards already made\n"
            f"- the same work with plain tools, in the same run: the cutter (dataset_cut.shard) alone "
            f"{figures['tools']['shard_s']} s + plain rsync {figures['tools']['rsync_s']} s + sha256sum on the nodes, "
            f"all at once, {figures['tools']['node_sha256_s']} s = {figures['tools']['total_s']} s; data.yml less its "
            f"floor is {figures['project_less_floor_vs_tools_time']}x that\n"
            f"- copy-to-every-node / this project, time: {figures['copy_vs_project_time']}x (goal: at least 3x)\n"
            f"- this project's rerun / first run, time: {figures['project_rerun_vs_first_time']} (goal: under 0.10); "
            f"the rerun is {figures['project_rerun_vs_floor_time']}x its floor, and the floor alone is "
            f"{figures['rerun_floor_vs_first_time']} of the first run: {rerun_reading(figures)}\n"
            f"- shard bytes data.yml's rsync sent (rsync --stats, `Total bytes sent` of the send task): first run "
            f"{project['first_shard_bytes'] / mb:,.1f} MB to {project['first_shard_sends']} nodes, rerun "
            f"{project['rerun_shard_bytes']:,} bytes ({project['rerun_shard_sends']} nodes sent to)\n")
    (RESULTS / "data.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
