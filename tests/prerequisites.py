"""What a test needs from the machine (root, Docker, mpirun, pyenv's CPython 3.6.15...), said in one place.

Outside CI a missing prerequisite skips the test, naming it: a developer's machine may lack Docker or root.
Under CI (CI=true, as .ci/run is run) it fails the test instead: .ci/run installs every prerequisite, so a
missing one is a broken CI machine, and a green run that skipped the real-CNTK tests would claim coverage it
did not have."""

import os
import shutil

import pytest

from local_cluster.backend import pyenv_python

IN_CI = os.environ.get("CI") == "true"


def require(condition, why):
    """Go on when `condition` holds; else skip the test naming `why`, or fail it under CI."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"missing prerequisite under CI=true (.ci/run installs it): {why}", pytrace=False)
    pytest.skip(why)


def requires(condition, why):
    """require() as a mark, for a test or a module's `pytestmark` (checked as each test is set up, by
    tests/conftest.py)."""
    return pytest.mark.prerequisite(bool(condition), why)


IS_ROOT = os.geteuid() == 0
# The local cluster tool (tools/local_cluster) runs Docker and debootstrap as root.
CLUSTER_HOST = (IS_ROOT and shutil.which("docker") is not None,
                 "the local cluster needs root and Docker (Debian: docker.io, debootstrap)")
# The netns layout enters each node's namespaces from here.
NETNS = (CLUSTER_HOST[0] and shutil.which("nsenter") is not None and shutil.which("ip") is not None,
         "the netns layout needs root, Docker, ip and nsenter (Debian: docker.io, iproute2, util-linux)")
# CNTK 2.7's wheel runs on CPython 3.6; the cntk backend ships pyenv's build (with a shared libpython) to the
# nodes. .ci/run builds it when the machine lacks it.
PYENV_36 = (pyenv_python() is not None,
            "no pyenv CPython 3.6.15 with a shared libpython here ($(pyenv root)/versions/3.6.15): CNTK 2.7's "
            "wheel needs it (.ci/run builds it)")
