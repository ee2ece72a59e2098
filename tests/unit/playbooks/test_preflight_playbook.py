"""playbooks/preflight.yml run for real on bad inventories: it stops, names the fault, changes nothing.

The hosts are loopback addresses on a port where nothing listens, so a node
that preflight lets through would be unreachable, never changed.
"""

import os
import subprocess
import sys
from pathlib import Path

import yaml
from cluster_helpers import failure_messages, last_ran, playbook_report
from inventory_helpers import GROUP_VARS, closed_port

ROOT = Path(__file__).resolve().parents[3]


def write_inventory(tmp_path, hosts, port):
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "group_vars" / "all.yml").write_text(yaml.safe_dump(GROUP_VARS))
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_port": port, "ansible_ssh_common_args": "-o ConnectTimeout=5"},
        "children": {"cluster": {"children": {"training": {"hosts": hosts}}}}}}))
    return inventory


def run_preflight(tmp_path, hosts, port, playbook="playbooks/preflight.yml", args=()):
    inventory = write_inventory(tmp_path, hosts, port)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    ansible_playbook = Path(sys.executable).with_name("ansible-playbook")
    return subprocess.run(
        [str(ansible_playbook), "-i", str(inventory), str(ROOT / playbook), *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=180,
    )


def test_duplicate_addresses_stop_before_any_node_is_contacted(tmp_path):
    port = closed_port()
    result = run_preflight(tmp_path, {
        "node1": {"ansible_host": "127.0.0.91", "cluster_address": "127.0.0.91"},
        "node2": {"ansible_host": "127.0.0.92", "cluster_address": "127.0.0.91"},
    }, port)
    assert result.returncode != 0
    assert "node2 and node1 have the same cluster_address 127.0.0.91" in result.stdout
    assert "unreachable" not in result.stdout.lower().split("play recap")[0]


def test_bad_slots_are_named_with_the_fix(tmp_path):
    result = run_preflight(tmp_path, {
        "node1": {"ansible_host": "127.0.0.91", "cluster_address": "127.0.0.91", "cluster_slots": 0},
    }, closed_port())
    assert result.returncode != 0
    assert "node1: cluster_slots=0 is not a positive integer" in result.stdout


def test_unreachable_node_is_named_and_the_run_stops(tmp_path):
    port = closed_port()
    inventory = write_inventory(tmp_path, {
        "node1": {"ansible_host": "127.0.0.91", "cluster_address": "127.0.0.91"},
        "node2": {"ansible_host": "127.0.0.92", "cluster_address": "127.0.0.92"},
    }, port)
    result, report = playbook_report(inventory, "playbooks/preflight.yml", timeout=180)
    assert result.returncode != 0
    messages = failure_messages(report)
    assert f"node1 is unreachable at 127.0.0.91:{port}" in messages
    assert f"node2 is unreachable at 127.0.0.92:{port}" in messages
    assert "Nothing was changed on any node" in messages
    # Nothing after the reachability check ran: it is where the run stopped (the JSON callback's report).
    where, name, stopped = last_ran(report)
    assert where == "roles/preflight/tasks/reachability.yml" and stopped.get("failed"), (where, name, stopped)


def test_a_cuda_override_the_matrix_rejects_stops_before_any_node_is_contacted(tmp_path):
    GROUP_VARS.update(cluster_backend="cntk", cluster_cntk_version="2.7", cluster_device="gpu",
                      cluster_stack_overrides={"cuda_version": "11.0"})
    try:
        result = run_preflight(tmp_path, {"node1": {"ansible_host": "127.0.0.91", "cluster_address": "127.0.0.91"}},
                               closed_port())
    finally:
        for key in ("cluster_backend", "cluster_cntk_version", "cluster_device", "cluster_stack_overrides"):
            GROUP_VARS.pop(key)
    assert result.returncode != 0
    assert "cuda_version=11.0 does not match CNTK 2.7, which needs CUDA 10.0" in result.stdout
    assert "unreachable" not in result.stdout.lower().split("play recap")[0]


TWO_NODES = {"node1": {"ansible_host": "127.0.0.91", "cluster_address": "127.0.0.91"},
             "node2": {"ansible_host": "127.0.0.92", "cluster_address": "127.0.0.92"}}


def test_site_with_a_mistyped_tag_stops_before_any_node_is_contacted(tmp_path):
    result = run_preflight(tmp_path, TWO_NODES, closed_port(), "site.yml", ["--tags", "trian"])
    assert result.returncode != 0
    assert "--tags trian: no play of this project has that tag" in result.stdout
    assert "unreachable" not in result.stdout.lower().split("play recap")[0]


def test_site_with_a_limit_that_cuts_the_training_group_stops_before_any_node_is_contacted(tmp_path):
    result = run_preflight(tmp_path, TWO_NODES, closed_port(), "site.yml", ["--limit", "node2"])
    assert result.returncode != 0
    assert "--limit leaves out node1, but the data step works on every node of `training` at once" in result.stdout
    assert "unreachable" not in result.stdout.lower().split("play recap")[0]


def test_the_data_step_alone_refuses_a_limit_that_cuts_the_training_group(tmp_path):
    result = run_preflight(tmp_path, TWO_NODES, closed_port(), "playbooks/data.yml", ["--limit", "node1"])
    assert result.returncode != 0
    assert "--limit leaves out node2, but this step works on every node of `training` at once" in result.stdout
    assert "unreachable" not in result.stdout.lower().split("play recap")[0]


def test_the_data_step_alone_stops_before_the_lock_when_a_node_does_not_answer(tmp_path):
    # node1 is this machine (a local connection, root already, this interpreter), node2 a port where nothing
    # listens: the step reaches every node first, and node2's silence stops it before the lock is taken on node1.
    hosts = {"node1": dict(TWO_NODES["node1"], ansible_connection="local", ansible_become=False,
                           ansible_python_interpreter=sys.executable),
             "node2": TWO_NODES["node2"]}
    inventory = write_inventory(tmp_path, hosts, closed_port())
    result, report = playbook_report(inventory, "playbooks/data.yml", timeout=180)
    assert result.returncode != 0
    assert "node2 failed or could not be reached earlier in this run, and this step works on every node of " \
        "`training` at once: it was not started" in failure_messages(report), result.stdout[-3000:]
    # The whole-group check stopped the step (the last task that ran), before the lock.
    where, name, stopped = last_ran(report)
    assert where == "roles/cluster/tasks/whole_group.yml" and stopped.get("failed"), (where, name, stopped)
