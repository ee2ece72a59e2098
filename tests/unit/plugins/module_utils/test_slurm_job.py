"""The train step's Slurm job: sbatch options from the layout, and what squeue and scontrol say afterwards."""

import pathlib

import pytest
import yaml

from bounded import call_within
from ansible_collections.cntk.cluster.plugins.filter import slurm_job as filter_plugin
from ansible_collections.cntk.cluster.plugins.module_utils import slurm_job

LAYOUT = [{"host": f"node{i}", "slots": 2, "ranks": [2 * i - 2, 2 * i - 1]} for i in (1, 2, 3, 4)]


@pytest.mark.parametrize("seconds, expected", [(1, "0-00:01:00"), (60, "0-00:01:00"), (61, "0-00:02:00"),
                                               (7320, "0-02:02:00"), (90000, "1-01:00:00")])
def test_time_limit_rounds_up_to_a_minute(seconds, expected):
    assert slurm_job.time_limit(seconds) == expected


def test_sbatch_options_take_the_layouts_nodes_and_ranks_per_node():
    options = slurm_job.sbatch_options(LAYOUT, "digits", "20261203T000000Z", "/srv/run", 7200, "mpirun.log")
    assert options == ["--job-name=digits", "--comment=cntk.cluster:digits:20261203T000000Z", "--chdir=/srv/run",
                       "--output=mpirun.log", "--nodes=4", "--nodelist=node1,node2,node3,node4",
                       "--time=0-02:02:00", "--export=NONE", "--no-requeue", "--parsable", "--ntasks-per-node=2"]
    assert slurm_job.uniform_slots(LAYOUT)


def test_uneven_slots_get_the_most_per_node_and_a_hostfile_places_the_ranks():
    layout = [{"host": "node1", "slots": 4, "ranks": [0, 1, 2, 3]}, {"host": "node2", "slots": 2, "ranks": [4, 5]}]
    assert slurm_job.sbatch_options(layout, "j", "r", "/d", 60, "o")[-1] == "--ntasks-per-node=4"
    assert not slurm_job.uniform_slots(layout)


@pytest.mark.parametrize("text, rc, reason", [
    ("JobId=12 JobName=j JobState=CANCELLED Reason=None ExitCode=0:15", 143, "Slurm ended job 12: CANCELLED"),
    ("JobId=13 JobState=TIMEOUT Reason=TimeLimit ExitCode=0:0", 255, "Slurm ended job 13: TIMEOUT (TimeLimit)"),
    ("JobId=14 JobState=NODE_FAIL Reason=NodeDown ExitCode=0:0", 255, "Slurm ended job 14: NODE_FAIL (NodeDown)"),
    ("JobId=15 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0", 3,
     "Slurm ended job 15: FAILED (NonZeroExitCode)"),
    ("JobId=16 JobState=COMPLETED Reason=None ExitCode=0:0", 0, "Slurm ended job 16: COMPLETED"),
    ("slurm_load_jobs error: Invalid job id specified", 255, "Slurm ended job ?: UNKNOWN"),
])
def test_a_job_that_ended_without_its_exit_code_is_read_from_scontrol(text, rc, reason):
    assert slurm_job.ended(slurm_job.show_job(text)) == (rc, reason)


def test_the_queue_lists_only_the_projects_jobs():
    text = ("41|digits|cntk|RUNNING|cntk.cluster:digits:20261203T000000Z\n"
            "42|mine|alice|PENDING|(null)\n"
            "43|other|cntk|PENDING|cntk.cluster:other:20261203T000100Z\n")
    assert [job["id"] for job in slurm_job.queue_lines(text)] == ["41", "43"]
    assert slurm_job.queue_lines(text)[1] == {"id": "43", "name": "other", "user": "cntk", "state": "PENDING",
                                              "comment": "cntk.cluster:other:20261203T000100Z"}


def test_a_job_that_may_be_requeued_asks_for_the_head_node_and_a_range_of_nodes():
    """train_job_max_retries: 1 of 4 nodes: Slurm may start a requeued job on 3 of them, node1 always first."""
    options = slurm_job.sbatch_options(LAYOUT, "digits", "r", "/srv/run", 7200, "mpirun.log", retries=1)
    assert "--nodes=3-4" in options and "--nodelist=node1" in options and "--requeue" in options
    # Whole nodes and no task count: Slurm would fix 8 tasks at 2 a node at the first start, which 3 nodes
    # cannot hold; run.sh maps the ranks over whatever nodes the attempt has.
    assert "--exclusive" in options and not any(option.startswith("--ntasks") for option in options)
    assert "--no-requeue" not in options and "--open-mode=append" in options
    assert "--nodes=1-4" in slurm_job.sbatch_options(LAYOUT, "j", "r", "/d", 60, "o", retries=5)


def test_attempts_are_told_apart_by_a_requeue_and_name_the_nodes_lost():
    history = [("PENDING", "", None), ("RUNNING", "node[1-4]", None), ("RUNNING", "node[1-4]", 40),
               ("REQUEUED", "node[1-4]", 40), ("PENDING", "", 40), ("RUNNING", "node[1,3-4]", 40),
               ("RUNNING", "node[1,3-4]", 80), ("COMPLETING", "node[1,3-4]", 90)]
    assert slurm_job.attempts(history) == [
        {"nodes": ["node1", "node2", "node3", "node4"], "last_step": 40, "lost": ["node2"]},
        {"nodes": ["node1", "node3", "node4"], "last_step": 80}]
    # Requeued and started again between two polls: the nodes changed.
    assert len(slurm_job.attempts([("RUNNING", "node[1-4]", 5), ("RUNNING", "node[1-3]", 9)])) == 2
    assert slurm_job.attempts([("RUNNING", "node[1-4]", 5), ("RUNNING", "node[1-4]", 9)]) == [
        {"nodes": ["node1", "node2", "node3", "node4"], "last_step": 9}]


def test_the_nodes_held_out_are_those_of_the_layout_the_first_attempt_did_not_run_on():
    hosts = ["node1", "node2", "node3", "node4"]
    assert slurm_job.held_out(hosts, [{"nodes": ["node1", "node2", "node4"]}, {"nodes": ["node1", "node4"]}]) == \
        ["node3"]
    assert slurm_job.held_out(hosts, [{"nodes": hosts}]) == []
    assert slurm_job.held_out(hosts, []) == []


@pytest.mark.parametrize("nodes, per_node", [(4, 2), (3, 3), (2, 4), (1, 8)])
def test_a_requeued_job_maps_its_ranks_over_the_nodes_it_has(tmp_path, nodes, per_node):
    """The shell lines run.sh runs, with scontrol's hostname list faked: ppr:N:node for 8 ranks."""
    import subprocess
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\nfor n in $(seq %d); do echo node$n; done\n" % nodes)
    fake.chmod(0o755)
    script = slurm_job.requeue_mapping(8) + "\necho $OMPI_MCA_rmaps_base_mapping_policy"
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                         env={"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "x"}).stdout
    assert out.strip() == f"ppr:{per_node}:node"


BUSY = ("41|eve|PENDING|digits|cntk.cluster:digits:x\n"
        "42|eve|PENDING|digits|cntk|RUNNING|cntk.cluster:digits:x\n"
        "43|cntk|PENDING|digits|(null)\n"
        "44|cntk|RUNNING|other|cntk.cluster:other:20261203T000100Z\n")


def test_another_accounts_job_of_the_same_name_and_comment_blocks_nothing():
    """Any Slurm user can `sbatch --hold --job-name=digits --comment=cntk.cluster:digits:x`; a name holding
    "|" cannot pose as the user column either (Slurm's own columns come first)."""
    assert slurm_job.busy_jobs(BUSY, "cntk", "digits") == []


def test_the_training_users_job_of_this_name_blocks():
    text = BUSY + "45|cntk|PENDING|digits|cntk.cluster:digits:20261203T000000Z\n"
    assert slurm_job.busy_jobs(text, "cntk", "digits") == [
        {"id": "45", "name": "digits", "user": "cntk", "state": "PENDING",
         "comment": "cntk.cluster:digits:20261203T000000Z"}]
    assert slurm_job.busy_jobs(text, "cntk", "other") == [
        {"id": "44", "name": "other", "user": "cntk", "state": "RUNNING",
         "comment": "cntk.cluster:other:20261203T000100Z"}]


def test_busy_yml_asks_squeue_for_the_training_users_jobs_in_the_format_busy_jobs_reads():
    """The decision is busy_jobs'; the role's squeue call must give it the training user's jobs only, in its
    column order."""
    tasks = yaml.safe_load((pathlib.Path(__file__).parents[4] / "roles/train_job/tasks/busy.yml").read_text())
    look = next(task for task in tasks if task["name"] == "Look for this job in Slurm's queue")
    argv = look["ansible.builtin.command"]["argv"]
    assert "--user={{ cluster_training_user }}" in argv and f"--format={slurm_job.BUSY_FORMAT}" in argv
    refuse = next(task for task in tasks if task["name"].startswith("Refuse a second job"))
    assert "train_job_slurm_busy(cluster_training_user, train_job_name)" in refuse["loop"]
    assert filter_plugin.FilterModule().filters()["train_job_slurm_busy"](BUSY, "cntk", "digits") == []


@pytest.mark.parametrize("text", ["a" * (1 << 20), "JobId=1 JobName=" + "x" * (1 << 20) + " JobState=RUNNING",
                                  "=a" * (1 << 19)])
def test_scontrols_line_is_read_in_one_pass_whatever_a_job_name_holds(text):
    """A 1 MB word (a job's name or comment) with no '=' is tried once, not from each of its letters."""
    answer = call_within(20, "ansible_collections.cntk.cluster.plugins.module_utils.slurm_job", "show_job", text)
    assert answer["result"].get("JobState") == ("RUNNING" if "JobState" in text else None)


def test_every_users_unfinished_job_is_queued_and_a_name_cannot_add_a_line_or_escape():
    text = ("12|RUNNING|alice|my-job\n13|PENDING|bob|a|b \x1b[2Jname\n14|COMPLETED|carol|done\n"
            "junk line\n15|REQUEUE_HOLD|cntk|digits-softmax\n")
    jobs = slurm_job.queued_jobs(text)
    assert [job["id"] for job in jobs] == ["12", "13", "15"]
    assert jobs[1]["name"] == "a|b ?[2Jname" and jobs[1]["label"] == "13 (PENDING, bob, a|b ?[2Jname)"
    assert slurm_job.QUEUE_FORMAT == yaml.safe_load(
        (pathlib.Path(__file__).resolve().parents[4] / "roles/cluster/vars/main.yml").read_text())[
            "cluster_lock_queue_format"]


def test_a_poll_whose_nodelist_is_not_a_hostlist_says_nothing_of_the_nodes():
    """hostnames refuses a malformed hostlist; one such poll neither ends the follower nor makes an attempt."""
    history = [("RUNNING", "node[1-2]", 3), ("RUNNING", "node[1-", 5), ("RUNNING", "node[1-2]", 9)]
    assert slurm_job.attempts(history) == [{"nodes": ["node1", "node2"], "last_step": 9}]
