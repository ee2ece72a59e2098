"""The source_build role run for real on the controller (local connection).

A tiny autoconf-style project stands in for Open MPI: its configure writes the
prefix for its Makefile, its build appends to a log so that every compile is
counted. The real fetch, build, stage, pack, cache, copy, unpack and
done-check paths run without a network and without installing packages."""

import json
import os
import subprocess
import tarfile

import pytest
from prerequisites import requires
from source_build_helpers import ROOT, changed, compiles, run, source_tarball

# The role builds as root only: it refuses a build folder another user could write in.
pytestmark = requires(os.geteuid() == 0, "the source_build role builds as root")


@pytest.fixture
def world(tmp_path):
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    sha = source_tarball(upstream / "hello-1.0.tar.gz")
    return tmp_path, upstream, sha


def builds(tmp_path):
    return sorted(p.name for p in (tmp_path / "cache" / "builds").iterdir())


def test_builds_once_then_reuses_the_cached_build(world):
    tmp_path, upstream, sha = world
    first = run(tmp_path, upstream, sha)
    assert first.returncode == 0, first.stdout
    assert compiles(tmp_path) == 1
    prefix = tmp_path / "opt" / "hello"
    hello = subprocess.run([prefix / "bin" / "hello"], capture_output=True, text=True, check=True)
    assert hello.stdout.startswith("hello 1.0")
    record = json.loads((prefix / ".source-build.json").read_text())
    assert record["sha256"] == sha and record["configure"][:2] == ["./configure", f"--prefix={prefix}"]
    tarballs = builds(tmp_path)
    assert len(tarballs) == 2 and tarballs[0].startswith("hello-1.0-") and tarballs[1].endswith(".tar.gz.sha256")
    assert not any((tmp_path / "work").iterdir())

    # Converged: nothing changes, nothing is compiled.
    second = run(tmp_path, upstream, sha)
    assert second.returncode == 0, second.stdout
    assert changed(second) == 0, second.stdout
    assert compiles(tmp_path) == 1

    # The prefix is gone: it comes back from the cached build, not from a compile,
    # and not even the source is needed.
    subprocess.run(["rm", "-rf", str(prefix)], check=True)
    (upstream / "hello-1.0.tar.gz").unlink()
    third = run(tmp_path, upstream, sha)
    assert third.returncode == 0, third.stdout
    assert compiles(tmp_path) == 1
    assert (prefix / "bin" / "hello").exists()
    assert not list(prefix.parent.glob("hello.source-build-*"))


def test_other_configure_arguments_are_another_build(world):
    tmp_path, upstream, sha = world
    assert run(tmp_path, upstream, sha).returncode == 0
    other = run(tmp_path, upstream, sha, {"source_build_configure_args": ["--enable-other"],
                                          "source_build_check_patterns": ["^nothing passes this$"]})
    # The new build is made, then its done check still fails: the run says so.
    assert other.returncode != 0
    assert "Check the build now passes the done check" in other.stdout
    assert compiles(tmp_path) == 2
    assert len(builds(tmp_path)) == 4


def test_a_damaged_cached_build_is_rebuilt(world):
    tmp_path, upstream, sha = world
    assert run(tmp_path, upstream, sha).returncode == 0
    tarball = tmp_path / "cache" / "builds" / builds(tmp_path)[0]
    tarball.write_bytes(b"damaged")
    subprocess.run(["rm", "-rf", str(tmp_path / "opt")], check=True)
    again = run(tmp_path, upstream, sha)
    assert again.returncode == 0, again.stdout
    assert compiles(tmp_path) == 2
    assert tarfile.is_tarfile(tarball)


def test_a_system_folder_is_refused_as_prefix(world):
    tmp_path, upstream, sha = world
    result = run(tmp_path, upstream, sha, {"source_build_prefix": "/usr/local"})
    assert result.returncode != 0
    assert "a prefix of its own" in result.stdout
    assert compiles(tmp_path) == 0
