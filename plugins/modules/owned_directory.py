#!/usr/bin/python
"""Make a folder that root gives to the training user, without ever acting
through a path that user controls."""

DOCUMENTATION = r"""
module: owned_directory
short_description: A folder given to an unprivileged user, its parents kept root's
description:
  - Walks I(path) from C(/). A missing parent is made root's, 0755; a parent the
    I(untrusted_user) owns is taken back (root's, 0755), since that user could
    otherwise swap the folder below it for a symlink between two runs; a parent
    that user can write in any other way, or a symlink that user could have made,
    is refused.
  - The folder itself is refused when it is a symlink (root would chown its target).
    It is made and given I(owner), I(group) and I(mode) through a file descriptor
    opened with O_NOFOLLOW, never by name.
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

PARENT_MODE = 0o755


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


def ensure(path, owner, group, mode, untrusted, check_mode=False):
    """Returns (changed, created, taken_back); raises Refused with the message a user reads."""
    if not os.path.isabs(path) or os.path.normpath(path) != path or path == "/":
        raise Refused(f"{path!r} is not an absolute, normalised folder path (no '..', '//' or trailing '/')")
    uid, gids = _user(untrusted)
    owner_uid = pwd.getpwnam(owner).pw_uid
    group_gid = grp.getgrnam(group).gr_gid
    created, taken_back = [], []
    current = "/"
    parts = path.strip("/").split("/")
    for index, part in enumerate(parts):
        candidate = os.path.join(current, part)
        last = index == len(parts) - 1
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            created.append(candidate)
            if check_mode:
                # What follows does not exist yet either.
                created += [os.path.join(candidate, *parts[index + 1:index + 1 + n]) for n in range(1, len(parts) - index)]
                return True, created, taken_back
            # Root's until the end: the final folder is given away by descriptor below.
            os.mkdir(candidate, 0o700)
            _set(candidate, 0, 0, 0o700 if last else PARENT_MODE)
            st = os.lstat(candidate)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(candidate)
            if last:
                raise Refused(f"{candidate} is a symlink (to {target}) where a folder is expected: root gives this "
                              f"folder to {owner} and would give it the link's target instead. Remove the link "
                              f"(rm {candidate}; move what you need from {target} first) and run again")
            if st.st_uid == uid or _writable_by(os.lstat(current), uid, gids):
                raise Refused(f"{candidate} is a symlink (to {target}) that {untrusted} could have made: root "
                              f"does not follow it to make {path}. Replace it with a folder root owns, or point "
                              "the setting at the real path")
            current = os.path.realpath(candidate)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise Refused(f"{candidate} is not a folder: move it away, or choose another path than {path}")
        if not last:
            if st.st_uid == uid:
                taken_back.append(candidate)
                if not check_mode:
                    _set(candidate, 0, 0, PARENT_MODE)
            elif _writable_by(st, uid, gids):
                raise Refused(f"{candidate} (a parent of {path}) is writable by {untrusted} "
                              f"(mode {stat.S_IMODE(st.st_mode):04o}): that user could swap {path} for a symlink "
                              f"and have root chown the target. Make it root's and not writable by that user "
                              f"(chmod go-w {candidate}), or choose another path")
        current = candidate
    changed = bool(created or taken_back)
    if check_mode:
        st = os.lstat(path)
        return changed or (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (owner_uid, group_gid, mode), \
            created, taken_back
    return _set(path, owner_uid, group_gid, mode) or changed, created, taken_back


def _set(path, uid, gid, mode):
    """Owner and mode through a descriptor of the folder itself (O_NOFOLLOW): never a link's target."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        changed = False
        if (st.st_uid, st.st_gid) != (uid, gid):
            os.fchown(fd, uid, gid)
            changed = True
        if stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
            changed = True
        return changed
    finally:
        os.close(fd)


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
    except KeyError as missing:
        if module.check_mode:
            # A dry run on new nodes: the user is made by an earlier task of the real run.
            module.exit_json(changed=True, path=params["path"], created=[], taken_back=[])
        module.fail_json(msg=f"no such user or group: {missing}", path=params["path"])
    module.exit_json(changed=changed, path=params["path"], created=created, taken_back=taken_back)


if __name__ == "__main__":
    main()
