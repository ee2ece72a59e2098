"""What tests in several folders share: one 2-node local cluster (`sec`,
127.0.0.71..), converged once by site.yml (numpy backend) as molecule's
default scenario converged a cluster of its own, for the tests that need
nodes but leave them as they found them (the security tests, the installed
collection's run); and the `prerequisite` mark's check
(tests/prerequisites.py)."""

import shutil
import subprocess
from pathlib import Path

import pytest

import prerequisites
from cluster_helpers import LOCAL_CLUSTER, failure_messages, playbook_report

ROOT = Path(__file__).resolve().parents[1]
NAME = "sec"
INVENTORY = ROOT / ".cluster" / NAME / "inventory"
ARTIFACTS = ROOT / ".cluster" / NAME / "artifacts"
TOOL = LOCAL_CLUSTER
# Molecule's default scenario's sequence (molecule/default/molecule.yml), run on the sec cluster.
CONVERGE = (("dry run on new nodes", "site.yml", "--check"), ("converge", "site.yml"), ("idempotence", "site.yml"),
            ("dry run on converged nodes", "site.yml", "--check"), ("verify", "molecule/default/verify.yml"))


def pytest_collection_modifyitems(items):
    """A test outside tests/e2e that takes the shared cluster is marked `cluster`, or `make unit` would bring
    the cluster up."""
    unmarked = [item.nodeid for item in items if {"sec_cluster", "sec_converge"} & set(item.fixturenames)
                and not item.get_closest_marker("cluster") and "tests/e2e/" not in item.nodeid]
    if unmarked:
        raise pytest.UsageError(f"mark these @pytest.mark.cluster (they bring up the sec cluster): {unmarked}")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("prerequisite"):
        prerequisites.require(*mark.args)


@pytest.fixture(scope="session")
def sec_converge():
    """The sec cluster brought up (Debian 12, the loopback layout, as molecule's default scenario's) and
    converged the way that scenario did on a cluster of its own: a dry run on the new nodes, site.yml, a
    second site.yml, a dry run on the converged nodes, molecule/default/verify.yml. {step: (its CompletedProcess,
    its JSON report)} (cluster_helpers.playbook_report), asserted by tests/test_sec_cluster.py. Taken down at the
    session's end, or when a step fails."""
    prerequisites.require(*prerequisites.CLUSTER_HOST)
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    subprocess.run(TOOL + ["up", f"--name={NAME}", "--first-address=127.0.0.71", "--nodes=2", "--backend=numpy",
                           "--network=loopback", "--suite=bookworm"], check=True, capture_output=True, text=True)
    try:
        steps = {}
        for step, playbook, *extra in CONVERGE:
            result, report = playbook_report(INVENTORY, playbook, *extra, timeout=2400)
            if step == "converge" and result.returncode != 0:
                pytest.fail(f"site.yml failed on the sec cluster: {failure_messages(report)[-8000:]}\n"
                            f"{result.stderr[-2000:]}")
            steps[step] = (result, report)
        yield steps
    finally:
        subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)


@pytest.fixture(scope="session")
def sec_cluster(sec_converge):
    return INVENTORY
