#!/usr/bin/env python3
"""The speed goals, each beside the figure it started from and the latest measured one.

    bench/summary.py

Reads what the other benchmarks wrote (bench/results/*.json; `make bench`
runs this last) and writes bench/results/summary.md and the figures section of
bench/README.md (between its two marker lines; tests/unit/bench checks the
committed README is what the committed results render): one row per goal, with
the figure the goal was set against (measured before this work, quoted), the
figure in the results now (with its file's date and load), the goal, whether
it is met, and for a goal not met what bounds it: the measured figure beside
it in the same run that the goal cannot beat on this machine (Ansible's floor:
as many `ping` tasks over the same nodes, bench/ansible_floor.py; for the
training ranks, as many independent copies of the 1-rank job without MPI). A
file that is missing says "not measured"; nothing here is typed in but the
starting figures and the goals.
"""

import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
# The goals (issue 13).
SITE_GOAL_S = 15
PROVISION_GROWTH_GOAL = 1.3
DATA_VS_RSYNC_GOAL = 1.3
RERUN_VS_FIRST_GOAL = 0.10
TWO_RANKS_GOAL = 1.8


def load(name):
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def when(figures):
    load_average = figures.get("load_average") or figures.get("loadavg_start") or figures.get("load_before")
    text = figures.get("date", "?")
    if isinstance(load_average, list) and load_average:
        text += f", load {load_average[0]:.1f}"
    elif figures.get("load_average_at_start") is not None:
        # data_bench: the 1-minute figure at its start and end.
        text += f", load {figures['load_average_at_start']:.1f}"
        if figures.get("load_average_at_end") is not None:
            text += f" to {figures['load_average_at_end']:.1f}"
    elif figures.get("load_average_1m_before") is not None:
        text += f", load {figures['load_average_1m_before']:.1f}"
    return text


def verdict(met):
    return "n/a" if met is None else ("met" if met else "not met")


def above_or_below(value, goal):
    return "above" if value > goal else "within"


def site_rows():
    cluster, fanout = load("cluster"), load("fanout")
    rows = []
    if cluster:
        now = cluster["runs"]["now"]
        met = now["site_second_s"] <= SITE_GOAL_S
        bound = "not measured"
        if "floor_s" in now:
            bound = (f"Ansible's floor: {now['floor_tasks']} `ping` tasks (as many as a host ran) over the same nodes "
                     f"and ansible.cfg, {now['floor_s']} s, {above_or_below(now['floor_s'], SITE_GOAL_S)} "
                     f"the goal; site.yml is {now['second_to_floor_ratio']}x it")
        rows.append(("converged `site.yml`, 4 nodes, changed=0", "39.5 s (median of 3)",
                     f"{now['site_second_s']} s, changed={now['site_second_changed']} ({cluster['date']})",
                     f"<= {SITE_GOAL_S} s", verdict(met), "-" if met else bound))
        skipped = sorted({counts["skipped"] for counts in now["second_tasks_per_host"].values()})
        other = ", ".join(now["second_other_backend_roles"]) or "none"
        rows.append(("skipped tasks per host, converged numpy cluster", "about 105 (the cntk stack's roles)",
                     f"{'/'.join(map(str, skipped))}; the other backend's roles walked: {other}",
                     "none of the other backend's", verdict(not now["second_other_backend_roles"]), "-"))
    else:
        rows.append(("converged `site.yml`, 4 nodes", "39.5 s", "not measured", f"<= {SITE_GOAL_S} s", "n/a", "-"))
    if fanout and fanout.get("converged_provision_s"):
        times = fanout["converged_provision_s"]
        half, full = sorted(times, key=int)
        best_half, best_full = min(times[half]), min(times[full])
        growth = best_full / best_half
        met = growth <= PROVISION_GROWTH_GOAL
        bound = "not measured"
        if fanout.get("converged_provision_floor_s"):
            floors = fanout["converged_provision_floor_s"]
            floor_growth = min(floors[full]) / min(floors[half])
            tasks = "/".join(map(str, sorted(set(sum(fanout["converged_provision_floor_tasks"].values(), [])))))
            bound = (f"Ansible's floor alone ({tasks} `ping` tasks, as many as a host ran, same --limit): "
                     f"{full}/{half} = {floor_growth:.2f}x on this controller ({min(floors[full])} s against "
                     f"{min(floors[half])} s), {above_or_below(floor_growth, PROVISION_GROWTH_GOAL)} the goal")
            # Two runs of the same thing in this run, slowest over fastest: other work's share of the figures.
            spread = max(max(runs) / min(runs) for runs in list(times.values()) + list(floors.values()))
            if spread > PROVISION_GROWTH_GOAL:
                bound += (f"; but two runs of the same thing differed by up to {spread:.2f}x, more than the goal's "
                          f"{PROVISION_GROWTH_GOAL}x: both ratios are within this run's noise")
        rows.append((f"converged provisioning (`--tags provision`), {full} nodes against {half}", "-",
                     f"{growth:.2f}x (best of each: {best_full} s against {best_half} s; {when(fanout)})",
                     f"<= {PROVISION_GROWTH_GOAL}x", verdict(met), "-" if met else bound))
    return rows


def strategy_rows():
    strategy = load("strategy")
    if not strategy:
        return [("Mitogen against linear, converged `site.yml`", "30.1 s against 50.3 s", "not measured", "-", "n/a",
                 "-")]
    medians = strategy["median_s"]
    # Mitogen's own plugin, CPU pinning on, beside the project's shim (pinning off), where the run measured it.
    pinned = (f"; Mitogen's own plugin, pinning on: {medians['mitogen_linear_pinned']} s"
              if "mitogen_linear_pinned" in medians else "")
    return [("Mitogen against linear, converged `site.yml`", "30.1 s against 50.3 s (0.60)",
             f"{medians['mitogen_linear']} s against {medians['linear']} s ({strategy['mitogen_to_linear_ratio']}"
             f"{pinned}; {when(strategy)})", "on by default", "met", "-")]


def data_rows():
    data = load("data")
    if not data:
        return [("`data.yml`, 1 GB to 4 nodes, against plain rsync", "3.06x", "not measured",
                 f"<= {DATA_VS_RSYNC_GOAL}x", "n/a", "-")]
    project = data["project"]
    first_met = data["project_vs_rsync_time"] <= DATA_VS_RSYNC_GOAL
    first_bound = rerun_bound = "not measured"
    if "first_floor_s" in project:
        less_floor = data["project_less_floor_vs_rsync_time"]
        first_bound = (f"Ansible's floor for its tasks ({project['first_floor_tasks']} `ping` tasks, as many as a "
                       f"host ran, same nodes): {project['first_floor_s']} s; data.yml less it "
                       f"{round(project['first_s'] - project['first_floor_s'], 1)} s = {less_floor}x rsync, "
                       f"{above_or_below(less_floor, DATA_VS_RSYNC_GOAL)} the goal")
        tools = data.get("tools")
        if tools:
            # rsync alone neither makes nor checks the shards: the same work with plain tools, same run.
            first_bound += (f"; rsync does not make or check the shards: the cutter alone {tools['shard_s']} s "
                            f"+ rsync {tools['rsync_s']} s + sha256sum on the nodes {tools['node_sha256_s']} s = "
                            f"{tools['total_s']} s, and data.yml less its floor is "
                            f"{data['project_less_floor_vs_tools_time']}x that")
        floor_share = data["rerun_floor_vs_first_time"]
        rerun_bound = (f"its floor ({project['rerun_floor_tasks']} `ping` tasks, same nodes): "
                       f"{project['rerun_floor_s']} s = {floor_share} of the first run, "
                       f"{above_or_below(floor_share, RERUN_VS_FIRST_GOAL)} the goal; the rerun is "
                       f"{data['project_rerun_vs_floor_time']}x its floor; shard bytes sent (rsync --stats): "
                       f"{project['rerun_shard_bytes']:,}")
    shard_bytes = project.get("rerun_shard_bytes")
    rerun_met = data["project_rerun_vs_first_time"] <= RERUN_VS_FIRST_GOAL and not shard_bytes
    return [
        ("`data.yml`, 1 GB to 4 nodes, against plain rsync of the same shards", "3.06x (16.2 s against 5.3 s)",
         f"{data['project_vs_rsync_time']}x ({project['first_s']} s against {data['rsync']['first_s']} s; "
         f"{when(data)})", f"<= {DATA_VS_RSYNC_GOAL}x", verdict(first_met), "-" if first_met else first_bound),
        ("`data.yml` rerun with nothing changed, against its first run", "0.44 (7.2 s)",
         f"{data['project_rerun_vs_first_time']} ({project['rerun_s']} s; "
         f"{project['rerun_bytes']:,} loopback bytes, Ansible's own traffic included"
         + ("" if shard_bytes is None else f"; {shard_bytes:,} shard bytes") + ")",
         f"<= {RERUN_VS_FIRST_GOAL:.2f}, no shard bytes", verdict(rerun_met), "-" if rerun_met else rerun_bound),
    ]


def train_rows():
    rows = []
    for name, label in (("train_scaling", "MLP, 1024 hidden units, global minibatch 512"),
                        ("train", "digits as the cluster trains it")):
        train = load(name)
        if not train:
            rows.append((f"2 ranks against 1, {label}", "0.27x to 0.48x (numpy, digits)", "not measured",
                         f">= {TWO_RANKS_GOAL}x", "n/a", "-"))
            continue
        for backend in train["settings"]["backends"]:
            two = [row for row in train["medians"] if row["backend"] == backend and row["ranks"] == 2]
            if not two:
                continue
            best = max(two, key=lambda row: row["ratio_vs_1_rank"])
            share = "" if best["allreduce_share"] is None else f", Allreduce {best['allreduce_share']:.0%} of a step"
            scaling = name == "train_scaling"
            met = best["ratio_vs_1_rank"] >= TWO_RANKS_GOAL
            rows.append((f"{backend}: 2 ranks against 1, {label}",
                         "0.27x to 0.48x (numpy, digits)" if backend == "numpy" else "-",
                         f"{best['ratio_vs_1_rank']:.2f}x ({best['model']}, minibatch {best['minibatch']}{share}; "
                         f"{when(train)})", f">= {TWO_RANKS_GOAL}x" if scaling else "-",
                         verdict(met) if scaling else "n/a",
                         ceiling_bound(train, best) if scaling and not met else "-"))
    return rows


def ceiling_bound(train, best):
    """The machine's ceiling for the best 2-rank row: 2 independent copies of the 1-rank job, no MPI."""
    ceiling = next((c for c in train.get("ceilings") or []
                    if (c["backend"], c["model"], c["minibatch"], c["copies"])
                    == (best["backend"], best["model"], best["minibatch"], best["ranks"])), None)
    if ceiling is None:
        return "not measured"
    reading = ("the cores, not MPI, are the bound" if ceiling["bound"] == "cores"
               else "MPI and the ranks' synchronisation cost the rest")
    together = ceiling["loops_together_share"]
    side = "below" if ceiling["ceiling_vs_1_rank"] < TWO_RANKS_GOAL else "at or above"
    return (f"{ceiling['copies']} independent copies of the 1-rank job at once, without MPI (the machine's "
            f"ceiling): {ceiling['ceiling_vs_1_rank']:.2f}x, {side} the goal; {best['ranks']} ranks reach "
            f"{ceiling['ranks_share_of_ceiling']:.0%} of it: {reading}"
            + ("" if together is None else f" (the copies' loops ran together {together:.0%} of the time)")
            + gap_split(train, ceiling))


def gap_split(train, ceiling):
    """Where the ranks' gap to the ceiling goes, and what the overlapped Allreduce hid (train_bench's figures)."""
    text = ""
    if ceiling.get("local_ceiling_vs_1_rank") is not None:
        text += (f"; the copies at the ranks' local minibatch: {ceiling['local_ceiling_vs_1_rank']:.2f}x"
                 + ("" if ceiling.get("ranks_without_allreduce") is None else
                    f", the ranks with their Allreduce taken out: {ceiling['ranks_without_allreduce']:.2f}x "
                    "(the rest of the gap: the ranks' steps beside the Allreduce, slower than the copies')"))
    overlap = next((o for o in train.get("overlap") or []
                    if (o["model"], o["minibatch"], o["ranks"])
                    == (ceiling["model"], ceiling["minibatch"], ceiling["copies"])), None)
    if overlap and ceiling["backend"] == "numpy":
        text += (f"; the overlapped Allreduce: {overlap['overlap_allreduce_share']:.0%} of a step exposed against "
                 f"{overlap['blocking_allreduce_share']:.0%} blocking, {overlap['overlap_vs_blocking']:.2f}x the "
                 "blocking samples/s")
    return text


def fanout_rows():
    fanout = load("fanout")
    if not fanout:
        return [("controller bytes, a set every node needs whole", "N x D", "not measured", "D", "n/a", "-")]
    size = fanout["dataset_bytes"]
    relayed = sorted((row["nodes"], row["controller_bytes"] / size) for row in fanout["rows"] if row["fanout"])
    if not relayed:
        # A fanout run stopped before its data rows.
        return [("controller bytes, a set every node needs whole", "N x D", "not measured", "D", "n/a", "-")]
    return [("controller bytes, a set every node needs whole (replicate), N nodes", "N x D",
             ", ".join(f"{nodes} nodes: {ratio:.2f} D" for nodes, ratio in relayed) + f" ({when(fanout)})", "D",
             verdict(all(ratio < 1.05 for _, ratio in relayed)), "-")]


def collect_rows():
    collect = load("collect")
    if not collect:
        return [("every rank's logs back", "one fetch per file", "not measured", "one transfer per node", "n/a",
                 "-")]
    rows = []
    for run in collect["runs"]:
        rows.append((f"every rank's logs back, {run['ranks']} ranks on {collect['nodes']} nodes",
                     f"one fetch per file: {run['transfers']['fetch']} transfers, {run['median_s']['fetch']} s",
                     f"one rsync per node: {run['transfers']['rsync']} transfers, {run['median_s']['rsync']} s "
                     f"({when(collect)})", "one transfer per node", "met", "-"))
    return rows


README = RESULTS.parent / "README.md"
BEGIN = "<!-- BEGIN generated: figures (bench/summary.py, from bench/results/*.json) -->"
END = "<!-- END generated: figures -->"


def rows():
    return site_rows() + strategy_rows() + data_rows() + train_rows() + fanout_rows() + collect_rows()


def table(goal_rows):
    lines = ["| what | started at | now | goal | | what bounds it |", "| --- | --- | --- | --- | --- | --- |"]
    return lines + [f"| {' | '.join(row)} |" for row in goal_rows]


def render_summary(goal_rows):
    lines = ["# Speed goals: where each started, where it is", "",
             "The starting figures were measured before this work (quoted); the figures now come from "
             "`bench/results/*.json` as `make bench` last wrote them, each with its date and the load average "
             "when it ran. These machines have 2 shared cores: compare within a row's run, not across rows. "
             "\"What bounds it\", for a goal not met: a figure measured in the same run as the one it bounds, "
             "Ansible's floor (as many `ping` tasks as a host ran, over the same nodes with the same command line and "
             "ansible.cfg: Ansible's own per-task cost, bench/ansible_floor.py), or for the training ranks the "
             "machine's ceiling (as many independent copies of the 1-rank job at once, each on its own core, without "
             "MPI); a goal beyond its bound cannot be met on this machine by changing the project's tasks.", ""]
    return "\n".join(lines + table(goal_rows)) + "\n"


def scale_model():
    """The scale model's inputs and its estimates (README: t_site(N) = T * N * c / C when the controller bounds it)."""
    cluster = load("cluster")
    if not cluster or "floor_tasks" not in cluster["runs"]["now"]:
        return ["Scale model: `results/cluster.json` not measured."]
    now = cluster["runs"]["now"]
    cores = int(re.search(r"(\d+) cores", cluster.get("machine", "2 cores")).group(1))
    tasks, nodes = now["floor_tasks"], cluster["nodes"]
    per_task = now["site_second_s"] * cores / (nodes * tasks)
    floor_per_task = now["floor_s"] * cores / (nodes * tasks)
    lines = [f"Scale model inputs (`results/cluster.md`, {when(cluster)}): T = {tasks} tasks, the converged "
             f"`site.yml` {now['site_second_s']} s on N = {nodes} nodes and C = {cores} cores, so c ≈ "
             f"{per_task:.2f} CPU-seconds per host-task (an upper bound: the nodes share those cores); Ansible's "
             f"floor ({tasks} pings) {now['floor_s']} s, c ≈ {floor_per_task:.2f}.", "",
             "| N | controller | converged site.yml (model: T · N · c / C) |", "| ---: | --- | ---: |"]
    for size, controller_cores, label in ((64, cores, f"{cores} cores"), (64, 32, "32 cores, forks 64"),
                                           (512, 32, "32 cores, forks 64")):
        lines.append(f"| {size} | {label} | ≈ {tasks * size * per_task / controller_cores:.0f} s |")
    return lines


def render_figures(goal_rows):
    """bench/README.md's generated block: the goals table and each result file's date and load."""
    files = sorted(path.stem for path in RESULTS.glob("*.json"))
    runs = []
    for name in files:
        figures = load(name)
        runs.append(f"- `results/{name}.md` ({when(figures) if isinstance(figures, dict) else '?'})")
    lines = [BEGIN, "",
             "Rendered by `bench/summary.py` from the committed `results/*.json` (the same table as "
             "`results/summary.md`); each result file's own page has every figure and how it was measured.", ""]
    lines += table(goal_rows) + [""] + scale_model() + ["", "Result files (date, load at the start):", ""] + runs
    lines += ["", END]
    return "\n".join(lines)


def render_readme(text, goal_rows):
    """bench/README.md with its generated block replaced."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + render_figures(goal_rows) + tail


def main():
    goal_rows = rows()
    summary = render_summary(goal_rows)
    (RESULTS / "summary.md").write_text(summary)
    README.write_text(render_readme(README.read_text(), goal_rows))
    print(summary, end="")


if __name__ == "__main__":
    main()
