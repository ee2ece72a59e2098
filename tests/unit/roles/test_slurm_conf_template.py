"""roles/slurm/templates/slurm.conf.j2 rendered by Ansible's own template module, with the role's defaults and
vars: who may run jobs (AllowGroups), what users see of each other (PrivateData), and jobs only under an
association when accounting is on."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
HARDWARE = {"CPUs": 2, "Boards": 1, "SocketsPerBoard": 1, "CoresPerSocket": 2, "ThreadsPerCore": 1,
            "RealMemory": 2000}


def render(tmp_path, **extra):
    """slurm.conf for a two-node cluster (node1, node2 in `training`) and the extra vars given."""
    out = tmp_path / "slurm.conf"
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"cluster": {"children": {
        "training": {"hosts": {"node1": {}, "node2": {}}}}}}}}))
    (tmp_path / "render.yml").write_text(yaml.safe_dump([{
        "name": "Render slurm.conf", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars_files": [str(ROOT / "roles/slurm/defaults/main.yml"), str(ROOT / "roles/slurm/vars/main.yml")],
        "tasks": [{"name": "Render it", "ansible.builtin.template": {
            "src": str(ROOT / "roles/slurm/templates/slurm.conf.j2"), "dest": str(out), "mode": "0644"}}]}]))
    variables = {"cluster_name": "T", "cluster_training_user": "cntk",
                 "slurm_cluster": {"plugins": {"proctrack": "proctrack/cgroup", "task": "task/cgroup"},
                                   "nodes": [{"name": "node1", "hardware": HARDWARE, "gpus": 0},
                                             {"name": "node2", "hardware": HARDWARE, "gpus": 0}],
                                   "def_mem_per_cpu": 12052}, **extra}
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    result = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i",
                             str(tmp_path / "hosts.yml"), str(tmp_path / "render.yml"), "-e", json.dumps(variables)],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return out.read_text().splitlines()


def settings(lines):
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith(("#", "PartitionName",
                                                                                           "NodeName")))


def test_partitions_admit_the_training_group_and_users_see_their_own_jobs(tmp_path):
    lines = render(tmp_path)
    [partition] = [line for line in lines if line.startswith("PartitionName=")]
    assert partition.split() == ["PartitionName=training", "Nodes=node[1-2]", "Default=YES", "AllowGroups=cntk",
                                 "MaxTime=INFINITE", "State=UP"]
    assert settings(lines)["PrivateData"] == "jobs,usage,users"
    assert "AccountingStorageEnforce" not in settings(lines)


def test_memory_is_a_consumable_resource_with_a_default_share_per_cpu(tmp_path):
    """--mem is enforced only when memory is consumable (CR_Core_Memory); a job without it gets DefMemPerCPU."""
    conf = settings(render(tmp_path))
    assert conf["SelectTypeParameters"] == "CR_Core_Memory"
    assert conf["DefMemPerCPU"] == "12052"


def test_accounting_enforces_associations(tmp_path):
    conf = settings(render(tmp_path, slurm_accounting=True))
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert conf["AccountingStorageEnforce"] == "associations"


@pytest.mark.parametrize("groups, expected", [(["cntk", "ml-team"], ["AllowGroups=cntk,ml-team"]), ([], [])])
def test_allow_groups_is_a_list_and_empty_opens_the_partitions(tmp_path, groups, expected):
    [partition] = [line for line in render(tmp_path, slurm_allow_groups=groups) if line.startswith("PartitionName")]
    assert [word for word in partition.split() if word.startswith("AllowGroups")] == expected


def test_the_role_associates_the_training_user_with_its_account_when_accounting_is_on():
    """AccountingStorageEnforce=associations refuses a job without one: the role makes it (sacctmgr)."""
    tasks = yaml.safe_load((ROOT / "roles/slurm/tasks/accounting_check.yml").read_text())
    argvs = [task["ansible.builtin.command"]["argv"] for task in tasks if "ansible.builtin.command" in task]
    assert ["sacctmgr", "--immediate", "add", "user", "{{ cluster_training_user }}",
            "account={{ slurm_accounting_account }}", "cluster={{ cluster_name | lower }}"] in argvs
