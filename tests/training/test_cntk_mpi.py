"""train.py --backend cntk on the REAL cntk 2.7 CPU wheel, under mpirun.

The wheel (cntk 2.7.post2, cp36, with numpy 1.19.5 and scipy 1.5.4 as
matrix/cntk.yml pins them) runs in a venv of pyenv's CPython 3.6.15 with the
distribution's Open MPI 4.1 standing in for Open MPI 1.10 (soname links;
tests/training/cntk_env.py). All ranks are on this one host, over loopback.
Not covered here: GPUs (cntk-gpu), Open MPI 1.10.7 itself, several hosts.
"""

import json
import math
import re
import shutil
import socket
import time

import pytest

from test_mpi_training import SUMMARY_KEYS, METRICS_KEYS, TRAIN_SAMPLES, check_rank_timing, job, read_metrics

CNTK_EXTRAS = {"hidden", "distributed", "quantization_bits", "device", "minibatch", "minibatch_per_rank", "lr",
               "max_samples", "steps", "wall_seconds", "test_samples", "resumed", "resumed_at_step",
               "seed"}


def lines_of(result, rank, stream="stdout"):
    """What one rank printed (mpirun --tag-output: "[job,rank]<stream>:line")."""
    tag = re.compile(r"^\[\d+,{}\]<{}>:".format(rank, stream))
    return [tag.sub("", line) for line in (result.stdout + result.stderr).splitlines() if tag.match(line)]


def output_of(result):
    return result.stdout + result.stderr


def summary_of(out):
    return json.loads((out / "output" / "summary.json").read_text())


def test_three_ranks_learn_digits_with_64_samples_a_step(digits, digits_shards, train_cntk, tmp_path):
    result = train_cntk(3, *job(digits_shards(3), digits, tmp_path, "--lr", "0.5", "--epochs", "5",
                                "--progress-every", "5"))
    assert result.returncode == 0, output_of(result)
    summary = summary_of(tmp_path)

    # The same fields as the numpy backend's, meaning the same, plus the cntk extras.
    assert set(summary) == SUMMARY_KEYS | CNTK_EXTRAS
    assert (summary["backend"], summary["model"], summary["ranks"]) == ("cntk", "softmax", 3)
    assert summary["hosts"] == [socket.gethostname()] * 3
    assert summary["versions"]["python"] == "3.6.15" and summary["versions"]["cntk"] == "2.7"
    assert summary["versions"]["numpy"] == "1.19.5" and "Open MPI" in summary["versions"]["mpi"]
    assert (summary["epochs"], summary["samples"]) == (5, 5 * TRAIN_SAMPLES)
    assert summary["test_accuracy"] >= 0.90
    assert summary["allreduce_share"] is None
    assert summary["samples_per_sec"] > 0 and math.isfinite(summary["final_loss"])
    assert summary["distributed"] == "data_parallel" and summary["device"] == "cpu:0"
    # 64 = 22 + 21 + 21: nothing dropped.
    assert (summary["minibatch"], summary["minibatch_per_rank"]) == (64, [22, 21, 21])
    # Timing from outside CNTK's update: a compute probe every --progress-every steps, the first not counted.
    assert (summary["timing_method"], summary["timing_probe_every"]) == ("probe", 5)
    # (A rank whose shard ran out passes an empty minibatch for the last steps: no probe there.)
    check_rank_timing(summary, summary["steps"], range(summary["steps"] // 5 - 2, summary["steps"] // 5))

    metrics = read_metrics(tmp_path / "output")
    assert all(set(record) == METRICS_KEYS for record in metrics)
    assert all(record["allreduce_share"] is None for record in metrics)
    # Shards of 480, 479, 479 samples: each rank has a full share for the
    # first 21 steps, so 64 samples a step.
    early = [record for record in metrics if record["step"] <= 21]
    assert [record["step"] for record in early] == [5, 10, 15, 20]
    assert all(record["samples"] == 64 * record["step"] for record in early)
    steps = [record["step"] for record in metrics]
    assert steps == sorted(set(steps)) and steps[-1] == summary["steps"]
    assert metrics[-1]["samples"] == 5 * TRAIN_SAMPLES and metrics[-1]["loss"] == summary["final_loss"]
    assert metrics[-1]["loss"] < metrics[0]["loss"]

    # CNTK's ProgressPrinter is attached on rank 0 only.
    assert any("Minibatch[" in line for line in lines_of(result, 0))
    for rank in (1, 2):
        assert not any("Minibatch[" in line for line in lines_of(result, rank))
        assert any("rank {}/3".format(rank) in line and "done:" in line for line in lines_of(result, rank))
    assert (tmp_path / "output" / "model.cntk").is_file()


@pytest.fixture
def first_run(digits, digits_shards, train_cntk, tmp_path):
    """Two epochs on 2 ranks with --resume and no checkpoint anywhere (it
    starts fresh), each rank with its own checkpoint dir, as on two nodes
    that share none: rank 0's (ck0) gets the checkpoint, rank 1's (ck1)
    stays empty."""
    shards = digits_shards(2)
    common_args = job(shards, digits, tmp_path, "--lr", "0.5", "--progress-every", "10", "--resume")
    common_args = [a for a in common_args if a != tmp_path / "checkpoint" and a != "--checkpoint-dir"]
    per_rank = [["--checkpoint-dir", tmp_path / "ck0"], ["--checkpoint-dir", tmp_path / "ck1"]]

    def train(epochs, timeout=120):
        return train_cntk(2, *common_args, "--epochs", epochs, per_rank=per_rank, timeout=timeout)

    result = train(2)
    assert result.returncode == 0, output_of(result)
    assert "no checkpoint at" in output_of(result) and "starting fresh" in output_of(result)
    assert sorted(p.name for p in (tmp_path / "ck0").iterdir()) == ["trainer.ckpt", "trainer.ckpt.ckp"]
    assert list((tmp_path / "ck1").iterdir()) == []
    return tmp_path, train


def test_resume_fails_on_every_rank_when_only_some_see_the_checkpoint(first_run):
    tmp_path, train = first_run
    before = (tmp_path / "output" / "metrics.jsonl").read_text()
    start = time.monotonic()
    result = train(4, timeout=60)  # a hang fails here
    assert result.returncode != 0
    assert time.monotonic() - start < 45
    for rank in (0, 1):
        said = "\n".join(lines_of(result, rank, "stderr"))
        assert "cannot resume: the checkpoint is visible to rank(s) 0" in said, output_of(result)
        assert "but not to rank(s) 1 ({}: {}, no checkpoint)".format(socket.gethostname(), tmp_path / "ck1") in said
        assert "must be readable by every rank" in said
    # Nothing was trained or rewritten.
    assert (tmp_path / "output" / "metrics.jsonl").read_text() == before


def test_resume_fails_when_a_rank_holds_another_checkpoint(first_run):
    tmp_path, train = first_run
    for name in ("trainer.ckpt", "trainer.ckpt.ckp"):
        shutil.copy(tmp_path / "ck0" / name, tmp_path / "ck1" / name)
    with open(tmp_path / "ck1" / "trainer.ckpt.ckp", "ab") as stale:
        stale.write(b"\0")
    result = train(4, timeout=60)
    assert result.returncode != 0
    for rank in (0, 1):
        said = "\n".join(lines_of(result, rank, "stderr"))
        assert "cannot resume: rank(s) 1 ({}: {}) hold a different checkpoint than rank 0".format(
            socket.gethostname(), tmp_path / "ck1") in said, output_of(result)


def test_resume_when_every_rank_has_rank0s_checkpoint_trims_the_metrics(first_run):
    tmp_path, train = first_run
    output = tmp_path / "output"
    first = read_metrics(output)
    first_summary = json.loads((output / "summary.json").read_text())
    # What the cluster side does before a resumed run: rank 0's checkpoint files to every node.
    for name in ("trainer.ckpt", "trainer.ckpt.ckp"):
        shutil.copy(tmp_path / "ck0" / name, tmp_path / "ck1" / name)
    # As if the job had died after the checkpoint, with progress records past it.
    with open(output / "metrics.jsonl", "a") as metrics:
        for step in (first_summary["steps"] + 10, first_summary["steps"] + 20):
            metrics.write(json.dumps(dict(first[-1], step=step, loss=99.0)) + "\n")

    result = train(3)
    assert result.returncode == 0, output_of(result)
    assert "resumed from {} at step {}".format(tmp_path / "ck0" / "trainer.ckpt", first_summary["steps"]) \
        in output_of(result)
    summary = summary_of(tmp_path)
    assert summary["resumed"] and (summary["epochs"], summary["samples"]) == (3, 3 * TRAIN_SAMPLES)
    assert summary["resumed_at_step"] == first_summary["steps"]
    assert summary["steps"] > first_summary["steps"] and summary["test_accuracy"] >= 0.90

    metrics = read_metrics(output)
    steps = [record["step"] for record in metrics]
    assert metrics[:len(first)] == first  # kept up to the checkpoint
    assert steps == sorted(set(steps)) and steps[-1] == summary["steps"]  # no duplicates, nothing stale
    assert all(record["loss"] != 99.0 for record in metrics)
    assert metrics[-1]["samples"] == 3 * TRAIN_SAMPLES


def test_missing_test_file_fails_before_training(digits, digits_shards, train_cntk, tmp_path):
    missing = tmp_path / "nowhere" / "test.ctf"
    arguments = job(digits_shards(2), digits, tmp_path, "--epochs", "50")
    arguments[arguments.index("--test-file") + 1] = missing
    start = time.monotonic()
    result = train_cntk(2, *arguments, timeout=60)
    assert result.returncode != 0
    assert time.monotonic() - start < 45
    for rank in (0, 1):
        said = "\n".join(lines_of(result, rank, "stderr"))
        assert "rank 0 on {}: test file not found: {}".format(socket.gethostname(), missing) in said, \
            output_of(result)
    assert not (tmp_path / "output" / "metrics.jsonl").exists()
    assert not (tmp_path / "checkpoint" / "trainer.ckpt").exists()


def test_one_bit_sgd_runs_to_the_end(digits, digits_shards, train_cntk, tmp_path):
    result = train_cntk(2, *job(digits_shards(2), digits, tmp_path, "--quantization-bits", "1",
                                "--lr", "0.5", "--epochs", "2", "--progress-every", "10"))
    assert result.returncode == 0, output_of(result)
    summary = summary_of(tmp_path)
    assert (summary["distributed"], summary["quantization_bits"]) == ("data_parallel_1bit", 1)
    assert (summary["epochs"], summary["samples"]) == (2, 2 * TRAIN_SAMPLES)
    assert math.isfinite(summary["final_loss"]) and summary["test_accuracy"] > 0.5


def test_block_momentum_runs_to_the_end_with_uneven_shards(digits, digits_shards, train_cntk, tmp_path):
    # Shards of 480, 479, 479 in local minibatches of 22, 21, 21: rank 0 runs
    # out of data 2 steps before the others. Checkpoints and progress
    # records every 5 steps must stop there, or the job would hang.
    result = train_cntk(3, *job(digits_shards(3), digits, tmp_path, "--block-momentum", "--lr", "0.5",
                                "--epochs", "2", "--progress-every", "5", "--checkpoint-every", "5"))
    assert result.returncode == 0, output_of(result)
    summary = summary_of(tmp_path)
    assert summary["distributed"] == "block_momentum(block_size=640)"
    assert (summary["epochs"], summary["samples"]) == (2, 2 * TRAIN_SAMPLES)
    assert math.isfinite(summary["final_loss"]) and summary["test_accuracy"] > 0.5
    metrics = read_metrics(tmp_path / "output")
    assert metrics[-1]["samples"] == 2 * TRAIN_SAMPLES


def test_ranks_with_other_arguments_fail_before_training(digits, digits_shards, train_cntk, tmp_path):
    result = train_cntk(2, *job(digits_shards(2), digits, tmp_path), per_rank=[["--epochs", "3"], ["--epochs", "4"]],
                        timeout=60)
    assert result.returncode != 0
    for rank in (0, 1):
        said = "\n".join(lines_of(result, rank, "stderr"))
        assert "rank 1 on {} runs another job than rank 0: --epochs 4 (rank 0: 3)".format(socket.gethostname()) \
            in said, output_of(result)
    assert not (tmp_path / "output" / "metrics.jsonl").exists()
