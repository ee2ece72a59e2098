"""The follower (root) stops the job by the pid in a file the training user
owns: a hostile value (-1 is "every process", 1 is init, a command
substitution, another user's process) must never reach kill. The real
_stop_job's command runs in sh, with kill replaced by a recorder."""

import getpass
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from ansible_collections.cntk.cluster.plugins.action import train_job_follow


def killed(tmp_path, pid_text, user="cntk"):
    run_dir = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    run_dir.mkdir()
    (run_dir / train_job_follow.job_files.MPIRUN_PID).write_text(pid_text)
    commands = []
    follower = object.__new__(train_job_follow.ActionModule)
    follower._remote = commands.append
    follower._stop_job(str(run_dir), user)
    [command] = commands
    log = run_dir / "kills"
    # runuser -u USER -- sh -c SCRIPT: SCRIPT runs here, where kill is the recorder.
    script = (f"kill() {{ echo \"$@\" >> {log}; }}; runuser() {{ eval \"$6\"; }}; sleep() {{ :; }}; "
              f"{command}")
    subprocess.run(["sh", "-c", script], check=True)
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("pid_text", ["-1", "1", "0", "", "$(touch /tmp/pwned)", "12 13", "-1\n", "abc"])
def test_a_hostile_pid_file_signals_nothing(tmp_path, pid_text):
    assert killed(tmp_path, pid_text) == []


def test_the_jobs_pid_is_stopped_with_term_then_kill(tmp_path):
    job = subprocess.Popen(["sleep", "30"])
    try:
        assert killed(tmp_path, f"{job.pid}\n", user=getpass.getuser()) == [f"-TERM -{job.pid}", f"-KILL -{job.pid}"]
    finally:
        job.kill()


def test_a_process_of_another_user_is_not_signalled(tmp_path):
    """The training user writes sshd's pid (root's) into the file: nothing is signalled."""
    assert killed(tmp_path, "1\n") == []
    job = subprocess.Popen(["sleep", "30"])
    try:
        assert killed(tmp_path, f"{job.pid}\n", user="cntk") == []
    finally:
        job.kill()


@pytest.mark.parametrize("line", ['{"step": 1, "loss": [1]}', '{"step": 2, "loss": "x", "epoch": {}}',
                                  '{"step": 3, "samples": true, "metric": null}'])
def test_an_odd_metrics_line_is_shown_without_its_odd_fields(line):
    record = train_job_follow.job_files.parse_metrics_line(line)
    text = train_job_follow.progress_line("job", record)
    assert text.startswith("job | step ")


@pytest.mark.parametrize("text", ["abc", "1e3", "-", "0; rm -rf /"])
def test_an_exit_code_that_is_not_a_number_counts_as_a_failure(text):
    assert train_job_follow.job_files.parse_exit_code(text) == 255
