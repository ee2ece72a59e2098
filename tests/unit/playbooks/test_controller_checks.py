"""What every playbook checks on the controller before anything else, run for real with no reachable node: an
inventory with no host at all, and a project folder (cluster_project_root) that cannot hold the cluster's keys.
The nodes, where there are any, are loopback addresses on a port where nothing listens: a playbook that went
past the check would say they are unreachable."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from inventory_helpers import GROUP_VARS, closed_port

from ansible_collections.cntk.cluster.plugins.module_utils import project_root

ROOT = Path(__file__).resolve().parents[3]
# Every playbook a user runs: site.yml and each playbook under playbooks/.
PLAYBOOKS = ["site.yml"] + sorted(f"playbooks/{path.name}" for path in (ROOT / "playbooks").glob("*.yml"))


def run(playbook, inventory, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory),
                           str(ROOT / playbook), *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=180)


def said(result):
    return " ".join(result.stdout.split())


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_an_inventory_with_no_host_at_all_is_refused_naming_it(tmp_path, playbook):
    """Every group empty: on main each play said "no hosts matched" and the run ended with rc 0."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"vars": GROUP_VARS, "children": {"cluster": {"children": {
        "training": {"hosts": {}}, "windows": {"hosts": {}}}}}}}))
    result = run(playbook, inventory)
    assert result.returncode != 0, result.stdout[-2000:]
    assert f"The inventory {inventory} has no host" in said(result)


def test_an_inventory_path_that_is_not_there_is_refused_too(tmp_path):
    result = run("site.yml", tmp_path / "no-such-inventory")
    assert result.returncode != 0
    assert f"The inventory {tmp_path / 'no-such-inventory'} has no host" in said(result)


def inventory(tmp_path):
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {
        "vars": dict(GROUP_VARS, ansible_port=closed_port(), ansible_ssh_common_args="-o ConnectTimeout=5"),
        "children": {"cluster": {"children": {"training": {"hosts": {
            "node1": {"ansible_host": "127.0.0.91", "cluster_address": "127.0.0.91"}}}}}}}}))
    return path


def folder(tmp_path, mode, secrets_mode=None):
    path = tmp_path / "project"
    path.mkdir()
    path.chmod(mode)
    if secrets_mode is not None:
        (path / ".secrets").mkdir()
        (path / ".secrets").chmod(secrets_mode)
    return path


@pytest.mark.parametrize("playbook", ["playbooks/preflight.yml", "playbooks/ssh.yml"])
@pytest.mark.parametrize("case, expected", [
    ("empty", "cluster_project_root is empty"),
    ("relative", "cluster_project_root='project' is relative"),
    ("world-writable", "may be written by others (mode 0777)"),
    ("open-secrets", ".secrets is mode 0755"),
])
def test_a_project_folder_that_cannot_hold_keys_is_refused_before_any_is_made(tmp_path, playbook, case, expected):
    root = {"empty": lambda: "", "relative": lambda: "project", "world-writable": lambda: folder(tmp_path, 0o777),
            "open-secrets": lambda: folder(tmp_path, 0o700, secrets_mode=0o755)}[case]()
    result = run(playbook, inventory(tmp_path), "-e", f"cluster_project_root={root}")
    assert result.returncode != 0
    assert expected in said(result), result.stdout[-3000:]
    assert "unreachable" not in result.stdout.lower().split("play recap")[0]
    if case == "world-writable":
        assert list(root.iterdir()) == []


def test_a_project_folder_of_this_users_alone_passes(tmp_path):
    root = folder(tmp_path, 0o700, secrets_mode=0o700)
    result = run("playbooks/preflight.yml", inventory(tmp_path), "-e", f"cluster_project_root={root}")
    assert result.returncode != 0 and "node1 is unreachable at 127.0.0.91" in said(result)
    assert "project folder cannot hold" not in result.stdout


def test_problems_name_the_folder_above_that_others_may_write(tmp_path):
    """A folder of this user's inside one anyone may write (not sticky): the one above could swap it."""
    shared = tmp_path / "shared"
    (shared / "mine").mkdir(parents=True)
    shared.chmod(0o777)
    [problem] = project_root.problems(str(shared / "mine"))
    assert f"{shared} may be written by others (mode 0777)" in problem
    shared.chmod(0o1777 if os.geteuid() == 0 else 0o755)  # root's sticky folder (/tmp): no one replaces "mine"
    assert project_root.problems(str(shared / "mine")) == []


def test_secrets_that_are_a_link_or_anothers_are_refused(tmp_path):
    root = folder(tmp_path, 0o700)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (root / ".secrets").symlink_to(tmp_path / "elsewhere")
    assert "is not a folder" in project_root.problems(str(root))[0]
    (root / ".secrets").unlink()
    (root / ".secrets" / "t").mkdir(parents=True, mode=0o700)
    (root / ".secrets").chmod(0o700)
    (root / ".secrets" / "t").chmod(0o750)
    assert project_root.problems(str(root), "t") == [
        f"{root / '.secrets' / 't'} is mode 0750: others may read or change the cluster's keys. chmod 700 "
        f"{root / '.secrets' / 't'} (and check no one else copied them)"]
    assert stat.S_IMODE((root / ".secrets").stat().st_mode) == 0o700
