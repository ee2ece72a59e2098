"""Fixtures for the training package: the digits data as CTF, shards, mpirun."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prerequisites import require

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


@pytest.fixture(scope="session")
def cntk_runtime():
    """(python, mpi_dir): the real cntk 2.7 CPU wheel in a venv of pyenv's
    CPython 3.6.15, and the Open MPI 1.10 soname stand-in folder
    (tests/training/cntk_env.py). Skips (fails under CI) when a piece is not on this machine."""
    import cntk_env
    require(shutil.which("mpirun") is not None, "no mpirun on PATH (Debian: openmpi-bin)")
    try:
        mpi_dir = cntk_env.mpi_standin_dir()
        return cntk_env.venv(mpi_dir), mpi_dir
    except cntk_env.Unavailable as error:
        require(False, "the real cntk 2.7 wheel cannot run here: {}".format(error))


@pytest.fixture
def train_cntk(cntk_runtime):
    """train_cntk(ranks, *arguments): mpirun -np RANKS (CNTK's python)
    training/train.py --backend cntk ARGUMENTS on loopback, finished, its
    output captured; every output line tagged [job,rank]<stream>.

    per_rank=[args_0, args_1, ...] adds arguments per rank instead (an MPMD
    launch, one app context per rank), e.g. a checkpoint dir per rank, as
    on nodes that do not share one."""
    python, mpi_dir = cntk_runtime
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONWARNINGS="ignore",
               LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(mpi_dir), os.environ.get("LD_LIBRARY_PATH")])))
    exported = []
    for name in ("LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PYTHONWARNINGS"):
        exported += ["-x", name]

    def train(ranks, *arguments, per_rank=None, timeout=120):
        program = [str(python), str(TRAINING / "train.py"), "--backend", "cntk"] + [str(a) for a in arguments]
        command = MPIRUN + ["--tag-output"] + exported
        if per_rank is None:
            command += ["-np", str(ranks)] + program
        else:
            assert len(per_rank) == ranks
            for rank, extra in enumerate(per_rank):
                command += ([":"] if rank else []) + ["-np", "1"] + program + [str(a) for a in extra]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)

    return train
