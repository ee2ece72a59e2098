"""Fixtures for the training package: the digits data as CTF, shards, mpirun."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TRAINING = Path(__file__).resolve().parents[2] / "training"
sys.path.insert(0, str(TRAINING))

import make_digits  # noqa: E402  (needs the path above)

# The sandbox has no network but loopback, and its shared memory cannot do
# Open MPI's single-copy transfers.
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe",
          "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo",
          "--mca", "btl_vader_single_copy_mechanism", "none"]


@pytest.fixture(scope="session")
def digits(tmp_path_factory):
    """train.ctf and test.ctf of the digits data, written by make_digits.py."""
    out = tmp_path_factory.mktemp("digits")
    make_digits.main(["--out", str(out)])
    return out


@pytest.fixture(scope="session")
def digits_shards(digits, tmp_path_factory):
    """shards(ranks): a directory with train.ctf dealt round-robin into
    shard-00000.ctf ... one per rank, as the data step would lay it out."""
    lines = (digits / "train.ctf").read_text().splitlines(keepends=True)

    def shards(ranks):
        data_dir = tmp_path_factory.mktemp("shards-{}".format(ranks))
        for rank in range(ranks):
            (data_dir / "shard-{:05d}.ctf".format(rank)).write_text("".join(lines[rank::ranks]))
        return data_dir

    return shards


@pytest.fixture
def train_numpy():
    """train_numpy(ranks, *arguments): mpirun -np RANKS python training/train.py
    --backend numpy ARGUMENTS, finished, its output captured."""
    # One BLAS thread per rank: the ranks already fill the two cores.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")

    def train(ranks, *arguments, timeout=60):
        command = MPIRUN + ["-np", str(ranks), sys.executable, str(TRAINING / "train.py"),
                            "--backend", "numpy"] + [str(a) for a in arguments]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)

    return train
