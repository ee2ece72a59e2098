"""playbooks/fabric.yml's refusals, run for real before any node is contacted (the nodes are loopback addresses on
a port where nothing listens), and its place in site.yml: opt-in, left out of a plain run."""

import re

from inventory_helpers import closed_port
from test_preflight_playbook import TWO_NODES, run_preflight


def before_recap(result):
    return result.stdout.lower().split("play recap")[0]


def test_under_slurm_it_stops_naming_it_before_any_node_is_contacted(tmp_path):
    hosts = {name: dict(values, cluster_scheduler="slurm") for name, values in TWO_NODES.items()}
    result = run_preflight(tmp_path, hosts, closed_port(), "playbooks/fabric.yml")
    assert result.returncode != 0
    text = " ".join(result.stdout.split())
    assert "playbooks/fabric.yml does not yet run under Slurm (cluster_scheduler: slurm)" in text, text[-3000:]
    assert "unreachable" not in before_recap(result)


def test_a_fraction_out_of_range_is_refused_naming_it(tmp_path):
    result = run_preflight(tmp_path, TWO_NODES, closed_port(), "playbooks/fabric.yml",
                           ["-e", "fabric_matrix_pair_fraction=2"])
    assert result.returncode != 0
    assert "fabric_matrix_pair_fraction=2 and fabric_matrix_tcp_fraction=0.25 must be fractions" in \
        " ".join(result.stdout.split())
    assert "unreachable" not in before_recap(result)


def test_a_limit_that_cuts_the_training_group_is_refused(tmp_path):
    result = run_preflight(tmp_path, TWO_NODES, closed_port(), "playbooks/fabric.yml", ["--limit", "node1"])
    assert result.returncode != 0
    assert "--limit leaves out node2, but this step works on every node of `training` at once" in result.stdout
    assert "unreachable" not in before_recap(result)


def fabric_tasks(listing):
    """The tasks site.yml --list-tasks lists under the fabric play."""
    play = re.search(r"play #\d+ \(training:!windows\): Fabric - measure.*?\n(.*?)(?:\n\s*play #|\Z)", listing, re.S)
    assert play, listing[-3000:]
    return [line.strip() for line in play.group(1).splitlines() if line.strip().startswith(("Check", "Hold",
                                                                                            "Take", "Measure",
                                                                                            "Give"))]


def test_a_plain_site_run_leaves_the_fabric_out_and_its_tag_brings_it_in(tmp_path):
    plain = run_preflight(tmp_path / "plain", TWO_NODES, closed_port(), "site.yml", ["--list-tasks"])
    assert plain.returncode == 0, plain.stdout[-2000:]
    assert fabric_tasks(plain.stdout) == []
    asked = run_preflight(tmp_path / "asked", TWO_NODES, closed_port(), "site.yml",
                          ["--list-tasks", "--tags", "fabric_matrix"])
    assert asked.returncode == 0, asked.stdout[-2000:]
    assert any(task.startswith("Measure the fabric") for task in fabric_tasks(asked.stdout)), asked.stdout[-3000:]
