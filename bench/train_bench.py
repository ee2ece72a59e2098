#!/usr/bin/env python3
"""Measure training throughput of both backends side by side, in one run.

    bench/train_bench.py [--repeat 3] [--epochs 20] [--backends numpy,cntk]
                         [--ranks 1,2,4,8] [--models softmax,mlp] [--minibatches 64,512]
                         [--hidden 64] [--name train]

`make bench` runs it twice: the digits job as the cluster trains it (--name
train), and a workload whose compute per step dominates the Allreduce (--name
train_scaling: an MLP with 1024 hidden units, global minibatch 512), which is
the one that says how the cluster's ranks scale.

Writes scikit-learn's digits as CTF (training/make_digits.py) into a temporary
directory, splits train.ctf into 1, 2, 4 and 8 shards (the data step's cutter, plugins/module_utils/dataset_cut.py)
and runs `mpirun -np W training/train.py --backend B` for every configuration:

    backend in (numpy, cntk) x model in (softmax, mlp)
        x global minibatch in (64, 512) x ranks in (1, 2, 4, 8)

Both backends train the same job: the same shards, model, global minibatch,
lr 0.1, epochs and seed. numpy runs on the project venv's Python with mpi4py;
cntk on the REAL cntk 2.7 CPU wheel in a venv of pyenv's CPython 3.6.15, with
the distribution's Open MPI 4 presented under Open MPI 1.10's sonames (a
stand-in: tests/training/cntk_env.py builds both once into .cache/). Every
rank gets one OpenMP/MKL/BLAS thread; ranks beyond the machine's cores are
oversubscribed (mpirun --oversubscribe) and labelled so. Each configuration
runs --repeat times, interleaved (every configuration once, then again, ...)
so that background load spreads over all of them. From each run's
summary.json it reads samples_per_sec (the training loop only, not mpirun or
CNTK start-up), allreduce_share (numpy only), test_accuracy and seconds; it
reports the median per configuration, the W-rank/1-rank throughput ratio of
each backend (ratio of the medians; the per-repeat paired ratios are kept in
the JSON) and cntk/numpy. The figures are relative, measured in one run on one
machine, not absolute claims.

The machine's ceiling for W ranks (each W of --ranks with 1 < W <= cores),
in the same interleaved rounds: W independent copies of the 1-rank job at
once, each its own `mpirun -np 1` on its own core (as mpirun places the W
ranks: rank i on core i), with no communication between them and the same
data, arguments and one-thread env. The sum of their samples/s over the
1-rank samples/s of the same round (median over rounds) is what W cores give
this job with no MPI at all; W ranks near it are bound by the cores, W ranks
well below it by MPI and the ranks' synchronisation. Each copy's log dates
its training loop, so the JSON keeps how long all W loops ran together. The
copies run twice: at the global minibatch (the 1-rank job as it is), and at
the W ranks' local minibatch (global / W, the rows each rank computes a
step), so that the W ranks' gap to the ceiling splits into the smaller
local batch, the Allreduce (numpy: its exposed share of the step) and the
rest (the ranks' steps beside the Allreduce, which rank 0 times with its waits for the slower rank).

The numpy backend's W-rank rows run twice too: --allreduce overlap (the
default: the output layer's gradient goes out in a non-blocking Allreduce
while the hidden layer's is computed) and --allreduce blocking, in the same
rounds, so the table says how much of the Allreduce the overlap hid.

Writes bench/results/<name>.json (every run, the medians, the machine, the
date) and bench/results/<name>.md (the tables and what they mean).
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# tests/training/ on PYTHONPATH (the Makefile's bench target), the collection through .collections/.
import cntk_env
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_cut import shard

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

PYTHON = sys.executable
MPIRUN = shutil.which("mpirun") or "/usr/bin/mpirun"
MPI_FLAGS = [
    "--allow-run-as-root", "--oversubscribe",
    "--mca", "btl_vader_single_copy_mechanism", "none",
    "--mca", "btl_tcp_if_include", "lo",
    "--mca", "oob_tcp_if_include", "lo",
]
THREAD_VARS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
BACKENDS = ("numpy", "cntk")
MODELS = ("softmax", "mlp")
MINIBATCHES = (64, 512)
RANKS = (1, 2, 4, 8)
LR = 0.1
PROGRESS_EVERY = 50
# W ranks within this share of W independent copies' throughput are bound by the cores, not by MPI.
CORES_BOUND_SHARE = 0.9
# Copies whose loops ran together less than this share of the time measure a ceiling that may be too high.
LOOPS_TOGETHER_ENOUGH = 0.8
# The rank logger's line at the end of the training loop (training/common.py's format).
LOOP_DONE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) rank \S+ \S+ done: .* in ([\d.]+) s$", re.M)


def run(cmd, env=None, timeout=600):
    start = time.monotonic()
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        sys.exit(f"{' '.join(map(str, cmd))} did not finish in {timeout} s:\n{error.stdout}\n{error.stderr}")
    seconds = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n"
                 f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return seconds, result.stdout


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "host": platform.node(),
        "os": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "mpirun": MPIRUN,
    }


def loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def int_list(text):
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive integers")
    return values


def name_list(allowed):
    def parse(text):
        values = [v.strip() for v in text.split(",") if v.strip()]
        if not values or set(values) - set(allowed):
            raise argparse.ArgumentTypeError("a comma-separated list out of " + ", ".join(allowed))
        return values
    return parse


def cntk_runtime():
    """(python, env additions, stand-in dir) for the cntk backend, or (None, reason)."""
    try:
        mpi_dir = cntk_env.mpi_standin_dir()
        return cntk_env.venv(mpi_dir), mpi_dir
    except cntk_env.Unavailable as error:
        return None, str(error)


def run_together(commands, logs, env, timeout=600):
    """Start every command at once, each with its stdout in its log file; wall seconds of each."""
    start = time.monotonic()
    procs = []
    for cmd, log in zip(commands, logs):
        # A session folder of its own for each mpirun: two started at once race to make /tmp/ompi.<host>.<uid>
        # ("File exists", orte_init failed).
        session = Path(f"{log}.tmp")
        session.mkdir(exist_ok=True)
        with open(log, "w") as out:
            procs.append(subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                          env=dict(env, TMPDIR=str(session))))
    walls = []
    for cmd, log, proc in zip(commands, logs, procs):
        try:
            code = proc.wait(timeout=max(1, timeout - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            sys.exit(f"{' '.join(map(str, cmd))} did not finish in {timeout} s:\n{Path(log).read_text()[-3000:]}")
        if code != 0:
            sys.exit(f"{' '.join(map(str, cmd))} failed ({code}):\n{Path(log).read_text()[-3000:]}")
        walls.append(time.monotonic() - start)
    return walls


def loop_window(log_text):
    """(start, end) of the training loop in epoch seconds, from the log's `done: ... in S s` line."""
    match = LOOP_DONE.search(log_text)
    if not match:
        return None
    end = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return end - float(match.group(2)), end


def overlap_share(windows):
    """How long every loop ran at the same time, as a share of the longest loop (1.0: fully together)."""
    if not windows or None in windows:
        return None
    together = min(end for _, end in windows) - max(start for start, _ in windows)
    return max(0.0, together) / max(end - start for start, end in windows)


def median_of(rows, key):
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) if values else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration (median reported)")
    parser.add_argument("--epochs", type=int, default=20, help="epochs per run (1,438 samples each)")
    parser.add_argument("--backends", type=name_list(BACKENDS), default=list(BACKENDS))
    parser.add_argument("--ranks", type=int_list, default=list(RANKS))
    parser.add_argument("--models", type=name_list(MODELS), default=list(MODELS))
    parser.add_argument("--minibatches", type=int_list, default=list(MINIBATCHES))
    parser.add_argument("--hidden", type=int, default=64, help="hidden units of the mlp (training/train.py's default)")
    parser.add_argument("--name", default="train", help="bench/results/<name>.json and .md")
    parser.add_argument("--no-blocking", action="store_true",
                        help="skip the numpy backend's --allreduce blocking runs beside the default overlap")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite bench/results/<name>.md from bench/results/<name>.json")
    args = parser.parse_args()
    if args.render:
        (RESULTS / f"{args.name}.md").write_text(markdown(json.loads((RESULTS / f"{args.name}.json").read_text())))
        return
    if args.repeat < 1 or args.epochs < 1 or args.hidden < 1:
        parser.error("--repeat, --epochs and --hidden must be at least 1")
    ranks_list = sorted(set(args.ranks))
    if ranks_list[0] != 1:
        parser.error("--ranks must include 1 (the ratios are against 1 rank)")

    cores = os.cpu_count() or 1
    env = dict(os.environ, **THREAD_VARS)
    pythons = {"numpy": PYTHON}
    notes = {}
    if "cntk" in args.backends:
        python, detail = cntk_runtime()
        if python is None:
            notes["cntk"] = "not measured: " + detail
            print(f"cntk backend skipped: {detail}", file=sys.stderr)
            args.backends = [b for b in args.backends if b != "cntk"]
        else:
            pythons["cntk"] = str(python)
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(detail), env.get("LD_LIBRARY_PATH")]))
            env["PYTHONWARNINGS"] = "ignore"
    exported = []
    for name in sorted(THREAD_VARS) + (["LD_LIBRARY_PATH", "PYTHONWARNINGS"] if "cntk" in args.backends else []):
        exported += ["-x", name]

    configs = [(model, mb) for model in args.models for mb in args.minibatches]
    # The ceiling's widths: W ranks that fit on the cores this process may use, one copy per core.
    cpus = sorted(os.sched_getaffinity(0))
    copy_widths = [w for w in ranks_list if 1 < w <= min(cores, len(cpus))]
    copy_groups = []
    runs = []
    blocking_runs = []
    versions = {}
    bench_start = time.monotonic()
    load_start = loadavg()

    with tempfile.TemporaryDirectory(prefix="train-bench-") as tmp:
        tmp = Path(tmp)
        run([PYTHON, "training/make_digits.py", "--out", tmp], env=env)
        shards = {}
        for ranks in ranks_list:
            shards[ranks] = tmp / f"shards-{ranks}"
            shard(tmp / "train.ctf", ranks, shards[ranks])

        def job(backend, model, mb, ranks, tag, placement=(), extra=()):
            """The mpirun command line of one run; `placement` adds mpirun's own options (a copy's core),
            `extra` train.py's."""
            return [MPIRUN, *MPI_FLAGS, *placement, *exported, "-np", str(ranks),
                    pythons[backend], "training/train.py", "--backend", backend,
                    "--data-dir", shards[ranks], "--test-file", tmp / "test.ctf",
                    "--output-dir", tmp / "out" / tag, "--checkpoint-dir", tmp / "ck" / tag,
                    "--model", model, "--hidden", str(args.hidden), "--epochs", str(args.epochs),
                    "--minibatch", str(mb), "--lr", str(LR),
                    "--progress-every", str(PROGRESS_EVERY), *extra]

        def copy_batches(mb, copies):
            """The copies' minibatches: the global one, and the W ranks' local one where it differs."""
            return [("global", mb)] + ([("local", mb // copies)] if mb // copies not in (0, mb) else [])

        def blocking_here(backend, ranks):
            return backend == "numpy" and ranks > 1 and not args.no_blocking

        total = args.repeat * sum(
            sum(1 + blocking_here(backend, ranks) for ranks in ranks_list)
            + sum(len(copy_batches(mb, copies)) for copies in copy_widths)
            for _, mb in configs for backend in args.backends)
        for repeat in range(1, args.repeat + 1):
            for model, mb in configs:
                for ranks in ranks_list:
                    for backend in args.backends:
                        tag = f"{backend}-{model}-mb{mb}-np{ranks}-r{repeat}"
                        out = tmp / "out" / tag
                        wall, _ = run([str(c) for c in job(backend, model, mb, ranks, tag)], env=env)
                        summary = json.loads((out / "summary.json").read_text())
                        record = {
                            "backend": backend, "model": model, "minibatch": mb, "ranks": ranks,
                            "oversubscribed": ranks > cores, "repeat": repeat,
                            "samples_per_sec": summary["samples_per_sec"],
                            "allreduce_share": summary["allreduce_share"],
                            "test_accuracy": summary["test_accuracy"],
                            "seconds": summary["seconds"],
                            "samples": summary["samples"],
                            "wall_seconds": round(wall, 3),
                        }
                        runs.append(record)
                        versions[backend] = summary.get("versions", {})
                        share = record["allreduce_share"]
                        print(f"[{len(runs) + len(blocking_runs) + len(copy_groups)}/{total}] {tag}: "
                              f"{record['samples_per_sec']:,.0f} samples/s, "
                              f"allreduce {'n/a' if share is None else format(share, '.0%')}, "
                              f"acc {record['test_accuracy']:.3f}, wall {wall:.1f} s", flush=True)
                        if blocking_here(backend, ranks):
                            btag = tag + "-blocking"
                            wall, _ = run([str(c) for c in job(backend, model, mb, ranks, btag,
                                                               extra=("--allreduce", "blocking"))], env=env)
                            summary = json.loads((tmp / "out" / btag / "summary.json").read_text())
                            blocking_runs.append(dict(
                                record, samples_per_sec=summary["samples_per_sec"],
                                allreduce_share=summary["allreduce_share"],
                                test_accuracy=summary["test_accuracy"], seconds=summary["seconds"],
                                wall_seconds=round(wall, 3)))
                            print(f"[{len(runs) + len(blocking_runs) + len(copy_groups)}/{total}] {btag}: "
                                  f"{summary['samples_per_sec']:,.0f} samples/s, allreduce "
                                  f"{summary['allreduce_share']:.0%}", flush=True)
                for copies in copy_widths:
                    for backend in args.backends:
                        for batch, copy_mb in copy_batches(mb, copies):
                            tag = f"{backend}-{model}-mb{mb}-copies{copies}-{batch}-r{repeat}"
                            tags = [f"{tag}-c{index}" for index in range(copies)]
                            logs = [tmp / f"{copy_tag}.log" for copy_tag in tags]
                            # Copy i on core i, as mpirun binds rank i of a W-rank job (and rank 0 of a 1-rank job).
                            commands = [job(backend, model, copy_mb, 1, copy_tag,
                                            ("--cpu-set", str(cpus[index]), "--bind-to", "core"))
                                        for index, copy_tag in enumerate(tags)]
                            walls = run_together(commands, logs, env)
                            group = []
                            for index, copy_tag in enumerate(tags):
                                summary = json.loads((tmp / "out" / copy_tag / "summary.json").read_text())
                                group.append({"samples_per_sec": summary["samples_per_sec"],
                                              "test_accuracy": summary["test_accuracy"],
                                              "seconds": summary["seconds"],
                                              "wall_seconds": round(walls[index], 3)})
                            windows = [loop_window(log.read_text()) for log in logs]
                            together = overlap_share(windows)
                            copy_groups.append({
                                "backend": backend, "model": model, "minibatch": mb, "copies": copies,
                                "batch": batch, "copy_minibatch": copy_mb,
                                "repeat": repeat, "cpus": [cpus[index] for index in range(copies)],
                                "samples_per_sec_sum": sum(c["samples_per_sec"] for c in group),
                                "loops_together_share": together, "runs": group})
                            print(f"[{len(runs) + len(blocking_runs) + len(copy_groups)}/{total}] {tag}: "
                                  + " + ".join(f"{c['samples_per_sec']:,.0f}" for c in group)
                                  + f" samples/s, loops together "
                                  f"{'n/a' if together is None else format(together, '.0%')}", flush=True)

    medians = []
    for backend in args.backends:
        for model, mb in configs:
            one = None
            for ranks in ranks_list:
                rs = [r for r in runs if (r["backend"], r["model"], r["minibatch"], r["ranks"])
                      == (backend, model, mb, ranks)]
                row = {
                    "backend": backend, "model": model, "minibatch": mb, "ranks": ranks,
                    "oversubscribed": ranks > cores, "runs": len(rs),
                    "samples_per_sec": median_of(rs, "samples_per_sec"),
                    "samples_per_sec_min": min(r["samples_per_sec"] for r in rs),
                    "samples_per_sec_max": max(r["samples_per_sec"] for r in rs),
                    "allreduce_share": median_of(rs, "allreduce_share"),
                    "test_accuracy": median_of(rs, "test_accuracy"),
                    "seconds": median_of(rs, "seconds"),
                    "wall_seconds": median_of(rs, "wall_seconds"),
                }
                if ranks == 1:
                    one = row
                    row["ratio_vs_1_rank"] = 1.0
                else:
                    row["ratio_vs_1_rank"] = row["samples_per_sec"] / one["samples_per_sec"]
                    single = {r["repeat"]: r["samples_per_sec"] for r in runs
                              if (r["backend"], r["model"], r["minibatch"], r["ranks"]) == (backend, model, mb, 1)}
                    row["paired_ratios"] = [r["samples_per_sec"] / single[r["repeat"]] for r in rs]
                medians.append(row)
    if set(args.backends) == set(BACKENDS):
        by = {(r["backend"], r["model"], r["minibatch"], r["ranks"]): r for r in medians}
        for row in medians:
            if row["backend"] == "cntk":
                row["ratio_vs_numpy"] = row["samples_per_sec"] / by[("numpy",) + tuple(
                    row[k] for k in ("model", "minibatch", "ranks"))]["samples_per_sec"]

    ceilings = []
    for backend in args.backends:
        for model, mb in configs:
            single = {r["repeat"]: r["samples_per_sec"] for r in runs
                      if (r["backend"], r["model"], r["minibatch"], r["ranks"]) == (backend, model, mb, 1)}
            for copies in copy_widths:
                groups = [g for g in copy_groups if g.get("batch", "global") == "global" and
                          (g["backend"], g["model"], g["minibatch"], g["copies"]) == (backend, model, mb, copies)]
                local = [g["samples_per_sec_sum"] / single[g["repeat"]] for g in copy_groups
                         if g.get("batch") == "local" and (g["backend"], g["model"], g["minibatch"], g["copies"])
                         == (backend, model, mb, copies)]
                # Each round's copies against that round's 1-rank run: the same load for both.
                paired = [g["samples_per_sec_sum"] / single[g["repeat"]] for g in groups]
                ranks_row = next(r for r in medians if (r["backend"], r["model"], r["minibatch"], r["ranks"])
                                 == (backend, model, mb, copies))
                ceiling = statistics.median(paired)
                together = [g["loops_together_share"] for g in groups if g["loops_together_share"] is not None]
                ceilings.append({
                    "backend": backend, "model": model, "minibatch": mb, "copies": copies,
                    "ceiling_vs_1_rank": ceiling, "paired_ceilings": paired,
                    "samples_per_sec_sum": statistics.median(g["samples_per_sec_sum"] for g in groups),
                    "loops_together_share": statistics.median(together) if together else None,
                    "ranks_ratio_vs_1_rank": ranks_row["ratio_vs_1_rank"],
                    "ranks_share_of_ceiling": ranks_row["ratio_vs_1_rank"] / ceiling,
                    # What bounds the W ranks: the cores (near the copies) or MPI (well below them).
                    "bound": "cores" if ranks_row["ratio_vs_1_rank"] / ceiling >= CORES_BOUND_SHARE else "mpi",
                    # The same copies at the ranks' local minibatch: what the cores give the rows a rank computes.
                    "local_ceiling_vs_1_rank": statistics.median(local) if local else None,
                    # The ranks' ratio had their exposed Allreduce taken no time (numpy; cntk cannot see it).
                    "ranks_without_allreduce": (None if ranks_row["allreduce_share"] is None else
                                                ranks_row["ratio_vs_1_rank"] / (1 - ranks_row["allreduce_share"])),
                })

    overlap = []
    for model, mb in configs:
        for ranks in ranks_list[1:]:
            rs = [r for r in blocking_runs if (r["model"], r["minibatch"], r["ranks"]) == (model, mb, ranks)]
            if not rs:
                continue
            row = next(r for r in medians if (r["backend"], r["model"], r["minibatch"], r["ranks"])
                       == ("numpy", model, mb, ranks))
            by_repeat = {r["repeat"]: r for r in runs if (r["backend"], r["model"], r["minibatch"], r["ranks"])
                         == ("numpy", model, mb, ranks)}
            paired = [by_repeat[r["repeat"]]["samples_per_sec"] / r["samples_per_sec"] for r in rs]
            overlap.append({
                "model": model, "minibatch": mb, "ranks": ranks, "oversubscribed": ranks > cores,
                "blocking_samples_per_sec": median_of(rs, "samples_per_sec"),
                "blocking_allreduce_share": median_of(rs, "allreduce_share"),
                "overlap_samples_per_sec": row["samples_per_sec"],
                "overlap_allreduce_share": row["allreduce_share"],
                "overlap_vs_blocking": statistics.median(paired), "paired": paired,
            })

    elapsed = time.monotonic() - bench_start
    figures = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": machine(),
        "versions": versions,
        "notes": notes,
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
        "settings": {
            "dataset": "scikit-learn digits via training/make_digits.py (1,438 train, 359 test)",
            "shards": "plugins/module_utils/dataset_cut.py: contiguous, balanced by samples; the same for both backends",
            "epochs": args.epochs, "repeat": args.repeat, "lr": LR, "hidden": args.hidden,
            "progress_every": PROGRESS_EVERY, "backends": list(args.backends), "models": list(args.models),
            "minibatches": list(args.minibatches), "ranks": ranks_list,
            "threads_per_rank": 1, "thread_env": THREAD_VARS, "mpirun_flags": MPI_FLAGS,
            "interpreters": pythons,
            "cntk_mpi": ("the distribution's Open MPI 4 under Open MPI 1.10's sonames (libmpi.so.12, "
                         "libmpi_cxx.so.1): a stand-in, not Open MPI 1.10.7") if "cntk" in args.backends else None,
            "order": "repeats interleaved: every configuration once per round",
            "ceiling": ("W independent copies of the 1-rank job at once, each its own `mpirun -np 1 --cpu-set i "
                        "--bind-to core` (copy i on core i), no communication; sum of their samples/s over the "
                        "same round's 1-rank samples/s, median over rounds"),
            "ceiling_copies": copy_widths,
        },
        "bench_seconds": round(elapsed, 1),
        "medians": medians,
        "ceilings": ceilings,
        "overlap": overlap,
        "runs": runs,
        "blocking_runs": blocking_runs,
        "copy_runs": copy_groups,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(figures, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(markdown(figures))
    print(markdown(figures))


def ranks_label(row, cores):
    return f"{row['ranks']} (oversubscribed on {cores} cores)" if row["oversubscribed"] else str(row["ranks"])


def versions_text(backend, v):
    if backend == "numpy":
        return (f"numpy backend: Python {v.get('python', '?')}, numpy {v.get('numpy', '?')}, "
                f"mpi4py {v.get('mpi4py', '?')}, {str(v.get('mpi', 'MPI ?')).split(',')[0].strip()}")
    return (f"cntk backend: CNTK {v.get('cntk', '?')} (cntk 2.7.post2 CPU wheel), Python {v.get('python', '?')}, "
            f"numpy {v.get('numpy', '?')}, {str(v.get('mpi') or 'MPI ?').split(',')[0].strip()} "
            "under Open MPI 1.10's sonames (stand-in)")


def markdown(f):
    m = f["machine"]
    s = f["settings"]
    cores = m["cores"]
    backends = s["backends"]
    lines = [
        f"# Training throughput: numpy and cntk backends ({s.get('hidden', 64)} hidden units in the mlp)",
        "",
        f"{f['date']}; {m['host']}, {m['cpu']}, {cores} cores, {m['os']}. "
        f"Load average at start {f['loadavg_start']}, at end {f['loadavg_end']}.",
        "",
    ]
    for backend in backends:
        lines.append(f"- {versions_text(backend, f['versions'].get(backend, {}))}.")
    for backend, note in f.get("notes", {}).items():
        lines.append(f"- {backend} backend {note}.")
    lines += [
        "",
        f"The same job for both backends: digits (1,438 training samples) in the same shards "
        f"(the data step's cutter, plugins/module_utils/dataset_cut.py), {s['epochs']} epochs, lr {s['lr']}, seed 1, {s.get('hidden', 64)} hidden "
        f"units in the mlp; one OpenMP/MKL/BLAS thread "
        f"per rank; every rank on this one host over loopback, ranks beyond the {cores} cores oversubscribed. "
        f"Median of {s['repeat']} interleaved runs per row; `bench/train_bench.py` took {f['bench_seconds']} s"
        + ("" if list(s["ranks"]) == list(RANKS) else
           f", at {', '.join(map(str, s['ranks']))} ranks only (--ranks; the default is "
           f"{', '.join(map(str, RANKS))})") + ". "
        "Samples/s, Allreduce share and test accuracy come from each run's `summary.json` (the training loop "
        "only, not mpirun or CNTK start-up); the cntk backend cannot see its Allreduce share (n/a). "
        "min-max is the spread of the runs.",
        "",
        "| backend | model | minibatch | ranks | samples/s (median) | min-max | ratio vs 1 rank | Allreduce share | test accuracy |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in f["medians"]:
        share = "n/a" if r["allreduce_share"] is None else f"{r['allreduce_share']:.0%}"
        lines.append(
            f"| {r['backend']} | {r['model']} | {r['minibatch']} | {ranks_label(r, cores)} | "
            f"{r['samples_per_sec']:,.0f} | {r['samples_per_sec_min']:,.0f}-{r['samples_per_sec_max']:,.0f} | "
            f"{r['ratio_vs_1_rank']:.2f} | {share} | {r['test_accuracy']:.3f} |")

    cntk_rows = [r for r in f["medians"] if "ratio_vs_numpy" in r]
    if cntk_rows:
        lines += [
            "",
            "cntk samples/s as a share of numpy's on the same job:",
            "",
            "| model | minibatch | " + " | ".join(
                ("{} rank{}{}".format(w, "" if w == 1 else "s", " (oversubscribed)" if w > cores else ""))
                for w in s["ranks"]) + " |",
            "| --- | ---: | " + " | ".join("---:" for _ in s["ranks"]) + " |",
        ]
        for model in s["models"]:
            for mb in s["minibatches"]:
                cells = []
                for w in s["ranks"]:
                    row = next(r for r in cntk_rows if (r["model"], r["minibatch"], r["ranks"]) == (model, mb, w))
                    cells.append(f"{row['ratio_vs_numpy']:.2f}")
                lines.append(f"| {model} | {mb} | " + " | ".join(cells) + " |")

    ceilings = f.get("ceilings") or []
    if ceilings:
        lines += [
            "",
            "The machine's ceiling: W independent copies of the 1-rank job at once, each its own `mpirun -np 1` "
            "on its own core (copy i on core i, as mpirun binds rank i), no communication between them, the same "
            "data, arguments and one thread each, in the same interleaved rounds. Ceiling: the copies' samples/s "
            "summed over the same round's 1-rank samples/s, median over rounds; what W cores give this job with "
            "no MPI at all. \"loops together\": how long all W training loops ran at the same time, as a share of "
            "the longest (from each copy's log).",
            "",
            "| backend | model | minibatch | W | W ranks, ratio vs 1 rank | W copies, ceiling vs 1 rank "
            "| ranks / ceiling | loops together |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for c in ceilings:
            together = "n/a" if c["loops_together_share"] is None else f"{c['loops_together_share']:.0%}"
            lines.append(f"| {c['backend']} | {c['model']} | {c['minibatch']} | {c['copies']} | "
                         f"{c['ranks_ratio_vs_1_rank']:.2f} | {c['ceiling_vs_1_rank']:.2f} | "
                         f"{c['ranks_share_of_ceiling']:.0%} | {together} |")

        split = [c for c in ceilings if c.get("local_ceiling_vs_1_rank") is not None]
        if split:
            lines += [
                "",
                "Where the W ranks' gap to the ceiling goes, all against the same 1-rank run: the copies at the "
                "global minibatch (the ceiling above); the copies at the ranks' local minibatch (global / W rows "
                "a step each, what a rank computes); the W ranks as if their exposed Allreduce took no time "
                "(ratio / (1 - Allreduce share); numpy only); the W ranks. From the second to the third: the ranks' "
                "steps beside the Allreduce running slower than the copies' (rank 0's Allreduce time includes its "
                "waits for the slower rank); from the third to the fourth: the Allreduce.",
                "",
                "| backend | model | minibatch | W | copies, global minibatch | copies, local minibatch "
                "| ranks, Allreduce free | ranks |",
                "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
            ]
            for c in split:
                free = "n/a" if c["ranks_without_allreduce"] is None else f"{c['ranks_without_allreduce']:.2f}"
                lines.append(f"| {c['backend']} | {c['model']} | {c['minibatch']} | {c['copies']} | "
                             f"{c['ceiling_vs_1_rank']:.2f} | {c['local_ceiling_vs_1_rank']:.2f} | {free} | "
                             f"{c['ranks_ratio_vs_1_rank']:.2f} |")

    overlap = f.get("overlap") or []
    if overlap:
        lines += [
            "",
            "The numpy backend's Allreduce, overlapped (`--allreduce overlap`, the default: the output layer's "
            "gradient goes out in a non-blocking Allreduce while the hidden layer's is computed) against one "
            "blocking Allreduce of the whole gradient (`--allreduce blocking`), in the same rounds. The Allreduce "
            "share counts only the time a rank waits for it after its compute.",
            "",
            "| model | minibatch | ranks | blocking: samples/s | Allreduce share | overlap: samples/s "
            "| Allreduce share | overlap / blocking |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for o in overlap:
            lines.append(f"| {o['model']} | {o['minibatch']} | {ranks_label(o, cores)} | "
                         f"{o['blocking_samples_per_sec']:,.0f} | {o['blocking_allreduce_share']:.0%} | "
                         f"{o['overlap_samples_per_sec']:,.0f} | {o['overlap_allreduce_share']:.0%} | "
                         f"{o['overlap_vs_blocking']:.2f} |")

    lines += ["", "What it means: " + verdict(f), ""]
    return "\n".join(lines)


def gap_reading(c):
    """The W ranks' gap to the ceiling, split by the measured intermediate figures."""
    if c.get("local_ceiling_vs_1_rank") is None:
        return ""
    text = (f" Split: copies at the ranks' local minibatch {c['local_ceiling_vs_1_rank']:.2f}x "
            f"(at the global one {c['ceiling_vs_1_rank']:.2f}x)")
    if c.get("ranks_without_allreduce") is not None:
        text += (f"; the ranks with a free Allreduce {c['ranks_without_allreduce']:.2f}x. The ranks' steps beside "
                 f"the Allreduce account for {c['local_ceiling_vs_1_rank']:.2f}x against "
                 f"{c['ranks_without_allreduce']:.2f}x, the Allreduce for {c['ranks_without_allreduce']:.2f}x "
                 f"against {c['ranks_ratio_vs_1_rank']:.2f}x")
    return text + "."


def overlap_reading(o):
    hidden = o["blocking_allreduce_share"] - o["overlap_allreduce_share"]
    return (f"numpy, {o['model']}/{o['minibatch']} at {o['ranks']} ranks: the overlap took the exposed Allreduce "
            f"from {o['blocking_allreduce_share']:.0%} to {o['overlap_allreduce_share']:.0%} of a step "
            f"({hidden:+.0%} of a step {'hidden' if hidden > 0 else 'gained'}), and ran at "
            f"{o['overlap_vs_blocking']:.2f}x the blocking Allreduce's samples/s.")


def ceiling_reading(c):
    """W ranks against W independent copies, and what bounds the W ranks, derived from the two figures."""
    head = (f"{c['backend']}: {c['copies']} ranks {c['ranks_ratio_vs_1_rank']:.2f}x; {c['copies']} independent "
            f"copies without MPI {c['ceiling_vs_1_rank']:.2f}x")
    together = c["loops_together_share"]
    if together is not None and together < LOOPS_TOGETHER_ENOUGH:
        # A copy whose loop ran partly alone had its core's share to itself for that part.
        head += (f" (their training loops ran together only {together:.0%} of the time, so the ceiling may be "
                 "high)")
    if c["bound"] == "cores":
        return f"{head}: the cores, not MPI, are the bound."
    return (f"{head}: the ranks reach {c['ranks_share_of_ceiling']:.0%} of what the cores give, so MPI and the "
            "ranks' synchronisation cost the rest.")


def verdict(f):
    """A reading of the figures, derived from them (not written in advance)."""
    s = f["settings"]
    cores = f["machine"]["cores"]
    med = {(r["backend"], r["model"], r["minibatch"], r["ranks"]): r for r in f["medians"]}
    load = ""
    if f["loadavg_start"] and f["loadavg_end"]:
        load = (f" (1-minute load average {f['loadavg_start'][0]} at the start, {f['loadavg_end'][0]} at the end: "
                "other work shared the machine, and the min-max column shows how far single runs moved)")
    parts = [f"ratios measured side by side in one run on {cores} shared cores{load}, not absolute figures."]
    two = [r for r in f["medians"] if r["backend"] == "numpy" and r["ranks"] == 2 and r["allreduce_share"] is not None]
    if two:
        share = max(r["allreduce_share"] for r in two)
        parts.append(f"The numpy backend's Allreduce takes at most {share:.0%} of a 2-rank step here: "
                     + ("the step's compute dominates, so the 2-rank ratio shows how the ranks scale."
                        if share < 0.2 else
                        "per-step overhead (the Allreduce, MPI, the framework's own step) dominates the "
                        "arithmetic, so these rows measure overhead, not scaling."))
    for backend in s["backends"]:
        multi = [r for r in f["medians"] if r["backend"] == backend and r["ranks"] > 1]
        if not multi:
            continue
        best = max(multi, key=lambda r: r["ratio_vs_1_rank"])
        faster = [r for r in multi if r["ratio_vs_1_rank"] > 1.0]
        parts.append(
            f"{backend}: {len(faster)} of {len(multi)} multi-rank configurations beat 1 rank (best "
            f"{best['ratio_vs_1_rank']:.2f}x, {best['model']}/{best['minibatch']} at {best['ranks']} ranks).")
        over = [r for r in multi if r["oversubscribed"]]
        within = [r for r in multi if not r["oversubscribed"]]
        if over and within:
            worse = [r for r in over
                     if r["samples_per_sec"] < med[(backend, r["model"], r["minibatch"], cores)]["samples_per_sec"]
                     ] if cores in s["ranks"] else []
            if cores in s["ranks"]:
                parts.append(f"{backend} oversubscribed ({', '.join(str(w) for w in s['ranks'] if w > cores)} ranks "
                             f"on {cores} cores): {len(worse)} of {len(over)} slower than at {cores} ranks.")
        big = [m for m in s["minibatches"] if m != min(s["minibatches"])]
        if big:
            large, small = max(s["minibatches"]), min(s["minibatches"])
            higher = [(model, w) for model in s["models"] for w in s["ranks"]
                      if med[(backend, model, large, w)]["samples_per_sec"]
                      > med[(backend, model, small, w)]["samples_per_sec"]]
            parts.append(f"{backend}: minibatch {large} is faster than {small} in {len(higher)} of "
                         f"{len(s['models']) * len(s['ranks'])} model/rank pairs (fewer steps per sample, so less "
                         "per-step overhead).")
    for ceiling in f.get("ceilings") or []:
        parts.append(ceiling_reading(ceiling) + gap_reading(ceiling))
    for o in f.get("overlap") or []:
        parts.append(overlap_reading(o))
    cntk_rows = [r for r in f["medians"] if "ratio_vs_numpy" in r]
    if cntk_rows:
        single = [r["ratio_vs_numpy"] for r in cntk_rows if r["ranks"] == 1]
        multi = [r["ratio_vs_numpy"] for r in cntk_rows if r["ranks"] > 1]
        parts.append(
            "cntk vs numpy on the same job: "
            + (f"{min(single):.2f}-{max(single):.2f}x numpy's samples/s at 1 rank" if single else "")
            + (f", {min(multi):.2f}-{max(multi):.2f}x at 2 or more ranks" if multi else "")
            + ". cntk ran on the Open MPI 4 stand-in for Open MPI 1.10, on CPUs, on one host: these figures "
            "say nothing about CNTK on GPUs, on Open MPI 1.10.7, or across hosts.")
    accuracy = [r["test_accuracy"] for r in f["medians"]]
    parts.append(f"Test accuracy ranges {min(accuracy):.3f}-{max(accuracy):.3f} over all rows (same global "
                 "minibatch and lr; the larger minibatch takes fewer SGD steps in the same epochs).")
    return " ".join(parts)


if __name__ == "__main__":
    main()
