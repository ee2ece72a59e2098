"""Typos refused: an inventory variable that looks like the project's but no role knows fails preflight.

The filter (plugins/filter/inventory_names.py) runs on a temporary roles tree;
the playbooks run for real on inventories whose nodes sit on a closed loopback
port, so a node contacted would show as unreachable, never changed.
"""

import re
from pathlib import Path

import pytest
import yaml
from cluster_helpers import failure_messages, last_ran, playbook_report
from inventory_helpers import GROUP_VARS, closed_port

ROOT = Path(__file__).resolve().parents[4]

from ansible_collections.cntk.cluster.plugins.filter.inventory_names import _project_names, unknown_project_vars

CLUSTER_SPEC = ROOT / "roles" / "cluster" / "meta" / "argument_specs.yml"
needs_cluster_spec = pytest.mark.skipif(
    not CLUSTER_SPEC.exists(), reason="cluster_slots is known only once roles/cluster lists it in its spec")


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    write(root / "roles/cluster/meta/argument_specs.yml", {"argument_specs": {"main": {"options": {
        "cluster_name": {"type": "str"}, "cluster_slots": {"type": "int"}}}}})
    write(root / "roles/train_job/meta/argument_specs.yml", {"argument_specs": {
        "main": {"options": {"train_job_args": {"type": "dict"}}},
        "resume": {"options": {"train_job_resume": {"type": "bool"}}}}})
    write(root / "roles/train_job/defaults/main.yml", "train_job_poll_seconds: 3\n")
    # Ansible's own tags must not hide a role's names.
    write(root / "roles/dataset/defaults/main.yml", "dataset_name: digits\ndataset_token: !unsafe '{{ raw }}'\n")
    write(root / "roles/cpython/meta/argument_specs.yml", {"argument_specs": {"main": {"options": {
        "cpython_version": {"type": "str"}}}}})
    write(root / "roles/cluster/tasks/main.yml", [
        {"name": "Resolve", "ansible.builtin.set_fact": {"cluster_stack": {}, "cacheable": False}},
        {"name": "Probe", "block": [{"name": "Run", "ansible.builtin.command": "true",
                                     "register": "cluster_probe_result"}]}])
    # What include_vars loads by OS: set on the host for the rest of the run (a chained playbook sees it).
    write(root / "roles/base/vars/Debian.yml", "base_ssh_unit: ssh.service\n")
    return root


def test_a_typo_is_named_with_the_nearest_known_name(project):
    assert unknown_project_vars(["cluster_slot"], str(project)) == [{
        "name": "cluster_slot", "suggestion": "cluster_slots", "where": [],
        "message": "cluster_slot is not a variable of this project (did you mean cluster_slots?); "
                   "fix the extra vars or the inventory"}]


def test_known_names_pass(project):
    names = ["cluster_name", "cluster_slots", "train_job_args", "train_job_resume", "train_job_poll_seconds",
             "dataset_name", "dataset_token"]
    assert unknown_project_vars(names, str(project)) == []


def test_ansible_and_foreign_names_are_ignored(project):
    names = ["ansible_host", "ansible_cluster_slot", "http_proxy", "foo_bar", "clustering", "inventory_hostname",
             "python_interpreter"]
    assert unknown_project_vars(names, str(project)) == []


def test_a_role_prefix_typo_is_caught(project):
    found = unknown_project_vars(["train_jobs_args", "clustr_slots", "python_version"], str(project))
    assert [(v["name"], v["suggestion"]) for v in found] == [
        ("clustr_slots", "cluster_slots"), ("python_version", "cpython_version"), ("train_jobs_args", "train_job_args")]


def test_a_project_name_with_nothing_close_says_so(project):
    [found] = unknown_project_vars(["dataset_zzzzqqq"], str(project))
    assert found["suggestion"] is None
    assert "(no close match)" in found["message"]


def test_names_the_projects_tasks_set_pass_and_are_never_suggested(project):
    assert unknown_project_vars(["cluster_stack", "cluster_probe_result"], str(project)) == []
    [found] = unknown_project_vars(["cluster_stak"], str(project))
    assert found["suggestion"] != "cluster_stack"


def test_names_a_roles_vars_files_set_pass_as_a_later_playbook_of_the_run_sees_them(project):
    assert unknown_project_vars(["base_ssh_unit"], str(project)) == []
    [found] = unknown_project_vars(["base_ssh_units"], str(project))
    assert found["suggestion"] != "base_ssh_unit"


def test_the_message_names_the_inventory_files_that_set_it(project, tmp_path):
    inventory = tmp_path / "inv"
    write(inventory / "hosts.yml", {"all": {"hosts": {"node1": {"train_jobs_args": {}}}}})
    write(inventory / "group_vars/all.yml", "# cluster_slot: 2 (a comment sets nothing)\ncluster_slot: 4\n")
    write(inventory / "host_vars/node1/main.yml", "cluster_slots: 1\n")
    found = {v["name"]: v for v in unknown_project_vars(["cluster_slot", "train_jobs_args", "cluster_nme"],
                                                        str(project), str(inventory))}
    assert found["cluster_slot"]["where"] == [str((inventory / "group_vars/all.yml").resolve())]
    assert found["train_jobs_args"]["where"] == [str((inventory / "hosts.yml").resolve())]
    assert found["cluster_nme"]["message"] == (
        "cluster_nme is not a variable of this project (did you mean cluster_name?); "
        f"fix the extra vars (-e) or the inventory ({inventory.resolve()})")
    # Inside the project, paths are shown relative to it.
    inside = project / "inventory" / "rack1"
    write(inside / "group_vars/all.yml", "cluster_slot: 4\n")
    [found] = unknown_project_vars(["cluster_slot"], str(project), str(inside))
    assert found["message"].endswith("fix the inventory (inventory/rack1/group_vars/all.yml)")


def test_the_roles_are_read_once_per_process(project):
    _project_names.cache_clear()
    for _ in range(3):
        unknown_project_vars(["cluster_slot"], str(project))
    assert _project_names.cache_info().misses == 1


def test_the_projects_own_inventories_are_clean():
    names = set()
    for path in (ROOT / "inventory").glob("*/group_vars/*.yml"):
        names |= set(yaml.safe_load(path.read_text()) or {})
    if not CLUSTER_SPEC.exists():  # cluster_* names are known once roles/cluster lands
        names -= {name for name in names if name.startswith("cluster_")}
    assert unknown_project_vars(names, str(ROOT)) == []


def run_playbook(tmp_path, playbook, windows=False):
    inventory = tmp_path / "inventory"
    write(inventory / "group_vars" / "all.yml", {**GROUP_VARS, "cluster_slot": 4})
    hosts = {"node1": {"ansible_host": "127.0.0.91", "cluster_address": "127.0.0.91"}}
    children = {"cluster": {"children": {"training": {"hosts": hosts}}}}
    if windows:
        write(inventory / "group_vars" / "windows.yml", {"ansible_shell_type": "powershell", "ansible_become": False})
        children["windows"] = {"hosts": {"node1": None}}
    write(inventory / "hosts.yml", {"all": {
        "vars": {"ansible_port": closed_port(), "ansible_ssh_common_args": "-o ConnectTimeout=5"},
        "children": children}})
    # What the run did, from Ansible's JSON callback: its failures' messages (whitespace collapsed) and the report.
    result, report = playbook_report(inventory, playbook, timeout=180)
    return result, failure_messages(report), inventory, report


def check_stopped_at_the_names_check(report):
    """The names check failed and was the last task that ran; no node was contacted."""
    where, _, result = last_ran(report)
    assert where == "roles/preflight/tasks/names.yml" and result.get("failed"), (where, result)
    assert all(stats["unreachable"] == 0 for stats in report["stats"].values()), report["stats"]


@pytest.fixture(scope="module")
def preflight_run(tmp_path_factory):
    return run_playbook(tmp_path_factory.mktemp("typo"), "playbooks/preflight.yml")


def test_a_typo_stops_preflight_before_anything_else_runs(preflight_run):
    result, stdout, _, report = preflight_run
    assert result.returncode != 0
    assert "node1: cluster_slot is not a variable of this project" in stdout
    assert "Nothing was changed." in stdout
    check_stopped_at_the_names_check(report)


@needs_cluster_spec
def test_the_typo_message_names_the_known_name_and_the_file(preflight_run):
    result, stdout, inventory, _ = preflight_run
    message = ("node1: cluster_slot is not a variable of this project (did you mean cluster_slots?); "
               f"fix the inventory ({(inventory / 'group_vars' / 'all.yml').resolve()}). Nothing was changed.")
    assert message in stdout, result.stdout
    # Only the typo: every other name of the inventory is known.
    assert set(re.findall(r"(\S+) is not a variable of this project", stdout)) == {"cluster_slot"}


def test_the_windows_playbook_refuses_a_typo_first(tmp_path):
    result, stdout, _, report = run_playbook(tmp_path, "playbooks/windows.yml", windows=True)
    assert result.returncode != 0
    assert "node1: cluster_slot is not a variable of this project" in stdout
    check_stopped_at_the_names_check(report)
