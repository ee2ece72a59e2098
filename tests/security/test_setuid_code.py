"""Finding 3 (issue 27): a setuid file in the job's code. On main it passed the
input check and rsync (root receiving, --perms) kept the bit: the file landed
setuid-root on every node. Now the input check refuses it, naming the file,
and the code push's own rsync flags (read from the task that sends the code)
clear the bits should one come by another way."""

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from prerequisites import requires
import yaml

ROOT = Path(__file__).resolve().parents[2]
from ansible_collections.cntk.cluster.plugins.filter import train_job as tj


@pytest.fixture
def code(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    helper = tmp_path / "bin" / "helper"
    helper.parent.mkdir()
    shutil.copy("/bin/true", helper)
    return tmp_path


def problems(source):
    return tj.train_job_input_problems({"source": str(source), "shared": False, "entry": "train.py",
                                        "args": [], "exclude": [".git"]})


def test_sound_code_passes(code):
    assert problems(code) == []


@pytest.mark.parametrize("mode", [0o4755, 0o2755])
def test_a_setuid_or_setgid_file_is_refused_by_name(code, mode):
    os.chmod(code / "bin" / "helper", mode)
    [problem] = problems(code)
    assert "set-user-ID, set-group-ID or sticky files: bin/helper" in problem
    assert "chmod ug-s,-t" in problem


def test_a_setgid_folder_is_refused(code):
    os.chmod(code / "bin", 0o2755)
    [problem] = problems(code)
    assert "sticky files: bin;" in problem


def test_an_excluded_folder_is_not_looked_at(code):
    (code / ".git").mkdir()
    shutil.copy("/bin/true", code / ".git" / "hook")
    os.chmod(code / ".git" / "hook", 0o4755)
    assert problems(code) == []


def _push_chmod():
    tasks = yaml.safe_load((ROOT / "roles" / "train_job" / "tasks" / "prepare-Linux.yml").read_text())
    [push] = [task for task in tasks if task["name"].startswith("Send the job's code")]
    [flag] = re.findall(r"'(--chmod=[^']+)'", push["ansible.builtin.command"]["argv"])
    return flag


@requires(os.geteuid() == 0 and shutil.which("rsync") is not None, "root receiving, as on the nodes (and rsync)")
def test_the_code_push_clears_the_bits_even_when_root_receives(code, tmp_path_factory):
    os.chmod(code / "bin" / "helper", 0o4755)
    os.chmod(code / "bin", 0o2755)
    dest = tmp_path_factory.mktemp("node")
    subprocess.run(["rsync", "--recursive", "--perms", _push_chmod(), f"{code}/", f"{dest}/"], check=True)
    assert stat.S_IMODE((dest / "bin" / "helper").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "bin").stat().st_mode) == 0o755
