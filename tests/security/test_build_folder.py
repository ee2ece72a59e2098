"""Root compiles where no other user can reach: a build folder under a
world-writable parent (where another user could pre-create it and swap
`configure` before root runs it) is refused before anything is unpacked."""

import os
import stat
from pathlib import Path

import pytest
from prerequisites import requires
import yaml
from source_build_helpers import compiles, run, source_tarball

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def world(tmp_path):
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    return tmp_path, upstream, source_tarball(upstream / "hello-1.0.tar.gz")


def test_a_build_folder_under_a_world_writable_parent_is_refused(world):
    tmp_path, upstream, sha = world
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    # Another user's trap: the folder exists already, with a configure of theirs.
    trap = shared / "build" / "hello" / "src"
    trap.mkdir(parents=True)
    (trap / "configure").write_text(f"#!/bin/sh\ntouch {tmp_path / 'pwned'}\n")
    (trap / "configure").chmod(0o755)
    result = run(tmp_path, upstream, sha, {"source_build_work_dir": str(shared / "build")})
    assert result.returncode != 0
    assert "which is not root's alone" in result.stdout
    assert not (tmp_path / "pwned").exists()
    assert compiles(tmp_path) == 0


def test_the_default_build_folder_is_under_a_root_only_parent():
    default = yaml.safe_load((ROOT / "roles" / "source_build" / "defaults" / "main.yml").read_text())
    parent = Path(default["source_build_work_dir"]).parent
    assert not str(parent).startswith(("/tmp", "/var/tmp", "/dev/shm"))
    if parent.exists():
        mode = parent.stat()
        assert mode.st_uid == 0 and not mode.st_mode & (stat.S_IWOTH | stat.S_IWGRP)


pytestmark = requires(os.geteuid() == 0, "root builds: the check reads owners as root")
