"""playbooks/windows.yml on inventories with Windows nodes, with no Windows machine.

A mixed inventory is refused on the controller before any node is contacted
(the nodes sit on a closed loopback port, so contacting one would show as
unreachable). The playbook and its roles pass ansible-playbook --syntax-check
against a Windows inventory shaped like inventory/example's.
"""

import os
import subprocess
import sys
from pathlib import Path

import yaml
from cluster_helpers import failure_messages, last_ran, playbook_report
from inventory_helpers import GROUP_VARS, closed_port

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = ROOT / "playbooks" / "windows.yml"


def write_inventory(tmp_path, linux, windows):
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "group_vars" / "all.yml").write_text(yaml.safe_dump(GROUP_VARS))
    (inventory / "group_vars" / "windows.yml").write_text(yaml.safe_dump(
        {"ansible_shell_type": "powershell", "ansible_become": False}))
    hosts = {**linux, **windows}
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_port": closed_port(), "ansible_ssh_common_args": "-o ConnectTimeout=5"},
        "children": {"cluster": {"children": {"training": {"hosts": hosts}}},
                     "windows": {"hosts": {name: None for name in windows}}}}}))
    return inventory


def ansible_playbook(*args):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    exe = Path(sys.executable).with_name("ansible-playbook")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def test_mixed_inventory_is_refused_before_any_node_is_contacted(tmp_path):
    inventory = write_inventory(
        tmp_path,
        {"node1": {"ansible_host": "127.0.0.91", "cluster_address": "127.0.0.91"}},
        {"win1": {"ansible_host": "127.0.0.92", "cluster_address": "127.0.0.92"},
         "win2": {"ansible_host": "127.0.0.93", "cluster_address": "127.0.0.93"}})
    result, report = playbook_report(inventory, "playbooks/windows.yml", timeout=120)
    assert result.returncode != 0
    messages = failure_messages(report)
    assert "mixes Linux nodes (node1) and Windows nodes (win1, win2)" in messages
    assert "nothing was changed" in messages
    # The mix check failed and was the last task that ran (JSON callback); no node was contacted.
    where, _, stopped = last_ran(report)
    assert where == "roles/preflight/tasks/platform.yml" and stopped.get("failed"), (where, stopped)
    assert all(stats["unreachable"] == 0 for stats in report["stats"].values()), report["stats"]


def test_the_preflight_playbook_refuses_a_mixed_inventory(tmp_path):
    inventory = write_inventory(
        tmp_path, {"node1": {"ansible_host": "127.0.0.91", "cluster_address": "127.0.0.91"}},
        {"win1": {"ansible_host": "127.0.0.92", "cluster_address": "127.0.0.92"}})
    result = ansible_playbook("-i", str(inventory), str(ROOT / "playbooks" / "preflight.yml"))
    assert result.returncode != 0
    assert "mixes Linux nodes (node1) and Windows nodes (win1)" in result.stdout
    assert "unreachable" not in result.stdout.lower().split("play recap")[0]


def test_windows_playbook_passes_syntax_check_on_a_windows_inventory(tmp_path):
    inventory = write_inventory(
        tmp_path, {}, {"win1": {"ansible_host": "127.0.0.92", "cluster_address": "127.0.0.92"}})
    result = ansible_playbook("--syntax-check", "-i", str(inventory), str(PLAYBOOK))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_task_file_passes_syntax_check(tmp_path):
    """--syntax-check does not follow include_tasks, so a play importing every
    task file of every role reaches the per-platform ones (tasks/*-Windows.yml)."""
    inventory = write_inventory(
        tmp_path, {}, {"win1": {"ansible_host": "127.0.0.92", "cluster_address": "127.0.0.92"}})
    task_files = sorted((ROOT / "roles").glob("*/tasks/*.yml"))
    assert {"dataset/tasks/node-Windows.yml", "train_job/tasks/launch-mpiexec.yml"} <= {
        str(path.relative_to(ROOT / "roles")) for path in task_files}
    imports = [{"name": f"Import {path.parent.parent.name} {path.name}",
                "ansible.builtin.import_role": {"name": path.parent.parent.name, "tasks_from": path.name}}
               for path in task_files]
    playbook = tmp_path / "every_task_file.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Every task file", "hosts": "all", "gather_facts": False,
                                         "tasks": imports}], sort_keys=False))
    result = ansible_playbook("--syntax-check", "-i", str(inventory), str(playbook))
    assert result.returncode == 0, result.stdout + result.stderr
