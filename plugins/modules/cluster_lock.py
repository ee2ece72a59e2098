#!/usr/bin/python
"""The cluster's lock, on the head node: one step at a time changes what a job uses."""

DOCUMENTATION = r"""
module: cluster_lock
short_description: Take or release the cluster's lock on the head node
description:
  - The lock is a root-owned folder holding C(holder.json). It is taken by
    renaming a full folder into place (rename(2) is atomic and fails on a
    folder that is not empty), so two runs a second apart cannot both hold it
    and a lock is never seen half-written.
  - Called by the C(cluster_lock) action plugin, which names the holder and
    decides whether a lock is stale (its run's controller process is gone).
  - With I(running), the runs alive on this node are named; with
    I(refuse_running) as well, a taken lock is given back at once when one is
    (data and provisioning must not change what a job uses).
options:
  path: {description: The lock folder (its parent is made root's, 0755)., type: path, required: true}
  state: {description: held or released., type: str, choices: [held, released], default: held}
  holder: {description: Who takes the lock (token, step, controller, user, pid, started)., type: dict, required: true}
  replace: {description: A stale holder to take the lock from (only if it still holds it)., type: dict}
  running:
    description: jobs_dir (and pid_file, exit_file), to look for a live run as running_runs.sh does.
    type: dict
  refuse_running: {description: Give a taken lock back at once when a run is alive., type: bool, default: false}
"""

import errno
import json
import os
import shutil
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.cntk.cluster.plugins.module_utils import job_files

HOLDER = "holder.json"


def read_holder(path):
    """The holder of the lock at path, {} when it is free (or held by a folder without a readable holder)."""
    try:
        fd = os.open(os.path.join(path, HOLDER), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return {} if not os.path.lexists(path) else {"token": "unreadable"}
    with os.fdopen(fd) as handle:
        try:
            return json.loads(handle.read(4096))
        except ValueError:
            return {"token": "unreadable"}


def _staged(path, holder):
    staging = f"{path}.{os.getpid()}.new"
    shutil.rmtree(staging, ignore_errors=True)
    os.mkdir(staging, 0o700)
    with open(os.path.join(staging, HOLDER), "w") as handle:
        json.dump(holder, handle)
    return staging


def take(path, holder, replace=None):
    """(taken, holder now): taken is True when this holder holds the lock after the call."""
    parent = os.path.dirname(path)
    os.makedirs(parent, 0o755, exist_ok=True)
    staging = _staged(path, holder)
    try:
        for _ in range(3):
            try:
                os.rename(staging, path)
                return True, holder
            except OSError as error:
                if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
            current = read_holder(path)
            if not current:
                continue  # released meanwhile: try again
            if current.get("token") == holder["token"]:
                return True, current
            if replace is None or current.get("token") != replace.get("token"):
                return False, current
            # The stale lock moves aside; a second taker of the same stale lock finds it gone and retries.
            aside = f"{path}.{os.getpid()}.stale"
            try:
                os.rename(path, aside)
            except FileNotFoundError:
                continue
            shutil.rmtree(aside, ignore_errors=True)
            replace = None
        return False, read_holder(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def release(path, holder):
    """True when this holder's lock was removed; another holder's lock is left alone."""
    if read_holder(path).get("token") != holder["token"]:
        return False
    aside = f"{path}.{os.getpid()}.released"
    os.rename(path, aside)
    shutil.rmtree(aside, ignore_errors=True)
    return True


def _open_folder(name, dir_fd=None):
    """A folder's descriptor, never through a link (the last name) nor to anything but a folder."""
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)


def _small_file(name, dir_fd):
    """The first bytes of a regular file in a folder, never through a link or a FIFO; None otherwise."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return os.read(fd, 16).decode(errors="replace") if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


def _entries(dir_fd, name):
    """(names, descriptor) of the folder `name` in dir_fd, reached without following a link; ([], None) when it
    is not a folder there. The caller closes the descriptor."""
    try:
        fd = _open_folder(name, dir_fd)
    except OSError:
        return [], None
    try:
        return sorted(os.listdir(fd)), fd
    except OSError:
        os.close(fd)
        return [], None


def live_runs(jobs_dir, pid_file=job_files.PID, exit_file=job_files.EXIT_CODE):
    """'<job> <run id>' of every run whose run.sh is alive and has written no exit code. Root reads the training
    user's folders here: each one is opened through its parent's descriptor without following a link, so a link
    the user put in place of a job, its runs or a run leads nowhere."""
    found = []
    try:
        top = _open_folder(jobs_dir)
    except OSError:
        return found
    try:
        for job in sorted(os.listdir(top)):
            job_names, job_fd = _entries(top, job)
            if job_fd is None or "runs" not in job_names:
                if job_fd is not None:
                    os.close(job_fd)
                continue
            runs, runs_fd = _entries(job_fd, "runs")
            os.close(job_fd)
            for run in runs:
                _, run_fd = _entries(runs_fd, run)
                if run_fd is None:
                    continue
                try:
                    if exit_file in os.listdir(run_fd):
                        continue
                    pid = (_small_file(pid_file, run_fd) or "").strip()
                    if pid.isdigit() and int(pid) > 1 and os.path.exists(f"/proc/{pid}"):
                        found.append(f"{job} {run}")
                finally:
                    os.close(run_fd)
            if runs_fd is not None:
                os.close(runs_fd)
    finally:
        os.close(top)
    return found


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["held", "released"], "default": "held"},
            "holder": {"type": "dict", "required": True},
            "replace": {"type": "dict"},
            "running": {"type": "dict"},
            "refuse_running": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    path, holder = module.params["path"], module.params["holder"]
    if module.params["state"] == "released":
        released = False if module.check_mode else release(path, holder)
        module.exit_json(changed=False, released=released)
    if module.check_mode:
        current = read_holder(path)
        module.exit_json(changed=False, taken=not current or current.get("token") == holder["token"],
                         holder=current or holder, running=[])
    taken, current = take(path, holder, module.params["replace"])
    spec = module.params["running"]
    running = live_runs(spec["jobs_dir"], spec.get("pid_file", job_files.PID),
                        spec.get("exit_file", job_files.EXIT_CODE)) if spec else []
    if taken and running and module.params["refuse_running"]:
        release(path, holder)
        taken = False
    # The lock is bookkeeping, not a change to the node.
    module.exit_json(changed=False, taken=taken, holder=current, running=running)


if __name__ == "__main__":
    main()
