#!/usr/bin/env python3
"""Logistic regression by data-parallel minibatch SGD over MPI (numpy + mpi4py).

Launched once per rank by mpirun:

    mpirun -np N python train.py [--epochs 5] [--minibatch 256] [--lr 0.5]
        [--l2 0.0001] [--seed 1] [--progress-every 10]

Each rank reads only its own pre-split part, JOB_DATA_DIR/shard-{rank:05d}.npz
(JOB_DATA_LAYOUT=presplit; arrays `X`, samples x features, and `y`, 0/1 labels;
make_parts.py writes such parts). Every step each rank computes the gradient
sum over its share of the global minibatch, one Allreduce adds the ranks'
[gradient sum, loss sum, error count, samples], and every rank takes the same
step with the global mean gradient, so the replicas stay identical.

Rank 0 alone writes: JOB_CHECKPOINT_DIR/checkpoint.npz after every epoch (read
back by rank 0 and broadcast when JOB_RESUME=1), JOB_METRICS_FILE (optional,
JSON lines), and in JOB_OUTPUT_DIR model.npz and summary.json (with the
accuracy on JOB_TEST_FILE, an .npz with `X` and `y`, when there is one).

Python 3.6 syntax and long-standing numpy/mpi4py APIs only.
"""

import argparse
import json
import os
import socket
import sys
import time
import traceback

import numpy as np

CHECKPOINT_NAME = "checkpoint.npz"
MODEL_NAME = "model.npz"
SUMMARY_NAME = "summary.json"


class JobError(Exception):
    """A problem the user can fix (a setting, a missing or malformed file)."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5, help="passes over every rank's part (default 5)")
    parser.add_argument("--minibatch", type=int, default=256,
                        help="GLOBAL minibatch: samples per step over all ranks (default 256)")
    parser.add_argument("--lr", type=float, default=0.5, help="step size on the mean gradient (default 0.5)")
    parser.add_argument("--l2", type=float, default=1e-4, help="L2 penalty on the weights (default 1e-4)")
    parser.add_argument("--seed", type=int, default=1, help="the per-epoch shuffles (default 1)")
    parser.add_argument("--progress-every", type=int, default=10,
                        help="rank 0 writes a metrics line every this many steps and at each epoch's end")
    args = parser.parse_args(argv)
    for name in ("epochs", "minibatch", "lr", "progress_every"):
        if getattr(args, name) <= 0:
            parser.error("--{} must be positive".format(name.replace("_", "-")))
    if args.l2 < 0:
        parser.error("--l2 must not be negative")
    return args


def job_environment():
    """The contract's variables; a missing one is named."""
    env = {}
    for key, name in (("data_dir", "JOB_DATA_DIR"), ("output_dir", "JOB_OUTPUT_DIR"),
                      ("checkpoint_dir", "JOB_CHECKPOINT_DIR")):
        env[key] = os.environ.get(name, "")
        if not env[key]:
            raise JobError("environment variable {} is not set: this script runs as a cluster job, which sets "
                           "JOB_DATA_DIR, JOB_OUTPUT_DIR and JOB_CHECKPOINT_DIR for every rank "
                           "(examples/README.md)".format(name))
    env["layout"] = os.environ.get("JOB_DATA_LAYOUT", "")
    env["test_file"] = os.environ.get("JOB_TEST_FILE", "")
    env["metrics_file"] = os.environ.get("JOB_METRICS_FILE", "")
    env["resume"] = os.environ.get("JOB_RESUME", "") == "1"
    return env


def load_part(path, layout):
    """(X float64, y float64) of one .npz part, or JobError saying what is wrong."""
    if not os.path.isfile(path):
        raise JobError("part not found: {} (this job expects JOB_DATA_LAYOUT=presplit, one .npz part per rank "
                       "named shard-<rank>.npz, i.e. dataset_train_source a directory of exactly as many parts "
                       "as ranks; JOB_DATA_LAYOUT is {!r})".format(path, layout))
    with open(path, "rb") as handle:
        if handle.read(4) != b"PK\x03\x04":
            raise JobError("{} is not an .npz file (np.savez writes a zip archive)".format(path))
    try:
        with np.load(path, allow_pickle=False) as data:
            if "X" not in data.files or "y" not in data.files:
                raise JobError("{} holds {}, needs arrays X (samples x features) and y (0/1 labels)".format(
                    path, ", ".join(data.files) or "nothing"))
            X = np.asarray(data["X"], dtype=np.float64)
            y = np.asarray(data["y"], dtype=np.float64).reshape(-1)
    except JobError:
        raise
    except Exception as error:  # a corrupt or non-npz file
        raise JobError("cannot read {} as .npz: {}".format(path, error))
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise JobError("{}: X has shape {} and y {}: need X samples x features, y one label a sample".format(
            path, X.shape, y.shape))
    if not np.all((y == 0) | (y == 1)):
        raise JobError("{}: y must hold 0/1 labels".format(path))
    if not np.all(np.isfinite(X)):
        raise JobError("{}: X holds NaN or infinite values".format(path))
    return X, y


def save_npz_atomic(path, **arrays):
    """np.savez through a temporary file and os.replace: a reader (or a crash)
    sees the old checkpoint or the new one, never half of one."""
    temporary = path + ".tmp"
    with open(temporary, "wb") as target:
        np.savez(target, **arrays)
        target.flush()
        os.fsync(target.fileno())
    os.replace(temporary, path)


def write_json_atomic(path, document):
    temporary = path + ".tmp"
    with open(temporary, "w") as target:
        json.dump(document, target, indent=2, sort_keys=True)
        target.write("\n")
    os.replace(temporary, path)


def local_batch(minibatch, ranks, rank):
    """This rank's share of the global minibatch (the shares add up to it)."""
    return minibatch // ranks + (1 if rank < minibatch % ranks else 0)


def forward(theta, X, y):
    """(gradient sum, loss sum, errors) of the logistic loss over X, y; theta = [w..., b]."""
    z = X @ theta[:-1] + theta[-1]
    p = 1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0)))
    residual = p - y
    gradient = np.empty_like(theta)
    gradient[:-1] = X.T @ residual
    gradient[-1] = residual.sum()
    # log(1 + e^z) - y z, computed stably.
    loss = float(np.sum(np.logaddexp(0.0, z) - y * z))
    errors = float(np.sum((z > 0) != (y > 0.5)))
    return gradient, loss, errors


class Metrics(object):
    """JOB_METRICS_FILE, one JSON object a line, flushed per line (rank 0).

    A resumed run keeps the lines up to its checkpoint's step and drops the
    ones a crashed run wrote after it; a fresh run starts the file anew.
    """

    def __init__(self, path, keep_until_step):
        self.handle = None
        if not path:
            return
        kept = []
        if keep_until_step > 0 and os.path.exists(path):
            with open(path) as previous:
                for line in previous:
                    try:
                        if int(json.loads(line)["step"]) <= keep_until_step:
                            kept.append(line)
                    except (ValueError, KeyError, TypeError):
                        pass
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self.handle = open(path, "w")
        self.handle.writelines(kept)
        self.handle.flush()

    def write(self, record):
        if self.handle is not None:
            self.handle.write(json.dumps(record, sort_keys=True) + "\n")
            self.handle.flush()

    def close(self):
        if self.handle is not None:
            self.handle.close()


def describe_problems(everyone):
    """Each problem once, with the ranks (and hosts) that have it."""
    where = {}
    for rank, (host, problems, _, _) in enumerate(everyone):
        for problem in problems:
            where.setdefault(problem, []).append("{} ({})".format(rank, host))
    return ["rank{} {}: {}".format("s" if len(ranks) > 1 else "", ", ".join(ranks), problem)
            for problem, ranks in where.items()]


def run(comm, args, env):
    from mpi4py import MPI

    rank, ranks = comm.Get_rank(), comm.Get_size()
    host = socket.gethostname()

    def say(text):
        print("rank {}/{} {}: {}".format(rank, ranks, host, text))
        sys.stdout.flush()

    # Every rank checks its own part; all ranks learn every problem at once
    # and stop together, rank 0 naming them all.
    shard = os.path.join(env["data_dir"], "shard-{:05d}.npz".format(rank))
    problems = []
    X = y = None
    if env["layout"] not in ("", "presplit"):
        problems.append("JOB_DATA_LAYOUT is {!r}: this job reads .npz parts, set dataset_layout: presplit "
                        "(and dataset_train_source to the directory of parts)".format(env["layout"]))
    else:
        try:
            X, y = load_part(shard, env["layout"])
        except JobError as error:
            problems.append(str(error))
    if rank == 0 and env["test_file"] and not os.path.isfile(env["test_file"]):
        problems.append("JOB_TEST_FILE {} not found".format(env["test_file"]))
    features = -1 if X is None else X.shape[1]
    everyone = comm.allgather((host, problems, features, 0 if X is None else X.shape[0]))
    widths = set(f for _, _, f, _ in everyone if f >= 0)
    report = describe_problems(everyone)
    if not report and len(widths) > 1:
        report.append("the parts disagree on the number of features: " + ", ".join(
            "rank {}: {}".format(r, f) for r, (_, _, f, _) in enumerate(everyone)))
    if not report and args.minibatch < ranks:
        report.append("--minibatch {} is smaller than the {} ranks".format(args.minibatch, ranks))
    if report:
        raise JobError("cannot start: " + "; ".join(report))
    counts = [n for _, _, _, n in everyone]
    total_samples = sum(counts)
    batch = local_batch(args.minibatch, ranks, rank)
    # Every rank runs the same number of steps an epoch (the collective
    # needs all of them); a rank whose part is used up adds zeros, so every
    # sample of every part is used once an epoch.
    steps_per_epoch = max(-(-n // local_batch(args.minibatch, ranks, r)) for r, n in enumerate(counts))
    say("part {} ({} samples, {} features), {} of every {} samples a step, {} steps an epoch".format(
        shard, X.shape[0], features, batch, args.minibatch, steps_per_epoch))

    theta = np.zeros(features + 1)
    epoch = step = samples = 0
    resumed = False
    checkpoint = os.path.join(env["checkpoint_dir"], CHECKPOINT_NAME)
    if rank == 0:
        os.makedirs(env["checkpoint_dir"], exist_ok=True)
        os.makedirs(env["output_dir"], exist_ok=True)
    # Resume: rank 0 reads its checkpoint and broadcasts it, so the other
    # ranks need not see the file.
    state = None
    if rank == 0 and env["resume"]:
        if os.path.exists(checkpoint):
            try:
                with np.load(checkpoint, allow_pickle=False) as saved:
                    state = {name: saved[name] for name in saved.files}
            except Exception as error:
                state = {"error": "cannot read checkpoint {}: {}".format(checkpoint, error)}
            else:
                if int(state["features"]) != features or int(state["seed"]) != args.seed \
                        or int(state["total_samples"]) != total_samples:
                    state = {"error": "checkpoint {} is from another job (features {}, seed {}, samples {}; "
                                      "this job: {}, {}, {}): delete it to start over".format(
                                          checkpoint, int(state["features"]), int(state["seed"]),
                                          int(state["total_samples"]), features, args.seed, total_samples)}
        else:
            say("JOB_RESUME=1 but no checkpoint at {}: starting fresh".format(checkpoint))
    state = comm.bcast(state, root=0)
    if state is not None:
        if "error" in state:
            raise JobError(str(state["error"]))
        theta = np.array(state["theta"], dtype=np.float64)
        epoch, step, samples = int(state["epoch"]), int(state["step"]), int(state["samples"])
        resumed = True
        if rank == 0:
            say("resumed from {} after epoch {} (step {})".format(checkpoint, epoch, step))

    metrics = Metrics(env["metrics_file"], step if resumed else 0) if rank == 0 else None
    start = time.time()
    samples_at_start = samples
    window = (start, samples)
    last = None
    send = np.empty(features + 4)
    receive = np.empty_like(send)
    for epoch in range(epoch + 1, args.epochs + 1):
        # The same shuffle for (seed, epoch, rank) on every run, so that a
        # resumed run continues exactly as an uninterrupted one.
        order = np.random.RandomState([args.seed, epoch, rank]).permutation(X.shape[0])
        for i in range(steps_per_epoch):
            rows = order[i * batch:(i + 1) * batch]
            if len(rows):
                gradient, loss, errors = forward(theta, X[rows], y[rows])
            else:
                gradient, loss, errors = np.zeros_like(theta), 0.0, 0.0
            send[:features + 1] = gradient
            send[features + 1:] = (loss, errors, len(rows))
            comm.Allreduce(send, receive, op=MPI.SUM)
            n = receive[-1]
            if n == 0:
                continue
            mean_gradient = receive[:features + 1] / n
            mean_gradient[:-1] += args.l2 * theta[:-1]
            theta -= args.lr * mean_gradient
            step += 1
            samples += int(n)
            last = (receive[features + 1] / n, receive[features + 2] / n)
            if rank == 0 and (step % args.progress_every == 0 or i == steps_per_epoch - 1):
                now = time.time()
                metrics.write({"step": step, "epoch": epoch, "samples": samples, "loss": last[0],
                               "metric": last[1],
                               "samples_per_sec": round((samples - window[1]) / max(now - window[0], 1e-9), 1)})
                window = (now, samples)
        if rank == 0:
            save_npz_atomic(checkpoint, theta=theta, epoch=epoch, step=step, samples=samples,
                            features=features, seed=args.seed, total_samples=total_samples)
            say("epoch {} done: step {}, loss {:.4f}, error {:.4f}; checkpoint {}".format(
                epoch, step, last[0], last[1], checkpoint))
    seconds = time.time() - start
    say("done: {} steps, {} samples trained (this run {}) in {:.2f} s".format(
        step, samples, samples - samples_at_start, seconds))
    if rank != 0:
        return
    metrics.close()

    np.savez(os.path.join(env["output_dir"], MODEL_NAME), w=theta[:-1], b=theta[-1], features=features)
    accuracy = test_loss = cosine = None
    test_samples = 0
    if env["test_file"]:
        X_test, y_test = load_part(env["test_file"], env["layout"])
        if X_test.shape[1] != features:
            raise JobError("JOB_TEST_FILE {} has {} features, the training parts {}".format(
                env["test_file"], X_test.shape[1], features))
        _, loss_sum, errors = forward(theta, X_test, y_test)
        test_samples = X_test.shape[0]
        accuracy, test_loss = 1.0 - errors / test_samples, loss_sum / test_samples
        with np.load(env["test_file"], allow_pickle=False) as data:
            if "w_true" in data.files:
                w_true = np.asarray(data["w_true"], dtype=np.float64)
                cosine = float(theta[:-1] @ w_true / (np.linalg.norm(theta[:-1]) * np.linalg.norm(w_true)))
    summary = {
        "test_accuracy": accuracy,
        "test_loss": test_loss,
        "test_samples": test_samples,
        "weight_cosine_to_truth": cosine,
        "samples_trained": samples,
        "seconds": round(seconds, 3),
        "ranks": ranks,
        "epochs": args.epochs,
        "steps": step,
        "minibatch": args.minibatch,
        "lr": args.lr,
        "final_loss": None if last is None else last[0],
        "resumed": resumed,
        "job_name": os.environ.get("JOB_NAME", ""),
        "run_id": os.environ.get("JOB_RUN_ID", ""),
    }
    write_json_atomic(os.path.join(env["output_dir"], SUMMARY_NAME), summary)
    say("test accuracy {}, weights' cosine to the truth {}".format(
        "n/a" if accuracy is None else "{:.4f}".format(accuracy),
        "n/a" if cosine is None else "{:.4f}".format(cosine)))


def main(argv=None):
    args = parse_args(argv)
    try:
        env = job_environment()
    except JobError as error:
        sys.exit("error: {}".format(error))  # before MPI starts: a plain non-zero exit
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    try:
        run(comm, args, env)
    except JobError as error:
        # Raised on every rank after the same collective (or on rank 0 alone
        # at the end, when no other rank waits): say it once, exit non-zero.
        if comm.Get_rank() == 0:
            sys.stderr.write("error: {}\n".format(error))
        sys.stderr.flush()
        sys.exit(1)
    except BaseException:
        # Anything else may leave the other ranks waiting in an Allreduce:
        # abort the whole job.
        sys.stderr.write("rank {}: ".format(comm.Get_rank()))
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)


if __name__ == "__main__":
    main()
