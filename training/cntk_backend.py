"""CNTK 2.7 backend: data-parallel training over MPI with CNTK's own learners.

This is the production path on real clusters. It runs inside the CNTK
interpreter (CPython 3.6 with Open MPI 1.10), so it and its modules (below)
must stay valid Python 3.6: no walrus, no f"{x=}", no dataclasses, no
subscripted builtins such as list[int] at run time.
tests/training/test_cntk_api.py looks up every cntk name they read and binds
every cntk call they make on the real cntk 2.7 CPU wheel (taken branches or
not), and tests/training/test_cntk_mpi.py runs it on that wheel under mpirun.

Launched once per rank by mpirun, e.g.

    mpirun -np 8 -hostfile hosts python train.py --backend cntk ...

Every rank reads only its own shard, data_dir/shard-{rank:05d}.ctf, in CNTK
text format (dense streams named ``features`` and ``labels``). Rank 0 alone
writes output_dir/model.cntk, output_dir/metrics.jsonl and
output_dir/summary.json, and checkpoint_dir/trainer.ckpt(.ckp); on --resume
EVERY rank reads the checkpoint (CNTK restores it on every worker).

Everything a rank must know about the others (host names, whether each sees
the checkpoint, shard sizes, sample counts) travels through one primitive,
cntk_ranks.gather(). This file is the training loop; its pieces are beside
it, in training/ (sent to the nodes with it):

    cntk_model.py       the network, the distributed learners, the device
    cntk_ranks.py       what the ranks tell each other; JobError
    cntk_preflight.py   every rank's check before training
    cntk_checkpoint.py  the checkpoint: what each rank sees, resume, save, restore
    cntk_evaluation.py  after training: test accuracy, the versions that ran
"""

import os
import socket
import sys
import time
import traceback

import cntk_checkpoint
import cntk_evaluation
import cntk_model
import cntk_preflight
import cntk_ranks
import common
from cntk_checkpoint import CHECKPOINT_NAME
from cntk_ranks import JobError

MODEL_NAME = "model.cntk"


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
    block_momentum = bool(cntk_model.option(args, "block_momentum", False))

    shard = common.shard_path(args.data_dir, rank)
    output_dir = args.output_dir
    checkpoint_dir = args.checkpoint_dir or os.path.join(output_dir, "checkpoints")
    checkpoint = os.path.join(checkpoint_dir, CHECKPOINT_NAME)
    metrics_path = os.path.join(output_dir, common.METRICS_FILE)

    features = C.input_variable(args.features, dtype=np.float32, name="features")
    labels = C.input_variable(args.classes, dtype=np.float32, name="labels")
    model = cntk_model.build_model(C, args, features)
    loss = C.cross_entropy_with_softmax(model, labels)
    metric = C.classification_error(model, labels)

    # learning_parameter_schedule(lr) without minibatch_size: the rate is
    # applied to the mean gradient of the minibatch the learner actually gets,
    # and under data-parallel SGD that is the allreduced global minibatch. So
    # lr means the same as in the numpy backend (mean gradient over the global
    # minibatch), whatever the rank count. learning_rate_schedule(...,
    # UnitType.minibatch) is deprecated since 2.2 and not used.
    local_learner = C.sgd(model.parameters, lr=C.learning_parameter_schedule(args.lr))
    learner, mode = cntk_model.distributed_learner(C, args, local_learner, args.minibatch)
    communicator = learner.communicator()  # an instance: is_main(), workers(), barrier()
    communicator_out.append(communicator)
    is_main = communicator.is_main()

    # Preflight, before any training (cntk_preflight.py): a problem on one
    # rank stops all of them at once, with the reason.
    peers, hosts, decision = cntk_preflight.preflight(C, communicator, rank, workers, args, host, shard,
                                                      checkpoint_dir, block_momentum)

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
    source = C.io.MinibatchSource(C.io.CTFDeserializer(shard, cntk_model.streams(C, args)),
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
        step, sweeps, local_samples = cntk_checkpoint.restore(trainer, source, checkpoint, workers)
        # On every rank: each rank's log shows where it continued from.
        logger.info("resumed from %s at step %d", checkpoint, step)
    elif args.resume and is_main:
        logger.info("no checkpoint at %s on any rank, starting fresh", checkpoint)
    resumed_at_step = step

    # Where every rank stands: the global sample count, and for block
    # momentum the last step at which every rank still has data (below).
    totals = [0] * workers
    if block_momentum:
        for r, peer in enumerate(peers):
            totals[r] = peer["shard_samples"] * args.epochs
            if budgets[r] is not None:
                totals[r] = min(totals[r], budgets[r])
    standing = cntk_ranks.gather(C, communicator, rank, workers, [local_samples])
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
        cntk_checkpoint.save(trainer, source, checkpoint, step, sweeps, local_samples, workers)

    metrics = common.MetricsLog(output_dir, resumed_at_step=step) if is_main else None
    logger.info("start: backend cntk, model %s, shard %s, %d samples per step (global %d), %s, device %s",
                args.model, shard, local_minibatch, args.minibatch, mode, cntk_model.device_name(C))

    checkpoint_every = int(cntk_model.option(args, "checkpoint_every", 0)) or 10 * progress_every
    # Per-rank timing (training/README.md, "Per-rank timing"): CNTK aggregates inside train_minibatch, so
    # the compute a rank's own step needs is measured apart from it, every progress_every steps, by a
    # forward and backward pass over the same local minibatch (loss.grad: no aggregation, no update).
    timing = common.RankTiming(step, time.perf_counter, time.process_time)
    probes = 0
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
        if mb and step % progress_every == 0:
            probe_start = time.perf_counter()
            loss.grad(mb, wrt=model.parameters)
            probe = time.perf_counter() - probe_start
            timing.excluded += probe
            # The first pass builds the backward state: set-up, not a step's compute.
            if probes:
                timing.observe(step, probe)
            probes += 1
        last = cntk_model.last_step(trainer)
        if not block_momentum:
            samples += last[0]  # the global minibatch's size, the same on every rank
        if step % progress_every == 0 and in_sync():
            if block_momentum:
                # Each rank has its own minibatch's loss: add them up.
                table = cntk_ranks.gather(C, communicator, rank, workers,
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
    timing.stop()

    # The last checkpoint is collective and, for block momentum, comes after
    # the final synchronization of the workers' models: every rank is here.
    save_checkpoint()
    table = cntk_ranks.gather(C, communicator, rank, workers,
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
    mine = timing.record(rank, host, step)
    logger.info(common.timing_text(mine))
    # Collective: every rank's timing, by rank, to rank 0 for summary.json.
    timings = cntk_ranks.gather_json(C, communicator, rank, workers, mine)
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
    accuracy, test_samples = cntk_evaluation.accuracy_on_test_file(C, args, trainer, features, labels)
    summary = common.make_summary("cntk", args.model, hosts, cntk_evaluation.versions(C), epochs_done,
                                  samples, samples - samples_at_start, train_seconds, None, final_loss, accuracy)
    summary.update({
        "hidden": args.hidden if args.model == "mlp" else None,
        "distributed": mode,
        "quantization_bits": int(cntk_model.option(args, "quantization_bits", 32)),
        "device": cntk_model.device_name(C),
        "minibatch": args.minibatch,
        "minibatch_per_rank": batches,
        "lr": args.lr,
        "max_samples": args.max_samples,
        "steps": step,
        "wall_seconds": round(time.time() - start_time, 3),
        "test_samples": test_samples,
        "resumed": resumed,
        "resumed_at_step": resumed_at_step,
        "seed": args.seed,
    })
    summary.update(common.timing_summary(timings, "probe", progress_every))
    common.write_json_atomic(os.path.join(output_dir, common.SUMMARY_FILE), summary)
    logger.info("test accuracy %s on %d samples, %.0f samples/s",
                "n/a" if accuracy is None else "{:.4f}".format(accuracy), test_samples, summary["samples_per_sec"])
    return summary
