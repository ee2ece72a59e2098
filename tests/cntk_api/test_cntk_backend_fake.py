"""training/cntk_backend.py run end to end on a numpy TEST DOUBLE of cntk.

CNTK 2.7 cannot run here. tests/cntk_api/fake_cntk/cntk.py stands in for the
few CNTK calls the backend makes (checked against the real wheel by
test_cntk_api.py), so that the backend's own logic runs for real: shard per
rank, the training loop, metrics.jsonl, summary.json, model, checkpoints and
resume, the error exit. It says nothing about CNTK's numerics or MPI.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy", reason="the CNTK test double computes with numpy (requirements.txt)")

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parent / "fake_cntk"
FEATURES, CLASSES = 8, 3

RUNNER = """
import argparse, json, sys
import cntk_backend
summary = cntk_backend.run(argparse.Namespace(**json.loads(sys.argv[1])))
print("SUMMARY " + json.dumps(summary))
"""


def write_ctf(path, x, y):
    with open(path, "w") as handle:
        for features, label in zip(x, y):
            onehot = np.eye(CLASSES, dtype=np.float32)[label]
            handle.write("|features {} |labels {}\n".format(
                " ".join("%.5f" % v for v in features), " ".join("%g" % v for v in onehot)))


@pytest.fixture
def data(tmp_path):
    rng = np.random.RandomState(0)
    centers = rng.normal(0, 3, (CLASSES, FEATURES))

    def sample(n):
        labels = rng.randint(0, CLASSES, n)
        return centers[labels] + rng.normal(0, 0.5, (n, FEATURES)), labels
    directory = tmp_path / "data"
    directory.mkdir()
    for rank in range(2):
        write_ctf(directory / "shard-{:05d}.ctf".format(rank), *sample(120 + 10 * rank))
    write_ctf(directory / "test.ctf", *sample(90))
    return directory


def arguments(tmp_path, data, **overrides):
    args = dict(backend="cntk", data_dir=str(data), test_file="test.ctf", output_dir=str(tmp_path / "out"),
                checkpoint_dir=str(tmp_path / "ckpt"), resume=False, model="softmax", hidden=16,
                features=FEATURES, classes=CLASSES, minibatch=16, lr=0.1, epochs=2, max_samples=None,
                seed=7, progress_every=3, quantization_bits=32, block_momentum=False, block_size=0)
    args.update(overrides)
    return args


def run_backend(tmp_path, args, rank=0, workers=1):
    env = dict(os.environ, FAKE_CNTK_RANK=str(rank), FAKE_CNTK_WORKERS=str(workers),
               FAKE_CNTK_LOG=str(tmp_path / "calls-{}.jsonl".format(rank)),
               PYTHONPATH=os.pathsep.join([str(FAKE), str(ROOT / "training")]))
    proc = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(args)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    summary = None
    for line in proc.stdout.splitlines():
        if line.startswith("SUMMARY "):
            summary = json.loads(line[len("SUMMARY "):])
    calls = []
    log = tmp_path / "calls-{}.jsonl".format(rank)
    if log.exists():
        calls = [json.loads(l)["call"] for l in log.read_text().splitlines()]
        log.unlink()
    return proc, summary, calls


def metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_softmax_run_writes_the_rank0_artifacts(tmp_path, data):
    proc, summary, calls = run_backend(tmp_path, arguments(tmp_path, data))
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    assert (out / "model.cntk").is_file()
    assert json.loads((out / "summary.json").read_text()) == summary
    for key in ("backend", "model", "ranks", "hosts", "versions", "epochs", "samples", "seconds",
                "samples_per_sec", "final_loss", "test_accuracy"):
        assert key in summary, key
    assert summary["backend"] == "cntk" and summary["ranks"] == 1 and summary["hosts"] == [socket.gethostname()]
    assert summary["versions"]["cntk"] == "2.7-fake" and summary["versions"]["python"]
    assert summary["samples"] == 2 * 120 and summary["steps"] == 15  # 2 sweeps of 120 in steps of 16
    assert summary["distributed"] == "data_parallel"
    assert summary["test_accuracy"] > 0.9 and summary["test_samples"] == 90
    lines = metrics(out)
    assert [m["step"] for m in lines] == [3, 6, 9, 12, 15]
    assert set(lines[0]) == {"step", "epoch", "samples", "loss", "metric", "samples_per_sec", "allreduce_share"}
    assert lines[0]["allreduce_share"] is None and summary["allreduce_share"] is None
    assert [m["epoch"] for m in lines] == [1, 1, 2, 2, 2]
    assert lines[-1]["samples"] == 240 and lines[-1]["loss"] == summary["final_loss"]
    assert lines[-1]["loss"] < lines[0]["loss"]
    assert calls[-1] == "finalize" and calls.count("save_checkpoint") == 1  # every 30 steps, and at the end
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["trainer.ckpt", "trainer.ckpt.ckp"]


def test_mlp_with_1bit_sgd(tmp_path, data):
    proc, summary, calls = run_backend(tmp_path, arguments(tmp_path, data, model="mlp", quantization_bits=1))
    assert proc.returncode == 0, proc.stderr
    assert summary["distributed"] == "data_parallel_1bit" and summary["hidden"] == 16
    assert summary["test_accuracy"] > 0.9


def test_block_momentum(tmp_path, data):
    proc, summary, calls = run_backend(tmp_path, arguments(tmp_path, data, block_momentum=True))
    assert proc.returncode == 0, proc.stderr
    assert summary["distributed"] == "block_momentum(block_size=160)"
    assert "block_momentum_distributed_learner" in calls


def test_block_momentum_and_1bit_exclude_each_other(tmp_path, data):
    proc, summary, calls = run_backend(tmp_path, arguments(tmp_path, data, block_momentum=True,
                                                           quantization_bits=1))
    assert proc.returncode == 1
    assert "exclude each other" in proc.stderr and "Traceback" in proc.stderr
    assert "finalize" not in calls


def test_max_samples_bounds_the_run(tmp_path, data):
    proc, summary, calls = run_backend(tmp_path, arguments(tmp_path, data, max_samples=50))
    assert proc.returncode == 0, proc.stderr
    assert summary["samples"] == 50 and summary["steps"] == 4


def test_resume_continues_from_the_checkpoint(tmp_path, data):
    proc, first, _ = run_backend(tmp_path, arguments(tmp_path, data, epochs=1))
    assert proc.returncode == 0, proc.stderr
    before = metrics(tmp_path / "out")
    proc, second, calls = run_backend(tmp_path, arguments(tmp_path, data, epochs=2, resume=True))
    assert proc.returncode == 0, proc.stderr
    assert "restore_from_checkpoint" in calls
    # The 1-epoch run ended its sweep with a short minibatch (7 x 16 + 8): 8 steps, then 8 more.
    assert [m["step"] for m in before] == [3, 6, 8]
    assert second["resumed"] and second["steps"] == 16 and second["samples"] == 240
    after = metrics(tmp_path / "out")
    assert after[:len(before)] == before  # appended, not rewritten
    assert [m["step"] for m in after[len(before):]] == [9, 12, 15, 16]
    assert [m["samples"] for m in after[len(before):]] == [136, 184, 232, 240]


def test_resume_without_a_checkpoint_starts_fresh(tmp_path, data):
    proc, summary, calls = run_backend(tmp_path, arguments(tmp_path, data, resume=True))
    assert proc.returncode == 0, proc.stderr
    assert not summary["resumed"] and "restore_from_checkpoint" not in calls


def test_resume_fails_when_the_checkpoint_is_incomplete(tmp_path, data):
    # Whether the ranks agree is tested on the real wheel under mpirun
    # (tests/training/test_cntk_mpi.py); here one rank sees half a checkpoint.
    proc, _, _ = run_backend(tmp_path, arguments(tmp_path, data, epochs=1))
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "ckpt" / "trainer.ckpt.ckp").unlink()
    proc, _, calls = run_backend(tmp_path, arguments(tmp_path, data, resume=True))
    assert proc.returncode == 1
    assert "cannot resume" in proc.stderr and "lacks trainer.ckpt.ckp" in proc.stderr
    assert "restore_from_checkpoint" not in calls and "finalize" not in calls


def test_missing_test_file_fails_before_training(tmp_path, data):
    (data / "test.ctf").unlink()
    proc, _, calls = run_backend(tmp_path, arguments(tmp_path, data))
    assert proc.returncode == 1
    assert "test file not found: {}".format(data / "test.ctf") in proc.stderr
    assert "save_checkpoint" not in calls and "finalize" not in calls


def test_other_ranks_read_their_own_shard_and_write_nothing(tmp_path, data):
    proc, summary, calls = run_backend(tmp_path, arguments(tmp_path, data, minibatch=32), rank=1, workers=2)
    assert proc.returncode == 0, proc.stderr
    assert summary is None
    assert "shard-00001.ctf, 16 samples per step (global 32)" in proc.stdout
    assert not (tmp_path / "out").exists()
    assert calls[-1] == "finalize"


def test_missing_shard_exits_non_zero_with_a_traceback(tmp_path, data):
    proc, summary, calls = run_backend(tmp_path, arguments(tmp_path, data), rank=2, workers=3)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "shard-00002.ctf" in proc.stderr
    assert "finalize" not in calls


def test_args_namespace_is_all_it_needs(tmp_path, data):
    # The CNTK-only options may be absent from the namespace (defaults apply).
    args = arguments(tmp_path, data)
    for name in ("quantization_bits", "block_momentum", "block_size"):
        del args[name]
    proc, summary, _ = run_backend(tmp_path, args)
    assert proc.returncode == 0, proc.stderr
    assert summary["quantization_bits"] == 32
    assert isinstance(argparse.Namespace(**args), argparse.Namespace)
