"""roles/train_job/files/run_rank.py under a real mpirun: every rank's output in logs/1/rank.N/."""

import shutil
import subprocess
import sys
from pathlib import Path

from prerequisites import requires

RUNNER = Path(__file__).resolve().parents[3] / "roles" / "train_job" / "files" / "run_rank.py"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe",
          "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
ENTRY = """import os, sys
rank = os.environ["OMPI_COMM_WORLD_RANK"]
print("rank", rank, "args", sys.argv[1:])
print("to stderr from", rank, file=sys.stderr)
os.write(1, b"native write\\n")
if rank == "1" and "--fail" in sys.argv:
    raise ValueError("rank 1 gives up")
"""

pytestmark = requires(shutil.which("mpirun") is not None, "needs Open MPI's mpirun (Debian: openmpi-bin)")


def launch(tmp_path, *args):
    (tmp_path / "entry.py").write_text(ENTRY)
    return subprocess.run(MPIRUN + ["-np", "3", sys.executable, str(RUNNER), "--logs", "logs", "entry.py", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_every_ranks_output_lands_in_its_own_folder_and_not_on_mpiruns_console(tmp_path):
    result = launch(tmp_path, "--epochs", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in range(3):
        folder = tmp_path / "logs" / "1" / f"rank.{rank}"
        stdout = (folder / "stdout").read_text()
        assert f"rank {rank} args ['--epochs', '2']" in stdout and "native write" in stdout
        assert (folder / "stderr").read_text() == f"to stderr from {rank}\n"
    assert "rank 0 args" not in result.stdout


def test_a_failing_rank_says_why_in_its_stderr_and_fails_the_job(tmp_path):
    result = launch(tmp_path, "--fail")
    assert result.returncode != 0
    assert "ValueError: rank 1 gives up" in (tmp_path / "logs" / "1" / "rank.1" / "stderr").read_text()


def test_without_a_rank_in_the_environment_it_refuses(tmp_path):
    (tmp_path / "entry.py").write_text("print('ran')\n")
    env = {"PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, str(RUNNER), "--logs", "logs", "entry.py"], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
    assert result.returncode != 0 and "no rank in the environment" in result.stderr
    assert not (tmp_path / "logs").exists()
