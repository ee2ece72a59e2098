"""Real MPI runs of train.py --backend numpy on the digits shards."""

import json
import math
import re

import numpy as np
import pytest

METRICS_KEYS = {"step", "epoch", "samples", "loss", "metric", "samples_per_sec", "allreduce_share"}
SUMMARY_KEYS = {"backend", "model", "ranks", "hosts", "versions", "epochs", "samples", "seconds",
                "samples_per_sec", "allreduce_share", "final_loss", "test_accuracy",
                "rank_timing", "timing_method", "timing_probe_every", "comm_share"}
RANK_TIMING_KEYS = {"rank", "host", "steps", "wall_seconds", "cpu_seconds", "cpu_share", "step_seconds",
                    "compute_seconds", "compute_median_seconds", "comm_seconds", "comm_share", "observations",
                    "compute_series"}


def check_rank_timing(summary, steps, observations):
    """Every rank's timing, by rank, with its host: figures that add up."""
    timing = summary["rank_timing"]
    assert [entry["rank"] for entry in timing] == list(range(summary["ranks"]))
    assert [entry["host"] for entry in timing] == summary["hosts"]
    for entry in timing:
        assert set(entry) == RANK_TIMING_KEYS
        assert entry["steps"] == steps and entry["observations"] in observations
        assert 0 < entry["compute_seconds"] and 0 < entry["compute_median_seconds"]
        assert 0 <= entry["comm_seconds"] and 0 <= entry["comm_share"] <= 1
        assert entry["step_seconds"] * steps <= entry["wall_seconds"] * 1.0001
        assert 0 < entry["cpu_seconds"] and 0 < entry["cpu_share"]
        series = entry["compute_series"]
        assert 0 < len(series) <= 64 and [s for s, _ in series] == sorted(s for s, _ in series)
        assert all(value > 0 for _, value in series)
    shares = [entry["comm_share"] for entry in timing]
    assert summary["comm_share"] == pytest.approx(sum(shares) / len(shares))
TRAIN_SAMPLES = 1438


def job(data_dir, digits, out, *extra):
    return ["--data-dir", data_dir, "--test-file", digits / "test.ctf",
            "--output-dir", out / "output", "--checkpoint-dir", out / "checkpoint"] + list(extra)


def read_metrics(output):
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


def test_two_ranks_learn_digits(digits, digits_shards, train_numpy, tmp_path):
    result = train_numpy(2, *job(digits_shards(2), digits, tmp_path,
                                 "--lr", "0.5", "--epochs", "10", "--progress-every", "20"))
    assert result.returncode == 0, result.stdout + result.stderr
    output = tmp_path / "output"

    summary = json.loads((output / "summary.json").read_text())
    assert set(summary) == SUMMARY_KEYS
    assert (summary["backend"], summary["model"], summary["ranks"]) == ("numpy", "softmax", 2)
    assert len(summary["hosts"]) == 2
    assert set(summary["versions"]) == {"python", "numpy", "mpi4py", "mpi"}
    assert "Open MPI" in summary["versions"]["mpi"]
    assert (summary["epochs"], summary["samples"]) == (10, 10 * TRAIN_SAMPLES)
    assert summary["test_accuracy"] >= 0.90
    assert 0.0 <= summary["allreduce_share"] <= 1.0
    assert summary["samples_per_sec"] > 0 and math.isfinite(summary["final_loss"])
    # Every step timed on every rank: compute, and the wait in the Allreduce measured.
    assert (summary["timing_method"], summary["timing_probe_every"]) == ("measured", None)
    check_rank_timing(summary, 230, [230])
    for entry in summary["rank_timing"]:
        assert entry["compute_seconds"] + entry["comm_seconds"] <= entry["step_seconds"] * 1.0001
    assert summary["rank_timing"][0]["comm_share"] == pytest.approx(summary["allreduce_share"], abs=0.05)

    metrics = read_metrics(output)
    assert all(set(record) == METRICS_KEYS for record in metrics)
    # 719 samples per shard in local batches of 32: 23 steps an epoch.
    assert [record["step"] for record in metrics] == list(range(20, 231, 20))
    assert all(record["samples"] == 64 * record["step"] - 34 * (record["epoch"] - 1)
               for record in metrics)
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    assert all(0.0 <= record["metric"] <= 1.0 for record in metrics)

    with np.load(output / "model.npz") as model:
        assert model["W"].shape == (64, 10) and model["b"].shape == (10,)
        assert str(model["model"]) == "softmax"
    for rank in (0, 1):
        assert "rank {}/2".format(rank) in result.stdout
        assert re.search(r"rank {}/2 .* timing: 230 steps, [0-9.]+ ms a step: compute".format(rank), result.stdout)
    assert "test accuracy" in result.stdout and "done:" in result.stdout


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(digits, digits_shards, train_numpy,
                                                              tmp_path):
    shards = digits_shards(2)
    model = ["--model", "mlp", "--hidden", "32", "--progress-every", "10"]
    straight = train_numpy(2, *job(shards, digits, tmp_path / "straight", "--epochs", "4", *model))
    assert straight.returncode == 0, straight.stdout + straight.stderr

    # --resume without a checkpoint starts fresh, so the same command serves both runs.
    first = train_numpy(2, *job(shards, digits, tmp_path / "resumed", "--epochs", "2", "--resume", *model))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "no checkpoint" in first.stdout
    # As if the job had died in epoch 3, after a progress record past the checkpoint.
    with open(tmp_path / "resumed" / "output" / "metrics.jsonl", "a") as metrics:
        metrics.write(json.dumps(dict(read_metrics(tmp_path / "resumed" / "output")[-1], step=50)) + "\n")
    second = train_numpy(2, *job(shards, digits, tmp_path / "resumed", "--epochs", "4", "--resume", *model))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resuming from" in second.stdout and "after epoch 2" in second.stdout

    with np.load(tmp_path / "straight" / "output" / "model.npz") as expected, \
            np.load(tmp_path / "resumed" / "output" / "model.npz") as got:
        for name in ("W1", "b1", "W2", "b2"):
            np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=1e-12)
    straight_summary = json.loads((tmp_path / "straight" / "output" / "summary.json").read_text())
    resumed_summary = json.loads((tmp_path / "resumed" / "output" / "summary.json").read_text())
    for key in ("epochs", "samples", "final_loss", "test_accuracy"):
        assert resumed_summary[key] == straight_summary[key]
    # The resumed run continues the metrics of the run it resumes, less the
    # records written after its checkpoint.
    def trajectory(run):
        return [(r["step"], r["epoch"], r["samples"], r["loss"], r["metric"])
                for r in read_metrics(tmp_path / run / "output")]
    assert trajectory("resumed") == trajectory("straight")


def test_overlapped_allreduce_trains_the_same_weights_as_one_blocking_allreduce(digits, digits_shards,
                                                                                 train_numpy, tmp_path):
    """The output layer's gradient goes out early in its own Iallreduce: the sums, and so the
    weights, are those of the one Allreduce of the whole gradient (to rounding: Open MPI picks
    its reduction order by message size)."""
    shards = digits_shards(3)
    model = ["--model", "mlp", "--hidden", "32", "--epochs", "3", "--minibatch", "96"]
    for mode in ("overlap", "blocking"):
        result = train_numpy(3, *job(shards, digits, tmp_path / mode, "--allreduce", mode, *model))
        assert result.returncode == 0, result.stdout + result.stderr
    with np.load(tmp_path / "blocking" / "output" / "model.npz") as expected, \
            np.load(tmp_path / "overlap" / "output" / "model.npz") as got:
        for name in ("W1", "b1", "W2", "b2"):
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-12, atol=1e-14)
    losses = {mode: json.loads((tmp_path / mode / "output" / "summary.json").read_text())["final_loss"]
              for mode in ("overlap", "blocking")}
    assert losses["overlap"] == pytest.approx(losses["blocking"], rel=1e-12)


def test_max_samples_stops_every_rank_at_the_same_step(digits, digits_shards, train_numpy, tmp_path):
    result = train_numpy(2, *job(digits_shards(2), digits, tmp_path, "--max-samples", "1000"))
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "output" / "summary.json").read_text())
    # 16 steps of 64 samples; no epoch finished, so no checkpoint either.
    assert (summary["samples"], summary["epochs"]) == (1024, 0)
    assert not (tmp_path / "checkpoint" / "checkpoint.npz").exists()


def test_a_failing_rank_aborts_the_job_instead_of_hanging(digits, digits_shards, train_numpy, tmp_path):
    shards = digits_shards(2)
    (shards / "shard-00001.ctf").unlink()
    result = train_numpy(2, *job(shards, digits, tmp_path), timeout=30)
    assert result.returncode != 0
    assert "rank 1/2" in result.stdout and "FileNotFoundError" in result.stdout
