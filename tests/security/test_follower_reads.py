"""Findings 4 and 8 (issue 27): what the follower reads from the training
user's run folder is bounded, and the heartbeat outlasts failed polls.

On main a FIFO as the metrics file hung the playbook for ever (tail on a
FIFO), a one-line metrics file of gigabytes came whole into the controller's
memory, a file that grew after rsync listed it came back past
train_job_fetch_max_mb, and the 30 s heartbeat was shorter than one failed
poll (SSH's 30 s connect timeout): a blip of the management network stopped
a healthy job. The probe here is the follower's own script, run by sh as it
is on the head node; the fetch is collect-Linux.yml's own command prefix."""

import configparser
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.cntk.cluster.plugins.action import train_job_follow as follow
from ansible_collections.cntk.cluster.plugins.filter import train_job as tj

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "output").mkdir()
    (tmp_path / "heartbeat").touch()  # run.sh makes it before the first poll
    return tmp_path


def probe(run_dir):
    started = time.monotonic()
    out = subprocess.run(["timeout", "30", "sh", "-c", follow.probe_script(str(run_dir))], capture_output=True)
    return out.stdout, time.monotonic() - started


def test_the_probe_reads_the_exit_code_and_the_last_metrics_line(run_dir):
    (run_dir / "exit_code").write_text("0\n")
    (run_dir / "output" / "metrics.jsonl").write_text('{"epoch": 1}\n{"epoch": 2}\n')
    out, _ = probe(run_dir)
    assert out == b'0\n' + follow.SEPARATOR.encode() + b'\n{"epoch": 2}\n'


@pytest.mark.parametrize("name", ["output/metrics.jsonl", "exit_code"])
def test_a_fifo_is_not_read(run_dir, name):
    os.mkfifo(run_dir / name)
    out, seconds = probe(run_dir)
    assert follow.SEPARATOR.encode() in out and seconds < 5


def test_a_huge_one_line_metrics_file_is_read_to_a_bound(run_dir):
    with open(run_dir / "output" / "metrics.jsonl", "wb") as handle:
        handle.write(b"{" + b"x" * (64 * 1024 * 1024) + b"}")
    out, _ = probe(run_dir)
    assert len(out) <= follow.METRICS_TAIL_BYTES + 100


def test_a_metrics_link_is_not_followed(run_dir, tmp_path_factory):
    secret = tmp_path_factory.mktemp("root") / "secret"
    secret.write_text('{"epoch": 99}\n')
    os.symlink(secret, run_dir / "output" / "metrics.jsonl")
    out, _ = probe(run_dir)
    assert b"99" not in out


def _pull_prefix():
    tasks = yaml.safe_load((ROOT / "roles" / "train_job" / "tasks" / "collect-Linux.yml").read_text())
    argv = tasks[0]["vars"]["train_job_pull_argv"]
    return argv[:argv.index("rsync")]


def test_a_file_past_the_cap_is_cut_off_as_it_lands(tmp_path):
    # As if the file grew after rsync's list (--max-size) let it through.
    source, dest = tmp_path / "node", tmp_path / "controller"
    source.mkdir(), dest.mkdir()
    (source / "a.log").write_text("small\n")
    (source / "model.npz").write_bytes(os.urandom(3 * 1048576))
    prefix = [part.replace("{{ train_job_fetch_max_mb | int * 1048576 }}", str(1048576)) for part in _pull_prefix()]
    result = subprocess.run(prefix + ["rsync", "--files-from=-", f"{source}/", f"{dest}/"],
                            input="a.log\nmodel.npz\n", capture_output=True, text=True)
    assert "File too large" in result.stderr
    assert not (dest / "model.npz").exists()
    assert all(path.stat().st_size <= 1048576 for path in dest.rglob("*") if path.is_file())


def defaults():
    return yaml.safe_load((ROOT / "roles" / "train_job" / "defaults" / "main.yml").read_text())


def limits(**changes):
    values = {"timeout": 7200, "poll_seconds": 3, "heartbeat_timeout": 120, "fetch_max_mb": 512,
              "connect_timeout": 30}
    return tj._limit_problems({**values, **changes})


def test_the_shipped_margins_are_consistent():
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "ansible.cfg")
    alive = dict(re.findall(r"-o ServerAlive(\w+)=(\d+)", cfg["ssh_connection"]["ssh_args"]))
    assert int(alive["Interval"]) * int(alive["CountMax"]) == tj.DEAD_CONNECTION_S
    d = defaults()
    assert limits(poll_seconds=d["train_job_poll_seconds"], heartbeat_timeout=d["train_job_heartbeat_timeout"],
                  connect_timeout=int(cfg["defaults"]["timeout"])) == []


def test_a_heartbeat_shorter_than_two_failed_polls_is_refused():
    [problem] = limits(heartbeat_timeout=30)
    assert problem.startswith("train_job_heartbeat_timeout=30 is shorter than two failed polls")
    assert "= 96 s" in problem
    assert limits(heartbeat_timeout=0) == []  # never stops for the controller


@pytest.mark.parametrize("name, value", [("timeout", -1), ("timeout", 0), ("poll_seconds", 0),
                                         ("fetch_max_mb", 0), ("fetch_max_mb", -5), ("heartbeat_timeout", -1),
                                         ("timeout", "soon"), ("fetch_max_mb", True)])
def test_negative_or_zero_limits_are_refused(name, value):
    [problem] = limits(**{name: value})
    assert problem.startswith(f"train_job_{name}={value!r}: give a whole number of at least")


def test_a_ranks_escape_sequences_do_not_reach_the_terminal(tmp_path):
    # Issue 27, finding 10: the failed rank's words are quoted in the playbook's failure message.
    from ansible_collections.cntk.cluster.plugins.module_utils import job_files
    stderr = tmp_path / "logs" / "node1" / "1" / "rank.0" / "stderr"
    stderr.parent.mkdir(parents=True)
    stderr.write_text("x" * 200000 + "\nTraceback (most recent call last):\n  File \"t.py\", line 1\n"
                      "ValueError: \x1b]0;owned\x07\x1b[2J\x1b[31mbad\x1b[0m\x08\x9b value\n")
    rank, host, error = job_files.rank_error(tmp_path / "logs", "node1", 0)
    assert error.splitlines()[-1] == "ValueError: bad value"
    assert job_files.printable("a\tb\nc\x1b[1m") == "a\tb\nc"
