"""Finding 2 (issue 27): each step run alone checks the inventory before it
contacts a node. On main, playbooks/train.yml, data.yml, ssh.yml and
provision.yml ran no name check (an empty or '..' train_job_name reached
root's `rsync --delete`), and preflight read the names of the first node
only. The nodes here do not exist (nothing listens at 127.0.0.9:1): a step
that reached for them instead of refusing would say UNREACHABLE."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ["playbooks/train.yml", "playbooks/data.yml", "playbooks/ssh.yml", "playbooks/provision.yml",
             "playbooks/stop.yml", "playbooks/check.yml", "site.yml"]


def inventory(tmp_path, node2=None):
    hosts = {"node1": {"ansible_host": "127.0.0.9", "ansible_port": 1},
             "node2": {"ansible_host": "127.0.0.10", "ansible_port": 1, **(node2 or {})}}
    data = {"all": {"vars": {"cluster_name": "lone", "cluster_training_user": "cntk", "cluster_training_uid": 2000,
                             "cluster_mpi_interface": "lo", "cluster_slots": 1, "cluster_backend": "numpy",
                             "cluster_dataset_name": "digits"},
                    "children": {"cluster": {"children": {"training": {"hosts": hosts}}}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps(data))
    return path


def run(playbook, inventory_file, *extra):
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "ANSIBLE_STRATEGY": "linear", "HOME": str(inventory_file.parent)}
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory_file),
                           playbook, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_a_traversal_job_name_is_refused_before_any_node_is_contacted(tmp_path, playbook):
    result = run(playbook, inventory(tmp_path), "-e", "train_job_name=..")
    assert result.returncode != 0
    assert "train_job_name='..' names a folder" in result.stdout
    assert "UNREACHABLE" not in result.stdout


@pytest.mark.parametrize("playbook", ["playbooks/train.yml", "playbooks/data.yml", "site.yml"])
@pytest.mark.parametrize("override", [{"cluster_dataset_name": "../../etc"}, {"train_job_env": {"A;B": "1"}},
                                      {"cluster_mpi_interface": "lo\nx"}])
def test_a_hostile_per_host_override_is_refused(tmp_path, playbook, override):
    result = run(playbook, inventory(tmp_path, node2=override))
    assert result.returncode != 0
    [name] = override
    expected = "name the network interface MPI uses on this node" if name == "cluster_mpi_interface" \
        else f"{name} differs between nodes"
    assert expected in " ".join(result.stdout.split())
    assert "UNREACHABLE" not in result.stdout


def test_an_empty_job_name_is_refused(tmp_path):
    result = run("playbooks/train.yml", inventory(tmp_path), "-e", "train_job_name=")
    assert "train_job_name='' names a folder" in result.stdout and "UNREACHABLE" not in result.stdout


@pytest.mark.parametrize("playbook", ["site.yml", "playbooks/train.yml", "playbooks/data.yml"])
def test_an_inventory_with_an_empty_training_group_is_refused(tmp_path, playbook):
    # Issue 27, finding 9: on main the train and data steps matched no host and ended in success.
    data = json.loads(inventory(tmp_path).read_text())
    hosts = data["all"]["children"]["cluster"]["children"].pop("training")["hosts"]
    data["all"]["children"]["cluster"]["hosts"] = hosts
    data["all"]["children"]["cluster"]["children"] = {"training": {"hosts": {}}}
    (tmp_path / "hosts.yml").write_text(json.dumps(data))
    result = run(playbook, tmp_path / "hosts.yml")
    assert result.returncode != 0
    assert "the `training` group is empty" in " ".join(result.stdout.split())
    assert "UNREACHABLE" not in result.stdout
