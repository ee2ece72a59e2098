#!/usr/bin/python
"""Make a folder that root gives to the training user, without ever acting
through a path that user controls."""

DOCUMENTATION = r"""
module: owned_directory
short_description: A folder given to an unprivileged user, its parents kept root's
description:
  - Walks I(path) from C(/), each folder opened through its parent's descriptor
    with O_NOFOLLOW (plugins/module_utils/root_walk.py). A missing parent is made
    root's, 0755; a parent the I(untrusted_user) owns is taken back (root's, 0755),
    since that user could otherwise swap the folder below it for a symlink between
    two runs; a parent that user can write in any other way is refused. A symlink on
    the way is followed only when only root could have made it (root's, in a folder
    of root's that no one else may write in); any other is refused.
  - The folder itself is refused when it is a symlink (root would chown its target).
    It is made and given I(owner), I(group) and I(mode) through its own descriptor,
    never by name.
  - Supports check mode.
options:
  path: {description: Absolute, normalised path of the folder., type: path, required: true}
  owner: {description: User to own the folder., type: str, required: true}
  group: {description: Group of the folder., type: str, required: true}
  mode: {description: Octal mode of the folder, e.g. C(0750)., type: str, required: true}
  untrusted_user:
    description: The user whose folders these are (the training user); defaults to I(owner).
    type: str
"""

RETURN = r"""
taken_back: {description: Parents that were the untrusted user's and are root's now., type: list, returned: always}
created: {description: Folders made (parents included)., type: list, returned: always}
"""

import grp
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.cntk.cluster.plugins.module_utils.root_walk import (
    PARENT_MODE, NotAFolder, descend, make_folders)


class Refused(Exception):
    pass


def _writable_by(st, uid, gids):
    """Whether a user (uid, its groups) may create or rename entries in a folder with this stat."""
    if st.st_uid == uid:
        return True
    if st.st_mode & stat.S_ISVTX:
        # Sticky (/tmp): others' entries cannot be renamed or removed by that user.
        return False
    return bool((st.st_mode & stat.S_IWGRP and st.st_gid in gids) or st.st_mode & stat.S_IWOTH)


def _user(name):
    entry = pwd.getpwnam(name)
    gids = {entry.pw_gid} | {g.gr_gid for g in grp.getgrall() if name in g.gr_mem}
    return entry.pw_uid, gids


def _refusal(exc, path, owner, untrusted):
    if exc.target is None:
        return f"{exc.where} is not a folder: move it away, or choose another path than {path}"
    if exc.last:
        return (f"{exc.where} is a symlink (to {exc.target}) where a folder is expected: root gives this folder "
                f"to {owner} and would give it the link's target instead. Remove the link (rm {exc.where}; move "
                f"what you need from {exc.target} first) and run again")
    return (f"{exc.where} is a symlink (to {exc.target}) that {untrusted}, or another user than root, could have "
            f"made: root does not follow it to make {path}. Replace it with a folder root owns, or point the "
            "setting at the real path")


def ensure(path, owner, group, mode, untrusted, check_mode=False):
    """Returns (changed, created, taken_back); raises Refused with the message a user reads."""
    if not os.path.isabs(path) or os.path.normpath(path) != path or path == "/":
        raise Refused(f"{path!r} is not an absolute, normalised folder path (no '..', '//' or trailing '/')")
    uid, gids = _user(untrusted)
    owner_uid = pwd.getpwnam(owner).pw_uid
    group_gid = grp.getgrnam(group).gr_gid
    taken_back = []

    def parent(fd, where):
        st = os.fstat(fd)
        if st.st_uid == uid:
            # That user could swap the folder below for a link between two runs.
            taken_back.append(where)
            if not check_mode:
                os.fchown(fd, 0, 0)
                os.fchmod(fd, PARENT_MODE)
        elif _writable_by(st, uid, gids):
            raise Refused(f"{where} (a parent of {path}) is writable by {untrusted} "
                          f"(mode {stat.S_IMODE(st.st_mode):04o}): that user could swap {path} for a symlink "
                          f"and have root chown the target. Make it root's and not writable by that user "
                          f"(chmod go-w {where}), or choose another path")

    try:
        fd, where, missing = descend(path, parent, follow_last=False)
    except NotAFolder as exc:
        raise Refused(_refusal(exc, path, owner, untrusted)) from None
    try:
        if check_mode:
            if missing:
                return True, [os.path.join(where, *missing[:n]) for n in range(1, len(missing) + 1)], taken_back
            st = os.fstat(fd)
            return (bool(taken_back) or (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (owner_uid, group_gid, mode),
                    [], taken_back)
        # Root's until the end: the folder is given away through its descriptor.
        folder, created = make_folders(fd, where, missing, 0o700)
        os.close(fd)
        fd = folder
        return _set(fd, owner_uid, group_gid, mode) or bool(created or taken_back), created, taken_back
    finally:
        os.close(fd)


def _set(fd, uid, gid, mode):
    """Owner and mode through the folder's own descriptor: never a link's target."""
    st = os.fstat(fd)
    changed = False
    if (st.st_uid, st.st_gid) != (uid, gid):
        os.fchown(fd, uid, gid)
        changed = True
    if stat.S_IMODE(st.st_mode) != mode:
        os.fchmod(fd, mode)
        changed = True
    return changed


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "owner": {"type": "str", "required": True},
            "group": {"type": "str", "required": True},
            "mode": {"type": "str", "required": True},
            "untrusted_user": {"type": "str"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        mode = int(params["mode"], 8)
    except ValueError:
        module.fail_json(msg=f"mode={params['mode']!r} is not an octal mode such as 0750")
    try:
        changed, created, taken_back = ensure(params["path"], params["owner"], params["group"], mode,
                                              params["untrusted_user"] or params["owner"], module.check_mode)
    except Refused as refused:
        module.fail_json(msg=f"{refused}. {params['path']} was left as it was.", path=params["path"])
    except OSError as exc:
        module.fail_json(msg=f"cannot make {params['path']}: {exc.strerror} (at {exc.filename}): fix that folder, "
                         "or choose another path", path=params["path"])
    except KeyError as missing:
        if module.check_mode:
            # A dry run on new nodes: the user is made by an earlier task of the real run.
            module.exit_json(changed=True, path=params["path"], created=[], taken_back=[])
        module.fail_json(msg=f"no such user or group: {missing}", path=params["path"])
    module.exit_json(changed=changed, path=params["path"], created=created, taken_back=taken_back)


if __name__ == "__main__":
    main()
