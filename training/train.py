#!/usr/bin/env python3
"""Data-parallel training over MPI: one command line for both backends.

    mpirun -np 4 python train.py --backend numpy --data-dir DATA \\
        --test-file DATA/test.ctf --output-dir OUT --checkpoint-dir CKPT

On the cluster it is a job like any other: the folders, the backend and
--resume come from the job contract's environment (JOB_DATA_DIR,
JOB_TEST_FILE, JOB_OUTPUT_DIR, JOB_CHECKPOINT_DIR, JOB_BACKEND, JOB_RESUME;
training/README.md), and an option given on the command line wins.

--backend cntk runs CNTK 2.7 (CPython 3.6, Open MPI 1.10); --backend numpy
runs the numpy + mpi4py reference backend. This file is imported by CNTK's
interpreter too, so it must stay Python 3.6 syntax.
"""

import argparse
import importlib
import os
import sys

BACKENDS = ("numpy", "cntk")
MODELS = ("softmax", "mlp")


def build_parser():
    parser = argparse.ArgumentParser(
        description="Data-parallel SGD over MPI; every rank reads DATA_DIR/shard-<rank>.ctf.")
    def from_job(name):
        """An option's default from the job contract's environment; required without it."""
        value = os.environ.get(name)
        return {"default": value} if value else {"required": True}

    parser.add_argument("--backend", choices=BACKENDS, **from_job("JOB_BACKEND"))
    parser.add_argument("--data-dir", help="directory with this rank's shard-{rank:05d}.ctf (JOB_DATA_DIR)",
                        **from_job("JOB_DATA_DIR"))
    parser.add_argument("--test-file", help="CTF file rank 0 scores the final model on (JOB_TEST_FILE)",
                        **from_job("JOB_TEST_FILE"))
    parser.add_argument("--output-dir",
                        help="rank 0 writes metrics.jsonl, model.npz and summary.json here (JOB_OUTPUT_DIR)",
                        **from_job("JOB_OUTPUT_DIR"))
    parser.add_argument("--checkpoint-dir",
                        help="rank 0 writes checkpoints here (numpy: after every epoch; cntk: every "
                             "--checkpoint-every steps and at the end); cntk reads them on EVERY rank "
                             "on --resume, so each rank's dir must hold rank 0's files (JOB_CHECKPOINT_DIR)",
                        **from_job("JOB_CHECKPOINT_DIR"))
    parser.add_argument("--resume", action="store_true", default=bool(os.environ.get("JOB_RESUME")),
                        help="continue from the checkpoint if there is one (none anywhere: start fresh); "
                             "set by JOB_RESUME")
    parser.add_argument("--model", choices=MODELS, default="softmax")
    parser.add_argument("--hidden", type=int, default=64, help="hidden units of the mlp")
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--minibatch", type=int, default=64,
                        help="global minibatch: samples per step across all ranks")
    parser.add_argument("--lr", type=float, default=0.1,
                        help="learning rate applied to the minibatch's mean gradient")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--max-samples", type=int, default=None,
                        help="stop once this many global samples have been trained on")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--progress-every", type=int, default=10, metavar="STEPS",
                        help="rank 0 records progress every this many steps (cntk: and at the last step)")
    numpy_group = parser.add_argument_group("numpy backend only")
    numpy_group.add_argument("--allreduce", choices=("overlap", "blocking"), default="overlap",
                             help="overlap: send the output layer's gradient while the hidden layer's is "
                                  "computed (mlp); blocking: one Allreduce after the whole gradient")
    cntk = parser.add_argument_group("cntk backend only")
    cntk.add_argument("--quantization-bits", type=int, default=32,
                      help="gradient bits in the data-parallel learner; below 32 selects 1-bit SGD")
    cntk.add_argument("--block-momentum", action="store_true",
                      help="block-momentum SGD instead of data-parallel SGD")
    cntk.add_argument("--block-size", type=int, default=None,
                      help="samples across all workers between block-momentum syncs")
    cntk.add_argument("--checkpoint-every", type=int, default=None, metavar="STEPS",
                      help="steps between checkpoints (default: 10 x --progress-every)")
    return parser


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("hidden", "features", "classes", "minibatch", "epochs", "progress_every"):
        if getattr(args, name) < 1:
            parser.error("--{} must be at least 1".format(name.replace("_", "-")))
    if args.max_samples is not None and args.max_samples < 1:
        parser.error("--max-samples must be at least 1")
    if not 1 <= args.quantization_bits <= 32:
        parser.error("--quantization-bits must be between 1 and 32")
    for name in ("block_size", "checkpoint_every"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error("--{} must be at least 1".format(name.replace("_", "-")))
    if args.lr <= 0:
        parser.error("--lr must be positive")
    if args.seed < 0:
        parser.error("--seed must not be negative")
    return args


def main(argv=None):
    args = parse_args(argv)
    # Import only the backend asked for: cntk loads only under CNTK's
    # Python 3.6, mpi4py may be absent there.
    backend = importlib.import_module(args.backend + "_backend")
    backend.run(args)


if __name__ == "__main__":
    sys.exit(main())
