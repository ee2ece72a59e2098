"""More runs of train.py --backend cntk on the REAL cntk 2.7 CPU wheel under mpirun.

The same set-up as test_cntk_mpi.py (tests/training/cntk_env.py; skips where
pyenv's 3.6.15 or Open MPI is missing), for the cases it leaves out: the
mlp with a global sample budget, with rank 0 alone writing; a rank without
its shard; a checkpoint missing half of its files.
"""

import socket

from test_cntk_mpi import lines_of, output_of, summary_of
from test_mpi_training import job, read_metrics


def test_mlp_with_a_sample_budget_and_rank0_alone_writes(digits, digits_shards, train_cntk, tmp_path):
    arguments = job(digits_shards(2), digits, tmp_path, "--model", "mlp", "--hidden", "32", "--lr", "0.5",
                    "--max-samples", "500")
    arguments = [a for a in arguments if a != tmp_path / "output" and a != "--output-dir"]
    result = train_cntk(2, *arguments, per_rank=[["--output-dir", tmp_path / "output"],
                                                 ["--output-dir", tmp_path / "rank1-output"]])
    assert result.returncode == 0, output_of(result)
    summary = summary_of(tmp_path)
    assert (summary["model"], summary["hidden"], summary["max_samples"]) == ("mlp", 32, 500)
    # 250 samples a rank in local minibatches of 32: 7 full steps and one of 26.
    assert (summary["samples"], summary["steps"]) == (500, 8)
    metrics = read_metrics(tmp_path / "output")
    assert metrics[-1]["step"] == 8 and metrics[-1]["samples"] == 500
    assert summary["test_accuracy"] is not None and (tmp_path / "output" / "model.cntk").is_file()
    assert not (tmp_path / "rank1-output").exists()
    assert any("done:" in line for line in lines_of(result, 1))


def test_a_rank_without_its_shard_stops_every_rank_before_training(digits, digits_shards, train_cntk, tmp_path):
    data_dir = digits_shards(1)  # shard-00000.ctf only
    result = train_cntk(2, *job(data_dir, digits, tmp_path), timeout=60)
    assert result.returncode != 0
    for rank in (0, 1):
        said = "\n".join(lines_of(result, rank, "stderr"))
        assert "cannot start: rank 1 on {}: shard not found: {}".format(
            socket.gethostname(), data_dir / "shard-00001.ctf") in said, output_of(result)
    assert not (tmp_path / "output" / "metrics.jsonl").exists()
    assert not (tmp_path / "checkpoint" / "trainer.ckpt").exists()


def test_resume_refuses_a_checkpoint_missing_half_its_files(digits, digits_shards, train_cntk, tmp_path):
    arguments = job(digits_shards(2), digits, tmp_path, "--lr", "0.5")
    result = train_cntk(2, *arguments, "--epochs", "1")
    assert result.returncode == 0, output_of(result)
    before = (tmp_path / "output" / "metrics.jsonl").read_text()
    (tmp_path / "checkpoint" / "trainer.ckpt.ckp").unlink()
    result = train_cntk(2, *arguments, "--epochs", "2", "--resume", timeout=60)
    assert result.returncode != 0
    lacking = "{} ({}: {}, lacks trainer.ckpt.ckp)"
    for rank in (0, 1):
        said = "\n".join(lines_of(result, rank, "stderr"))
        assert "cannot resume: the checkpoint is visible to rank(s) none but not to rank(s) {}, {}".format(
            lacking.format(0, socket.gethostname(), tmp_path / "checkpoint"),
            lacking.format(1, socket.gethostname(), tmp_path / "checkpoint")) in said, output_of(result)
    assert (tmp_path / "output" / "metrics.jsonl").read_text() == before
