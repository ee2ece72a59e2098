"""Molecule's default scenario (Debian 12, the loopback layout, 2 nodes), checked on the sec cluster that the
integration tier brings up anyway (tests/conftest.py's sec_converge) rather than on a cluster of its own: the
dry runs pass on new and on converged nodes, a second site.yml changes nothing, and the verify playbook passes.
`molecule test` still runs the scenario alone."""

import pytest

from cluster_helpers import changed_counts, failure_messages

pytestmark = pytest.mark.cluster


NODES = ("node1", "node2")


def outcome(step):
    """(rc, {host: failures}) for the nodes and the controller's own checks (localhost) alike."""
    result, report = step
    failed = {host: stats["failures"] + stats["unreachable"] for host, stats in report["stats"].items()}
    return result.returncode, failed


def on_nodes(counts):
    return {host: count for host, count in counts.items() if host in NODES}


@pytest.mark.parametrize("step", ["dry run on new nodes", "converge", "idempotence", "dry run on converged nodes",
                                  "verify"])
def test_each_step_passes_on_both_nodes(sec_converge, step):
    # The messages of any failure, an ignored one's too (the report does not tell them apart).
    rc, failed = outcome(sec_converge[step])
    assert (rc, set(NODES) <= set(failed), sum(failed.values())) == (0, True, 0), \
        failure_messages(sec_converge[step][1])


def test_the_second_site_run_changes_nothing(sec_converge):
    changed = changed_counts(sec_converge["idempotence"][1])
    assert set(NODES) <= set(changed) and set(changed.values()) == {0}, changed


def test_the_converge_changed_both_nodes(sec_converge):
    changed = on_nodes(changed_counts(sec_converge["converge"][1]))
    assert set(changed) == set(NODES) and all(count > 10 for count in changed.values()), changed
