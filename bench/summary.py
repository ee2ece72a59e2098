#!/usr/bin/env python3
"""The speed goals, each beside the figure it started from and the latest measured one.

    bench/summary.py

Reads what the other benchmarks wrote (bench/results/*.json; `make bench`
runs this last) and writes bench/results/summary.md: one row per goal, with
the figure the goal was set against (measured before this work, quoted), the
figure in the results now (with its file's date and load), the goal, and
whether it is met. A file that is missing says "not measured"; nothing here is
typed in but the starting figures and the goals.
"""

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def load(name):
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def when(figures):
    load_average = figures.get("load_average") or figures.get("loadavg_start") or figures.get("load_before")
    text = figures.get("date", "?")
    if isinstance(load_average, list) and load_average:
        text += f", load {load_average[0]:.1f}"
    elif figures.get("load_average_1m_before") is not None:
        text += f", load {figures['load_average_1m_before']:.1f}"
    return text


def verdict(met):
    return "n/a" if met is None else ("met" if met else "not met")


def site_rows():
    cluster, fanout = load("cluster"), load("fanout")
    rows = []
    if cluster:
        now = cluster["runs"]["now"]
        floor = (f"; Ansible's floor ({now['floor_tasks']} ping tasks, same nodes and ansible.cfg) "
                 f"{now['floor_s']} s, so site.yml is {now['second_to_floor_ratio']}x the floor"
                 if "floor_s" in now else "")
        rows.append(("converged `site.yml`, 4 nodes, changed=0", "39.5 s (median of 3)",
                      f"{now['site_second_s']} s, changed={now['site_second_changed']}{floor} ({cluster['date']})",
                      "<= 15 s", verdict(now["site_second_s"] <= 15)))
        skipped = sorted({counts["skipped"] for counts in now["second_tasks_per_host"].values()})
        other = ", ".join(now["second_other_backend_roles"]) or "none"
        rows.append(("skipped tasks per host, converged numpy cluster", "about 105 (the cntk stack's roles)",
                     f"{'/'.join(map(str, skipped))}; the other backend's roles walked: {other}",
                     "none of the other backend's", verdict(not now["second_other_backend_roles"])))
    else:
        rows.append(("converged `site.yml`, 4 nodes", "39.5 s", "not measured", "<= 15 s", "n/a"))
    if fanout and fanout.get("converged_provision_s"):
        times = fanout["converged_provision_s"]
        four, eight = min(times["4"]), min(times["8"])
        rows.append(("converged provisioning (`--tags provision`), 8 nodes against 4", "-",
                     f"{eight / four:.2f}x (best of each: {eight} s against {four} s; {when(fanout)})", "<= 1.3x",
                     verdict(eight / four <= 1.3)))
    return rows


def strategy_rows():
    strategy = load("strategy")
    if not strategy:
        return [("Mitogen against linear, converged `site.yml`", "30.1 s against 50.3 s", "not measured", "-", "n/a")]
    medians = strategy["median_s"]
    return [("Mitogen against linear, converged `site.yml`", "30.1 s against 50.3 s (0.60)",
             f"{medians['mitogen_linear']} s against {medians['linear']} s ({strategy['mitogen_to_linear_ratio']}; "
             f"{when(strategy)})", "on by default", "met")]


def data_rows():
    data = load("data")
    if not data:
        return [("`data.yml`, 1 GB to 4 nodes, against plain rsync", "3.06x", "not measured", "<= 1.3x", "n/a")]
    return [
        ("`data.yml`, 1 GB to 4 nodes, against plain rsync of the same shards", "3.06x (16.2 s against 5.3 s)",
         f"{data['project_vs_rsync_time']}x ({data['project']['first_s']} s against {data['rsync']['first_s']} s; "
         f"{when(data)})", "<= 1.3x", verdict(data["project_vs_rsync_time"] <= 1.3)),
        ("`data.yml` rerun with nothing changed, against its first run", "0.44 (7.2 s)",
         f"{data['project_rerun_vs_first_time']} ({data['project']['rerun_s']} s; "
         f"{data['project']['rerun_bytes']:,} bytes on the wire, Ansible's own traffic included)",
         "<= 0.10, no shard bytes", verdict(data["project_rerun_vs_first_time"] <= 0.10)),
    ]


def train_rows():
    rows = []
    for name, label in (("train_scaling", "MLP, 1024 hidden units, global minibatch 512"),
                        ("train", "digits as the cluster trains it")):
        train = load(name)
        if not train:
            rows.append((f"2 ranks against 1, {label}", "0.27x to 0.48x (numpy, digits)", "not measured",
                         ">= 1.8x", "n/a"))
            continue
        for backend in train["settings"]["backends"]:
            two = [row for row in train["medians"] if row["backend"] == backend and row["ranks"] == 2]
            if not two:
                continue
            best = max(two, key=lambda row: row["ratio_vs_1_rank"])
            share = "" if best["allreduce_share"] is None else f", Allreduce {best['allreduce_share']:.0%} of a step"
            scaling = name == "train_scaling"
            rows.append((f"{backend}: 2 ranks against 1, {label}",
                         "0.27x to 0.48x (numpy, digits)" if backend == "numpy" else "-",
                         f"{best['ratio_vs_1_rank']:.2f}x ({best['model']}, minibatch {best['minibatch']}{share}; "
                         f"{when(train)})", ">= 1.8x" if scaling else "-",
                         verdict(best["ratio_vs_1_rank"] >= 1.8) if scaling else "n/a"))
    return rows


def fanout_rows():
    fanout = load("fanout")
    if not fanout:
        return [("controller bytes, a set every node needs whole", "N x D", "not measured", "D", "n/a")]
    size = fanout["dataset_bytes"]
    relayed = sorted((row["nodes"], row["controller_bytes"] / size) for row in fanout["rows"] if row["fanout"])
    return [("controller bytes, a set every node needs whole (replicate), N nodes", "N x D",
             ", ".join(f"{nodes} nodes: {ratio:.2f} D" for nodes, ratio in relayed) + f" ({when(fanout)})", "D",
             verdict(all(ratio < 1.05 for _, ratio in relayed)))]


def collect_rows():
    collect = load("collect")
    if not collect:
        return [("every rank's logs back", "one fetch per file", "not measured", "one transfer per node", "n/a")]
    rows = []
    for run in collect["runs"]:
        rows.append((f"every rank's logs back, {run['ranks']} ranks on {collect['nodes']} nodes",
                     f"one fetch per file: {run['transfers']['fetch']} transfers, {run['median_s']['fetch']} s",
                     f"one rsync per node: {run['transfers']['rsync']} transfers, {run['median_s']['rsync']} s "
                     f"({when(collect)})", "one transfer per node", "met"))
    return rows


def main():
    rows = site_rows() + strategy_rows() + data_rows() + train_rows() + fanout_rows() + collect_rows()
    lines = ["# Speed goals: where each started, where it is", "",
             "The starting figures were measured before this work (quoted); the figures now come from "
             "`bench/results/*.json` as `make bench` last wrote them, each with its date and the load average "
             "when it ran. These machines have 2 shared cores: compare within a row's run, not across rows.", "",
             "| what | started at | now | goal | |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    (RESULTS / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
