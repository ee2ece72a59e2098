"""roles/train_job/filter_plugins/train_job.py: train.py's arguments (one filter for
both platforms), mpirun's command line, the run fingerprint and the run
directory's names."""

import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "roles" / "train_job" / "filter_plugins"))
sys.path.insert(0, str(ROOT / "plugins" / "filter"))

import train_job as tj  # noqa: E402
import windows_commands as wc  # noqa: E402

ARGS = {"model": "mlp", "epochs": 3, "block-momentum": True, "hidden": None, "quiet": False}
LAYOUT = [{"host": "node1", "slots": 2, "ranks": [0, 1]}, {"host": "node2", "slots": 1, "ranks": [2]}]


def linux_spec(**changes):
    spec = {"platform": "Linux", "backend": "numpy", "data_dir": "/srv/cntk/data/digits",
            "output_dir": "/srv/cntk/jobs/j/runs/1/output", "checkpoint_dir": "/srv/cntk/jobs/j/checkpoints",
            "resume": True, "args": ARGS}
    spec.update(changes)
    return spec


def test_train_args_on_linux():
    assert tj.train_job_train_args(linux_spec()) == [
        "--backend", "numpy", "--data-dir", "/srv/cntk/data/digits", "--test-file", "/srv/cntk/data/digits/test.ctf",
        "--output-dir", "/srv/cntk/jobs/j/runs/1/output", "--checkpoint-dir", "/srv/cntk/jobs/j/checkpoints",
        "--resume", "--block-momentum", "--epochs", "3", "--model", "mlp"]


def test_train_args_on_windows_use_its_paths_and_the_same_options():
    args = tj.train_job_train_args({"platform": "Windows", "backend": "cntk", "data_dir": r"C:\cntk\data\digits",
                                    "output_dir": r"C:\run\output", "checkpoint_dir": r"C:\ck", "resume": True,
                                    "args": ARGS})
    assert args == ["--backend", "cntk", "--data-dir", r"C:\cntk\data\digits",
                    "--test-file", r"C:\cntk\data\digits\test.ctf", "--output-dir", r"C:\run\output",
                    "--checkpoint-dir", r"C:\ck", "--resume", "--block-momentum", "--epochs", "3",
                    "--model", "mlp"]
    assert args[10:] == tj.train_job_train_args(linux_spec())[10:]


def test_train_args_without_resume():
    assert "--resume" not in tj.train_job_train_args(linux_spec(resume=False))


def test_train_args_refuse_an_unknown_platform():
    with pytest.raises(AnsibleFilterError, match="platform must be one of Linux, Windows"):
        tj.train_job_train_args(linux_spec(platform="linux"))


def test_mpirun_command_runs_train_py_with_those_arguments():
    train_args = tj.train_job_train_args(linux_spec())
    argv = tj.train_job_command({"layout": LAYOUT, "interface": "eth1", "mca": {"btl": "self,tcp"},
                                 "env": {"OMP_NUM_THREADS": "1", "A": "2"}, "python": "/usr/bin/python3",
                                 "code_dir": "/srv/cntk/jobs/j/code", "mpirun": "/usr/bin/mpirun",
                                 "train_args": train_args})
    assert argv == ["/usr/bin/mpirun", "--hostfile", "hostfile", "-np", "3", "--map-by", "slot", "--bind-to", "none",
                    "--mca", "btl_tcp_if_include", "eth1", "--mca", "oob_tcp_if_include", "eth1",
                    "--mca", "btl", "self,tcp", "--output-filename", "logs", "-x", "A", "-x", "OMP_NUM_THREADS",
                    "/usr/bin/python3", "/srv/cntk/jobs/j/code/train.py"] + train_args


def test_mpiexec_runs_train_py_with_the_same_arguments():
    train_args = tj.train_job_train_args(linux_spec(platform="Windows", data_dir=r"C:\cntk\data\digits"))
    argv = wc.win_mpiexec_argv({"mpiexec": "mpiexec.exe", "layout": LAYOUT, "wdir": r"C:\run",
                                "python": "python.exe", "script": r"C:\code\train.py", "args": train_args})
    assert argv[argv.index(r"C:\code\train.py") + 1:] == train_args


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
    assert linux["output_patterns"] == ["*.json", "*.jsonl", "*.npz", "*.cntk"]
    assert linux["records"] == ["hostfile", "mpirun.log", "stop_reason", "exit_code"]
    assert {key: value for key, value in linux.items() if key not in ("launcher_log", "records")} == \
        {key: value for key, value in windows.items() if key not in ("launcher_log", "records")}


def test_filters_are_registered():
    assert set(tj.FilterModule().filters()) == {"train_job_train_args", "train_job_command",
                                                "train_job_fingerprint", "train_job_run_files"}
