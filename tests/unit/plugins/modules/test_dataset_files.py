"""plugins/modules/dataset_files.py: a node's data folder checked, repaired and recorded without re-hashing
what was verified before, and never an unverified file under a name the job reads."""

import hashlib
import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from prerequisites import require, requires

from ansible_collections.cntk.cluster.plugins.modules import dataset_files
from ansible_collections.cntk.cluster.plugins.modules.dataset_files import place, plan, safe_name

MANIFEST = {"name": "digits", "layout": "shard", "test": None, "shards": []}


def entry(name, data):
    return {"shard": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


DATA = {"shard-00000.ctf": b"a" * 100, "shard-00001.ctf": b"b" * 50}
WANTED = [entry(name, data) for name, data in DATA.items()]


def arrive(folder, names):
    """What rsync leaves in .incoming/."""
    (folder / ".incoming").mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / ".incoming" / name).write_bytes(DATA[name])


@pytest.fixture
def converged(tmp_path):
    folder = tmp_path / "digits"
    arrive(folder, DATA)
    result = place(str(folder), WANTED, MANIFEST, full=False, check_mode=False)
    assert result["changed"] and sorted(result["moved"]) == sorted(DATA)
    return folder


def count_hashes(monkeypatch):
    hashed = []
    real = dataset_files.sha256_of
    monkeypatch.setattr(dataset_files, "sha256_of", lambda fd, name, uid=None: hashed.append(name) or real(fd, name, uid))
    return hashed


def test_an_empty_folder_needs_every_file(tmp_path):
    found = plan(str(tmp_path / "none"), WANTED, MANIFEST, full=False)
    assert found["send"] == list(DATA) and found["stale"] == [] and found["manifest_differs"]


def test_a_converged_folder_is_checked_without_reading_a_file(converged, monkeypatch):
    hashed = count_hashes(monkeypatch)
    found = plan(str(converged), WANTED, MANIFEST, full=False)
    assert (found["send"], found["stale"], found["manifest_differs"], found["cache_differs"]) == ([], [], False, False)
    assert hashed == []
    assert json.loads((converged / "manifest.json").read_text()) == MANIFEST
    assert oct((converged / "shard-00000.ctf").stat().st_mode & 0o777) != "0o777"


def test_full_verification_hashes_every_file_and_finds_damage_that_kept_size_and_mtime(converged, monkeypatch):
    path = converged / "shard-00001.ctf"
    before = path.stat()
    with open(path, "r+b") as stream:
        stream.write(b"X")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    hashed = count_hashes(monkeypatch)
    assert plan(str(converged), WANTED, MANIFEST, full=False)["send"] == []
    assert hashed == []
    assert plan(str(converged), WANTED, MANIFEST, full=True)["send"] == ["shard-00001.ctf"]
    assert sorted(hashed) == sorted(DATA)


def test_a_changed_file_is_hashed_and_sent_and_a_stale_one_removed(converged, monkeypatch):
    with open(converged / "shard-00000.ctf", "ab") as stream:
        stream.write(b"|features 1\n")
    (converged / "shard-00099.ctf").write_bytes(b"old")
    (converged / "notes").mkdir()
    found = plan(str(converged), WANTED, MANIFEST, full=False)
    assert found["send"] == ["shard-00000.ctf"] and found["stale"] == ["shard-00099.ctf"]
    arrive(converged, ["shard-00000.ctf"])
    (converged / ".incoming" / "leftover").write_bytes(b"x")
    result = place(str(converged), WANTED, MANIFEST, full=False, check_mode=False)
    assert result == {"changed": True, "moved": ["shard-00000.ctf"], "removed": ["shard-00099.ctf"]}
    assert (converged / "shard-00000.ctf").read_bytes() == DATA["shard-00000.ctf"]
    assert sorted(os.listdir(converged)) == [".incoming", ".verified.json", "manifest.json", "notes"] + sorted(DATA)
    assert os.listdir(converged / ".incoming") == []
    hashed = count_hashes(monkeypatch)
    assert plan(str(converged), WANTED, MANIFEST, full=False)["send"] == [] and hashed == []


def test_a_file_that_arrived_damaged_stays_out_of_place_and_is_named(converged):
    os.unlink(converged / "shard-00001.ctf")
    (converged / ".incoming" / "shard-00001.ctf").write_bytes(b"c" * 50)
    result = place(str(converged), WANTED, MANIFEST, full=False, check_mode=False)
    assert result["failed"] and "shard-00001.ctf arrived with sha256" in result["bad"][0]
    assert not (converged / "shard-00001.ctf").exists()
    assert (converged / ".incoming" / "shard-00001.ctf").exists()


def test_a_symlink_in_place_of_a_data_file_is_replaced_not_followed(converged, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(DATA["shard-00000.ctf"])
    os.unlink(converged / "shard-00000.ctf")
    os.symlink(target, converged / "shard-00000.ctf")
    assert plan(str(converged), WANTED, MANIFEST, full=False)["send"] == ["shard-00000.ctf"]
    arrive(converged, ["shard-00000.ctf"])
    place(str(converged), WANTED, MANIFEST, full=False, check_mode=False)
    assert not (converged / "shard-00000.ctf").is_symlink()
    assert target.read_bytes() == DATA["shard-00000.ctf"]


def test_check_mode_reports_without_touching_the_folder(converged):
    (converged / "shard-00099.ctf").write_bytes(b"old")
    arrive(converged, [])
    result = place(str(converged), WANTED, dict(MANIFEST, layout="replicate"), full=False, check_mode=True)
    assert result["changed"]
    assert (converged / "shard-00099.ctf").exists()
    assert json.loads((converged / "manifest.json").read_text()) == MANIFEST


def test_only_plain_file_names_are_accepted():
    assert safe_name("shard-00000.ctf") and safe_name("test.ctf")
    for bad in ("", ".", "..", "../x", "a/b", ".verified.json", "manifest.json", None, "a\0b"):
        assert not safe_name(bad), bad


@pytest.fixture
def small_disk(tmp_path):
    """A real 64 KiB filesystem (tmpfs) for a node's data folder."""
    require(os.geteuid() == 0, "mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def run_module(args):
    """The module as Ansible runs it: its arguments in a file, its answer as JSON on stdout."""
    path = Path(args["path"]).parent.parent / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    result = subprocess.run([sys.executable, dataset_files.__file__, str(path)], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(Path(dataset_files.__file__).parents[5])))
    return json.loads(result.stdout)


def test_a_data_set_bigger_than_the_free_space_is_refused_before_anything_is_sent(small_disk):
    big = entry("shard-00000.ctf", b"x" * 100 * 1024)
    answer = run_module({"path": str(small_disk / "digits"), "wanted": [big, WANTED[1]], "manifest": MANIFEST,
                         "node": "node3"})
    assert answer["failed"]
    assert answer["msg"].startswith(f"node3: {small_disk / 'digits'} has ")
    assert "free, and the 2 data files to send need 100.0 KiB. Nothing was sent" in answer["msg"]
    assert "cluster_dataset_dir" in answer["msg"]
    assert list((small_disk / "digits").iterdir()) == [small_disk / "digits" / ".incoming"]


def test_files_that_fit_are_planned_on_the_same_disk(small_disk):
    answer = run_module({"path": str(small_disk / "digits"), "wanted": WANTED, "manifest": MANIFEST, "node": "node3"})
    assert not answer.get("failed") and answer["send"] == list(DATA)


def test_a_data_folder_that_cannot_be_made_is_named_with_the_fix(tmp_path):
    """A read-only filesystem where the data folder goes: the module names the node, the folder and the fix
    (before this, a PermissionError's traceback and "Module result deserialization failed")."""
    require(os.geteuid() == 0, "mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(mount)], check=True)
    try:
        answer = run_module({"path": str(mount / "digits"), "wanted": WANTED, "manifest": MANIFEST,
                             "node": "node3"})
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    assert answer["failed"]
    assert answer["msg"].startswith(f"node3: cannot make {mount / 'digits'} for the training user: "
                                    "Read-only file system. Its data folder must be that user's")


# state=planned as root for the training user (here `nobody`): it reads nothing that user does not own and
# follows no link, so a user's folder cannot make root read or make anything elsewhere.
needs_root = requires(os.geteuid() == 0, "chown needs root")
USER = "nobody"


def users_folder(tmp_path):
    """tmp_path/srv (root's) / data (the user's, like cluster_data_dir)."""
    data = tmp_path / "srv" / "data"
    data.mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chown(data, pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)
    return data


def plan_for_user(folder, **args):
    return run_module({"path": str(folder), "wanted": WANTED, "manifest": MANIFEST, "owner": USER, "node": "node2",
                       **args})


@needs_root
def test_root_makes_the_missing_folder_for_the_user_through_its_descriptor(tmp_path):
    data = users_folder(tmp_path)
    answer = plan_for_user(data / "digits")
    assert answer["changed"] and answer["owner_exists"] and answer["send"] == list(DATA)
    for folder in (data / "digits", data / "digits" / ".incoming"):
        status = folder.lstat()
        assert (pwd.getpwuid(status.st_uid).pw_name, stat.S_IMODE(status.st_mode)) == (USER, 0o750)
    assert not plan_for_user(data / "digits")["changed"]


@needs_root
def test_root_follows_no_link_the_user_made_in_place_of_the_data_folder(tmp_path):
    data = users_folder(tmp_path)
    victim = tmp_path / "etc-victim"
    victim.mkdir()
    (data / "digits").symlink_to(victim)
    answer = plan_for_user(data / "digits")
    assert answer["failed"]
    assert answer["msg"] == (f"node2: {data / 'digits'} is a symlink or a file where a folder is expected: remove it "
                             f"(the data step makes {data / 'digits'}), and rerun")
    assert list(victim.iterdir()) == [] and victim.lstat().st_uid == 0


@needs_root
def test_root_reads_no_file_the_user_does_not_own(tmp_path, monkeypatch):
    data = users_folder(tmp_path)
    uid, gid = pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid
    plan_for_user(data / "digits")
    for name, content in DATA.items():
        (data / "digits" / name).write_bytes(content)
        os.chown(data / "digits" / name, uid, gid)
    os.chown(data / "digits" / "shard-00001.ctf", 0, 0)  # root's file (a hard link to one, say) in the user's folder
    hashed = count_hashes(monkeypatch)
    found = plan(str(data / "digits"), WANTED, MANIFEST, full=False, uid=uid)
    assert found["send"] == ["shard-00001.ctf"] and hashed == ["shard-00000.ctf"]


@needs_root
def test_a_data_folder_another_user_owns_is_refused_naming_the_fix(tmp_path):
    data = users_folder(tmp_path)
    (data / "digits").mkdir()
    answer = plan_for_user(data / "digits")
    assert answer["failed"]
    assert answer["msg"] == (f"node2: {data / 'digits'} belongs to root, not to the training user {USER}: give it to "
                             "that user (chown -R), or remove it, and rerun")


def test_a_missing_training_user_is_named_and_a_dry_run_plans_every_file(tmp_path):
    args = {"path": str(tmp_path / "digits"), "wanted": WANTED, "manifest": MANIFEST, "owner": "no-such-user",
            "node": "node4"}
    answer = run_module(args)
    assert answer["failed"] and answer["msg"].startswith("node4: the training user no-such-user does not exist: ")
    dry = run_module(dict(args, _ansible_check_mode=True))
    assert not dry.get("failed") and not dry["owner_exists"] and dry["send"] == list(DATA)
    assert not (tmp_path / "digits").exists()


@needs_root
def test_a_link_only_root_could_have_made_on_the_way_is_followed(tmp_path):
    """A data disk's mount linked in by the operator (/srv -> /data/srv): root's link in a folder of root's
    that no one else may write in."""
    (tmp_path / "disk").mkdir()
    data = users_folder(tmp_path / "disk")  # disk/srv/data
    (tmp_path / "srv-link").symlink_to(tmp_path / "disk" / "srv")
    os.chmod(tmp_path, 0o755)
    answer = plan_for_user(tmp_path / "srv-link" / "data" / "digits")
    assert not answer.get("failed") and answer["send"] == list(DATA), answer
    assert (data / "digits" / ".incoming").is_dir()


@needs_root
def test_a_folder_on_the_way_the_user_cannot_search_is_named(tmp_path):
    # state=present runs as the training user: a parent only root may enter stops it with a message.
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o755)
    folder = closed / "data" / "digits"
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the module's code as the user, in a child that never returns to pytest
        try:
            os.close(read)
            os.setgid(pwd.getpwnam(USER).pw_gid)
            os.setuid(pwd.getpwnam(USER).pw_uid)
            try:
                place(str(folder), WANTED, MANIFEST, full=False, check_mode=False)
                said = "no refusal"
            except dataset_files.Refused as exc:
                said = str(exc)
            os.write(write, said.encode())
        finally:
            os._exit(0)
    os.close(write)
    said = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(child, 0)
    assert said.startswith(f"cannot reach {folder}: Permission denied"), said
