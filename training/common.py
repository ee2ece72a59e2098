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
