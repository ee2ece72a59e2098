"""The follower of a Slurm job, its loop driven by scripted polls: a queued job's wait is said and not counted
against its time limit, its exit code ends it as before, a job that left the queue without one is read from
scontrol, and Ctrl-C is scancel."""

import os
import re
import shlex
import subprocess
import types

import pytest
from ansible.plugins.action import ActionBase

from ansible_collections.cntk.cluster.plugins.action import train_job_follow as follow

LAYOUT = [{"host": "node1", "slots": 2, "ranks": [0, 1]}]


def answer(exit_code="", metrics="", queue=""):
    """One poll's answer, rendered with the separators of the script it answers (Scripted._poll)."""
    return exit_code, metrics, queue


def rendered(script, poll):
    """The head node's output for `script`: squeue's line, the Slurm separator, the exit code, the separator,
    the metrics line, in the order the script prints them."""
    slurm_separator = re.search(r"echo (@@train_job_follow:slurm:[0-9a-f]{32}@@)", script).group(1)
    separator = re.search(r"echo (@@train_job_follow:[0-9a-f]{32}@@)", script).group(1)
    assert script.index("squeue") < script.index(slurm_separator) < script.index("cd ")
    exit_code, metrics, queue = poll
    return f"{queue}\n{slurm_separator}\n{exit_code}\n{separator}\n{metrics}\n"


class Scripted(follow.ActionModule):
    """The real loop; the head node's answers from a script, the commands it was sent recorded."""

    def __init__(self, polls, scontrol="", interrupt_after=None, **args):
        self._task = types.SimpleNamespace(args=dict(dict(run_dir="/srv/run", layout=LAYOUT, user="cntk",
                                                          name="digits", poll_seconds=1, slurm_job="41"), **args))
        self.polls, self.scontrol, self.sent, self.interrupt_after = list(polls), scontrol, [], interrupt_after
        self.scripts = []

    def _poll(self, user, script):
        assert "squeue --noheader --jobs=41" in script
        if self.interrupt_after is not None and len(self.sent) >= self.interrupt_after:
            raise KeyboardInterrupt
        self.sent.append("poll")
        self.scripts.append(script)
        poll = self.polls.pop(0)
        return poll if isinstance(poll, str) else rendered(script, poll)

    def _as_user(self, user, script):
        self.sent.append(script)
        return self.scontrol if script.startswith("scontrol") else ""


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(follow.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    shown = []
    monkeypatch.setattr(follow.display, "display", shown.append)
    return shown


def test_a_queued_job_is_said_then_its_exit_code_ends_it(quick):
    follower = Scripted([answer(queue="PENDING|Resources|"), answer(queue="PENDING|Resources|"),
                         answer(queue="RUNNING|None|node1"),
                         answer(exit_code="0", metrics='{"epoch": 1, "step": 5}', queue="COMPLETING|None|node1")])
    result = follower.run()
    assert result["rc"] == 0 and result["slurm_job"] == 41
    assert quick.count("digits: Slurm job 41 is queued (Resources)") == 1
    assert not any(command.startswith("scancel") for command in follower.sent)


def test_a_job_gone_from_the_queue_without_an_exit_code_is_read_from_scontrol():
    follower = Scripted([answer(queue="RUNNING|None|node1"), answer(), answer()],
                        scontrol="JobId=41 JobName=digits UserId=cntk(1001) JobState=CANCELLED Reason=None ExitCode=0:15")
    result = follower.run()
    assert result["rc"] == 143
    assert result["reason"] == "Slurm ended job 41: CANCELLED"
    assert "scontrol show job --oneliner 41 2>&1" in follower.sent


def test_one_poll_without_the_job_is_not_yet_its_end():
    """The script may be writing its exit code as the job leaves the queue."""
    follower = Scripted([answer(queue="RUNNING|None|node1"), answer(), answer(exit_code="0")])
    assert follower.run()["rc"] == 0
    assert not any(command.startswith("scontrol") for command in follower.sent)


def test_ctrl_c_cancels_the_job_with_scancel():
    follower = Scripted([answer(queue="RUNNING|None|node1")] * 5, interrupt_after=2)
    with pytest.raises(KeyboardInterrupt):
        follower.run()
    assert "scancel 41" in follower.sent


def test_a_job_id_that_is_not_a_number_is_refused():
    with pytest.raises(follow.AnsibleError, match="not a Slurm job id"):
        Scripted([], slurm_job="41; rm -rf /").run()


def test_a_job_requeued_after_a_nodes_failure_is_followed_through_its_attempts(quick):
    """Slurm requeues the job after node4 fails: the follower says so, keeps following (a moment out of squeue's
    view, scontrol still says PENDING), and returns each attempt's nodes and the node lost."""
    follower = Scripted([answer(queue="RUNNING|None|node[1-4]", metrics='{"epoch": 1, "step": 40}'),
                         answer(queue="RUNNING|None|node[1-4]", metrics='{"epoch": 2, "step": 60}'),
                         answer(), answer(queue="PENDING|BeginTime|"), answer(), answer(),
                         answer(queue="RUNNING|None|node[1-3]", metrics='{"epoch": 2, "step": 55}'),
                         answer(exit_code="0", metrics='{"epoch": 3, "step": 90}', queue="COMPLETING|None|node[1-3]")],
                        scontrol="JobId=41 JobName=digits UserId=cntk(1001) JobState=PENDING Reason=BeginTime Restarts=1")
    result = follower.run()
    assert result["rc"] == 0
    assert result["lost_nodes"] == ["node4"]
    assert [attempt["nodes"] for attempt in result["attempts"]] == [["node1", "node2", "node3", "node4"],
                                                                   ["node1", "node2", "node3"]]
    assert result["attempts"][0]["last_step"] == 60 and result["attempts"][0]["lost"] == ["node4"]
    assert ("digits: Slurm requeued job 41 (BeginTime): it starts again on the nodes left and continues from its "
            "last checkpoint") in quick


def test_a_job_that_ran_once_has_no_attempts_recorded():
    follower = Scripted([answer(queue="RUNNING|None|node[1-4]"), answer(exit_code="0", queue="COMPLETING|None|")])
    result = follower.run()
    assert result["rc"] == 0 and "attempts" not in result and "lost_nodes" not in result


def test_a_job_slurm_started_without_a_held_out_node_records_it():
    """node4 drained and the job allowing one node fewer: Slurm runs it on node1-3, and node4 is named held out
    (collect.yml then looks for no logs there)."""
    layout = [{"host": f"node{i}", "slots": 2, "ranks": [2 * i - 2, 2 * i - 1]} for i in range(1, 5)]
    follower = Scripted([answer(queue="RUNNING|None|node[1-3]", metrics='{"epoch": 1, "step": 40}'),
                         answer(exit_code="0", metrics='{"epoch": 2, "step": 80}', queue="COMPLETING|None|node[1-3]")],
                        layout=layout)
    result = follower.run()
    assert result["rc"] == 0 and result["held_out"] == ["node4"] and result["lost_nodes"] == []
    assert result["attempts"] == [{"nodes": ["node1", "node2", "node3"], "last_step": 40}]


class OnThisMachine(follow.ActionModule):
    """The real loop running its real probe with sh in a run folder here. Slurm's commands are stand-ins (a
    double: no Slurm here), each a script printing what Slurm would; everything else is the real shell."""

    def __init__(self, tmp_path, squeue, scontrol, max_polls=20, **args):
        run_dir = tmp_path / "run"
        (run_dir / "output").mkdir(parents=True)
        (run_dir / "heartbeat").touch()  # run.sh's
        self.run_dir, self.max_polls, self.polls = run_dir, max_polls, 0
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for name, text in (("squeue", squeue), ("scontrol", scontrol), ("scancel", "")):
            path = bin_dir / name
            path.write_text("#!/bin/sh\nprintf '%s' " + shlex.quote(text) + "\n")
            path.chmod(0o755)
        self.env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
        self._task = types.SimpleNamespace(args=dict(dict(run_dir=str(run_dir), layout=LAYOUT, user="cntk",
                                                          name="digits", poll_seconds=1, slurm_job="41"), **args))
        self.sent = []

    def _sh(self, script):
        return subprocess.run(["sh", "-c", script], env=self.env, capture_output=True, text=True,
                              timeout=10).stdout

    def _poll(self, user, script):
        self.polls += 1
        assert self.polls <= self.max_polls, "the follower is still polling: it believes what the job wrote"
        return self._sh(script)

    def _as_user(self, user, script):
        self.sent.append(script)
        return self._sh(script)


FORGED = "@@train_job_follow:slurm@@PENDING|\x1b]0;owned\x07\x1b[2JResources|node1"


def test_a_rank_printing_the_separator_and_a_pending_line_does_not_hold_the_follower(tmp_path, quick):
    """Rank 0's metrics line says, after the old fixed separator, that the job is pending: it is the job's
    text, not squeue's. Slurm no longer lists the job (it failed): its end comes from scontrol."""
    follower = OnThisMachine(tmp_path, squeue="",
                             scontrol="JobId=41 JobName=digits UserId=cntk(1001) GroupId=cntk(1001) "
                                      "JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0\n")
    (follower.run_dir / "output" / "metrics.jsonl").write_text('{"step": 3}\n' + FORGED + "\n")
    result = follower.run()
    assert result["rc"] == 1 and result["reason"] == "Slurm ended job 41: FAILED (NonZeroExitCode)"
    assert not any("queued" in line for line in quick)
    assert follower.polls == follow.GONE_POLLS


def test_the_probe_prints_slurms_answer_before_anything_the_job_wrote(tmp_path, quick):
    """The job's exit code file and metrics line hold a separator each: squeue's line is read all the same."""
    follower = OnThisMachine(tmp_path, squeue="RUNNING|None|node1\n", scontrol="", max_polls=1)
    (follower.run_dir / "output" / "metrics.jsonl").write_text(FORGED + "\n" + follow.SEPARATOR + "\n")
    (follower.run_dir / "exit_code").write_text("0\n")
    result = follower.run()
    assert result["rc"] == 0 and "attempts" not in result
    assert follower.polls == 1


@pytest.mark.parametrize("line", ["PENDING|Res\x1b[2Jources|", "PENDING|\x1b]0;title\x07|", "HACKED|None|node1",
                                  "pending|Resources|", "RUNNING|None|node1;rm", "Resources|PENDING"])
def test_a_queue_line_slurm_could_not_have_written_is_not_read(line):
    assert follow.slurm_line(line) == ("", "", "")


@pytest.mark.parametrize("line, fields", [("PENDING|Resources|", ("PENDING", "Resources", "")),
                                          ("RUNNING|None|node[1-3],gpu-4", ("RUNNING", "None", "node[1-3],gpu-4")),
                                          ("PENDING|ReqNodeNotAvail, UnavailableNodes:node4|",
                                           ("PENDING", "ReqNodeNotAvail, UnavailableNodes:node4", ""))])
def test_slurms_own_lines_are_read(line, fields):
    assert follow.slurm_line(line + "\n") == fields


def test_no_escape_sequence_from_the_queue_or_the_metrics_reaches_the_terminal(quick):
    follower = Scripted([answer(queue="PENDING|Res\x1b[2Jources|", metrics='{"step": 1, "loss": 0.5}\x1b[31m'),
                         answer(queue="RUNNING|None|node1", metrics='{"step": 2}'),
                         answer(exit_code="0", metrics='{"step": 3}', queue="COMPLETING|None|node1")])
    assert follower.run()["rc"] == 0
    assert quick and not any("\x1b" in line or "\x07" in line for line in quick)


def test_a_job_pending_past_train_job_pending_timeout_is_cancelled(monkeypatch, quick):
    clock = [0.0]
    monkeypatch.setattr(follow.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(follow.time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    follower = Scripted([answer(queue="PENDING|Resources|")] * 10, pending_timeout=5)
    result = follower.run()
    assert result["rc"] == 255 and "scancel 41" in follower.sent
    assert "waited in the queue for more than 5 s (Resources)" in result["reason"]
    assert "train_job_pending_timeout" in result["reason"]
    assert follower.polls == [answer(queue="PENDING|Resources|")] * 3


def test_each_wait_in_the_queue_counts_on_its_own(monkeypatch, quick):
    """A requeued job waits again: its first wait does not count against the second."""
    clock = [0.0]
    monkeypatch.setattr(follow.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(follow.time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    pending, running = answer(queue="PENDING|Resources|"), answer(queue="RUNNING|None|node1")
    follower = Scripted([pending] * 4 + [running] + [pending] * 4 + [answer(exit_code="0", queue="RUNNING|None|node1")],
                        pending_timeout=5)
    assert follower.run()["rc"] == 0


def test_a_negative_pending_timeout_is_refused():
    with pytest.raises(follow.AnsibleError, match="train_job_pending_timeout is -1"):
        Scripted([], pending_timeout=-1).run()


def test_a_renamed_job_is_not_read_from_scontrol():
    """The job's owner may rename it; its name is the one free text before JobState in scontrol's line."""
    follower = Scripted([answer(queue="RUNNING|None|node1"), answer(), answer()],
                        scontrol="JobId=41 JobName=x JobState=COMPLETED ExitCode=0:0 UserId=cntk(1001) "
                                 "JobState=FAILED ExitCode=1:0")
    result = follower.run()
    assert result["rc"] == 255 and "renamed from digits" in result["reason"]
