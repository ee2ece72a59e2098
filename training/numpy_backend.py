"""The numpy + mpi4py reference backend: data-parallel SGD with MPI Allreduce.

Every rank holds the same weights, computes the summed cross-entropy
gradient of its part of the global minibatch, and an Allreduce SUM per step
turns the ranks' parts into the gradient of the whole global minibatch;
every rank then applies the same update. With --allreduce overlap (the
default) the output layer's gradient is sent with a non-blocking Allreduce
as soon as backpropagation has it, while the hidden layer's gradient is
still being computed. The model math below is pure numpy, so it is tested
without MPI.
"""

import os
import platform
import socket
import sys
import time
import traceback

import numpy as np

import common

DTYPE = np.float64
CHECKPOINT_FILE = "checkpoint.npz"


class Model(object):
    """Softmax regression, or one ReLU hidden layer under a softmax.

    The parameters live in one flat vector so that one Allreduce carries the
    whole gradient; views() names its pieces.
    """

    def __init__(self, kind, features, hidden, classes):
        self.kind = kind
        self.features = features
        self.hidden = hidden
        self.classes = classes
        if kind == "softmax":
            self.shapes = [("W", (features, classes)), ("b", (classes,))]
        elif kind == "mlp":
            self.shapes = [("W1", (features, hidden)), ("b1", (hidden,)),
                           ("W2", (hidden, classes)), ("b2", (classes,))]
        else:
            raise ValueError("unknown model {!r}".format(kind))
        self.size = sum(int(np.prod(shape)) for _, shape in self.shapes)

    def config(self):
        config = {"model": self.kind, "features": self.features, "classes": self.classes}
        if self.kind == "mlp":
            config["hidden"] = self.hidden
        return config

    def views(self, theta):
        named = {}
        offset = 0
        for name, shape in self.shapes:
            count = int(np.prod(shape))
            named[name] = theta[offset:offset + count].reshape(shape)
            offset += count
        return named

    def initial_parameters(self, seed):
        rng = np.random.default_rng(seed)
        theta = np.zeros(self.size, dtype=DTYPE)
        p = self.views(theta)
        # Biases start at zero; weights with variance 2/fan_in under a ReLU
        # (He) and 1/fan_in under the softmax, so the logits start near zero.
        if self.kind == "softmax":
            p["W"][...] = rng.standard_normal(p["W"].shape) / np.sqrt(self.features)
        else:
            p["W1"][...] = rng.standard_normal(p["W1"].shape) * np.sqrt(2.0 / self.features)
            p["W2"][...] = rng.standard_normal(p["W2"].shape) / np.sqrt(self.hidden)
        return theta

    def logits(self, theta, X):
        p = self.views(theta)
        if self.kind == "softmax":
            return X @ p["W"] + p["b"]
        hidden = np.maximum(X @ p["W1"] + p["b1"], 0.0)
        return hidden @ p["W2"] + p["b2"]

    @property
    def tail_start(self):
        """Where the parameters of the output layer start in theta: the mlp
        backpropagates into them first, so contribution() finishes
        [tail_start:] before the rest."""
        return 0 if self.kind == "softmax" else self.features * self.hidden + self.hidden

    def contribution(self, theta, X, Y, out, on_tail=None):
        """Write into out (model.size + 3 floats) what a rank puts into the
        Allreduce SUM: the cross-entropy gradient summed over the rows of X,
        then the summed loss, the count of errors and the row count. Summed
        over ranks these are the totals of the concatenated global batch,
        however the rows were split (global_mean() turns them into means).

        on_tail(start) is called as soon as out[start:] is final (the output
        layer's gradient and the three totals), before the hidden layer's
        gradient is computed; it may return a function, called between the
        remaining steps, that lets a non-blocking Allreduce of out[start:]
        progress (Open MPI moves one only inside an MPI call).
        """
        p = self.views(theta)
        g = self.views(out[:self.size])
        if self.kind == "softmax":
            output_layer(X, p["W"], p["b"], Y, g["W"], g["b"], out)
            if on_tail is not None:
                on_tail(self.tail_start)
            return
        H = X @ p["W1"]
        H += p["b1"]
        A = np.maximum(H, 0.0)
        dZ = output_layer(A, p["W2"], p["b2"], Y, g["W2"], g["b2"], out)
        progress = (on_tail(self.tail_start) if on_tail is not None else None) or (lambda: None)
        dH = dZ @ p["W2"].T
        dH *= H > 0
        progress()
        np.matmul(X.T, dH, out=g["W1"])
        progress()
        dH.sum(axis=0, out=g["b1"])

    def loss_and_gradient(self, theta, X, Y):
        """Mean cross-entropy over the rows of X, its error rate, and its
        gradient with respect to theta (a flat vector shaped like theta)."""
        out = np.empty(self.size + 3, dtype=DTYPE)
        self.contribution(theta, X, Y, out)
        gradient, loss, error, _ = global_mean(out)
        return loss, error, gradient

    def accuracy(self, theta, X, Y):
        return 1.0 - error_rate(self.logits(theta, X), Y)


def output_layer(A, W, b, Y, gW, gb, out):
    """The softmax output layer on inputs A: its weights' and bias's summed gradients written into gW and gb,
    the summed loss, the error count and the row count into out[-3:]; the gradient in its logits returned."""
    Z = A @ W
    Z += b
    loss, dZ = softmax_cross_entropy(Z, Y)
    np.matmul(A.T, dZ, out=gW)
    dZ.sum(axis=0, out=gb)
    out[-3:] = (loss, error_count(Z, Y), len(A))
    return dZ


def softmax_cross_entropy(Z, Y):
    """Cross-entropy of softmax(Z) against Y summed over the rows, and its
    gradient in Z."""
    shifted = Z - Z.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -(Y * log_p).sum()
    np.exp(log_p, out=log_p)
    log_p -= Y
    return loss, log_p


def error_count(Z, Y):
    return int(np.count_nonzero(Z.argmax(axis=1) != Y.argmax(axis=1)))


def error_rate(Z, Y):
    return error_count(Z, Y) / len(Z)


def global_mean(summed):
    """(gradient, loss, error rate, sample count) of the global batch from
    the Allreduce SUM of every rank's Model.contribution()."""
    count = summed[-1]
    return summed[:-3] / count, summed[-3] / count, summed[-2] / count, int(round(count))


# Shared with the cntk backend, which splits the global minibatch the same way.
local_batch_size = common.local_batch_size


def steps_per_epoch(shard_sizes, batch_sizes):
    """Every rank must run the same number of steps, or the Allreduce hangs:
    the epoch ends when the smallest shard (in batches) is used up. The
    last batch of a shard may be short; global_mean() weights it right."""
    if min(batch_sizes) < 1:
        raise ValueError("--minibatch {} is smaller than the {} ranks".format(
            sum(batch_sizes), len(batch_sizes)))
    return min(-(-shard // batch) for shard, batch in zip(shard_sizes, batch_sizes))


def epoch_order(seed, epoch, rank, count):
    """The order a rank visits its shard in an epoch, derived from (seed,
    epoch, rank) alone, so a resumed run replays it without saved RNG state."""
    return np.random.default_rng([seed, epoch, rank]).permutation(count)


def save_npz_atomic(path, arrays):
    """Write an .npz so a reader sees the old file or the new one, never half."""
    temporary = path + ".tmp"
    with open(temporary, "wb") as target:
        np.savez(target, **arrays)
        target.flush()
        os.fsync(target.fileno())
    os.replace(temporary, path)


def save_checkpoint(path, model, state, seed):
    arrays = dict(model.config())
    arrays.update(theta=state["theta"], step=state["step"], epoch=state["epoch"],
                  samples=state["samples"], loss=np.nan if state["loss"] is None else state["loss"],
                  seed=seed)
    save_npz_atomic(path, arrays)


def load_checkpoint(path, model, seed):
    """The training state saved by save_checkpoint(), refused if it was
    written for another model or seed (the shuffles derive from the seed)."""
    with np.load(path, allow_pickle=False) as saved:
        saved_config = {key: saved[key].item() for key in model.config()
                        if key in saved.files}
        if saved_config != model.config():
            raise ValueError("{} holds {}, this run is {}".format(path, saved_config, model.config()))
        if int(saved["seed"]) != seed:
            raise ValueError("{} was written with --seed {}, this run has --seed {}".format(
                path, int(saved["seed"]), seed))
        loss = float(saved["loss"])
        return {"theta": saved["theta"].astype(DTYPE), "step": int(saved["step"]),
                "epoch": int(saved["epoch"]), "samples": int(saved["samples"]),
                "loss": None if np.isnan(loss) else loss}


def starting_state(args, model, checkpoint, logger):
    """Rank 0's view of where training starts: the checkpoint, or fresh weights."""
    if args.resume and os.path.exists(checkpoint):
        state = load_checkpoint(checkpoint, model, args.seed)
        logger.info("resuming from %s after epoch %d (step %d)", checkpoint, state["epoch"], state["step"])
        return state
    if args.resume:
        logger.info("no checkpoint at %s, starting fresh", checkpoint)
    return {"theta": model.initial_parameters(args.seed), "step": 0, "epoch": 0,
            "samples": 0, "loss": None}


def versions(MPI):
    import mpi4py
    return {"python": platform.python_version(), "numpy": np.__version__,
            "mpi4py": mpi4py.__version__,
            "mpi": MPI.Get_library_version().splitlines()[0].strip()}


def train(comm, MPI, args, logger):
    rank, ranks = comm.Get_rank(), comm.Get_size()
    model = Model(args.model, args.features, args.hidden, args.classes)
    shard = common.shard_path(args.data_dir, rank)
    X, Y = common.read_ctf(shard, args.features, args.classes, DTYPE)
    logger.info("start: backend numpy, model %s, shard %s with %d samples", args.model, shard, len(X))

    checkpoint = os.path.join(args.checkpoint_dir, CHECKPOINT_FILE)
    state = None
    if rank == 0:
        # Read the test set before training so that a bad path fails now.
        X_test, Y_test = common.read_ctf(args.test_file, args.features, args.classes, DTYPE)
        os.makedirs(args.output_dir, exist_ok=True)
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        state = starting_state(args, model, checkpoint, logger)
    # Each node has its own checkpoint dir: rank 0's weights (fresh or
    # resumed) go to every rank, so all start from the same point.
    state = comm.bcast(state, root=0)
    theta, step, samples, last_loss = state["theta"], state["step"], state["samples"], state["loss"]
    epochs_done = state["epoch"]

    batch = local_batch_size(args.minibatch, ranks, rank)
    steps = steps_per_epoch(comm.allgather(len(X)),
                            [local_batch_size(args.minibatch, ranks, r) for r in range(ranks)])
    metrics = common.MetricsLog(args.output_dir, resumed_at_step=step) if rank == 0 else None
    contribution = np.empty(model.size + 3, dtype=DTYPE)
    summed = np.empty_like(contribution)
    overlap = args.allreduce == "overlap" and model.tail_start > 0
    tail = []

    def send_tail(start):
        tail.append(comm.Iallreduce(contribution[start:], summed[start:], op=MPI.SUM))
        return tail[-1].Test

    timing = common.RankTiming(step, time.perf_counter, time.process_time)
    run_start = window_start = time.perf_counter()
    run_samples = window_samples = 0
    allreduce_seconds = window_allreduce = 0.0
    for epoch in range(epochs_done, args.epochs):
        if args.max_samples is not None and samples >= args.max_samples:
            break
        order = epoch_order(args.seed, epoch, rank, len(X))
        for index in range(steps):
            started = time.perf_counter()
            rows = order[index * batch:(index + 1) * batch]
            model.contribution(theta, X[rows], Y[rows], contribution, send_tail if overlap else None)
            # Only the Allreduce time left after the compute is counted: with overlap, what the
            # hidden layer's gradient covered is not.
            before = time.perf_counter()
            if overlap:
                comm.Allreduce(contribution[:model.tail_start], summed[:model.tail_start], op=MPI.SUM)
                tail.pop().Wait()
            else:
                comm.Allreduce(contribution, summed, op=MPI.SUM)
            waited = time.perf_counter() - before
            gradient, last_loss, error, count = global_mean(summed)
            theta -= args.lr * gradient
            step += 1
            # Compute: the step less its wait in the Allreduce (the progress record below is not counted).
            timing.observe(step, time.perf_counter() - started - waited, waited)
            samples += count
            run_samples += count
            window_samples += count
            allreduce_seconds += waited
            window_allreduce += waited
            if rank == 0 and step % args.progress_every == 0:
                elapsed = time.perf_counter() - window_start
                record = common.metrics_record(step, epoch + 1, samples, last_loss, error,
                                               window_samples / elapsed, window_allreduce / elapsed)
                metrics.write(record)
                logger.info(common.progress_text(record))
                window_start, window_samples, window_allreduce = time.perf_counter(), 0, 0.0
            # Every rank sees the same global count, so all stop at the same step.
            if args.max_samples is not None and samples >= args.max_samples:
                break
        if index == steps - 1:
            epochs_done = epoch + 1
            if rank == 0:
                save_checkpoint(checkpoint, model, {"theta": theta, "step": step, "epoch": epochs_done,
                                                    "samples": samples, "loss": last_loss}, args.seed)
    seconds = time.perf_counter() - run_start
    timing.stop()

    hosts = comm.allgather(socket.gethostname())
    mine = timing.record(rank, hosts[rank], step)
    logger.info(common.timing_text(mine))
    timings = comm.gather(mine, root=0)
    if rank == 0:
        metrics.close()
        arrays = dict(model.config())
        arrays.update(model.views(theta))
        save_npz_atomic(os.path.join(args.output_dir, common.MODEL_FILE), arrays)
        accuracy = model.accuracy(theta, X_test, Y_test)
        summary = common.make_summary("numpy", args.model, hosts, versions(MPI), epochs_done, samples,
                                      run_samples, seconds, allreduce_seconds, last_loss, accuracy)
        summary.update(common.timing_summary(timings, "measured"))
        common.write_json_atomic(os.path.join(args.output_dir, common.SUMMARY_FILE), summary)
        logger.info("test accuracy %.4f on %d samples, %.0f samples/s, allreduce %.1f%%",
                    accuracy, len(X_test), summary["samples_per_sec"],
                    100.0 * (summary["allreduce_share"] or 0.0))
    logger.info("done: %d steps, %d global samples in %.2f s", step, samples, seconds)


def run(args):
    # mpi4py is imported here, not at the top, so the model math above
    # imports (for tests and tools) without starting MPI.
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    logger = common.rank_logger(comm.Get_rank(), comm.Get_size(), socket.gethostname())
    try:
        train(comm, MPI, args, logger)
    except Exception:
        # The other ranks would wait in the next Allreduce for ever: take
        # the whole job down, after saying why.
        logger.error("failed:\n%s", traceback.format_exc())
        sys.stdout.flush()
        sys.stderr.flush()
        comm.Abort(1)
