"""The project as the cntk.cluster collection: `ansible-galaxy collection build`
makes a tarball that installs, holds none of the checkout's state, passes the
syntax check as `cntk.cluster.site`, and, installed into a temporary path and
driven by a bare ansible.cfg of the user's (no strategy plugin, no
collections_path to the checkout), converges the shared local cluster."""

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from cluster_helpers import recap

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
TARBALL = f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"
# What the checkout holds that is a user's or a machine's, never the collection's.
STATE = (".venv/", ".cache/", ".cluster/", ".secrets/", ".collections/", "artifacts/", "inventory/local/hosts.yml")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The built tarball and a user's folder with the collection installed and an ansible.cfg of its own."""
    user = tmp_path_factory.mktemp("user")
    collections = user / "collections"
    # The user's ansible.cfg from the start: under make, ANSIBLE_CONFIG names the checkout's, whose
    # collections_path already holds cntk.cluster (the checkout), and the install would skip it.
    (user / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {collections}\n")
    subprocess.run([BIN / "ansible-galaxy", "collection", "build", "--output-path", user, ROOT],
                   check=True, capture_output=True, text=True, cwd=user, env=user_env(user), timeout=300)
    subprocess.run([BIN / "ansible-galaxy", "collection", "install", "--offline", "-p", collections, user / TARBALL],
                   check=True, capture_output=True, text=True, cwd=user, env=user_env(user), timeout=300)
    assert (collections / "ansible_collections" / "cntk" / "cluster" / "MANIFEST.json").is_file()
    (user / "ansible.cfg").write_text(
        "[defaults]\n"
        f"collections_path = {collections}\n"
        "host_key_checking = True\n"
        "interpreter_python = auto_silent\n"
        "forks = 16\n"
        "timeout = 30\n"
        "[ssh_connection]\n"
        "pipelining = True\n")
    return user


def user_env(user):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "PYTHONPATH"}
    return dict(env, ANSIBLE_CONFIG=str(user / "ansible.cfg"), ANSIBLE_NOCOLOR="1", PYTHONUNBUFFERED="1")


def test_the_tarball_holds_the_collection_and_none_of_the_checkouts_state(installed):
    with tarfile.open(installed / TARBALL) as tar:
        names = tar.getnames()
    for needed in ("MANIFEST.json", "playbooks/site.yml", "roles/train_job/tasks/main.yml", "matrix/cntk.yml",
                   "plugins/modules/owned_directory.py", "plugins/module_utils/job_files.py", "training/train.py"):
        assert needed in names, needed
    leaked = [name for name in names if name.startswith(STATE) or "__pycache__" in name]
    assert not leaked, leaked
    assert not [name for name in names if "/filter_plugins/" in name or "/library/" in name
                or "/action_plugins/" in name], "a role keeps plugins a collection would not load"


def test_the_installed_site_playbook_passes_the_syntax_check(installed):
    result = subprocess.run([BIN / "ansible-playbook", "-i", "localhost,", "--syntax-check", "cntk.cluster.site"],
                            capture_output=True, text=True, cwd=installed, env=user_env(installed), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert str(installed / "collections" / "ansible_collections" / "cntk" / "cluster" / "playbooks" / "site.yml") \
        in result.stdout


@pytest.mark.cluster
def test_the_installed_collection_converges_the_local_cluster(installed, sec_cluster):
    """site.yml from the installed copy, on the cluster the checkout converged: it runs to its end with the
    collection's own roles, plugins, matrix and module_utils, and changes nothing (the user's project is the
    checkout: its caches, keys and the demo job's code)."""
    result = subprocess.run(
        [BIN / "ansible-playbook", "-i", sec_cluster, "cntk.cluster.site",
         "-e", f"cluster_project_root={ROOT}", "-e", f"train_job_source={ROOT / 'training'}"],
        capture_output=True, text=True, cwd=installed, env=user_env(installed), timeout=1800)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    hosts = recap(result.stdout)
    assert hosts and all(counts["failed"] == 0 and counts["unreachable"] == 0 for counts in hosts.values()), hosts
    assert all(counts["changed"] == 0 for counts in hosts.values()), (hosts, result.stdout[-6000:])
