#!/usr/bin/env python3
"""Distributed k-means (Lloyd's algorithm) over MPI with numpy and mpi4py.

Launched once per rank by mpirun:

    mpirun -np N python kmeans.py [--k 5] [--iterations 50] [--tol 1e-4] [--seed 1]

Each rank reads only its slice of the points, JOB_DATA_DIR/shard-{rank:05d}.txt
(JOB_DATA_LAYOUT=shard: the cluster cut one text file, one point a line of
whitespace-separated numbers, into contiguous slices; make_points.py writes
such a file). Every iteration each rank assigns its points to the nearest
centroid and one Allreduce adds the ranks' per-cluster coordinate sums,
counts and squared distances; every rank then computes the same new
centroids. The initial centroids come from k-means++ on a sample of every
rank's points, picked by rank 0 and broadcast.

Rank 0 alone writes: JOB_METRICS_FILE (optional; step = iteration, loss =
inertia, the sum of squared distances to the nearest centroid),
JOB_CHECKPOINT_DIR/kmeans.npz after every iteration (read back and broadcast
when JOB_RESUME=1), and in JOB_OUTPUT_DIR centroids.txt (one centroid a line)
and summary.json. With JOB_TEST_FILE (points in the same format) the summary
also gives the test points' mean squared distance.

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

CHECKPOINT_NAME = "kmeans.npz"
CENTROIDS_NAME = "centroids.txt"
SUMMARY_NAME = "summary.json"
SAMPLE_PER_CLUSTER = 50   # points per cluster each rank offers to the k-means++ initialisation


class JobError(Exception):
    """A problem the user can fix (a setting, a missing or malformed file)."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=5, help="number of clusters (default 5)")
    parser.add_argument("--iterations", type=int, default=50, help="at most this many iterations (default 50)")
    parser.add_argument("--tol", type=float, default=1e-4,
                        help="stop when no centroid moves more than tol x the data's RMS spread (default 1e-4)")
    parser.add_argument("--seed", type=int, default=1, help="the initial centroids (default 1)")
    args = parser.parse_args(argv)
    if args.k <= 0 or args.iterations <= 0:
        parser.error("--k and --iterations must be positive")
    if args.tol < 0:
        parser.error("--tol must not be negative")
    return args


def job_environment():
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


def read_points(path, what):
    """A (points x dim) float64 array from a text file, one point a line;
    blank lines and lines starting with '#' are skipped. An empty file gives
    a (0 x 0) array. A bad line raises JobError with its number."""
    rows = []
    width = None
    with open(path) as source:
        for number, line in enumerate(source, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                row = [float(token) for token in text.split()]
            except ValueError as error:
                raise JobError("{} {}, line {}: {} (expected whitespace-separated numbers)".format(
                    what, path, number, error))
            if width is None:
                width = len(row)
            elif len(row) != width:
                raise JobError("{} {}, line {}: {} numbers, the lines before have {}".format(
                    what, path, number, len(row), width))
            rows.append(row)
    X = np.array(rows, dtype=np.float64).reshape(len(rows), width or 0)
    if not np.all(np.isfinite(X)):
        raise JobError("{} {} holds NaN or infinite values".format(what, path))
    return X


def describe_problems(everyone):
    """Each problem once, with the ranks (and hosts) that have it."""
    where = {}
    for rank, (host, problems) in enumerate(everyone):
        for problem in problems:
            where.setdefault(problem, []).append("{} ({})".format(rank, host))
    return ["rank{} {}: {}".format("s" if len(ranks) > 1 else "", ", ".join(ranks), problem)
            for problem, ranks in where.items()]


def squared_distances(X, centroids):
    """(points x k) squared Euclidean distances."""
    d2 = (X * X).sum(axis=1)[:, None] - 2.0 * X @ centroids.T + (centroids * centroids).sum(axis=1)[None, :]
    return np.maximum(d2, 0.0)


def kmeans_plus_plus(points, k, rng):
    """k initial centroids from points by k-means++ (D^2 sampling)."""
    centroids = [points[rng.randint(len(points))]]
    d2 = ((points - centroids[0]) ** 2).sum(axis=1)
    for _ in range(1, k):
        total = d2.sum()
        index = rng.randint(len(points)) if total <= 0 else rng.choice(len(points), p=d2 / total)
        centroids.append(points[index])
        d2 = np.minimum(d2, ((points - points[index]) ** 2).sum(axis=1))
    return np.array(centroids)


def save_npz_atomic(path, **arrays):
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


class Metrics(object):
    """JOB_METRICS_FILE (rank 0): one JSON object a line, flushed per line;
    a resumed run keeps the lines up to its checkpoint's iteration."""

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
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
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


def run(comm, args, env):
    from mpi4py import MPI

    rank, ranks = comm.Get_rank(), comm.Get_size()
    host = socket.gethostname()

    def say(text):
        print("rank {}/{} {}: {}".format(rank, ranks, host, text))
        sys.stdout.flush()

    # Every rank checks its slice; every rank learns every problem and all
    # stop together, rank 0 naming them.
    shard = os.path.join(env["data_dir"], "shard-{:05d}.txt".format(rank))
    problems = []
    X = None
    if env["layout"] not in ("", "shard", "presplit"):
        problems.append("JOB_DATA_LAYOUT is {!r}: this job reads one slice of the points per rank, set "
                        "dataset_layout: shard (dataset_train_source: the points file)".format(env["layout"]))
    elif not os.path.isfile(shard):
        problems.append("slice not found: {} (this job expects JOB_DATA_LAYOUT=shard, the points file cut "
                        "into shard-<rank>.txt, one per rank; JOB_DATA_LAYOUT is {!r})".format(shard, env["layout"]))
    else:
        try:
            X = read_points(shard, "slice")
        except JobError as error:
            problems.append(str(error))
    if rank == 0 and env["test_file"] and not os.path.isfile(env["test_file"]):
        problems.append("JOB_TEST_FILE {} not found".format(env["test_file"]))
    everyone = comm.allgather((host, problems))
    report = describe_problems(everyone)
    if report:
        raise JobError("cannot start: " + "; ".join(report))

    # Dimensions must agree (an empty slice has none and is allowed).
    dims = comm.allgather(X.shape[1] if len(X) else -1)
    known = sorted(set(d for d in dims if d >= 0))
    if len(known) != 1:
        raise JobError("the slices disagree on the number of coordinates: " + ", ".join(
            "rank {}: {}".format(r, "empty" if d < 0 else d) for r, d in enumerate(dims)) if known
            else "every slice is empty: no points to cluster")
    dim = known[0]
    if not len(X):
        X = np.zeros((0, dim))
    # Global count, mean and spread (for the stopping rule).
    stats = np.concatenate([[len(X)], X.sum(axis=0), [(X * X).sum()]])
    total = np.empty_like(stats)
    comm.Allreduce(stats, total, op=MPI.SUM)
    points = int(total[0])
    mean = total[1:1 + dim] / points
    spread = float(np.sqrt(max(total[-1] / points - (mean * mean).sum(), 0.0)))
    if points < args.k:
        raise JobError("{} points in all, fewer than --k {}".format(points, args.k))
    say("slice {}: {} of {} points, {} coordinates".format(shard, len(X), points, dim))

    checkpoint = os.path.join(env["checkpoint_dir"], CHECKPOINT_NAME)
    if rank == 0:
        os.makedirs(env["checkpoint_dir"], exist_ok=True)
        os.makedirs(env["output_dir"], exist_ok=True)
    state = None
    if rank == 0 and env["resume"]:
        if os.path.exists(checkpoint):
            try:
                with np.load(checkpoint, allow_pickle=False) as saved:
                    state = {name: saved[name] for name in saved.files}
            except Exception as error:
                state = {"error": "cannot read checkpoint {}: {}".format(checkpoint, error)}
            else:
                mine = (args.k, dim, points, args.seed)
                theirs = tuple(int(state[name]) for name in ("k", "dim", "points", "seed"))
                if mine != theirs:
                    state = {"error": "checkpoint {} is from another job (k, dim, points, seed = {}; this job {}): "
                                      "delete it to start over".format(checkpoint, theirs, mine)}
        else:
            say("JOB_RESUME=1 but no checkpoint at {}: starting fresh".format(checkpoint))
    state = comm.bcast(state, root=0)
    iteration = 0
    converged = False
    resumed = state is not None
    if resumed:
        if "error" in state:
            raise JobError(str(state["error"]))
        centroids = np.array(state["centroids"], dtype=np.float64)
        iteration = int(state["iteration"])
        converged = bool(state["converged"])
        if rank == 0:
            say("resumed from {} after iteration {}".format(checkpoint, iteration))
    else:
        # k-means++ on a sample of every rank's points, picked by rank 0.
        rng = np.random.RandomState([args.seed, rank])
        take = min(len(X), SAMPLE_PER_CLUSTER * args.k)
        samples = comm.gather(X[rng.choice(len(X), take, replace=False)] if take else X, root=0)
        centroids = None
        if rank == 0:
            centroids = kmeans_plus_plus(np.concatenate(samples), args.k, np.random.RandomState(args.seed))
        centroids = comm.bcast(centroids, root=0)

    metrics = Metrics(env["metrics_file"], iteration if resumed else 0) if rank == 0 else None
    k = args.k
    send = np.empty(k * dim + k + 1)
    receive = np.empty_like(send)

    def lloyd_pass(centroids):
        """Global (sums k x dim, counts k, inertia) of assigning every point
        to its nearest centroid."""
        d2 = squared_distances(X, centroids)
        nearest = d2.argmin(axis=1) if len(X) else np.zeros(0, dtype=int)
        sums = np.zeros((k, dim))
        np.add.at(sums, nearest, X)
        send[:k * dim] = sums.ravel()
        send[k * dim:k * dim + k] = np.bincount(nearest, minlength=k)
        send[-1] = d2[np.arange(len(X)), nearest].sum()
        comm.Allreduce(send, receive, op=MPI.SUM)
        return receive[:k * dim].reshape(k, dim).copy(), receive[k * dim:k * dim + k].copy(), float(receive[-1])

    start = time.time()
    passes = 0
    while not converged and iteration < args.iterations:
        sums, counts, inertia = lloyd_pass(centroids)
        passes += 1
        iteration += 1
        # An empty cluster keeps its centroid.
        new = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], centroids)
        shift = float(np.sqrt(((new - centroids) ** 2).sum(axis=1)).max())
        centroids = new
        converged = bool(shift <= args.tol * spread)
        if rank == 0:
            metrics.write({"step": iteration, "epoch": iteration, "loss": inertia, "samples": points * iteration,
                           "max_shift": shift, "empty_clusters": int((counts == 0).sum())})
            save_npz_atomic(checkpoint, centroids=centroids, iteration=iteration, converged=converged,
                            k=k, dim=dim, points=points, seed=args.seed)
            say("iteration {}: inertia {:.6g}, largest centroid move {:.3g}{}".format(
                iteration, inertia, shift, " (converged)" if converged else ""))
    # The inertia of the final centroids (one more pass).
    _, counts, inertia = lloyd_pass(centroids)
    passes += 1
    seconds = time.time() - start
    if rank != 0:
        return
    metrics.close()
    np.savetxt(os.path.join(env["output_dir"], CENTROIDS_NAME), centroids, fmt="%.8g")
    test_mse = None
    test_points = 0
    if env["test_file"]:
        X_test = read_points(env["test_file"], "JOB_TEST_FILE")
        if len(X_test):
            if X_test.shape[1] != dim:
                raise JobError("JOB_TEST_FILE {} has {} coordinates, the training points {}".format(
                    env["test_file"], X_test.shape[1], dim))
            test_points = len(X_test)
            test_mse = float(squared_distances(X_test, centroids).min(axis=1).mean())
    summary = {
        "test_accuracy": None,
        "test_mean_squared_distance": test_mse,
        "test_points": test_points,
        "samples_trained": points * iteration,  # point assignments of the iterations, across resumes
        "seconds": round(seconds, 3),
        "ranks": ranks,
        "k": k,
        "points": points,
        "iterations": iteration,
        "converged": converged,
        "final_inertia": inertia,
        "mean_squared_distance": inertia / points,
        "cluster_sizes": [int(c) for c in counts],
        "resumed": resumed,
        "job_name": os.environ.get("JOB_NAME", ""),
        "run_id": os.environ.get("JOB_RUN_ID", ""),
    }
    write_json_atomic(os.path.join(env["output_dir"], SUMMARY_NAME), summary)
    say("{} after {} iterations: inertia {:.6g} ({:.4g} a point), cluster sizes {}; centroids in {}".format(
        "converged" if converged else "stopped", iteration, inertia, inertia / points, summary["cluster_sizes"],
        os.path.join(env["output_dir"], CENTROIDS_NAME)))


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
        # at the end, when no other rank waits): said once, exit non-zero.
        if comm.Get_rank() == 0:
            sys.stderr.write("error: {}\n".format(error))
        sys.stderr.flush()
        sys.exit(1)
    except BaseException:
        # Anything else may leave the other ranks waiting in a collective.
        sys.stderr.write("rank {}: ".format(comm.Get_rank()))
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)


if __name__ == "__main__":
    main()
