"""What tests in several folders share: one 2-node local cluster (`sec`,
127.0.0.71..), converged once by site.yml (numpy backend), for the tests that
need nodes but leave them as they found them (the security tests, the
installed collection's run)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cluster_helpers import LOCAL_CLUSTER, ansible_playbook

ROOT = Path(__file__).resolve().parents[1]
NAME = "sec"
INVENTORY = ROOT / ".cluster" / NAME / "inventory"
ARTIFACTS = ROOT / ".cluster" / NAME / "artifacts"
TOOL = LOCAL_CLUSTER


@pytest.fixture(scope="session")
def sec_cluster():
    if os.geteuid() != 0:
        pytest.skip("the local cluster needs root (Docker, debootstrap)")
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    subprocess.run(TOOL + ["up", f"--name={NAME}", "--first-address=127.0.0.71", "--nodes=2", "--backend=numpy"],
                   check=True, capture_output=True, text=True)
    ansible_playbook(INVENTORY, "site.yml")
    yield INVENTORY
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
