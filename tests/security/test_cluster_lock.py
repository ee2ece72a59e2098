"""Finding 6 (issue 27), at the lock itself: one holder at a time, however
close together the takers come; a holder's lock is given back only by it; a
lock left by a run of this controller that is gone is stale. On main there was
no lock: two train runs a second apart both ran (the cluster test is in
test_train_runs.py)."""

import importlib.util
import multiprocessing
import os
import re
import stat
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.cntk.cluster.plugins.module_utils import job_files
from ansible_collections.cntk.cluster.plugins.modules import cluster_lock as lock

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("cluster_lock_action", ROOT / "plugins" / "action" / "cluster_lock.py")
action = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(action)


def holder(token):
    return {"token": token, "step": "train", "controller": "c", "user": "u", "pid": 1, "started": "now"}


def test_one_holder_at_a_time(tmp_path):
    path = str(tmp_path / "lock")
    assert lock.take(path, holder("a")) == (True, holder("a"))
    assert lock.take(path, holder("b")) == (False, holder("a"))
    assert lock.take(path, holder("a"))[0]  # its own holder again
    assert not lock.release(path, holder("b")) and os.path.isdir(path)
    assert lock.release(path, holder("a")) and not os.path.exists(path)
    assert lock.take(path, holder("b"))[0]


def test_a_stale_holder_is_replaced_only_while_it_still_holds(tmp_path):
    path = str(tmp_path / "lock")
    lock.take(path, holder("old"))
    assert lock.take(path, holder("new"), replace=holder("gone")) == (False, holder("old"))
    assert lock.take(path, holder("new"), replace=holder("old")) == (True, holder("new"))
    assert lock.read_holder(path) == holder("new")


def _race(path, token, start, results):
    start.wait()
    results.put((token, lock.take(path, holder(token))[0]))


def test_takers_racing_get_one_holder(tmp_path):
    path = str(tmp_path / "lock")
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    workers = [context.Process(target=_race, args=(path, f"t{i}", start, results)) for i in range(16)]
    for worker in workers:
        worker.start()
    start.set()
    outcomes = dict(results.get(timeout=30) for _ in workers)
    for worker in workers:
        worker.join()
    winners = [token for token, taken in outcomes.items() if taken]
    assert len(winners) == 1 and lock.read_holder(path)["token"] == winners[0]
    assert os.listdir(tmp_path) == ["lock"]  # no staging folder left behind


def run_folder(tmp_path, pid_content, *, exit_code=False):
    folder = tmp_path / "jobs" / "digits-mlp" / "runs" / "20261203T000000Z"
    folder.mkdir(parents=True)
    if pid_content is not None:
        (folder / job_files.PID).write_text(pid_content)
    if exit_code:
        (folder / job_files.EXIT_CODE).write_text("0\n")
    return folder


def test_a_live_run_is_found(tmp_path):
    run_folder(tmp_path, f"{os.getpid()}\n")
    assert lock.live_runs(str(tmp_path / "jobs"), job_files.PID, job_files.EXIT_CODE) == ["digits-mlp 20261203T000000Z"]


@pytest.mark.parametrize("case", ["ended", "dead", "fifo", "link", "minus-one"])
def test_a_run_that_is_not_alive_or_a_hostile_pid_file_is_not_a_live_run(tmp_path, case):
    folder = run_folder(tmp_path, None if case in ("fifo", "link") else "-1\n" if case == "minus-one"
                        else "999999999\n" if case == "dead" else f"{os.getpid()}\n", exit_code=case == "ended")
    if case == "fifo":
        os.mkfifo(folder / job_files.PID)  # read without O_NONBLOCK, this would hang
    if case == "link":
        (tmp_path / "real").write_text(f"{os.getpid()}\n")
        os.symlink(tmp_path / "real", folder / job_files.PID)
    assert lock.live_runs(str(tmp_path / "jobs"), job_files.PID, job_files.EXIT_CODE) == []


@pytest.mark.parametrize("swapped", ["job", "runs", "run"])
def test_a_link_the_training_user_put_in_place_of_a_folder_leads_root_nowhere(tmp_path, swapped):
    """Issue 44: root looked for live runs through the training user's links. A live run elsewhere, reached
    only through a link put in place of the job, its runs or the run folder, is not read."""
    elsewhere = run_folder(tmp_path / "elsewhere", f"{os.getpid()}\n")
    jobs = tmp_path / "jobs"
    target = {"job": elsewhere.parents[1], "runs": elsewhere.parent, "run": elsewhere}[swapped]
    place = {"job": jobs / "digits-mlp", "runs": jobs / "digits-mlp" / "runs",
             "run": jobs / "digits-mlp" / "runs" / elsewhere.name}[swapped]
    place.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, place)
    assert lock.live_runs(str(jobs), job_files.PID, job_files.EXIT_CODE) == []
    assert lock.live_runs(str(tmp_path / "elsewhere" / "jobs")) == ["digits-mlp 20261203T000000Z"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """The controller user's home: the id is made there."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir(mode=0o700)
    return tmp_path / "home"


def test_stale_means_this_controller_and_a_process_that_is_gone(home):
    ours = action.this_holder("data")
    me = dict(ours, pid=os.getpid(), token=action.token(ours["controller_id"], ours["controller"], ours["boot_id"],
                                                        os.getpid(), action._process_start(os.getpid())))
    assert not action.is_stale(me, ours)
    assert action.is_stale(dict(me, token=me["token"] + "0"), ours)  # the pid now runs another process
    assert action.is_stale(dict(me, pid=999999999), ours)
    assert action.is_stale(dict(me, boot_id="an earlier boot"), ours)
    assert not action.is_stale(dict(me, controller="another-controller", pid=999999999), ours)


def test_another_controller_of_the_same_host_name_is_never_stale(home):
    """Two machines named `runner` (CI) or `ubuntu`: the other's live lock, taken in what is another boot to
    us, and a pid that is not running here, is its own, not an earlier run of this controller."""
    ours = action.this_holder("train")
    other = dict(ours, controller_id="0123456789abcdef" * 2, boot_id="its own boot", pid=999999999,
                 token=f"{'0123456789abcdef' * 2}/{ours['controller']}/its own boot/999999999/1")
    assert other["controller"] == ours["controller"]
    assert not action.is_stale(other, ours)
    assert not action.is_stale(dict(other, boot_id=ours["boot_id"]), ours)
    # A lock from before controllers had an id: refused (cluster_lock_break takes it), never taken silently.
    legacy = {key: value for key, value in other.items() if key != "controller_id"}
    assert not action.is_stale(dict(legacy, boot_id="an earlier boot"), ours)


def test_the_controller_id_is_made_once_and_kept_0600(home):
    first = action.controller_id()
    path = home / ".cache" / "cntk-cluster" / "controller-id"
    assert re.fullmatch(r"[0-9a-f]{32}", first) and action.controller_id() == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert action.this_holder("data")["controller_id"] == first and action.this_holder("data")["token"].startswith(first)


@pytest.mark.parametrize("case", ["group-writable", "folder-open", "link", "garbage"])
def test_a_controller_id_another_user_could_have_written_is_refused(home, tmp_path, case):
    path = home / ".cache" / "cntk-cluster" / "controller-id"
    action.controller_id()
    if case == "group-writable":
        path.chmod(0o620)
    elif case == "folder-open":
        path.parent.chmod(0o777)
    elif case == "link":
        (tmp_path / "theirs").write_text("0123456789abcdef" * 2 + "\n")
        path.unlink()
        path.symlink_to(tmp_path / "theirs")
    else:
        path.write_text("ubuntu\n")
    with pytest.raises(AnsibleActionFail, match="controller's id"):
        action.controller_id()


def test_a_home_where_the_id_cannot_be_made_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "file"))
    (tmp_path / "file").write_text("")
    with pytest.raises(AnsibleActionFail, match="cannot be made .*writable home"):
        action.controller_id()
