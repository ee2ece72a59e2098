"""plugins/filter/train_job.py: the program's arguments and the
job contract's environment (one filter for both platforms), mpirun's command
line, the code sent and its fingerprint, the job input's problems, what
comes back, the failed rank's words and the run directory's names."""

import re
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[4]

from ansible_collections.cntk.cluster.plugins.filter import train_job as tj
from ansible_collections.cntk.cluster.plugins.filter import windows_commands as wc

ARGS = {"model": "mlp", "epochs": 3, "block-momentum": True, "hidden": None, "quiet": False}
LAYOUT = [{"host": "node1", "slots": 2, "ranks": [0, 1]}, {"host": "node2", "slots": 1, "ranks": [2]}]


def job_env_spec(**changes):
    spec = {"platform": "Linux", "name": "j", "run_id": "1", "backend": "numpy", "data_dir": "/srv/cntk/data/digits",
            "data_layout": "shard", "test_file": "test.ctf", "output_dir": "/srv/cntk/jobs/j/runs/1/output",
            "checkpoint_dir": "/srv/cntk/jobs/j/checkpoints", "resume": True}
    spec.update(changes)
    return spec


def test_program_args_from_train_pys_mapping():
    assert tj.train_job_program_args(ARGS) == ["--block-momentum", "--epochs", "3", "--model", "mlp"]


def test_program_args_from_a_list_are_passed_as_given():
    args = ["--lr", "0.1", "a b", "$(rm -rf /)", ""]
    assert tj.train_job_program_args(args) == args


@pytest.mark.parametrize("args", [["--epochs", 10], "--epochs 10", None, [["--x"]]])
def test_program_args_refuse_anything_but_strings(args):
    with pytest.raises(AnsibleFilterError, match="list of strings"):
        tj.train_job_program_args(args)


def test_job_env_is_the_contract():
    assert tj.train_job_job_env(job_env_spec()) == {
        "JOB_NAME": "j", "JOB_RUN_ID": "1", "JOB_BACKEND": "numpy", "JOB_DATA_DIR": "/srv/cntk/data/digits",
        "JOB_DATA_LAYOUT": "shard", "JOB_TEST_FILE": "/srv/cntk/data/digits/test.ctf",
        "JOB_OUTPUT_DIR": "/srv/cntk/jobs/j/runs/1/output", "JOB_CHECKPOINT_DIR": "/srv/cntk/jobs/j/checkpoints",
        "JOB_METRICS_FILE": "/srv/cntk/jobs/j/runs/1/output/metrics.jsonl", "JOB_RESUME": "1"}


def test_job_env_without_a_test_set_or_resume_and_on_windows():
    env = tj.train_job_job_env(job_env_spec(test_file=None, resume=False, data_layout="replicate"))
    assert env["JOB_TEST_FILE"] == "" and env["JOB_RESUME"] == "" and env["JOB_DATA_LAYOUT"] == "replicate"
    windows = tj.train_job_job_env(job_env_spec(platform="Windows", data_dir=r"C:\d", output_dir=r"C:\o"))
    assert windows["JOB_TEST_FILE"] == r"C:\d\test.ctf" and windows["JOB_METRICS_FILE"] == r"C:\o\metrics.jsonl"
    with pytest.raises(AnsibleFilterError, match="platform must be one of Linux, Windows"):
        tj.train_job_job_env(job_env_spec(platform="linux"))


def test_mpirun_command_runs_the_program_with_its_arguments_and_exports_every_variable():
    argv = tj.train_job_command({"layout": LAYOUT, "interface": "eth1", "mca": {"btl": "self,tcp"},
                                 "env": {"OMP_NUM_THREADS": "1", "JOB_DATA_DIR": "/d"}, "python": "/usr/bin/python3",
                                 "runner": "/var/lib/cntk-cluster/run_rank.py",
                                 "program": "/var/lib/cntk-cluster/jobs/j/dt.py", "mpirun": "/usr/bin/mpirun",
                                 "args": ["--epochs", "3"]})
    assert argv == ["/usr/bin/mpirun", "--hostfile", "hostfile", "-np", "3", "--map-by", "slot", "--bind-to", "none",
                    "--mca", "btl_tcp_if_include", "eth1", "--mca", "oob_tcp_if_include", "eth1",
                    "--mca", "btl", "self,tcp", "-x", "JOB_DATA_DIR",
                    "-x", "OMP_NUM_THREADS", "/usr/bin/python3", "/var/lib/cntk-cluster/run_rank.py",
                    "--logs", "logs", "/var/lib/cntk-cluster/jobs/j/dt.py",
                    "--epochs", "3"]



def test_a_job_slurm_may_requeue_keeps_its_rank_count_on_fewer_nodes():
    """A checkpoint restores only into as many ranks as wrote it: the requeued job on the nodes left runs as
    many, more than one a slot where it must."""
    argv = tj.train_job_command({"layout": LAYOUT, "interface": "eth1", "python": "p", "runner": "r",
                                 "program": "t.py", "args": [], "allocation": True, "requeue": True})
    assert argv[1:5] == ["-np", "3", "--oversubscribe", "--bind-to"] and "--hostfile" not in argv
    assert tj.train_job_command({"layout": LAYOUT, "interface": "eth1", "python": "p", "runner": "r",
                                 "program": "t.py", "args": [], "allocation": True})[1] == "--map-by"

def test_mpiexec_runs_the_program_with_the_same_arguments():
    args = tj.train_job_program_args(ARGS)
    argv = wc.win_mpiexec_argv({"mpiexec": "mpiexec.exe", "layout": LAYOUT, "wdir": r"C:\run",
                                "python": "python.exe", "script": r"C:\code\train.py", "args": args})
    assert argv[argv.index(r"C:\code\train.py") + 1:] == args


def make_source(tmp_path):
    source = tmp_path / "job"
    (source / "pkg" / "__pycache__").mkdir(parents=True)
    (source / ".git").mkdir()
    (source / "distributed_train.py").write_text("print(1)\n")
    (source / "pkg" / "model.py").write_text("W = 1\n")
    (source / "pkg" / "__pycache__" / "model.cpython-36.pyc").write_bytes(b"x")
    (source / ".git" / "HEAD").write_text("ref\n")
    return source


EXCLUDE = [".git", "__pycache__", "*.pyc"]


def test_source_files_leave_out_the_excluded_names(tmp_path):
    source = make_source(tmp_path)
    assert tj.train_job_source_files(str(source), EXCLUDE) == ["distributed_train.py", "pkg/model.py"]


def test_source_digest_follows_the_code_sent_and_nothing_else(tmp_path):
    source = make_source(tmp_path)
    digest = tj.train_job_source_digest(str(source), EXCLUDE)
    (source / ".git" / "HEAD").write_text("other\n")
    (source / "pkg" / "__pycache__" / "model.cpython-36.pyc").write_bytes(b"y")
    assert tj.train_job_source_digest(str(source), EXCLUDE) == digest
    (source / "pkg" / "model.py").write_text("W = 2\n")
    assert tj.train_job_source_digest(str(source), EXCLUDE) != digest


def problems(tmp_path, **changes):
    spec = {"source": str(make_source(tmp_path)), "shared": False, "entry": "distributed_train.py",
            "args": ["--epochs", "1"]}
    spec.update(changes)
    return tj.train_job_input_problems(spec)


def test_sound_job_input_has_no_problems(tmp_path):
    assert problems(tmp_path) == []
    assert problems(tmp_path / "again", entry="pkg/model.py", args={"epochs": 1}) == []


@pytest.mark.parametrize("changes, expected", [
    ({"source": "/nonexistent/job"}, "train_job_source=/nonexistent/job is not a folder on the controller"),
    ({"entry": "missing.py"}, "train_job_entry=missing.py is not a file in train_job_source="),
    ({"entry": "../outside.py"}, "train_job_entry='../outside.py' is outside train_job_source="),
    ({"entry": "/etc/passwd"}, "train_job_entry='/etc/passwd' is outside train_job_source="),
    ({"entry": ""}, "train_job_entry='' is outside"),
    ({"args": ["--epochs", 10]}, "train_job_args holds [10]: give a list of strings"),
    ({"args": "--epochs 10"}, "train_job_args holds '--epochs 10'"),
    ({"source": "relative/dir", "shared": True}, "give the folder's absolute path"),
])
def test_bad_job_input_is_named_with_its_fix(tmp_path, changes, expected):
    found = problems(tmp_path, **changes)
    assert len(found) == 1 and expected in found[0], found



RETRIES = {"max_retries": 1, "scheduler": "slurm", "nodes": 4, "data_shared": True, "checkpoint_shared": True}


@pytest.mark.parametrize("changes, expected", [
    ({"scheduler": "none"}, "train_job_max_retries=1 needs cluster_scheduler: slurm"),
    ({"max_retries": 4}, "train_job_max_retries=4 would leave no node of the 4 training nodes: give at most 3"),
    ({"data_shared": False}, "each node holds only its own ranks' shards"),
    ({"checkpoint_shared": False}, "set train_job_shared_checkpoint_root"),
    ({"max_retries": -1}, "train_job_max_retries=-1: give a whole number of at least 0"),
    ({"max_retries": "two"}, "train_job_max_retries='two': give a whole number"),
])
def test_retries_need_slurm_a_node_left_and_data_and_checkpoints_every_node_reads(tmp_path, changes, expected):
    assert problems(tmp_path / "sound", **RETRIES) == []
    assert problems(tmp_path / "none", **dict(RETRIES, max_retries=0, scheduler="none", data_shared=False)) == []
    found = problems(tmp_path, **dict(RETRIES, **changes))
    assert len(found) == 1 and expected in found[0], found

def test_an_entry_symlinked_out_of_the_source_is_refused(tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("x")
    source = make_source(tmp_path)
    (source / "link.py").symlink_to(outside)
    found = tj.train_job_input_problems({"source": str(source), "shared": False, "entry": "link.py", "args": []})
    assert len(found) == 1 and "leads outside" in found[0]


def test_fetch_list_keeps_outputs_inside_the_run_and_off_the_records():
    out = "/srv/cntk/jobs/j/runs/1/output"
    results = [
        {"item": {"path": out}, "files": [
            {"path": out + "/model.cntk"}, {"path": out + "/plots/loss.png"}, {"path": out + "/job.json"},
            {"path": out + "/../../x"}, {"path": "/etc/shadow"}, {"path": out + "/a\nb"}]},
        {"item": {"path": "/srv/cntk/jobs/j/runs/1"}, "files": [
            {"path": "/srv/cntk/jobs/j/runs/1/mpirun.log"}, {"path": "/srv/cntk/jobs/j/runs/1/output/x/y"}]},
    ]
    assert tj.train_job_fetch_list(results, out, ["job.json", "mpirun.log"]) == [
        {"src": out + "/model.cntk", "dest": "model.cntk"},
        {"src": "/srv/cntk/jobs/j/runs/1/mpirun.log", "dest": "mpirun.log"},
        {"src": out + "/plots/loss.png", "dest": "plots/loss.png"}]


def test_fetch_list_gives_rsync_one_plain_name_a_line():
    """collect-Linux.yml hands these names to rsync --files-from, one a line: a
    name that would split a line, read as a comment ('#', ';'), or step out of
    the folder stays on the node."""
    logs = "/srv/cntk/jobs/j/runs/1/logs"
    odd = ["1/rank.2/a\nb", "1/rank.2/#c", "1/rank.2/;d", "1/rank.2/a b", "1/rank.2/a\\b", "1/./rank.0/x",
           "1//x", "1/../../x", "1/rank.2/\u00e9", "1/rank.2/a\rb", "1/rank.2/a\tb"]
    found = [{"path": f"{logs}/{name}"} for name in ["1/rank.1/stderr", "1/rank.0/stdout", *odd]]
    found.append({"path": "/etc/shadow"})
    names = [entry["dest"] for entry in tj.train_job_fetch_list([{"item": {"path": logs}, "files": found}], logs, [])]
    assert names == ["1/rank.0/stdout", "1/rank.1/stderr"]
    assert "\n".join(names).splitlines() == names


def test_results_come_back_by_one_confined_rsync_per_folder():
    """The rsync of collect-Linux.yml: the training user's side, host keys
    checked, the filter's list only, no links, no recursion, nothing deleted."""
    tasks = yaml.safe_load((ROOT / "roles" / "train_job" / "tasks" / "collect-Linux.yml").read_text())
    [block] = [task for task in tasks if "block" in task]
    argv = block["vars"]["train_job_pull_argv"]
    # rsync under the size cap as the bytes land (tests/security/test_follower_reads.py runs it).
    prefix, argv = argv[:argv.index("rsync")], argv[argv.index("rsync"):]
    assert prefix[:2] == ["sh", "-c"] and "prlimit --fsize" in prefix[2]
    assert argv[0] == "rsync" and "--files-from=-" in argv and "--chmod=D0755,F0644" in argv
    assert "--max-size={{ train_job_fetch_max_mb }}M" in argv
    assert "--rsh={{ hostvars[inventory_hostname] | cntk.cluster.ssh_command_for }}" in argv
    assert any(arg.startswith("--rsync-path=") and "cluster_training_user" in arg for arg in argv)
    options = [arg for arg in argv if arg.startswith("-")]
    for arg in options:
        assert not arg.startswith(("--links", "--archive", "--recursive", "--copy-", "--del", "--remove")), arg
        assert arg.startswith("--"), f"{arg}: a short option hides what it implies (-a: --links, --recursive)"
    # No host-key bypass of any spelling (no, off, accept-new), and no throw-away known_hosts.
    assert not re.search(r"StrictHostKeyChecking\s*=?\s*(no|off|accept-new)", str(tasks), re.I)
    assert "/dev/null" not in str(tasks)
    pulls = [task for task in block["block"] if "ansible.builtin.command" in task]
    assert [task["ansible.builtin.command"]["argv"] for task in pulls] == ["{{ train_job_pull_argv }}"] * 2
    for task in pulls:
        assert task["delegate_to"] == "localhost" and task["become"] is False
        assert "train_job_fetch_list" in task["vars"]["train_job_pull_names"]
    assert "ansible.builtin.fetch" not in str(tasks)


def rank_stderr(run_dir, host, rank, text):
    """A rank's stderr as collect fetches it: logs/<host>/1/rank.N/stderr."""
    rank_dir = run_dir / "logs" / host / "1" / f"rank.{rank}"
    rank_dir.mkdir(parents=True)
    (rank_dir / "stderr").write_text(text)


def test_failure_quotes_the_failed_ranks_traceback(tmp_path):
    rank_stderr(tmp_path, "node2", 3,
        "warming up\nTraceback (most recent call last):\n  File \"dt.py\", line 9, in <module>\n    main()\n"
        "  File \"dt.py\", line 5, in main\n    open(path)\nFileNotFoundError: [Errno 2] No such file: 'x'\n")
    outcome = tj.train_job_failure({"rc": 1, "failed_rank": 3, "failed_host": "node2"}, str(tmp_path))
    assert outcome["error"] == ('  File "dt.py", line 5, in main\n    open(path)\n'
                                "FileNotFoundError: [Errno 2] No such file: 'x'")
    # mpirun named no rank: the first rank whose stderr holds a traceback.
    outcome = tj.train_job_failure({"rc": 1, "failed_rank": None, "failed_host": None}, str(tmp_path))
    assert (outcome["failed_rank"], outcome["failed_host"]) == (3, "node2")


def test_failure_cuts_cntks_call_stack_and_keeps_the_outcome_without_logs(tmp_path):
    rank_stderr(tmp_path, "node1", 0,
        "Traceback (most recent call last):\n  File \"t.py\", line 2, in <module>\n    C.x()\n"
        "RuntimeError: Reader: the input file 'a.ctf' does not exist\n\n[CALL STACK]\n    > Microsoft::MSR::X\n")
    outcome = tj.train_job_failure({"rc": 1, "failed_rank": 0, "failed_host": "node1"}, str(tmp_path))
    assert outcome["error"].endswith("RuntimeError: Reader: the input file 'a.ctf' does not exist")
    assert tj.train_job_failure({"rc": 2}, str(tmp_path / "none")) == {"rc": 2}


def test_fingerprint_covers_the_platform_and_needs_it():
    parts = {"backend": "numpy", "args": ARGS, "env": {}, "layout": LAYOUT, "mca": {}, "code": ["a"], "data": ["b"]}
    linux = tj.train_job_fingerprint(dict(parts, platform="Linux"))
    assert linux == tj.train_job_fingerprint(dict(parts, platform="Linux"))
    assert len(linux) == 64
    assert linux != tj.train_job_fingerprint(dict(parts, platform="Windows"))
    assert linux != tj.train_job_fingerprint(dict(parts, platform="Linux", args=dict(ARGS, epochs=4)))
    with pytest.raises(AnsibleFilterError):
        tj.train_job_fingerprint(parts)


def test_run_files_name_each_platforms_launcher_log():
    linux, windows = tj.train_job_run_files("Linux"), tj.train_job_run_files("Windows")
    assert linux["launcher_log"] == "mpirun.log" and windows["launcher_log"] == "mpiexec.log"
    assert "job.json" in linux["reserved"] and "report.html" in linux["reserved"]
    # job.json is the controller's own record (written before the launch), never the node's copy.
    assert linux["records"] == ["hostfile", "mpirun.log", "stop_reason", "exit_code"]
    assert {key: value for key, value in linux.items() if key not in ("launcher_log", "records", "reserved")} == \
        {key: value for key, value in windows.items() if key not in ("launcher_log", "records", "reserved")}


def test_filters_are_registered():
    assert set(tj.FilterModule().filters()) == {
        "train_job_program_args", "train_job_job_env", "train_job_command", "train_job_source_digest",
        "train_job_source_files", "train_job_input_problems", "train_job_script_warnings", "train_job_run_files",
        "train_job_failure", "train_job_fetch_list", "train_job_plan"}
