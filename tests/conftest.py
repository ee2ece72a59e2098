"""What tests in several folders share: one 2-node local cluster (`sec`,
127.0.0.71..), converged once by site.yml (numpy backend), for the tests that
need nodes but leave them as they found them (the security tests, the
installed collection's run); and the `prerequisite` mark's check
(tests/prerequisites.py)."""

import shutil
import subprocess
from pathlib import Path

import pytest

import prerequisites
from cluster_helpers import LOCAL_CLUSTER, ansible_playbook

ROOT = Path(__file__).resolve().parents[1]
NAME = "sec"
INVENTORY = ROOT / ".cluster" / NAME / "inventory"
ARTIFACTS = ROOT / ".cluster" / NAME / "artifacts"
TOOL = LOCAL_CLUSTER


def pytest_collection_modifyitems(items):
    """A test outside tests/e2e that takes the shared cluster is marked `cluster`, or `make unit` would bring
    the cluster up."""
    unmarked = [item.nodeid for item in items if "sec_cluster" in item.fixturenames
                and not item.get_closest_marker("cluster") and "tests/e2e/" not in item.nodeid]
    if unmarked:
        raise pytest.UsageError(f"mark these @pytest.mark.cluster (they bring up the sec cluster): {unmarked}")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("prerequisite"):
        prerequisites.require(*mark.args)


@pytest.fixture(scope="session")
def sec_cluster():
    prerequisites.require(*prerequisites.LOCAL_CLUSTER)
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    subprocess.run(TOOL + ["up", f"--name={NAME}", "--first-address=127.0.0.71", "--nodes=2", "--backend=numpy"],
                   check=True, capture_output=True, text=True)
    ansible_playbook(INVENTORY, "site.yml")
    yield INVENTORY
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
