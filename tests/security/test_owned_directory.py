"""Finding 1 (issue 27), at the module: root gives a folder to the training
user (here `nobody`) and never chowns through a link that user could make.
On main, the file module gave /srv/cntk itself to the user, who then swapped
/srv/cntk/jobs for a link and had the next run chown the link's target."""

import os
import pwd
import stat

import pytest
from prerequisites import requires

from ansible_collections.cntk.cluster.plugins.modules.owned_directory import Refused, ensure

USER = "nobody"
pytestmark = requires(os.geteuid() == 0, "chown needs root")


def owner_mode(path):
    st = os.lstat(path)
    return pwd.getpwuid(st.st_uid).pw_name, stat.S_IMODE(st.st_mode)


def give(path):
    return ensure(str(path), USER, "nogroup", 0o750, USER)


@pytest.fixture
def victim(tmp_path):
    folder = tmp_path / "etc-victim"
    folder.mkdir(mode=0o755)
    (folder / "program").write_text("root's\n")
    return folder


def test_missing_parents_are_roots_and_the_folder_the_users(tmp_path):
    changed, created, _ = give(tmp_path / "srv" / "cntk" / "jobs")
    assert changed and len(created) == 3
    assert owner_mode(tmp_path / "srv") == ("root", 0o755)
    assert owner_mode(tmp_path / "srv" / "cntk") == ("root", 0o755)
    assert owner_mode(tmp_path / "srv" / "cntk" / "jobs") == (USER, 0o750)
    assert give(tmp_path / "srv" / "cntk" / "jobs") == (False, [], [])


def test_a_folder_swapped_for_a_link_is_refused_and_its_target_left_alone(tmp_path, victim):
    jobs = tmp_path / "srv" / "jobs"
    give(jobs)
    os.rmdir(jobs)
    os.symlink(victim, jobs)
    with pytest.raises(Refused, match=f"{jobs} is a symlink \\(to {victim}\\) where a folder is expected"):
        give(jobs)
    assert owner_mode(victim) == ("root", 0o755)
    assert owner_mode(victim / "program")[0] == "root"


def test_a_parent_the_user_was_given_is_taken_back_before_the_link_below_is_refused(tmp_path, victim):
    # The layout main left: /srv/cntk the training user's, /srv/cntk/jobs swapped for a link.
    parent = tmp_path / "cntk"
    parent.mkdir(mode=0o750)
    os.chown(parent, pwd.getpwnam(USER).pw_uid, -1)
    os.symlink(victim, parent / "jobs")
    with pytest.raises(Refused):
        give(parent / "jobs")
    assert owner_mode(parent) == ("root", 0o755)
    assert owner_mode(victim) == ("root", 0o755)


def test_a_parent_the_user_can_write_is_refused(tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    os.chmod(parent, 0o777)
    with pytest.raises(Refused, match="is writable by nobody"):
        give(parent / "jobs")
    assert not (parent / "jobs").exists()


def test_a_sticky_parent_and_a_roots_link_on_the_way_are_followed(tmp_path):
    real = tmp_path / "disk"
    real.mkdir(mode=0o755)
    os.symlink(real, tmp_path / "srv")
    sticky = real / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    give(tmp_path / "srv" / "tmp" / "data")
    assert owner_mode(sticky / "data") == (USER, 0o750)


def test_a_link_the_user_made_is_not_followed(tmp_path):
    (tmp_path / "real").mkdir(mode=0o755)
    os.symlink(tmp_path / "real", tmp_path / "link")
    os.lchown(tmp_path / "link", pwd.getpwnam(USER).pw_uid, -1)
    with pytest.raises(Refused, match="could have made"):
        give(tmp_path / "link" / "jobs")


def test_check_mode_changes_nothing(tmp_path):
    changed, created, _ = ensure(str(tmp_path / "a" / "b"), USER, "nogroup", 0o750, USER, check_mode=True)
    assert changed and created == [str(tmp_path / "a"), str(tmp_path / "a" / "b")]
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("path", ["relative/jobs", "/srv/../etc", "/srv//jobs", "/srv/jobs/", "/"])
def test_a_path_that_is_not_absolute_and_normalised_is_refused(path):
    with pytest.raises(Refused, match="not an absolute, normalised folder path"):
        give(path)


def test_no_root_task_gives_a_folder_to_the_training_user_with_the_file_module():
    import yaml
    from pathlib import Path
    roots = Path(__file__).resolve().parents[2] / "roles"
    found = []
    for task_file in roots.glob("*/tasks/*.yml"):
        if task_file.parts[-3].startswith("win_"):
            continue
        for task in yaml.safe_load(task_file.read_text()) or []:
            for block in [task] + task.get("block", []) + task.get("always", []):
                spec = block.get("ansible.builtin.file") or block.get("file")
                if isinstance(spec, dict) and "training_user" in str(spec.get("owner", "")):
                    found.append(f"{task_file.relative_to(roots)}: {block['name']}")
    assert found == []


def test_check_mode_before_the_user_exists_says_it_would_change(tmp_path):
    # A dry run on new nodes (molecule's check step): the user task has not made the user yet.
    import json
    import subprocess
    import sys
    from pathlib import Path
    from ansible_collections.cntk.cluster.plugins.modules import owned_directory
    module = Path(owned_directory.__file__)
    args = {"ANSIBLE_MODULE_ARGS": {"path": str(tmp_path / "jobs"), "owner": "no-such-user-here",
                                    "group": "no-such-user-here", "mode": "0750", "_ansible_check_mode": True}}
    # The module as Ansible runs it, its module_utils importable as the collection's.
    out = subprocess.run([sys.executable, str(module)], input=json.dumps(args), capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(module.parents[5])))
    assert json.loads(out.stdout)["changed"] is True and not (tmp_path / "jobs").exists()
