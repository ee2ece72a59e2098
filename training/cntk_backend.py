"""CNTK 2.7 backend: data-parallel training over MPI with CNTK's own learners.

This is the production path on real clusters. It runs inside the CNTK
interpreter (CPython 3.6 with Open MPI 1.10), so it must stay valid Python
3.6: no walrus, no f"{x=}", no dataclasses, no subscripted builtins such as
list[int] at run time. It is checked against the real cntk 2.7 wheel's
Python sources by scripts/cntk_api_check.py (tests/cntk_api/).

Launched once per rank by mpirun, e.g.

    mpirun -np 8 -hostfile hosts python train.py --backend cntk ...

Every rank reads only its own shard, data_dir/shard-{rank:05d}.ctf, in CNTK
text format (dense streams named ``features`` and ``labels``). Rank 0 alone
writes output_dir/model.cntk, output_dir/metrics.jsonl and
output_dir/summary.json.

"""

import json
import os
import platform
import socket
import sys
import time
import traceback

import common

CHECKPOINT_NAME = "trainer.ckpt"  # CNTK also writes trainer.ckpt.ckp next to it
MODEL_NAME = "model.cntk"
METRICS_NAME = "metrics.jsonl"
SUMMARY_NAME = "summary.json"
TEST_MINIBATCH = 1024


def run(args):
    """Train with CNTK on this rank; return the summary on rank 0, else None.

    On any error the traceback is printed and the process exits non-zero
    without finalizing MPI, so that mpirun aborts the whole job instead of
    leaving the other ranks blocked in a collective.
    """
    try:
        import cntk as C
        summary = _train(C, args)
    except (Exception, KeyboardInterrupt):
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        # os._exit, not sys.exit: a normal interpreter exit runs atexit
        # handlers and CNTK's MPI teardown, which can wait forever for ranks
        # that are still inside an allreduce. Dying here with a non-zero
        # status makes mpirun kill the remaining ranks and report the job
        # as failed.
        os._exit(1)
    # Only after a successful run: no MPI communication may follow.
    C.Communicator.finalize()
    return summary


def _option(args, name, default):
    """A CNTK-only CLI option, with its default when the CLI does not set it."""
    value = getattr(args, name, None)
    return default if value is None else value


def _append_jsonl(path, record):
    with open(path, "a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
        handle.flush()


def _streams(C, args):
    """Stream definitions shared by the training shards and the test file."""
    return C.io.StreamDefs(
        features=C.io.StreamDef(field="features", shape=args.features, is_sparse=False),
        labels=C.io.StreamDef(field="labels", shape=args.classes, is_sparse=False),
    )


def _build_model(C, args, features):
    """Softmax regression or a one-hidden-layer MLP, with seeded initializers.

    Every rank builds the same initial parameters from the same seeds, so the
    replicas start identical; data-parallel SGD then keeps them identical.
    """
    if args.model == "softmax":
        return C.layers.Dense(args.classes, init=C.glorot_uniform(seed=args.seed), name="logits")(features)
    if args.model == "mlp":
        hidden = C.layers.Dense(args.hidden, activation=C.relu,
                                init=C.glorot_uniform(seed=args.seed), name="hidden")(features)
        return C.layers.Dense(args.classes, init=C.glorot_uniform(seed=args.seed + 1), name="logits")(hidden)
    raise ValueError("unknown model {!r}: expected 'softmax' or 'mlp'".format(args.model))


def _distributed_learner(C, args, local_learner, global_minibatch):
    """Wrap the local SGD learner for MPI: plain, 1-bit, or block momentum."""
    bits = int(_option(args, "quantization_bits", 32))
    if not 1 <= bits <= 32:
        raise ValueError("quantization_bits must be between 1 and 32, got {}".format(bits))
    if _option(args, "block_momentum", False):
        if bits < 32:
            raise ValueError("block momentum and 1-bit SGD (quantization_bits < 32) exclude each other")
        # block_size is in samples across all workers; without a setting,
        # synchronize every 10 global minibatches.
        block_size = int(_option(args, "block_size", 0)) or 10 * global_minibatch
        learner = C.train.distributed.block_momentum_distributed_learner(local_learner, block_size=block_size)
        return learner, "block_momentum(block_size={})".format(block_size)
    # num_quantization_bits < 32 selects 1-bit SGD (quantized gradients with
    # error feedback); 32 is plain allreduce of full-precision gradients.
    learner = C.train.distributed.data_parallel_distributed_learner(
        local_learner, distributed_after=0, num_quantization_bits=bits)
    mode = "data_parallel" if bits == 32 else "data_parallel_{}bit".format(bits)
    return learner, mode


def _resolve_test_file(args):
    if not args.test_file:
        return None
    if os.path.isabs(args.test_file) or os.path.exists(args.test_file):
        return args.test_file
    return os.path.join(args.data_dir, args.test_file)


def _test_accuracy(C, args, trainer, features, labels):
    """Accuracy of the trained model on the whole test file (rank 0 only).

    trainer.test_minibatch is local (no MPI), so only rank 0 runs this.
    """
    path = _resolve_test_file(args)
    if path is None:
        return None, 0
    if not os.path.exists(path):
        raise IOError("test file not found: {}".format(path))
    source = C.io.MinibatchSource(C.io.CTFDeserializer(path, _streams(C, args)),
                                  randomize=False, max_sweeps=1)
    input_map = {features: source.streams.features, labels: source.streams.labels}
    errors = 0.0
    count = 0
    while True:
        mb = source.next_minibatch(TEST_MINIBATCH, input_map=input_map)
        if not mb:
            break
        n = mb[labels].num_samples
        errors += trainer.test_minibatch(mb) * n
        count += n
    if count == 0:
        raise ValueError("test file {} holds no samples".format(path))
    return 1.0 - errors / count, count


class _Window(object):
    """Loss and metric averaged over the steps since the last metrics line."""

    def __init__(self):
        self.reset(0, time.time())

    def reset(self, samples, now):
        self.loss = 0.0
        self.metric = 0.0
        self.count = 0
        self.start_samples = samples
        self.start_time = now

    def add(self, trainer):
        # previous_minibatch_* raise when the last minibatch was empty, which
        # happens on a rank whose shard is exhausted before the others.
        n = trainer.previous_minibatch_sample_count
        if n:
            self.loss += trainer.previous_minibatch_loss_average * n
            self.metric += trainer.previous_minibatch_evaluation_average * n
            self.count += n

    def averages(self):
        if not self.count:
            return None, None
        return self.loss / self.count, self.metric / self.count


def _train(C, args):
    import numpy as np

    start_time = time.time()
    # Static methods: MPI starts lazily on first use; there is no
    # Communicator.init() in CNTK 2.7.
    rank = C.Communicator.rank()
    workers = C.Communicator.num_workers()
    host = socket.gethostname()

    local_minibatch = args.minibatch // workers
    if local_minibatch < 1:
        raise ValueError("global minibatch {} is smaller than the number of ranks {}".format(args.minibatch, workers))
    global_minibatch = local_minibatch * workers
    if global_minibatch != args.minibatch:
        print("rank {}: minibatch {} is not a multiple of {} ranks; using {} ({} per rank)".format(
            rank, args.minibatch, workers, global_minibatch, local_minibatch))

    shard = os.path.join(args.data_dir, "shard-{:05d}.ctf".format(rank))
    if not os.path.exists(shard):
        raise IOError("rank {} on {}: shard not found: {}".format(rank, host, shard))

    output_dir = args.output_dir
    checkpoint_dir = args.checkpoint_dir or os.path.join(output_dir, "checkpoints")
    checkpoint = os.path.join(checkpoint_dir, CHECKPOINT_NAME)
    os.makedirs(checkpoint_dir, exist_ok=True)
    if rank == 0:
        os.makedirs(output_dir, exist_ok=True)

    features = C.input_variable(args.features, dtype=np.float32, name="features")
    labels = C.input_variable(args.classes, dtype=np.float32, name="labels")
    model = _build_model(C, args, features)
    loss = C.cross_entropy_with_softmax(model, labels)
    metric = C.classification_error(model, labels)

    # learning_parameter_schedule(lr) without minibatch_size: the rate is
    # applied to the mean gradient of the minibatch the learner actually gets,
    # and under data-parallel SGD that is the allreduced global minibatch. So
    # lr means the same as in the numpy backend (mean gradient over the global
    # minibatch), whatever the rank count. learning_rate_schedule(...,
    # UnitType.minibatch) is deprecated since 2.2 and not used.
    local_learner = C.sgd(model.parameters, lr=C.learning_parameter_schedule(args.lr))
    learner, mode = _distributed_learner(C, args, local_learner, global_minibatch)
    communicator = learner.communicator()  # an instance: is_main(), workers(), barrier()
    is_main = communicator.is_main()
    hosts = _hosts(communicator)

    # The 4th argument of Trainer is progress writers, not a communicator:
    # the distributed learner carries the communicator.
    progress_every = max(1, int(args.progress_every))
    printer = C.logging.ProgressPrinter(freq=progress_every, tag="Training", rank=rank,
                                        num_epochs=args.epochs)
    trainer = C.Trainer(model, (loss, metric), [learner], [printer])

    # Each rank reads only its own, already partitioned shard, so the source
    # is asked for this rank's share of the global minibatch with the default
    # single partition (no num_data_partitions/partition_index): asking for W
    # partitions would make every rank skip (W-1)/W of its own shard.
    # max_sweeps bounds the epochs; randomization happens within the shard.
    source = C.io.MinibatchSource(C.io.CTFDeserializer(shard, _streams(C, args)),
                                  randomize=True, randomization_seed=args.seed,
                                  max_sweeps=args.epochs)
    input_map = {features: source.streams.features, labels: source.streams.labels}

    # max_samples is global; each rank reads its part of it, then reports end
    # of data like a rank whose shard is exhausted.
    local_budget = None
    if args.max_samples is not None:
        local_budget = args.max_samples // workers + (1 if rank < args.max_samples % workers else 0)

    # Checkpoints: a manual loop with trainer.save_checkpoint /
    # restore_from_checkpoint, the reader position riding along in the
    # checkpoint's external state. training_session with
    # CheckpointConfig(restore=True) would restore the same things, but it
    # drives the reader itself and, when distributed, always asks it for
    # partition `rank` of `num_workers`: with per-rank shards each rank would
    # train on a 1/W slice of its shard. The manual loop also gives the
    # per-step metrics.jsonl. Both calls are collective (all ranks call them
    # at the same step; rank 0 writes the file, every rank gets back its own
    # external state), so checkpoint_dir must be on storage every rank can
    # read when resuming across nodes. Each rank also leaves a marker after
    # every checkpoint: a rank that has its marker but cannot see the
    # checkpoint fails at once, instead of starting fresh while the others
    # restore (mismatched collectives would hang the job).
    marker = os.path.join(checkpoint_dir, "rank-{:05d}.json".format(rank))
    step = 0
    sweeps = 0
    local_samples = 0
    samples_offset = 0
    resumed = False
    metrics_path = os.path.join(output_dir, METRICS_NAME)
    have_checkpoint = os.path.exists(checkpoint) and os.path.exists(checkpoint + ".ckp")
    if args.resume and not have_checkpoint and os.path.exists(marker):
        raise IOError("rank {} on {}: {} says this rank took part in a checkpointed run, but the checkpoint {} "
                      "is not visible here: checkpoint_dir must be shared by all ranks (or copied to every "
                      "node) to resume".format(rank, host, marker, checkpoint))
    if args.resume and have_checkpoint:
        state = trainer.restore_from_checkpoint(checkpoint)
        saved_workers = int(state["workers"])
        if saved_workers != workers:
            raise ValueError("checkpoint {} was written by {} ranks, this job has {}: the shards differ; "
                             "remove the checkpoint to start over".format(checkpoint, saved_workers, workers))
        source.restore_from_checkpoint(dict(state["source"]))
        step = int(state["step"])
        sweeps = int(state["sweeps"])
        local_samples = int(state["local_samples"])
        # The trainer's own sample count may or may not survive a restore;
        # keep the global count from the external state either way.
        samples_offset = int(state["samples"]) - trainer.total_number_of_samples_seen
        resumed = True
        print("rank {}: resumed from {} at step {}".format(rank, checkpoint, step))
    elif args.resume:
        print("rank {}: no checkpoint at {}, starting fresh".format(rank, checkpoint))
    if is_main and not resumed and os.path.exists(metrics_path):
        os.remove(metrics_path)

    def global_samples():
        # Trainer.total_number_of_samples_seen counts samples of all workers.
        return samples_offset + trainer.total_number_of_samples_seen

    def save_checkpoint():
        trainer.save_checkpoint(checkpoint, {
            "source": source.get_checkpoint_state(),
            "step": step,
            "sweeps": sweeps,
            "local_samples": local_samples,
            "samples": global_samples(),
            "workers": workers,
        })
        # save_checkpoint ends with a barrier: rank 0 has written the file.
        common.write_json_atomic(marker, {"rank": rank, "host": host, "step": step, "checkpoint": checkpoint})

    print("rank {}/{} on {}: shard {}, {} samples per step (global {}), {}, device {}".format(
        rank, workers, host, shard, local_minibatch, global_minibatch, mode, _device_name(C)))
    sys.stdout.flush()

    checkpoint_every = int(_option(args, "checkpoint_every", 0)) or 10 * progress_every
    samples_at_start = global_samples()
    train_start = time.time()
    window = _Window()
    window.reset(samples_at_start, train_start)
    final_loss = None
    while True:
        mb = {}
        if local_budget is None or local_samples < local_budget:
            wanted = local_minibatch if local_budget is None else min(local_minibatch, local_budget - local_samples)
            mb = source.next_minibatch(wanted, input_map=input_map)
        if mb:
            local_samples += mb[labels].num_samples
            if mb[labels].end_of_sweep:
                sweeps += 1
        # An empty map tells the distributed learner this rank is out of data;
        # it keeps taking part in the aggregation until every rank is, and
        # then train_minibatch returns False on all ranks at the same step.
        if not trainer.train_minibatch(mb if mb else {}):
            break
        step += 1
        window.add(trainer)
        if step % progress_every == 0:
            final_loss = _log_progress(is_main, metrics_path, window, step, min(sweeps + 1, args.epochs),
                                       global_samples(), final_loss)
        if step % checkpoint_every == 0:
            save_checkpoint()
    if window.count:
        final_loss = _log_progress(is_main, metrics_path, window, step, min(max(sweeps, 1), args.epochs),
                                   global_samples(), final_loss)
    train_seconds = time.time() - train_start

    # The last checkpoint is collective and, for block momentum, also
    # synchronizes the workers' models before rank 0 saves the model.
    save_checkpoint()

    samples = global_samples()
    print("rank {}: done, {} steps, {} global samples, {:.1f} s".format(rank, step, samples, train_seconds))
    if not is_main:
        return None

    model.save(os.path.join(output_dir, MODEL_NAME))
    accuracy, test_samples = _test_accuracy(C, args, trainer, features, labels)
    trained = samples - samples_at_start
    summary = {
        "backend": "cntk",
        "model": args.model,
        "hidden": args.hidden if args.model == "mlp" else None,
        "ranks": workers,
        "hosts": hosts,
        "versions": {"python": platform.python_version(), "cntk": C.__version__.strip()},
        "distributed": mode,
        "quantization_bits": int(_option(args, "quantization_bits", 32)),
        "device": _device_name(C),
        "minibatch": global_minibatch,
        "minibatch_per_rank": local_minibatch,
        "lr": args.lr,
        "epochs": args.epochs,
        "max_samples": args.max_samples,
        "steps": step,
        "samples": samples,
        "seconds": round(train_seconds, 3),
        "samples_per_sec": round(trained / train_seconds, 3) if train_seconds > 0 else None,
        "wall_seconds": round(time.time() - start_time, 3),
        "final_loss": final_loss,
        "test_accuracy": accuracy,
        "test_samples": test_samples,
        "resumed": resumed,
        "seed": args.seed,
    }
    common.write_json_atomic(os.path.join(output_dir, SUMMARY_NAME), summary)
    return summary


def _log_progress(is_main, path, window, step, epoch, samples, last_loss):
    """Write one metrics line on rank 0; return the window's loss (or last_loss)."""
    now = time.time()
    loss, metric = window.averages()
    elapsed = now - window.start_time
    rate = (samples - window.start_samples) / elapsed if elapsed > 0 else None
    if is_main and loss is not None:
        _append_jsonl(path, {
            "step": step,
            "epoch": epoch,
            "samples": samples,
            "loss": float(loss),
            "metric": float(metric),
            "samples_per_sec": round(rate, 3) if rate is not None else None,
        })
    window.reset(samples, now)
    return last_loss if loss is None else float(loss)


def _hosts(communicator):
    """Host names of all ranks, as MPI reports them (informational)."""
    try:
        return sorted(set(str(worker.host_id) for worker in communicator.workers()))
    except Exception as error:  # the summary must not cost the run
        print("could not list the hosts of the job: {!r}".format(error))
        return None


def _device_name(C):
    device = C.device.use_default_device()
    kind = "gpu" if C.device.DeviceKind.GPU == device.type() else "cpu"
    return "{}:{}".format(kind, device.id())
