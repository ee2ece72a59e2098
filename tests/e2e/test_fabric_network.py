"""End to end on the netns layout on Debian 13 (issue 14's distribution matrix): a 2-node numpy cluster of its own
(`fabric13`: Open MPI 5, Python 3.13) where every node has a network namespace with a management NIC (mgmt0: the
controller, Ansible, SSH) and a fabric NIC (fab0: MPI, the SSH mesh, the data), each on a host bridge made by
tools/local_cluster. Debian 12's row of these checks runs on the real-CNTK cluster (test_cntk_cluster.py),
which has the same layout. This cluster is also the distribution matrix's Debian 13 row in `make test`: a second
site.yml changes nothing and molecule's verify playbook (molecule/default/verify.yml) passes on it, what
`molecule test -s debian13` checks on a cluster of its own (the scenario stays for running by hand).

The interface counters of each node (read in its namespace with nsenter, the harness's own channel) show that
the data step's and the training job's bytes went over the fabric, the management network carrying only
Ansible's own traffic; a cluster_mpi_interface that is missing, or that does not hold the node's
cluster_address, is refused at preflight.
"""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import cluster_helpers
from prerequisites import NETNS, requires

ROOT = Path(__file__).resolve().parents[2]
NAME = os.environ.get("FABRIC_CLUSTER_NAME", "fabric13")
SUITE = "trixie"
TOOL = cluster_helpers.LOCAL_CLUSTER
NODES = ["node1", "node2"]
JOB = "digits-softmax"
INVENTORY = ROOT / ".cluster" / NAME / "inventory"
ARTIFACTS = ROOT / ".cluster" / NAME / "artifacts"

pytestmark = requires(*NETNS)


@pytest.fixture(scope="module")
def cluster():
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    started = time.monotonic()
    up = subprocess.run(TOOL + ["up", f"--name={NAME}", "--nodes=2", "--backend=numpy", "--network=netns",
                                f"--suite={SUITE}"], capture_output=True, text=True)
    if up.returncode != 0:
        subprocess.run(TOOL + ["down", f"--name={NAME}"], capture_output=True)
        pytest.fail(f"python -m local_cluster up --network netns --suite {SUITE} failed:\n{up.stdout}\n{up.stderr}")
    print(f"{SUITE}: cluster up {time.monotonic() - started:.0f} s (the node image built if missing)")
    started = time.monotonic()
    site, readings = cluster_helpers.site_with_counters(NAME, NODES, INVENTORY)
    seconds = time.monotonic() - started
    try:
        if site.returncode != 0:
            pytest.fail(f"site.yml failed:\n{site.stdout[-8000:]}")
        yield {"site": site.stdout, "readings": readings, "seconds": seconds}
    finally:
        subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)


def test_inventory_reaches_nodes_on_management_and_names_the_fabric_nic(cluster):
    cluster_helpers.check_netns_inventory(NAME, INVENTORY)


def test_site_trains_and_the_data_and_job_bytes_go_over_the_fabric(cluster):
    run = ARTIFACTS / JOB / "latest"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ranks"] == 4 and summary["hosts"] == ["node1", "node1", "node2", "node2"]
    assert summary["test_accuracy"] >= 0.9
    # The distribution's own Open MPI: 5.0 on Debian 13 (PRRTE).
    assert summary["versions"]["mpi"].startswith("Open MPI v5.0"), summary["versions"]
    # Every rank's output came back from its node (Open MPI 5's own --output-filename loses all but one).
    for rank, node in enumerate(summary["hosts"]):
        assert "done:" in (run / "logs" / node / "1" / f"rank.{rank}" / "stdout").read_text(), (rank, node)
    figures = cluster_helpers.check_bytes_went_over_the_fabric(NAME, NODES, cluster["readings"])
    print(f"{SUITE}: site.yml {cluster['seconds']:.0f} s; bytes in+out per window: {json.dumps(figures)}")


def test_a_second_site_run_changes_nothing_and_molecules_verify_passes(cluster):
    again = cluster_helpers.ansible_playbook(INVENTORY, "site.yml")
    counts = cluster_helpers.recap(again.stdout)
    # The nodes, and the controller's own check play (localhost), which changes nothing either.
    assert sorted(counts) == ["localhost", *NODES] and all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
    verify = cluster_helpers.ansible_playbook(INVENTORY, "molecule/default/verify.yml")
    assert all(c["failed"] == 0 for c in cluster_helpers.recap(verify.stdout).values()), verify.stdout[-3000:]


def test_an_mpi_interface_the_node_lacks_or_that_misses_its_address_is_refused_at_preflight(cluster, tmp_path):
    cluster_helpers.check_wrong_mpi_interface_refused(INVENTORY, tmp_path)
