"""The real-CNTK cluster (`cntkreal`: 4 systemd nodes on the netns layout, CNTK 2.7 on CPython 3.6), brought up
and converged once for the session: test_cntk_cluster.py runs the direct-mpirun checks on it, then
test_slurm.py turns on Slurm on the same nodes (a second site.yml) and runs its checks there. Taken down at the
session's end."""

import shutil
import subprocess
import time

import pytest

import cluster_helpers
from cluster_helpers import CNTK_ARTIFACTS, CNTK_CLUSTER, CNTK_INVENTORY, CNTK_NODES
from prerequisites import NETNS, PYENV_36, require

TOOL = cluster_helpers.LOCAL_CLUSTER


@pytest.fixture(scope="session")
def cntk_cluster():
    require(*NETNS)
    require(*PYENV_36)
    subprocess.run(TOOL + ["down", f"--name={CNTK_CLUSTER}"], check=True, capture_output=True)
    # New nodes, and no runs on record from an earlier cluster of this name
    # (the controller's last_success.json would say the jobs are up to date).
    shutil.rmtree(CNTK_ARTIFACTS, ignore_errors=True)
    up = subprocess.run(TOOL + ["up", f"--name={CNTK_CLUSTER}", "--nodes=4", "--backend=cntk", "--network=netns"],
                        capture_output=True, text=True)
    if up.returncode != 0:
        subprocess.run(TOOL + ["down", f"--name={CNTK_CLUSTER}"], capture_output=True)
        pytest.fail(f"python -m local_cluster up --network netns --backend cntk failed:\n{up.stdout}\n{up.stderr}")
    started = time.monotonic()
    site, readings = cluster_helpers.site_with_counters(CNTK_CLUSTER, CNTK_NODES, CNTK_INVENTORY)
    seconds = time.monotonic() - started
    try:
        if site.returncode != 0:
            pytest.fail(f"site.yml failed:\n{site.stdout[-8000:]}")
        yield {"up": up.stdout, "site": site.stdout, "seconds": seconds, "readings": readings}
    finally:
        subprocess.run(TOOL + ["down", f"--name={CNTK_CLUSTER}"], check=True, capture_output=True)
