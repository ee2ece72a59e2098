#!/usr/bin/env python3
"""The project's shared filesystem against what it replaces, on one cluster in one run.

    bench/storage_bench.py [--megabytes 200] [--repeat 2] [--keep]

One netns cluster of its own (`storageb`: 4 nodes, real CNTK, `--storage glusterfs`: a replica-4 GlusterFS volume
over the fabric NICs at /cluster), converged once (site.yml without the train step). Then, alternating which goes
first in each round:

  data    a replicated data set of --megabytes MB (dataset_layout: replicate) into empty folders by
          playbooks/data.yml: relayed, each node its own copy on its own disk (cluster_shared_storage: none for
          the data step alone, dataset_fanout: true), against the volume (the head node receives it once and
          GlusterFS writes every brick). Wall time, the bytes the controller's rsync sent, and the bytes every
          node's NICs sent (fab0 and mgmt0 tx counters, summed over the nodes).
  resume  a real CNTK job (8 ranks) killed at a rank (SIGKILL on node3) after its checkpoints, then train.yml
          again, which resumes it: with the checkpoints on the volume (the default with shared storage) against
          each node's own folder (train_job_shared_checkpoint_root empty), where rank 0's checkpoint is copied to
          every node before the resume. Time from ansible-playbook's start to the resumed run's first progress
          line, and the whole train.yml.

Taken down at the end unless --keep. Writes bench/results/storage.json and bench/results/storage.md.
"""

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from cluster_bench import local_cluster_tool  # bench/, beside this script
from fanout_bench import SEND_TASK, rsync_bytes, write_dataset  # bench/, beside this script
from slurm_bench import check, env  # bench/, beside this script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
NAME = "storageb"
STATE = ROOT / ".cluster" / NAME
INVENTORY = STATE / "inventory"
ARTIFACTS = STATE / "artifacts"
TOOL = local_cluster_tool(ROOT)
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
NODES = [f"node{i}" for i in range(1, 5)]
DATASET = "storbench"
# The resume's job: three checkpoints written by step 60, then killed.
JOB_ARGS = {"model": "mlp", "hidden": 256, "epochs": 10, "minibatch": 64, "lr": 0.2, "seed": 1,
            "progress-every": 10, "checkpoint-every": 20}
STEP = re.compile(r"\| step (\d+) \|")
COPY_TASK = "Give every node rank 0's checkpoint"


def on_node(node, command):
    return check(["docker", "exec", f"cntk-{NAME}-{node}", "sh", "-c", command], timeout=120)


def nic_tx_bytes():
    """Bytes sent so far by every node's fabric and management NICs, summed."""
    return sum(int(on_node(node, "cat /sys/class/net/fab0/statistics/tx_bytes /sys/class/net/mgmt0/statistics/"
                                 "tx_bytes").split()[i]) for node in NODES for i in (0, 1))


def data_run(where, source):
    """playbooks/data.yml of the replicated set into empty folders, on each node's disk or on the volume."""
    folder = f"/srv/cntk/data/{DATASET}" if where == "relay" else f"/cluster/data/{DATASET}"
    for node in NODES if where == "relay" else NODES[:1]:
        on_node(node, f"rm -rf {folder}")
    data_vars = {"cluster_dataset_name": DATASET, "dataset_generate": "", "dataset_layout": "replicate",
                 "dataset_train_source": str(source), "dataset_test_source": "", "dataset_fanout": True}
    if where == "relay":
        data_vars["cluster_shared_storage"] = "none"
    before = nic_tx_bytes()
    started = time.monotonic()
    output = check([PLAYBOOK, "-i", str(INVENTORY), "playbooks/data.yml", "-v", "-e", json.dumps(data_vars)],
                   timeout=1800)
    seconds = time.monotonic() - started
    sent = nic_tx_bytes() - before
    held = [int(on_node(node, f"du -sb {folder} | cut -f1")) for node in NODES]
    return {"seconds": round(seconds, 1), "controller_bytes": rsync_bytes(output, SEND_TASK, "sent"),
            "nodes_sent_bytes": sent, "node_folder_bytes": held}


def killed_run(extra, job):
    """train.yml until three checkpoints are written, then SIGKILL a rank on node3; the run must fail."""
    cmd = [PLAYBOOK, "-i", str(INVENTORY), "playbooks/train.yml", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env(),
                            start_new_session=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        match = STEP.search(line)
        if match and int(match.group(1)) >= 60:
            break
    else:
        raise SystemExit(f"{job}: no step 60 before train.yml ended:\n{''.join(seen[-60:])}")
    on_node("node3", "pkill -9 -o -f train.py")
    proc.communicate(timeout=600)
    if proc.returncode == 0:
        raise SystemExit(f"{job}: the run ended well although a rank was killed")


def resume_run(checkpoints):
    """A killed job's train.yml again, timed: it resumes from rank 0's checkpoint."""
    job = f"bench-resume-{checkpoints}"
    extra = ["-e", f"train_job_name={job}", "-e", json.dumps({"train_job_args": JOB_ARGS})]
    if checkpoints == "node":
        extra += ["-e", "train_job_shared_checkpoint_root="]
    # Each round starts from a fresh run of its own (forced: the last round's run ended well), killed.
    killed_run(extra + ["-e", "train_job_fresh=true", "-e", "train_job_force=true"], job)
    # Forced again: without it the last round's run, same inputs and finished, is up to date and nothing runs.
    cmd = [PLAYBOOK, "-i", str(INVENTORY), "playbooks/train.yml", *extra, "-e", "train_job_force=true"]
    started = time.monotonic()
    first = None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env())
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if first is None and STEP.search(line):
            first = time.monotonic() - started
    proc.wait()
    total = time.monotonic() - started
    run = ARTIFACTS / job / "latest"
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else {}
    if proc.returncode != 0 or first is None or not summary.get("resumed"):
        raise SystemExit(f"{job}: the resume failed, showed no progress or did not resume:\n{''.join(lines[-80:])}")
    folder = json.loads((run / "job.json").read_text())["job_env"]["JOB_CHECKPOINT_DIR"]
    return {"to_first_step_s": round(first, 2), "train_yml_s": round(total, 2), "checkpoint_dir": folder,
            "resumed_at_step": summary["resumed_at_step"], "test_accuracy": summary["test_accuracy"],
            "checkpoint_bytes": int(on_node("node1", f"cat {folder}/trainer.ckpt* | wc -c")),
            "copied": ran_on_head("".join(lines), COPY_TASK)}


def ran_on_head(output, task):
    """Whether the task ran on node1 (the head node) rather than being skipped there."""
    sections = output.split(f"TASK [train_job : {task}")[1:]
    return any(re.search(r"^(ok|changed): \[node1\]", section.split("TASK [")[0], re.M) for section in sections)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=200)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    began = time.monotonic()
    load = [round(x, 1) for x in os.getloadavg()]
    work = ROOT / ".cache" / "bench-storage"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    size = write_dataset(work / "train.ctf", args.megabytes)
    check(TOOL + ["up", f"--name={NAME}", "--nodes=4", "--backend=cntk", "--network=netns", "--storage=glusterfs"],
          timeout=3600)
    data = {"relay": [], "volume": []}
    resume = {"shared": [], "node": []}
    try:
        check([PLAYBOOK, "-i", str(INVENTORY), "site.yml", "--skip-tags", "train"], timeout=3600)
        for index in range(args.repeat):
            for where in (("relay", "volume") if index % 2 == 0 else ("volume", "relay")):
                data[where].append(data_run(where, work / "train.ctf"))
                print("data", where, data[where][-1], flush=True)
        for index in range(args.repeat):
            for checkpoints in (("shared", "node") if index % 2 == 0 else ("node", "shared")):
                resume[checkpoints].append(resume_run(checkpoints))
                print("resume", checkpoints, resume[checkpoints][-1], flush=True)
    finally:
        if not args.keep:
            subprocess.run(TOOL + ["down", f"--name={NAME}"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    figures = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": platform.node(),
        "cpus": os.cpu_count(), "load_average": load, "load_average_end": [round(x, 1) for x in os.getloadavg()],
        "dataset_bytes": size, "repeat": args.repeat, "job_args": JOB_ARGS, "data": data, "resume": resume,
        "median": {
            "data_s": {w: statistics.median(r["seconds"] for r in data[w]) for w in data},
            "to_first_step_s": {c: statistics.median(r["to_first_step_s"] for r in resume[c]) for c in resume},
            "train_yml_s": {c: statistics.median(r["train_yml_s"] for r in resume[c]) for c in resume}},
        "seconds": round(time.monotonic() - began, 1),
    }
    median = figures["median"]
    figures["ratio"] = {"data_volume_to_relay": round(median["data_s"]["volume"] / median["data_s"]["relay"], 2),
                        "resume_first_step_shared_to_node": round(
                            median["to_first_step_s"]["shared"] / median["to_first_step_s"]["node"], 2),
                        "resume_train_yml_shared_to_node": round(
                            median["train_yml_s"]["shared"] / median["train_yml_s"]["node"], 2)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "storage.json").write_text(json.dumps(figures, indent=2) + "\n")
    text = report(figures)
    (RESULTS / "storage.md").write_text(text)
    print(text)
    return 0


def report(figures):
    size = figures["dataset_bytes"]
    median, ratio = figures["median"], figures["ratio"]
    data_rows = ["| where the data goes | data.yml (s), each run | controller sent | the nodes' NICs sent | "
                 "held per node |", "| --- | --- | ---: | ---: | --- |"]
    labels = {"relay": "each node's disk, relayed (fanout)", "volume": "the GlusterFS volume (replica 4)"}
    for where in ("relay", "volume"):
        runs = figures["data"][where]
        last = runs[-1]
        data_rows.append(f"| {labels[where]} | {', '.join(str(r['seconds']) for r in runs)} | "
                         f"{last['controller_bytes'] / size:.2f} D | {last['nodes_sent_bytes'] / size:.2f} D | "
                         f"{', '.join(f'{b / size:.2f}' for b in last['node_folder_bytes'])} D |")
    resume_rows = ["| checkpoints | start to first step (s), each run | whole train.yml (s), each run | "
                   "copied first | checkpoint |", "| --- | --- | --- | --- | ---: |"]
    labels = {"shared": "on the volume", "node": "each node's own folder"}
    for where in ("shared", "node"):
        runs = figures["resume"][where]
        resume_rows.append(f"| {labels[where]} (`{runs[-1]['checkpoint_dir']}`) | "
                           f"{', '.join(str(r['to_first_step_s']) for r in runs)} | "
                           f"{', '.join(str(r['train_yml_s']) for r in runs)} | "
                           f"{'yes' if runs[-1]['copied'] else 'no'} | {runs[-1]['checkpoint_bytes'] / 1e6:.2f} MB |")
    return "\n".join([
        "# Shared storage against what it replaces",
        "",
        f"{figures['date']}, {figures['host']}, {figures['cpus']} cores, load {figures['load_average']} at the start, "
        f"{figures['load_average_end']} at the end; `bench/storage_bench.py` took {figures['seconds']:.0f} s. "
        "One cluster: 4 netns nodes with real CNTK and a replica-4 GlusterFS volume over their fabric NICs, "
        f"{figures['repeat']} runs of each, alternating which goes first. Every node shares this machine's cores "
        "and its bridges, so the times show the work, not a network's bandwidth.",
        "",
        f"## A replicated data set, D = {size / 1e6:,.0f} MB, to 4 nodes",
        "",
        *data_rows,
        "",
        f"The volume / the relay, of the medians: {ratio['data_volume_to_relay']:.2f}x. Bytes of the last run "
        "of each: rsync's `Total bytes sent` by the controller's task; the nodes' NICs, the fab0 and mgmt0 tx "
        "counters summed over the nodes (the relay's node-to-node rsyncs; GlusterFS's client writing each brick, "
        "the head node's own included, and its replies). Held per node: `du -sb` of the data folder as each "
        "node sees it (through the mount on the volume, where the bricks hold one copy each).",
        "",
        "## A killed job's resume",
        "",
        f"Real CNTK, 8 ranks, `{json.dumps(figures['job_args'])}`: a rank SIGKILLed on node3 after step 60, then "
        "`train.yml` again, which resumes from rank 0's last checkpoint.",
        "",
        *resume_rows,
        "",
        f"Shared / own folders, of the medians: start to first step {ratio['resume_first_step_shared_to_node']:.2f}x "
        f"({median['to_first_step_s']['shared']:.1f} s against {median['to_first_step_s']['node']:.1f} s); the "
        f"whole train.yml {ratio['resume_train_yml_shared_to_node']:.2f}x ({median['train_yml_s']['shared']:.1f} s "
        f"against {median['train_yml_s']['node']:.1f} s).",
        "",
    ])


if __name__ == "__main__":
    sys.exit(main())
