"""CNTK 2.7 backend: data-parallel training over MPI with CNTK's own learners.

This is the production path on real clusters. It runs inside the CNTK
interpreter (CPython 3.6 with Open MPI 1.10), so it must stay valid Python
3.6: no walrus, no f"{x=}", no dataclasses, no subscripted builtins such as
list[int] at run time. tests/training/test_cntk_api.py looks up every cntk
name it reads and binds every cntk call it makes on the real cntk 2.7 CPU
wheel (taken branches or not), and tests/training/test_cntk_mpi.py runs it
on that wheel under mpirun.

Launched once per rank by mpirun, e.g.

    mpirun -np 8 -hostfile hosts python train.py --backend cntk ...

Every rank reads only its own shard, data_dir/shard-{rank:05d}.ctf, in CNTK
text format (dense streams named ``features`` and ``labels``). Rank 0 alone
writes output_dir/model.cntk, output_dir/metrics.jsonl and
output_dir/summary.json, and checkpoint_dir/trainer.ckpt(.ckp); on --resume
EVERY rank reads the checkpoint (CNTK restores it on every worker).

Everything a rank must know about the others (host names, whether each sees
the checkpoint, shard sizes, sample counts) travels through one primitive,
_gather(): a sum-aggregate (CNTK's Communicator.aggregate_in_place) of a zero
array in which each rank fills its own row. CNTK's communicator itself only
knows its own worker's host name.
"""

import ctypes
import hashlib
import json
import os
import platform
import socket
import sys
import time
import traceback

import common

CHECKPOINT_NAME = "trainer.ckpt"
# CNTK's save_checkpoint writes both (the model, and the trainer, learner and
# external state); restore_from_checkpoint reads both on every rank.
CHECKPOINT_FILES = (CHECKPOINT_NAME, CHECKPOINT_NAME + ".ckp")
MODEL_NAME = "model.cntk"
TEST_MINIBATCH = 1024


class JobError(Exception):
    """A problem every rank learned about through the same collective, so
    every rank raises it at the same point (and can say so before exiting)."""


def run(args):
    """Train with CNTK on this rank; return the summary on rank 0, else None.

    On any error the traceback is printed and the process exits non-zero
    without finalizing MPI, so that mpirun aborts the whole job instead of
    leaving the other ranks blocked in a collective.
    """
    communicator = []
    try:
        import cntk as C
        summary = _train(C, args, communicator)
    except (Exception, KeyboardInterrupt) as error:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        if isinstance(error, JobError) and communicator:
            # Every rank raised this after the same collective: wait until
            # all have printed why, or mpirun could kill a rank mid-sentence
            # when the first one exits.
            try:
                communicator[0].barrier()
            except Exception:
                pass
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


# -- what the ranks tell each other ------------------------------------------


def _gather(C, communicator, rank, workers, row):
    """Every rank's row of numbers, by rank (a list of lists of floats).

    Collective: every rank must call it at the same point with a row of the
    same length. Each rank writes its row into its own slot of a zero
    (workers x len) array and the sum-aggregate over all workers fills every
    slot everywhere. float64 carries integers exactly up to 2**53.
    """
    import numpy as np
    table = np.zeros((workers, len(row)), dtype=np.float64)
    table[rank, :] = row
    # On the CPU whatever the default device, so a GPU worker aggregates the
    # same way (and the table comes back without a device copy).
    view = C.NDArrayView.from_dense(table, device=C.device.cpu())
    communicator.aggregate_in_place([view], set(communicator.workers()))
    return view.asarray().tolist()


def _gather_json(C, communicator, rank, workers, document):
    """Every rank's JSON document, by rank: the lengths first, then the
    bytes (one byte a cell), so no document is cut whatever its length."""
    payload = json.dumps(document, sort_keys=True).encode("ascii")
    lengths = [int(row[0]) for row in _gather(C, communicator, rank, workers, [len(payload)])]
    row = [0] * max(lengths)
    row[:len(payload)] = bytearray(payload)
    table = _gather(C, communicator, rank, workers, row)
    return [json.loads(bytes(bytearray(int(b) for b in table[r][:lengths[r]])).decode("ascii"))
            for r in range(workers)]


def _checkpoint_view(checkpoint_dir):
    """What this rank sees of the checkpoint: state (ok, missing, incomplete,
    unreadable) and, when ok, a sha256 over both files, so the ranks can
    tell that they would restore the same checkpoint."""
    paths = [os.path.join(checkpoint_dir, name) for name in CHECKPOINT_FILES]
    present = [os.path.exists(path) for path in paths]
    if not any(present):
        return {"state": "missing", "dir": checkpoint_dir}
    if not all(present):
        return {"state": "incomplete", "dir": checkpoint_dir,
                "lacks": [name for name, there in zip(CHECKPOINT_FILES, present) if not there]}
    digest = hashlib.sha256()
    try:
        for path in paths:
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    except (IOError, OSError) as error:
        return {"state": "unreadable", "dir": checkpoint_dir, "error": str(error)}
    return {"state": "ok", "dir": checkpoint_dir, "sha256": digest.hexdigest()}


def _resume_decision(views, hosts):
    """'restore' or 'fresh' from every rank's view of the checkpoint, or a
    JobError that names the ranks that do not see rank 0's checkpoint."""
    states = [view["state"] for view in views]
    if all(state == "missing" for state in states):
        return "fresh"
    if all(state == "ok" for state in states) and len(set(view["sha256"] for view in views)) == 1:
        return "restore"

    def who(ranks):
        return ", ".join("{} ({}: {}{})".format(
            r, hosts[r], views[r]["dir"],
            "" if views[r]["state"] == "ok" else ", " + {
                "missing": "no checkpoint",
                "incomplete": "lacks " + " and ".join(views[r].get("lacks", [])),
                "unreadable": "unreadable: " + views[r].get("error", ""),
            }[views[r]["state"]]) for r in ranks)

    seeing = [r for r, state in enumerate(states) if state == "ok"]
    lacking = [r for r, state in enumerate(states) if state != "ok"]
    remedy = ("On --resume every rank restores the checkpoint (CNTK reads {} on every rank), so the "
              "checkpoint dir must be readable by every rank with the same content: put it on storage "
              "every node mounts, or copy rank 0's {} into every node's checkpoint dir before resuming "
              "(or delete the checkpoint on every node to start fresh).").format(
                  " and ".join(CHECKPOINT_FILES), " and ".join(CHECKPOINT_FILES))
    if lacking:
        return JobError("cannot resume: the checkpoint is visible to rank(s) {} but not to rank(s) {}. {}".format(
            who(seeing) or "none", who(lacking), remedy))
    reference = views[0]["sha256"]
    differ = [r for r in seeing if views[r]["sha256"] != reference]
    return JobError("cannot resume: rank(s) {} hold a different checkpoint than rank 0 ({}). {}".format(
        who(differ), who([0]), remedy))


PATH_OPTIONS = ("data_dir", "test_file", "output_dir", "checkpoint_dir")


def _job_arguments(args):
    """The options every rank must share (all but the paths, which may
    differ per node)."""
    return {name: value for name, value in sorted(vars(args).items()) if name not in PATH_OPTIONS}


def _count_samples(path):
    """Samples in a dense CTF shard: one sample a non-empty line."""
    count = 0
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                count += 1
    return count


def _resolve_test_file(args):
    if not args.test_file:
        return None
    if os.path.isabs(args.test_file) or os.path.exists(args.test_file):
        return args.test_file
    return os.path.join(args.data_dir, args.test_file)


def _readable_file_problem(path, what):
    if not os.path.isfile(path):
        return "{} not found: {}".format(what, path)
    try:
        with open(path, "rb"):
            pass
    except (IOError, OSError) as error:
        return "{} not readable: {}: {}".format(what, path, error)
    return None


def _test_accuracy(C, args, trainer, features, labels):
    """Accuracy of the trained model on the whole test file (rank 0 only).

    trainer.test_minibatch is local (no MPI), so only rank 0 runs this.
    """
    path = _resolve_test_file(args)
    if path is None:
        return None, 0
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


def _last_step(trainer):
    """(samples, loss, error rate) of the minibatch just trained, as this
    rank's trainer sees it: the global minibatch under data-parallel SGD
    (CNTK aggregates them with the gradients), this rank's own under block
    momentum. (0, 0, 0) when the trainer has nothing (an empty step)."""
    n = trainer.previous_minibatch_sample_count
    if not n:
        return 0, 0.0, 0.0
    try:
        return n, trainer.previous_minibatch_loss_average, trainer.previous_minibatch_evaluation_average
    except RuntimeError:
        return 0, 0.0, 0.0


def _mpi_library_version():
    """MPI_Get_library_version of the libmpi.so.12 CNTK loaded, or None."""
    try:
        libmpi = ctypes.CDLL("libmpi.so.12")
        buffer = ctypes.create_string_buffer(8192)
        length = ctypes.c_int(0)
        if libmpi.MPI_Get_library_version(buffer, ctypes.byref(length)) != 0:
            return None
        text = buffer.value.decode("ascii", "replace")
        return text.replace("\x00", "").splitlines()[0].strip() or None
    except (OSError, AttributeError, IndexError):
        return None


def _versions(C):
    import numpy as np
    return {"python": platform.python_version(), "cntk": C.__version__.strip(),
            "numpy": np.__version__, "mpi": _mpi_library_version()}


def _train(C, args, communicator_out):
    import numpy as np

    start_time = time.time()
    # Static methods: MPI starts lazily on first use; there is no
    # Communicator.init() in CNTK 2.7.
    rank = C.Communicator.rank()
    workers = C.Communicator.num_workers()
    host = socket.gethostname()
    logger = common.rank_logger(rank, workers, host)

    # The global minibatch is split as in the numpy backend: rank r takes
    # M // W samples, plus one if r < M % W. CNTK aggregates uneven local
    # minibatches correctly (the gradients are sums, divided by the global
    # sample count).
    if args.minibatch < workers:
        raise ValueError("global minibatch {} is smaller than the number of ranks {}".format(
            args.minibatch, workers))
    batches = [common.local_batch_size(args.minibatch, workers, r) for r in range(workers)]
    local_minibatch = batches[rank]
    block_momentum = bool(_option(args, "block_momentum", False))

    shard = common.shard_path(args.data_dir, rank)
    output_dir = args.output_dir
    checkpoint_dir = args.checkpoint_dir or os.path.join(output_dir, "checkpoints")
    checkpoint = os.path.join(checkpoint_dir, CHECKPOINT_NAME)
    metrics_path = os.path.join(output_dir, common.METRICS_FILE)

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
    learner, mode = _distributed_learner(C, args, local_learner, args.minibatch)
    communicator = learner.communicator()  # an instance: is_main(), workers(), barrier()
    communicator_out.append(communicator)
    is_main = communicator.is_main()

    # Preflight, before any training: every rank says what it has, and every
    # rank decides the same from the same table, so a problem on one rank
    # stops all of them at once, with the reason, instead of one rank dying
    # mid-run or the others hanging in a collective.
    problems = []
    shard_problem = _readable_file_problem(shard, "shard")
    if shard_problem:
        problems.append(shard_problem)
    if rank == 0:
        test_file = _resolve_test_file(args)
        test_problem = test_file and _readable_file_problem(test_file, "test file")
        if test_problem:
            problems.append(test_problem + " (rank 0 scores the model on it after training)")
    mine = {"host": host, "problems": problems, "job": _job_arguments(args)}
    if args.resume:
        mine["checkpoint"] = _checkpoint_view(checkpoint_dir)
    if block_momentum and not shard_problem:
        mine["shard_samples"] = _count_samples(shard)
    peers = _gather_json(C, communicator, rank, workers, mine)
    hosts = [peer["host"] for peer in peers]
    failures = ["rank {} on {}: {}".format(r, peer["host"], problem)
                for r, peer in enumerate(peers) for problem in peer["problems"]]
    for r, peer in enumerate(peers):
        differ = ["--{} {} (rank 0: {})".format(name.replace("_", "-"), peer["job"].get(name), value)
                  for name, value in sorted(peers[0]["job"].items()) if peer["job"].get(name) != value]
        if differ:
            failures.append("rank {} on {} runs another job than rank 0: {}".format(
                r, peer["host"], ", ".join(differ)))
    if failures:
        raise JobError("cannot start: " + "; ".join(failures))
    decision = "fresh"
    if args.resume:
        decision = _resume_decision([peer["checkpoint"] for peer in peers], hosts)
        if isinstance(decision, JobError):
            raise decision

    # exist_ok: ranks on one node create the same directory at the same time.
    os.makedirs(checkpoint_dir, exist_ok=True)
    if is_main:
        os.makedirs(output_dir, exist_ok=True)

    # The 4th argument of Trainer is progress writers, not a communicator:
    # the distributed learner carries the communicator. ProgressPrinter
    # prints on whichever rank has one (its rank= only names a log file), so
    # rank 0 alone gets one.
    progress_every = max(1, int(args.progress_every))
    writers = []
    if is_main:
        writers.append(C.logging.ProgressPrinter(freq=progress_every, tag="Training", num_epochs=args.epochs))
    trainer = C.Trainer(model, (loss, metric), [learner], writers)

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
    budgets = [None] * workers
    if args.max_samples is not None:
        budgets = [common.local_batch_size(args.max_samples, workers, r) for r in range(workers)]
    local_budget = budgets[rank]

    # Checkpoints: a manual loop with trainer.save_checkpoint /
    # restore_from_checkpoint, the reader position riding along in the
    # checkpoint's external state. training_session with
    # CheckpointConfig(restore=True) would restore the same things, but it
    # drives the reader itself and, when distributed, always asks it for
    # partition `rank` of `num_workers`: with per-rank shards each rank would
    # train on a 1/W slice of its shard. The manual loop also gives the
    # per-step metrics.jsonl. Both calls are collective: all ranks call them
    # at the same step; rank 0 writes the files, every rank reads them back
    # and gets its own external state. That is why the preflight above made
    # sure every rank sees the same checkpoint, or none does.
    step = 0
    sweeps = 0
    local_samples = 0
    resumed = decision == "restore"
    if resumed:
        state = trainer.restore_from_checkpoint(checkpoint)
        saved_workers = int(state["workers"])
        if saved_workers != workers:
            raise JobError("checkpoint {} was written by {} ranks, this job has {}: the shards differ; "
                           "remove the checkpoint on every node to start over".format(
                               checkpoint, saved_workers, workers))
        source.restore_from_checkpoint(dict(state["source"]))
        step = int(state["step"])
        sweeps = int(state["sweeps"])
        local_samples = int(state["local_samples"])
        if is_main:
            logger.info("resumed from %s at step %d", checkpoint, step)
    elif args.resume and is_main:
        logger.info("no checkpoint at %s on any rank, starting fresh", checkpoint)

    # Where every rank stands: the global sample count, and for block
    # momentum the last step at which every rank still has data (below).
    totals = [0] * workers
    if block_momentum:
        for r, peer in enumerate(peers):
            totals[r] = peer["shard_samples"] * args.epochs
            if budgets[r] is not None:
                totals[r] = min(totals[r], budgets[r])
    standing = _gather(C, communicator, rank, workers, [local_samples])
    samples = int(sum(row[0] for row in standing))
    samples_at_start = samples

    # Collectives of this script (checkpoints, block momentum's progress
    # records) must happen at the same step on every rank. Under
    # data-parallel SGD they do: a rank out of data passes an empty map,
    # keeps taking part in the aggregation, and train_minibatch returns
    # False on every rank at the same step. Under block momentum a rank out
    # of data returns from train_minibatch at once and waits in the final
    # synchronization while the others go on, so collectives stop at the
    # last step where every rank still has data. The reader delivers exactly
    # the samples asked for until the shard's sweeps (or budget) run out, so
    # that step follows from the shard sizes.
    sync_until = None
    if block_momentum:
        sync_until = min(step + -(-(totals[r] - int(standing[r][0])) // batches[r]) for r in range(workers))

    def in_sync():
        return sync_until is None or step <= sync_until

    def save_checkpoint():
        trainer.save_checkpoint(checkpoint, {
            "source": source.get_checkpoint_state(),
            "step": step,
            "sweeps": sweeps,
            "local_samples": local_samples,
            "workers": workers,
        })

    metrics = common.MetricsLog(output_dir, resumed_at_step=step) if is_main else None
    logger.info("start: backend cntk, model %s, shard %s, %d samples per step (global %d), %s, device %s",
                args.model, shard, local_minibatch, args.minibatch, mode, _device_name(C))

    checkpoint_every = int(_option(args, "checkpoint_every", 0)) or 10 * progress_every
    train_start = window_start = time.time()
    window_samples = samples
    last = (0, 0.0, 0.0)
    recorded_step = step
    final_loss = None
    while True:
        mb = {}
        if local_budget is None or local_samples < local_budget:
            wanted = local_minibatch if local_budget is None else min(local_minibatch, local_budget - local_samples)
            mb = source.next_minibatch(wanted, input_map=input_map)
        if not mb and sync_until is not None and step < sync_until:
            raise RuntimeError("rank {}: shard {} ran out at step {}, before step {} its size promised: "
                               "is it one sample a line?".format(rank, shard, step + 1, sync_until))
        if mb:
            local_samples += mb[labels].num_samples
            if mb[labels].end_of_sweep:
                sweeps += 1
        # An empty map tells the distributed learner this rank is out of data
        # (see in_sync above); train_minibatch returns False once every rank is.
        if not trainer.train_minibatch(mb if mb else {}):
            break
        step += 1
        last = _last_step(trainer)
        if not block_momentum:
            samples += last[0]  # the global minibatch's size, the same on every rank
        if step % progress_every == 0 and in_sync():
            if block_momentum:
                # Each rank has its own minibatch's loss: add them up.
                table = _gather(C, communicator, rank, workers,
                                [local_samples, last[0], last[1] * last[0], last[2] * last[0]])
                samples = int(sum(row[0] for row in table))
                count = sum(row[1] for row in table)
                record_loss = sum(row[2] for row in table) / count if count else None
                record_metric = sum(row[3] for row in table) / count if count else None
            else:
                record_loss, record_metric = (last[1], last[2]) if last[0] else (None, None)
            if record_loss is not None:
                final_loss = record_loss
                now = time.time()
                if is_main:
                    record = common.metrics_record(step, min(sweeps + 1, args.epochs), samples, record_loss,
                                                   record_metric, (samples - window_samples) / max(now - window_start, 1e-9),
                                                   None)
                    metrics.write(record)
                    logger.info(common.progress_text(record))
                window_start, window_samples, recorded_step = now, samples, step
        if step % checkpoint_every == 0 and in_sync():
            save_checkpoint()
    train_seconds = time.time() - train_start

    # The last checkpoint is collective and, for block momentum, comes after
    # the final synchronization of the workers' models: every rank is here.
    save_checkpoint()
    table = _gather(C, communicator, rank, workers,
                    [local_samples, sweeps, last[0], last[1] * last[0], last[2] * last[0]])
    samples = int(sum(row[0] for row in table))
    epochs_done = int(min(row[1] for row in table))
    if block_momentum:
        count = sum(row[2] for row in table)
        last_loss = sum(row[3] for row in table) / count if count else None
        last_metric = sum(row[4] for row in table) / count if count else None
    else:
        last_loss, last_metric = (last[1], last[2]) if last[0] else (None, None)
    if last_loss is not None:
        final_loss = last_loss
    logger.info("done: %d steps, %d global samples in %.2f s", step, samples, train_seconds)
    if not is_main:
        return None

    if step > recorded_step and last_loss is not None:
        now = time.time()
        record = common.metrics_record(step, min(max(sweeps, 1), args.epochs), samples, last_loss, last_metric,
                                       (samples - window_samples) / max(now - window_start, 1e-9), None)
        metrics.write(record)
        logger.info(common.progress_text(record))
    metrics.close()

    model.save(os.path.join(output_dir, MODEL_NAME))
    accuracy, test_samples = _test_accuracy(C, args, trainer, features, labels)
    summary = common.make_summary("cntk", args.model, hosts, _versions(C), epochs_done, samples,
                                  samples - samples_at_start, train_seconds, None, final_loss, accuracy)
    summary.update({
        "hidden": args.hidden if args.model == "mlp" else None,
        "distributed": mode,
        "quantization_bits": int(_option(args, "quantization_bits", 32)),
        "device": _device_name(C),
        "minibatch": args.minibatch,
        "minibatch_per_rank": batches,
        "lr": args.lr,
        "max_samples": args.max_samples,
        "steps": step,
        "wall_seconds": round(time.time() - start_time, 3),
        "test_samples": test_samples,
        "resumed": resumed,
        "seed": args.seed,
    })
    common.write_json_atomic(os.path.join(output_dir, common.SUMMARY_FILE), summary)
    logger.info("test accuracy %s on %d samples, %.0f samples/s",
                "n/a" if accuracy is None else "{:.4f}".format(accuracy), test_samples, summary["samples_per_sec"])
    return summary


def _device_name(C):
    device = C.device.use_default_device()
    kind = "gpu" if C.device.DeviceKind.GPU == device.type() else "cpu"
    return "{}:{}".format(kind, device.id())
