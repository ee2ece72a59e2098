"""The controller's project folder (cluster_project_root): where the cluster's keys, the munge key, the
database password and the run records are written. Refused when another user could put or replace a file there."""

import grp
import os
import pwd
import stat

SECRETS = ".secrets"
FIX = "set cluster_project_root (-e or group_vars) to an absolute folder only you may write, e.g. your checkout"


def _others_may_write(status, user, sticky_ok=True):
    """Whether a folder's mode lets a user other than `user` (and root) change what it holds: written by its
    group (unless that is the user's own private group) or by anyone. A sticky folder of root's (/tmp) lets no
    one replace another's entry: fine above the project folder (sticky_ok), not as it (others add names)."""
    sticky = sticky_ok and status.st_mode & stat.S_ISVTX and status.st_uid == 0
    if status.st_mode & stat.S_IWOTH and not sticky:
        return True
    if status.st_mode & stat.S_IWGRP and not sticky:
        try:
            group = grp.getgrgid(status.st_gid)
        except KeyError:
            return True
        return not (group.gr_name == user.pw_name and group.gr_gid == user.pw_gid and set(group.gr_mem) <= {user.pw_name})
    return False


def _owner(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def problems(root, cluster_name="", uid=None):
    """[problem]: what is wrong with `root` as the project folder for the controller user `uid` (this
    process's by default). Empty: keys may be made there."""
    uid = os.geteuid() if uid is None else uid
    user = pwd.getpwuid(uid)
    root = "" if root is None else str(root)
    if not root.strip():
        return [f"cluster_project_root is empty (Ansible found no ansible.cfg and PWD is unset, as under cron or "
                f"systemd): the cluster's keys would land in the working folder. {FIX}"]
    if not os.path.isabs(root):
        return [f"cluster_project_root={root!r} is relative: the keys would land wherever the run starts. {FIX}"]
    found = []
    path = os.path.realpath(root)
    if not os.path.isdir(path):
        return [f"cluster_project_root={root} is not a folder on the controller. {FIX}"]
    # The folder and every folder above it: one another user may write could swap the folder below for theirs.
    where = path
    while True:
        status = os.stat(where)
        if status.st_uid not in (0, uid):
            found.append(f"cluster_project_root={root}: {where} belongs to {_owner(status.st_uid)}, who could "
                         f"replace the cluster's keys there. {FIX}")
        elif _others_may_write(status, user, sticky_ok=where != path):
            found.append(f"cluster_project_root={root}: {where} may be written by others (mode "
                         f"{stat.S_IMODE(status.st_mode):04o}), who could put their own keys or records there. {FIX}")
        if where == os.path.dirname(where):
            break
        where = os.path.dirname(where)
    if found:
        return found
    # The secrets folder and this cluster's folder in it, when they exist: the user's alone (0700 or less).
    for folder in filter(None, [os.path.join(path, SECRETS),
                                os.path.join(path, SECRETS, cluster_name) if cluster_name else None]):
        try:
            status = os.lstat(folder)
        except FileNotFoundError:
            break
        if not stat.S_ISDIR(status.st_mode):
            found.append(f"{folder} is not a folder (a link or a file): the keys go in a folder of yours, 0700. "
                         f"Remove it; the next run makes it")
        elif status.st_uid != uid:
            found.append(f"{folder} belongs to {_owner(status.st_uid)}, not {user.pw_name}: the cluster's keys "
                         f"would be theirs to read. chown -R {user.pw_name} {folder}")
        elif status.st_mode & 0o077:
            found.append(f"{folder} is mode {stat.S_IMODE(status.st_mode):04o}: others may read or change the "
                         f"cluster's keys. chmod 700 {folder} (and check no one else copied them)")
    return found
