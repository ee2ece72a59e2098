"""The train step's Slurm job: sbatch options from the layout, and what squeue and scontrol say afterwards."""

import pytest

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
