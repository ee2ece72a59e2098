"""Helpers shared by the training backends and the data tools.

The cntk backend imports this module inside CNTK's CPython 3.6 with the numpy
of that era, so it must stay Python 3.6 syntax, use only long-standing numpy
APIs, and must not import mpi4py (CNTK brings its own MPI).
"""

import json
import logging
import os
import sys

import numpy as np

FEATURES_STREAM = "features"
LABELS_STREAM = "labels"

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
MODEL_FILE = "model.npz"


def shard_path(data_dir, rank):
    """The one file a rank trains on: every rank reads only its own shard."""
    return os.path.join(data_dir, "shard-{:05d}.ctf".format(rank))


def local_batch_size(minibatch, ranks, rank):
    """This rank's share of the global minibatch; the first minibatch % ranks
    ranks take one sample more, so the shares add up to the minibatch."""
    return minibatch // ranks + (1 if rank < minibatch % ranks else 0)


def format_ctf_line(features, label, classes):
    """One dense CTF sample: the features, then the label as a one-hot row."""
    one_hot = ["0"] * classes
    one_hot[label] = "1"
    values = " ".join("{:.10g}".format(float(v)) for v in features)
    return "|{} {} |{} {}\n".format(FEATURES_STREAM, values, LABELS_STREAM, " ".join(one_hot))


def read_ctf(path, features, classes, dtype=np.float64):
    """Read a dense CTF file into (X, Y): X is (n, features), Y is one-hot (n, classes).

    Text before the first '|' is a sequence id and is ignored, as are
    comment fields ('|#...'); every sample must have both streams with the
    declared widths, so that a shard written for another model fails here
    with its file and line rather than as a shape error mid-training.
    """
    rows_x = []
    rows_y = []
    with open(path) as source:
        for line_number, line in enumerate(source, 1):
            if not line.strip():
                continue
            streams = {}
            for field in line.split("|")[1:]:
                tokens = field.split()
                if not tokens or tokens[0].startswith("#"):
                    continue
                try:
                    streams[tokens[0]] = [float(t) for t in tokens[1:]]
                except ValueError as error:
                    raise ValueError("{}:{}: {}".format(path, line_number, error))
            sample_x = streams.get(FEATURES_STREAM)
            sample_y = streams.get(LABELS_STREAM)
            if sample_x is None or sample_y is None:
                raise ValueError("{}:{}: needs both |{} and |{}".format(
                    path, line_number, FEATURES_STREAM, LABELS_STREAM))
            if len(sample_x) != features or len(sample_y) != classes:
                raise ValueError("{}:{}: {} features and {} labels, expected {} and {}".format(
                    path, line_number, len(sample_x), len(sample_y), features, classes))
            rows_x.append(sample_x)
            rows_y.append(sample_y)
    if not rows_x:
        raise ValueError("{}: no samples".format(path))
    return np.array(rows_x, dtype=dtype), np.array(rows_y, dtype=dtype)


def rank_logger(rank, size, host):
    """A stdout logger whose lines name the rank and host, flushed per line.

    mpirun interleaves every rank's stdout, so each line must say whose it is.
    """
    logger = logging.getLogger("train.rank{}".format(rank))
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(
            "%(asctime)s rank {}/{} {} %(message)s".format(rank, size, host)))
        logger.addHandler(handler)
    return logger


def metrics_record(step, epoch, samples, loss, metric, samples_per_sec, allreduce_share):
    """One progress record; both backends write exactly these keys."""
    return {
        "step": int(step),
        "epoch": int(epoch),
        "samples": int(samples),
        "loss": float(loss),
        "metric": float(metric),
        "samples_per_sec": float(samples_per_sec),
        "allreduce_share": None if allreduce_share is None else float(allreduce_share),
    }


def progress_text(record):
    """The human-readable form of a metrics record, for the job's stdout."""
    share = record["allreduce_share"]
    return "epoch {} step {} samples {} loss {:.4f} error {:.4f} {:.0f} samples/s allreduce {}".format(
        record["epoch"], record["step"], record["samples"], record["loss"], record["metric"],
        record["samples_per_sec"], "n/a" if share is None else "{:.1%}".format(share))


class MetricsLog(object):
    """OUTPUT/metrics.jsonl, one JSON object per line, flushed per line so
    that a job that dies keeps its progress.

    A run resumed at step N keeps the records up to step N and appends; the
    records a crashed run wrote after its last checkpoint are dropped, as
    the resumed run writes those steps again. A fresh run (N = 0) starts
    the file anew.
    """

    def __init__(self, output_dir, resumed_at_step=0):
        self.path = os.path.join(output_dir, METRICS_FILE)
        kept = []
        if resumed_at_step > 0 and os.path.exists(self.path):
            with open(self.path) as previous:
                kept = [line for line in previous
                        if line.strip() and json.loads(line)["step"] <= resumed_at_step]
        self._file = open(self.path, "w")
        self._file.writelines(kept)
        self._file.flush()

    def write(self, record):
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

    def close(self):
        self._file.close()


def write_json_atomic(path, document):
    """Write JSON so that a reader sees the old file or the new one, never half."""
    temporary = path + ".tmp"
    with open(temporary, "w") as target:
        json.dump(document, target, indent=2, sort_keys=True)
        target.write("\n")
    os.replace(temporary, path)


def make_summary(backend, model, hosts, versions, epochs, samples, run_samples, seconds,
                 allreduce_seconds, final_loss, test_accuracy):
    """The summary.json document, the same keys for both backends.

    samples counts every global sample trained on, across resumes;
    samples_per_sec and allreduce_share describe this run only (run_samples
    in seconds). allreduce_seconds is None where the backend cannot see it.
    """
    return {
        "backend": backend,
        "model": model,
        "ranks": len(hosts),
        "hosts": list(hosts),
        "versions": versions,
        "epochs": int(epochs),
        "samples": int(samples),
        "seconds": float(seconds),
        "samples_per_sec": float(run_samples) / seconds if seconds > 0 else 0.0,
        "allreduce_share": (None if allreduce_seconds is None or seconds <= 0
                            else float(allreduce_seconds) / seconds),
        "final_loss": None if final_loss is None else float(final_loss),
        "test_accuracy": None if test_accuracy is None else float(test_accuracy),
    }


# Per-rank timing. Every rank keeps its own; rank 0 gathers them into
# summary.json's rank_timing (numpy: mpi4py's gather; cntk:
# cntk_ranks.gather_json), so the report reads one file.
TIMING_BUCKETS = 64


class RankTiming(object):
    """Where one rank's training-loop time went.

    observe(step, compute, comm) takes one step's compute seconds (numpy: the
    step less its wait in the Allreduce; cntk: the compute probe) and, where
    measured, its communication seconds. Consecutive observations share a
    bucket; when TIMING_BUCKETS are full, neighbours merge and a bucket holds
    twice as many, so memory stays bounded however long the run. The
    buckets give the report its compute-over-time line and the median of
    their means (a figure a one-off burst does not move); the mean over all
    steps is what the other ranks waited for.
    """

    def __init__(self, first_step, clock, cpu_clock):
        self._clock, self._cpu_clock = clock, cpu_clock
        self._wall0, self._cpu0 = clock(), cpu_clock()
        self._wall = self._cpu = None
        self._first_step = first_step
        self._per_bucket = 1
        self._buckets = []  # [last step, observations, compute sum, comm sum or None]
        self.compute_total = 0.0
        self.comm_total = None
        self.observations = 0
        self.excluded = 0.0  # seconds of the loop that were no training step (the cntk probe itself)

    def observe(self, step, compute, comm=None):
        self.observations += 1
        self.compute_total += compute
        if comm is not None:
            self.comm_total = (self.comm_total or 0.0) + comm
        last = self._buckets[-1] if self._buckets else None
        if last is not None and last[1] < self._per_bucket:
            last[0] = step
            last[1] += 1
            last[2] += compute
            last[3] = None if comm is None or last[3] is None else last[3] + comm
            return
        self._buckets.append([step, 1, compute, comm])
        if len(self._buckets) > TIMING_BUCKETS:
            merged = []
            for index in range(0, len(self._buckets), 2):
                pair = self._buckets[index:index + 2]
                comms = [b[3] for b in pair]
                merged.append([pair[-1][0], sum(b[1] for b in pair), sum(b[2] for b in pair),
                               None if None in comms else sum(comms)])
            self._buckets = merged
            self._per_bucket *= 2

    def stop(self):
        """The end of the training loop: what follows (the last checkpoint, gathering the ranks' results) is
        not a step's time."""
        self._wall = self._clock() - self._wall0
        self._cpu = self._cpu_clock() - self._cpu0

    def compute_per_step(self):
        """The median over buckets of the mean compute seconds per step; None before any observation."""
        means = sorted(b[2] / b[1] for b in self._buckets)
        if not means:
            return None
        middle = len(means) // 2
        return means[middle] if len(means) % 2 else (means[middle - 1] + means[middle]) / 2.0

    def record(self, rank, host, steps):
        """This rank's entry of summary.json's rank_timing (seconds; those of a step are means per step).

        compute_seconds is the mean, compute_median_seconds the median over
        buckets (what the straggler check compares). comm_seconds: numpy, the
        measured wait in the Allreduce; where the backend cannot see
        communication (cntk), the step time less the compute, an estimate of
        aggregation plus waiting."""
        if self._wall is None:
            self.stop()
        wall, cpu = self._wall, self._cpu
        steps = max(0, int(steps) - self._first_step)
        step_seconds = max(0.0, wall - self.excluded) / steps if steps else None
        compute = self.compute_total / self.observations if self.observations else None
        if self.comm_total is not None:
            comm = self.comm_total / steps if steps else None
        elif step_seconds is not None and compute is not None:
            comm = max(0.0, step_seconds - compute)
        else:
            comm = None
        return {
            "rank": int(rank),
            "host": str(host),
            "steps": steps,
            "wall_seconds": round(wall, 6),
            "cpu_seconds": round(cpu, 6),
            "cpu_share": round(cpu / wall, 4) if wall > 0 else None,
            "step_seconds": _rounded(step_seconds),
            "compute_seconds": _rounded(compute),
            "compute_median_seconds": _rounded(self.compute_per_step()),
            "comm_seconds": _rounded(comm),
            "comm_share": (round(min(1.0, comm / step_seconds), 4)
                           if comm is not None and step_seconds else None),
            "observations": self.observations,
            # [last step, mean compute seconds per step] per bucket: the report's plot over time.
            "compute_series": [[int(b[0]), _rounded(b[2] / b[1])] for b in self._buckets],
        }


def _rounded(value):
    return None if value is None else round(float(value), 9)


def timing_summary(records, method, probe_every=None):
    """summary.json's timing fields from every rank's RankTiming.record(), by rank."""
    shares = [r["comm_share"] for r in records if r.get("comm_share") is not None]
    return {
        "rank_timing": list(records),
        "timing_method": method,
        "timing_probe_every": probe_every,
        "comm_share": sum(shares) / len(shares) if shares else None,
    }


def timing_text(record):
    """A rank's timing as one log line."""
    def ms(value):
        return "n/a" if value is None else "{:.3f} ms".format(1000.0 * value)
    return "timing: {} steps, {} a step: compute {}, communication {} ({}), CPU {} of wall time".format(
        record["steps"], ms(record["step_seconds"]), ms(record["compute_seconds"]), ms(record["comm_seconds"]),
        "n/a" if record["comm_share"] is None else "{:.1%}".format(record["comm_share"]),
        "n/a" if record["cpu_share"] is None else "{:.0%}".format(record["cpu_share"]))
