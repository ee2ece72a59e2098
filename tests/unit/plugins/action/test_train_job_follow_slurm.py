"""The follower of a Slurm job, its loop driven by scripted polls: a queued job's wait is said and not counted
against its time limit, its exit code ends it as before, a job that left the queue without one is read from
scontrol, and Ctrl-C is scancel."""

import types

import pytest
from ansible.plugins.action import ActionBase

from ansible_collections.cntk.cluster.plugins.action import train_job_follow as follow

LAYOUT = [{"host": "node1", "slots": 2, "ranks": [0, 1]}]


def answer(exit_code="", metrics="", queue=""):
    return f"{exit_code}\n{follow.SEPARATOR}\n{metrics}\n{follow.SLURM_SEPARATOR}\n{queue}\n"


class Scripted(follow.ActionModule):
    """The real loop; the head node's answers from a script, the commands it was sent recorded."""

    def __init__(self, polls, scontrol="", interrupt_after=None, **args):
        self._task = types.SimpleNamespace(args=dict(dict(run_dir="/srv/run", layout=LAYOUT, user="cntk",
                                                          name="digits", poll_seconds=1, slurm_job="41"), **args))
        self.polls, self.scontrol, self.sent, self.interrupt_after = list(polls), scontrol, [], interrupt_after

    def _poll(self, user, script):
        assert "squeue --noheader --jobs=41" in script
        if self.interrupt_after is not None and len(self.sent) >= self.interrupt_after:
            raise KeyboardInterrupt
        self.sent.append("poll")
        return self.polls.pop(0)

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
    follower = Scripted([answer(queue="PENDING|Resources"), answer(queue="PENDING|Resources"),
                         answer(queue="RUNNING|None"),
                         answer(exit_code="0", metrics='{"epoch": 1, "step": 5}', queue="COMPLETING|None")])
    result = follower.run()
    assert result["rc"] == 0 and result["slurm_job"] == 41
    assert quick.count("digits: Slurm job 41 is queued (Resources)") == 1
    assert not any(command.startswith("scancel") for command in follower.sent)


def test_a_job_gone_from_the_queue_without_an_exit_code_is_read_from_scontrol():
    follower = Scripted([answer(queue="RUNNING|None"), answer(), answer()],
                        scontrol="JobId=41 JobState=CANCELLED Reason=None ExitCode=0:15")
    result = follower.run()
    assert result["rc"] == 143
    assert result["reason"] == "Slurm ended job 41: CANCELLED"
    assert "scontrol show job --oneliner 41 2>&1" in follower.sent


def test_one_poll_without_the_job_is_not_yet_its_end():
    """The script may be writing its exit code as the job leaves the queue."""
    follower = Scripted([answer(queue="RUNNING|None"), answer(), answer(exit_code="0")])
    assert follower.run()["rc"] == 0
    assert not any(command.startswith("scontrol") for command in follower.sent)


def test_ctrl_c_cancels_the_job_with_scancel():
    follower = Scripted([answer(queue="RUNNING|None")] * 5, interrupt_after=2)
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
                        scontrol="JobId=41 JobState=PENDING Reason=BeginTime Restarts=1")
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
