"""The one walk root takes to the training user's folders (owned_directory, dataset_files)."""

import os
import pwd
import stat

import pytest
from prerequisites import requires

from ansible_collections.cntk.cluster.plugins.module_utils.root_walk import NotAFolder, descend, make_folders

needs_root = requires(os.geteuid() == 0, "links of other users need root")


def reached(path, **args):
    fd, where, missing = descend(str(path), **args)
    try:
        return where, missing, os.fstat(fd).st_ino
    finally:
        os.close(fd)


def test_the_deepest_folder_that_exists_and_the_names_below_it(tmp_path):
    (tmp_path / "a").mkdir()
    where, missing, inode = reached(tmp_path / "a" / "b" / "c")
    assert (where, missing, inode) == (str(tmp_path / "a"), ["b", "c"], (tmp_path / "a").stat().st_ino)


def test_a_file_on_the_way_is_named(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(NotAFolder) as refused:
        descend(str(tmp_path / "file" / "below"))
    assert (refused.value.where, refused.value.target, refused.value.last) == (str(tmp_path / "file"), None, False)


@needs_root
def test_a_roots_link_in_a_folder_only_root_writes_is_followed_to_its_real_path(tmp_path):
    (tmp_path / "disk" / "srv").mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    (tmp_path / "srv").symlink_to("disk/../disk/srv")
    where, missing, _ = reached(tmp_path / "srv" / "data")
    assert (where, missing) == (str(tmp_path / "disk" / "srv"), ["data"])


@needs_root
@pytest.mark.parametrize("who, mode", [("daemon", 0o755), ("root", 0o775)])
def test_a_link_another_user_made_or_could_swap_is_refused(tmp_path, who, mode):
    (tmp_path / "real").mkdir()
    os.chmod(tmp_path, mode)
    os.symlink(tmp_path / "real", tmp_path / "link")
    os.lchown(tmp_path / "link", pwd.getpwnam(who).pw_uid, -1)
    with pytest.raises(NotAFolder) as refused:
        descend(str(tmp_path / "link" / "below"))
    assert (refused.value.where, refused.value.target) == (str(tmp_path / "link"), str(tmp_path / "real"))


@needs_root
def test_a_roots_link_in_a_sticky_folder_is_followed(tmp_path):
    os.chmod(tmp_path, 0o1777)
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert reached(tmp_path / "link")[:2] == (str(tmp_path / "real"), [])


@needs_root
def test_the_last_name_as_a_link_is_refused_when_asked(tmp_path):
    os.chmod(tmp_path, 0o700)
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert reached(tmp_path / "link")[:2] == (str(tmp_path / "real"), [])
    with pytest.raises(NotAFolder) as refused:
        descend(str(tmp_path / "link"), follow_last=False)
    assert refused.value.last


def test_before_child_sees_every_parent_and_may_stop_the_walk(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    seen = []
    fd, _, _ = descend(str(tmp_path / "a" / "b"), before_child=lambda fd, where: seen.append(where))
    os.close(fd)
    assert seen[-2:] == [str(tmp_path), str(tmp_path / "a")] and seen[0] == "/"

    def stop(fd, where):
        if where == str(tmp_path):
            raise RuntimeError(where)
    with pytest.raises(RuntimeError):
        descend(str(tmp_path / "a"), before_child=stop)


def test_folders_are_made_one_inside_the_next_the_last_with_its_mode(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    (tmp_path / "x").mkdir(mode=0o700)
    try:
        last, made = make_folders(fd, str(tmp_path), ["x", "y", "z"], 0o750)
        os.close(last)
    finally:
        os.close(fd)
    assert made == [str(tmp_path / "x" / "y"), str(tmp_path / "x" / "y" / "z")]
    assert stat.S_IMODE((tmp_path / "x").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "x" / "y").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "x" / "y" / "z").stat().st_mode) == 0o750
