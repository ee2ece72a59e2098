#!/usr/bin/env python3
"""Data-parallel training of the digits data with CNTK 2.7's training_session.

The usual CNTK distributed-training walkthrough (one MinibatchSource over the
whole training set, a distributed learner, training_session), written for
CNTK 2.7 and the cluster's job contract. Launched once per rank by mpirun:

    mpirun -np 8 python distributed_train.py [--epochs 10] [--minibatch 64]
        [--lr 0.3] [--momentum 0.9] [--model {softmax,mlp}] [--hidden 64]

What it reads and writes (the job contract, examples/README.md):

- JOB_DATA_DIR/train.ctf on EVERY rank: the whole training set, as
  training/make_digits.py writes it (dense CTF, streams |features (64 values)
  and |labels (10, one-hot)). The data must be replicated
  (JOB_DATA_LAYOUT=replicate): training_session with a distributed learner
  asks the reader for partition `rank` of `num_workers` itself, so each rank
  trains on its own 1/N of every global minibatch.
- JOB_TEST_FILE (rank 0, optional): CTF test set; rank 0 scores the model.
- JOB_CHECKPOINT_DIR/distributed_train.ckpt(.ckp): written by rank 0 through
  CheckpointConfig; with JOB_RESUME=1 EVERY rank restores it (CNTK's restore
  is collective), so every rank must see the same file.
- JOB_OUTPUT_DIR (rank 0): model.cntk, summary.json.
- JOB_METRICS_FILE (rank 0, optional): one JSON object per line.

Python 3.6 syntax: CNTK 2.7's wheels exist for CPython 3.5/3.6 only.
"""

import argparse
import json
import os
import socket
import sys
import time
import traceback

CHECKPOINT_NAME = "distributed_train.ckpt"
MODEL_NAME = "model.cntk"
SUMMARY_NAME = "summary.json"
TRAIN_NAME = "train.ctf"
FEATURES = 64
CLASSES = 10
TEST_MINIBATCH = 1024
CHUNKS_PER_RANK = 4
MIN_CHUNK_BYTES = 4096
MAX_CHUNK_BYTES = 32 * 1024 * 1024  # the CTF reader's own default


class JobError(Exception):
    """A problem the user can fix (a setting, a missing file)."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10, help="sweeps over the full training set (default 10)")
    parser.add_argument("--minibatch", type=int, default=64,
                        help="GLOBAL minibatch: samples per step over all ranks together (default 64)")
    parser.add_argument("--lr", type=float, default=0.3,
                        help="learning rate on the global minibatch's mean gradient (default 0.3)")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9; 0: plain SGD)")
    parser.add_argument("--model", choices=("softmax", "mlp"), default="mlp",
                        help="softmax regression, or an MLP with one ReLU layer (default mlp)")
    parser.add_argument("--hidden", type=int, default=64, help="the MLP's hidden units (default 64)")
    parser.add_argument("--seed", type=int, default=1, help="initial weights and reader shuffle (default 1)")
    parser.add_argument("--progress-every", type=int, default=10,
                        help="rank 0 writes a metrics line every this many steps (default 10)")
    parser.add_argument("--checkpoint-every", type=int, default=0,
                        help="samples between checkpoints (default 0: one epoch)")
    parser.add_argument("--chunk-bytes", type=int, default=0,
                        help="the CTF reader's chunk size, the unit it deals out to ranks (default 0: the "
                             "file's size / (4 x ranks), between 4 KB and 32 MB)")
    parser.add_argument("--train-file", default=TRAIN_NAME,
                        help="training file's name inside JOB_DATA_DIR (default train.ctf)")
    args = parser.parse_args(argv)
    for name in ("epochs", "minibatch", "lr", "hidden", "progress_every"):
        if getattr(args, name) <= 0:
            parser.error("--{} must be positive".format(name.replace("_", "-")))
    if not 0.0 <= args.momentum < 1.0:
        parser.error("--momentum must be in [0, 1)")
    return args


def require_env(name):
    value = os.environ.get(name, "")
    if not value:
        raise JobError("environment variable {} is not set: this script runs as a cluster job, which sets "
                       "JOB_DATA_DIR, JOB_OUTPUT_DIR and JOB_CHECKPOINT_DIR for every rank "
                       "(examples/README.md)".format(name))
    return value


def job_environment(args):
    """The contract's variables, checked before CNTK starts MPI."""
    env = {
        "data_dir": require_env("JOB_DATA_DIR"),
        "output_dir": require_env("JOB_OUTPUT_DIR"),
        "checkpoint_dir": require_env("JOB_CHECKPOINT_DIR"),
        "layout": os.environ.get("JOB_DATA_LAYOUT", ""),
        "test_file": os.environ.get("JOB_TEST_FILE", ""),
        "metrics_file": os.environ.get("JOB_METRICS_FILE", ""),
        "resume": os.environ.get("JOB_RESUME", "") == "1",
    }
    if env["layout"] not in ("", "replicate"):
        raise JobError("JOB_DATA_LAYOUT is {!r}, this job needs 'replicate' (dataset_layout: replicate): every "
                       "rank reads the WHOLE {} and CNTK's training_session hands each rank its own part of "
                       "every minibatch; with sharded data each rank would see only 1/N of its shard".format(
                           env["layout"], args.train_file))
    env["train_file"] = os.path.join(env["data_dir"], args.train_file)
    if not os.path.isfile(env["train_file"]):
        raise JobError("training file not found: {} (JOB_DATA_DIR with JOB_DATA_LAYOUT=replicate holds the whole "
                       "data set under its own name; expected {} as written by training/make_digits.py; "
                       "JOB_DATA_LAYOUT={!r})".format(env["train_file"], args.train_file, env["layout"]))
    return env


def count_samples(path):
    """Samples in a dense CTF file without sequence ids: one a non-empty line."""
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())


def streams(C):
    return C.io.StreamDefs(
        features=C.io.StreamDef(field="features", shape=FEATURES, is_sparse=False),
        labels=C.io.StreamDef(field="labels", shape=CLASSES, is_sparse=False))


def build_model(C, args, features):
    """Same seeds on every rank, so every replica starts identical."""
    if args.model == "softmax":
        return C.layers.Dense(CLASSES, init=C.glorot_uniform(seed=args.seed), name="logits")(features)
    hidden = C.layers.Dense(args.hidden, activation=C.relu, init=C.glorot_uniform(seed=args.seed),
                            name="hidden")(features)
    return C.layers.Dense(CLASSES, init=C.glorot_uniform(seed=args.seed + 1), name="logits")(hidden)


def metrics_writer_class(C):
    """A ProgressWriter that writes JOB_METRICS_FILE's JSON lines (rank 0).

    CNTK 2.7 exports no ProgressWriter under cntk.logging: custom writers
    derive from cntk.cntk_py.ProgressWriter, as cntk.logging's own
    ProgressPrinter and TensorBoardProgressWriter do. The Trainer calls
    on_write_training_update every `freq` minibatches with (start, end) pairs
    of the samples, updates, loss sum and metric sum counted since the last
    summary, and on_write_training_summary at every progress_frequency of
    training_session (an epoch here) with that period's totals, then starts
    counting anew. Under data-parallel SGD these are the aggregated global
    minibatches, the same on every rank.

    A line's `step` is the local learner's minibatch count and `samples` the
    trainer's sample count: both are part of CNTK's checkpoint, so they go on
    counting after a resume.
    """

    class MetricsWriter(C.cntk_py.ProgressWriter):
        def __init__(self, path, freq, epoch_size, epochs):
            super(MetricsWriter, self).__init__(freq, 0, sys.maxsize, 0, sys.maxsize, 0)
            self.path = path
            self.epoch_size = epoch_size
            self.epochs = epochs
            self.trainer = None        # set once they exist
            self.learner = None
            self.handle = None
            self.run_samples = 0       # samples of the finished periods of this process
            self.period_last = (0, 0, 0.0, 0.0)  # updates, samples, loss sum, metric sum at the last line
            self.window = (time.time(), None)
            self.last_step = 0
            self.last_loss = None
            self.errors = []           # an exception cannot cross back into CNTK's C++
            self.__disown__()          # as ProgressPrinter: CNTK's trainer owns the writer

        def _open(self, first_step):
            # A resumed run keeps the lines before its first step; those a
            # crashed run wrote after its last checkpoint are written again.
            kept = []
            if os.path.exists(self.path):
                with open(self.path) as previous:
                    for line in previous:
                        try:
                            if int(json.loads(line)["step"]) < first_step:
                                kept.append(line)
                        except (ValueError, KeyError, TypeError):
                            pass
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
            self.handle = open(self.path, "w")
            self.handle.writelines(kept)
            self.handle.flush()

        def _record(self, loss, metric, period_samples):
            step = int(self.learner.total_number_of_minibatches_seen())
            samples = int(self.trainer.total_number_of_samples_seen)
            if self.handle is None:
                self._open(step)
                # This process's first line: its window starts where it started.
                self.window = (self.window[0], samples - self.run_samples - period_samples)
            now = time.time()
            seconds = now - self.window[0]
            line = {
                "step": step,
                "loss": float(loss),
                "metric": None if metric is None else float(metric),
                "samples": samples,
                "epoch": min((samples - 1) // self.epoch_size + 1, self.epochs),
                "samples_per_sec": round((samples - self.window[1]) / seconds, 1) if seconds > 0 else None,
            }
            self.handle.write(json.dumps(line, sort_keys=True) + "\n")
            self.handle.flush()
            self.window = (now, samples)
            self.last_step, self.last_loss = step, line["loss"]
            print("rank 0: step {} samples {} epoch {} loss {:.4f} error {}".format(
                step, samples, line["epoch"], line["loss"], "n/a" if metric is None else "{:.4f}".format(metric)))
            sys.stdout.flush()

        def on_write_training_update(self, samples, updates, aggregate_loss, aggregate_metric):
            try:
                count = samples[1] - samples[0]
                if count > 0:
                    metric = None if aggregate_metric is None else (aggregate_metric[1] - aggregate_metric[0]) / count
                    self._record((aggregate_loss[1] - aggregate_loss[0]) / count, metric, samples[1])
                self.period_last = (updates[1], samples[1], aggregate_loss[1],
                                    0.0 if aggregate_metric is None else aggregate_metric[1])
            except Exception as error:  # noqa: BLE001 (raised after training)
                self.errors.append(error)

        def on_write_training_summary(self, samples, updates, summaries, aggregate_loss, aggregate_metric,
                                      elapsed_milliseconds):
            try:
                last_updates, last_samples, last_loss, last_metric = self.period_last
                count = samples - last_samples
                if updates > last_updates and count > 0:
                    # The steps since the last line, so that the period's
                    # (and the run's) last step is always recorded.
                    metric = None if aggregate_metric is None else (aggregate_metric - last_metric) / count
                    self._record((aggregate_loss - last_loss) / count, metric, samples)
                self.run_samples += samples
                self.period_last = (0, 0, 0.0, 0.0)
                print("rank 0: period {} done: {} samples in {:.2f} s, loss {:.4f}, error {}".format(
                    summaries, samples, elapsed_milliseconds / 1000.0, aggregate_loss / max(samples, 1),
                    "n/a" if aggregate_metric is None else "{:.4f}".format(aggregate_metric / max(samples, 1))))
                sys.stdout.flush()
            except Exception as error:  # noqa: BLE001 (raised after training)
                self.errors.append(error)

        def on_write_test_update(self, samples, updates, aggregate_metric):
            pass

        def on_write_test_summary(self, samples, updates, summaries, aggregate_metric, elapsed_milliseconds):
            pass

        def on_write_distributed_sync_update(self, samples, updates, aggregate_metric):
            pass

        def on_training_update_end(self):
            pass

        def write(self, key, value):
            pass

        def close(self):
            if self.handle is not None:
                self.handle.close()
                self.handle = None

    return MetricsWriter


def test_accuracy(C, path, trainer, features, labels):
    """(accuracy, samples) of the trained model on the CTF test file.

    Rank 0 only: trainer.test_minibatch is local (no MPI) by default.
    """
    source = C.io.MinibatchSource(C.io.CTFDeserializer(path, streams(C)), randomize=False, max_sweeps=1)
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
        raise JobError("test file {} holds no samples".format(path))
    return 1.0 - errors / count, count


def ranks_with(C, communicator, flag):
    """How many ranks pass a true flag (collective: every rank must call it)."""
    import numpy as np
    view = C.NDArrayView.from_dense(np.array([1.0 if flag else 0.0], dtype=np.float64), device=C.device.cpu())
    communicator.aggregate_in_place([view], set(communicator.workers()))
    return int(round(float(view.asarray()[0])))


def write_json_atomic(path, document):
    temporary = path + ".tmp"
    with open(temporary, "w") as target:
        json.dump(document, target, indent=2, sort_keys=True)
        target.write("\n")
    os.replace(temporary, path)


def train(args, env):
    import numpy as np
    import cntk as C

    start = time.time()
    Communicator = C.train.distributed.Communicator
    rank = Communicator.rank()            # static; MPI starts lazily
    workers = Communicator.num_workers()
    host = socket.gethostname()
    is_main = rank == 0
    if args.minibatch < workers:
        raise JobError("--minibatch {} is smaller than the {} ranks: every rank needs samples in every "
                       "global minibatch".format(args.minibatch, workers))
    test_file = env["test_file"] if is_main else ""
    if test_file and not os.path.isfile(test_file):
        raise JobError("JOB_TEST_FILE {} not found on rank 0's host {}".format(test_file, host))

    epoch_size = count_samples(env["train_file"])
    if epoch_size == 0:
        raise JobError("training file {} holds no samples".format(env["train_file"]))
    max_samples = args.epochs * epoch_size
    # At least CHUNKS_PER_RANK chunks per rank (see the reader below).
    chunk_bytes = args.chunk_bytes or min(MAX_CHUNK_BYTES, max(
        MIN_CHUNK_BYTES, os.path.getsize(env["train_file"]) // (CHUNKS_PER_RANK * workers)))
    checkpoint = os.path.join(env["checkpoint_dir"], CHECKPOINT_NAME)
    if not os.path.isdir(env["checkpoint_dir"]):
        os.makedirs(env["checkpoint_dir"], exist_ok=True)  # several ranks per node: same dir
    if is_main:
        os.makedirs(env["output_dir"], exist_ok=True)
    restoring = env["resume"] and os.path.exists(checkpoint) and os.path.exists(checkpoint + ".ckp")
    print("rank {}/{} on {}: {} ({} samples, {}-byte chunks), global minibatch {}, {} epochs, model {}, {}".format(
        rank, workers, host, env["train_file"], epoch_size, chunk_bytes, args.minibatch, args.epochs, args.model,
        "restoring " + checkpoint if restoring else ("resume asked, no checkpoint at " + checkpoint +
                                                     ": starting fresh" if env["resume"] else "fresh start")))
    sys.stdout.flush()

    features = C.input_variable(FEATURES, dtype=np.float32, name="features")
    labels = C.input_variable(CLASSES, dtype=np.float32, name="labels")
    model = build_model(C, args, features)
    loss = C.cross_entropy_with_softmax(model, labels)
    metric = C.classification_error(model, labels)

    # The rate applies to the mean gradient of the minibatch the learner
    # gets, which under data-parallel SGD is the aggregated global minibatch.
    lr = C.learning_parameter_schedule(args.lr)
    if args.momentum > 0:
        local_learner = C.momentum_sgd(model.parameters, lr=lr, momentum=C.momentum_schedule(args.momentum))
    else:
        local_learner = C.sgd(model.parameters, lr=lr)
    learner = C.train.distributed.data_parallel_distributed_learner(
        local_learner, distributed_after=0, num_quantization_bits=32)

    # CNTK's restore is collective: every rank restores or none may. A rank
    # that lacks the checkpoint would hang or crash the others, so the ranks
    # count who sees it first (a sum over the distributed learner's
    # communicator) and all stop with the reason when only some do.
    if env["resume"]:
        seen = ranks_with(C, learner.communicator(), restoring)
        if 0 < seen < workers:
            raise JobError("JOB_RESUME=1: only {} of {} ranks see the checkpoint {} (this rank: {}). CNTK restores "
                           "it on every rank: copy rank 0's {} and {}.ckp into every node's JOB_CHECKPOINT_DIR, "
                           "or delete them everywhere to start fresh".format(
                               seen, workers, checkpoint, "yes" if restoring else "no", CHECKPOINT_NAME,
                               CHECKPOINT_NAME))

    # Progress writers are the Trainer's 4th argument; rank 0 alone has one.
    writers = []
    writer = None
    if is_main and env["metrics_file"]:
        writer = metrics_writer_class(C)(env["metrics_file"], args.progress_every, epoch_size, args.epochs)
        writers.append(writer)
    trainer = C.Trainer(model, (loss, metric), [learner], writers)
    if writer is not None:
        writer.trainer, writer.learner = trainer, local_learner

    # The whole training set on every rank; training_session asks the reader
    # for partition `rank` of `workers` of each global minibatch of mb_size.
    # A randomizing reader partitions by CHUNK, and the CTF reader's chunks
    # are 32 MB: a small file is one chunk, which goes to rank 0 alone, while
    # every other rank gets empty minibatches (and the global minibatch
    # shrinks to mb_size / workers) without any error. Smaller chunks give
    # every rank its share. The same seed on every rank keeps the partitions
    # disjoint.
    deserializer = C.io.CTFDeserializer(env["train_file"], streams(C))
    deserializer["chunkSizeInBytes"] = chunk_bytes
    source = C.io.MinibatchSource(deserializer, randomize=True, randomization_seed=args.seed,
                                  max_sweeps=C.io.INFINITELY_REPEAT)
    checkpoint_every = args.checkpoint_every or epoch_size
    session = C.training_session(
        trainer=trainer,
        mb_source=source,
        mb_size=args.minibatch,
        model_inputs_to_streams={features: source.streams.features, labels: source.streams.labels},
        max_samples=max_samples,
        progress_frequency=epoch_size,  # a summary per epoch (and at the end)
        checkpoint_config=C.CheckpointConfig(checkpoint, frequency=checkpoint_every, restore=env["resume"]))
    train_start = time.time()
    session.train()
    train_seconds = time.time() - train_start
    samples_total = int(trainer.total_number_of_samples_seen)

    if writer is not None:
        writer.close()
        if writer.errors:
            raise writer.errors[0]

    print("rank {}/{} on {}: trained, {} global samples in total, {:.2f} s".format(
        rank, workers, host, samples_total, train_seconds))
    sys.stdout.flush()
    if not is_main:
        return None

    model.save(os.path.join(env["output_dir"], MODEL_NAME))
    accuracy, test_samples = (None, 0)
    if test_file:
        accuracy, test_samples = test_accuracy(C, test_file, trainer, features, labels)
    summary = {
        "test_accuracy": accuracy,
        "test_samples": test_samples,
        "samples_trained": samples_total,
        "seconds": round(train_seconds, 3),
        "wall_seconds": round(time.time() - start, 3),
        "ranks": workers,
        "model": args.model,
        "epochs": args.epochs,
        "minibatch": args.minibatch,
        "lr": args.lr,
        "momentum": args.momentum,
        "final_loss": None if writer is None else writer.last_loss,
        "steps": int(local_learner.total_number_of_minibatches_seen()),
        "resumed": restoring,
        "cntk": C.__version__.strip(),
        "job_name": os.environ.get("JOB_NAME", ""),
        "run_id": os.environ.get("JOB_RUN_ID", ""),
    }
    write_json_atomic(os.path.join(env["output_dir"], SUMMARY_NAME), summary)
    print("rank 0: test accuracy {} on {} samples; model {}".format(
        "n/a" if accuracy is None else "{:.4f}".format(accuracy), test_samples,
        os.path.join(env["output_dir"], MODEL_NAME)))
    sys.stdout.flush()
    return summary


def main(argv=None):
    args = parse_args(argv)
    try:
        env = job_environment(args)
    except JobError as error:
        # Before CNTK has started MPI: a plain non-zero exit; mpirun reports it.
        sys.exit("error: {}".format(error))
    try:
        train(args, env)
    except (Exception, KeyboardInterrupt) as error:
        if isinstance(error, JobError):
            sys.stderr.write("error: {}\n".format(error))
        else:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        # os._exit, not sys.exit: a normal exit runs CNTK's MPI teardown, which
        # can wait forever for ranks still inside an allreduce. A non-zero
        # status makes mpirun stop the other ranks and fail the job.
        os._exit(1)
    # Only after a successful run, on every rank: no MPI communication follows.
    import cntk as C
    C.train.distributed.Communicator.finalize()


if __name__ == "__main__":
    main()
