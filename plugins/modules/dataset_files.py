#!/usr/bin/python
"""A node's data folder against the files its ranks need.

state=planned runs as root and reads only, never through a symlink: the
folder is reached from / by descriptors opened with O_NOFOLLOW, and only
files the training user (owner) owns are read, so root learns nothing that
user could not read. It makes the folder and .incoming/ when missing (given
to owner through their descriptors) and reports which wanted files are
missing or differ, and which files in the folder are stale; it fails, before
anything is sent, when the folder's filesystem has less free space than the
files to send. A file is taken as good without reading it when its size,
mtime and inode are those recorded when it was last verified with the same
sha256 (.verified.json); otherwise it is hashed.
verify=full hashes every file (a periodic check for damage that kept size
and mtime).

state=present runs as the training user: the files rsync put in .incoming/
are hashed and moved into place only when their sha256 is the manifest's (a
bad one stays in .incoming/ and the task fails naming it), stale files are
removed, manifest.json and .verified.json are written. No partial or
unverified file is ever under a name the job reads.
"""

DOCUMENTATION = r"""
module: dataset_files
short_description: A node's data folder checked against the files its ranks need, and put right
description:
  - >-
    C(state=planned) runs as root, reads only the files I(owner) owns and follows no symlink; it
    makes the folder and C(.incoming/) for I(owner) when they are missing, lists the wanted files
    that are missing or differ and the stale ones, and fails before anything is sent when the
    folder's filesystem has too little free space. C(state=present) runs as the training user: it
    moves the files rsync put in C(.incoming/) into place when their sha256 is the manifest's,
    removes the stale files and writes manifest.json and .verified.json.
  - The folder is reached as plugins/module_utils/root_walk.py says (as owned_directory's).
  - Supports check mode.
options:
  path: {description: The node's data folder (absolute)., type: path, required: true}
  wanted:
    description: The entries the node holds, each with C(shard), C(bytes) and C(sha256).
    type: list
    elements: dict
    required: true
  manifest: {description: The node's manifest.json., type: dict, required: true}
  state: {description: Plan, or put in place., type: str, choices: [planned, present], default: planned}
  verify: {description: C(full) hashes every file., type: str, choices: [quick, full], default: quick}
  owner:
    description: >-
      The training user, whose folder this is (C(state=planned) run as root). A file or folder
      another user owns is never read; unset, the module's own user is taken as the owner.
    type: str
  node: {description: The node's name for the messages., type: str, default: ""}
"""

EXAMPLES = r"""
- name: Find the missing, damaged and stale data files on the node
  cntk.cluster.dataset_files:
    path: /srv/cntk/data/digits
    wanted: "{{ dataset_wanted }}"
    manifest: "{{ dataset_node_manifest }}"
    owner: cntk
    state: planned
  register: dataset_plan
"""

RETURN = r"""
send: {description: The files to send (planned)., type: list, returned: state=planned}
stale: {description: The files to remove (planned)., type: list, returned: state=planned}
manifest_differs: {description: Whether manifest.json must be written., type: bool, returned: state=planned}
cache_differs: {description: Whether .verified.json must be written., type: bool, returned: state=planned}
owner_exists:
  description: Whether the owner is a user on the node (a dry run on a new node has none yet).
  type: bool
  returned: state=planned
moved: {description: The files moved into place., type: list, returned: state=present}
removed: {description: The stale files removed., type: list, returned: state=present}
"""

import hashlib
import json
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.cntk.cluster.plugins.module_utils.root_walk import (
    NO_FOLLOW, NotAFolder, descend, make_folders as make_parents, open_folder)

MANIFEST = "manifest.json"
CACHE = ".verified.json"
INCOMING = ".incoming"
CHUNK = 8 << 20
# The largest manifest or cache read (a node's holds a line per file).
JSON_LIMIT = 64 << 20
FOLDER_MODE = 0o750


class Refused(Exception):
    pass


def walk(path):
    """(descriptor of the deepest folder of path that exists, its real path, the names below it that do not),
    reached from / without following a link another user than root could have made or swapped."""
    try:
        return descend(path)
    except NotAFolder as exc:
        raise Refused(f"{exc.where} is a symlink or a file where a folder is expected: remove it "
                      f"(the data step makes {path}), and rerun") from None
    except OSError as exc:
        raise Refused(f"cannot reach {path}: {exc.strerror} (at {exc.filename}): let the training user search "
                      "every folder on the way, or set cluster_dataset_dir to another folder, and rerun") from None


def open_file(fd, name, uid):
    """A descriptor of the regular file name in folder fd, owned by uid when uid is set, else None."""
    try:
        file_fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | NO_FOLLOW, dir_fd=fd)
    except OSError:
        return None
    status = os.fstat(file_fd)
    if not stat.S_ISREG(status.st_mode) or (uid is not None and status.st_uid != uid):
        os.close(file_fd)
        return None
    return file_fd


def sha256_of(fd, name, uid=None):
    """The sha256 of the file name in folder fd, or None when it is not a regular file owner uid owns."""
    file_fd = open_file(fd, name, uid)
    if file_fd is None:
        return None
    digest = hashlib.sha256()
    with os.fdopen(file_fd, "rb") as stream:
        for block in iter(lambda: stream.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def safe_name(name):
    return (isinstance(name, str) and name not in ("", ".", "..", MANIFEST) and "/" not in name
            and "\0" not in name and not name.startswith("."))


def regular_status(fd, name, uid=None):
    """The status of name in folder fd when it is a regular file (owned by uid when set), never a link's target."""
    try:
        status = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(status.st_mode) or (uid is not None and status.st_uid != uid):
        return None
    return status


def status_key(status):
    return [status.st_size, status.st_mtime_ns, status.st_ino]


def read_json(fd, name, uid=None):
    """The JSON object in the file name of folder fd, or None when there is none."""
    file_fd = open_file(fd, name, uid)
    if file_fd is None:
        return None
    try:
        with os.fdopen(file_fd, "rb") as stream:
            value = json.loads(stream.read(JSON_LIMIT + 1).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_json(fd, name, value):
    temp = name + ".tmp"
    out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NO_FOLLOW, 0o640, dir_fd=fd)
    with os.fdopen(out, "w", encoding="utf-8") as stream:
        stream.write(json.dumps(value, indent=2, sort_keys=True) + "\n")
        stream.flush()
        os.fchmod(stream.fileno(), 0o640)
        os.fsync(stream.fileno())
    os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)


def verified(fd, entry, cache, full, uid=None):
    """(good, cache record or None): the file in folder fd holds the entry's bytes."""
    status = regular_status(fd, entry["shard"], uid)
    if status is None or status.st_size != entry["bytes"]:
        return False, None
    record = cache.get(entry["shard"])
    if not full and record == {"stat": status_key(status), "sha256": entry["sha256"]}:
        return True, record
    if sha256_of(fd, entry["shard"], uid) != entry["sha256"]:
        return False, None
    return True, {"stat": status_key(status), "sha256": entry["sha256"]}


def stale_names(fd, wanted):
    keep = {entry["shard"] for entry in wanted} | {MANIFEST}
    return sorted(name for name in os.listdir(fd)
                  if name not in keep and not name.startswith(".") and regular_status(fd, name))


def plan_in(fd, wanted, manifest, full, uid=None):
    """What state=present would do in folder fd (None: missing): the files to send, the stale ones, and the
    cache as verified now."""
    cache = (read_json(fd, CACHE, uid) if fd is not None else None) or {}
    send, new_cache = [], {}
    for entry in wanted:
        good, record = verified(fd, entry, cache, full, uid) if fd is not None else (False, None)
        if good:
            new_cache[entry["shard"]] = record
        else:
            send.append(entry["shard"])
    stale = stale_names(fd, wanted) if fd is not None else []
    manifest_differs = (read_json(fd, MANIFEST, uid) if fd is not None else None) != manifest
    return {"send": send, "stale": stale, "manifest_differs": manifest_differs,
            "cache_differs": new_cache != cache, "cache": new_cache}


def plan(folder, wanted, manifest, full, uid=None):
    """plan_in for the folder at a path (reached without following a link)."""
    fd, _, missing = walk(folder)
    try:
        return plan_in(None if missing else fd, wanted, manifest, full, uid)
    finally:
        os.close(fd)


def human(size):
    if size < 1024:
        return f"{size} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}"


def space_short(folder, fd, wanted, send):
    """The message when the files to send do not fit on the filesystem of folder fd, else None.

    Counts every byte to send: rsync writes a whole new file beside a partial one, and a damaged
    file's old copy is only replaced once its new one is in .incoming/."""
    needed = sum(entry["bytes"] for entry in wanted if entry["shard"] in send)
    status = os.fstatvfs(fd)
    free = status.f_bavail * status.f_frsize
    if needed <= free:
        return None
    return (f"{folder} has {human(free)} free, and the {len(send)} data files to send need {human(needed)}. "
            "Nothing was sent: free space there, or set cluster_dataset_dir to a folder on a bigger disk, "
            "then rerun")


def make_folders(fd, where, missing, owner):
    """Makes what is missing below folder fd (at where): parents root's 0755, the data folder and its
    .incoming/ 0750, given to owner, (uid, gid), when set. Returns a descriptor of the data folder and whether
    one was made."""
    folder, made = make_parents(fd, where, missing, FOLDER_MODE, owner)
    try:
        path = os.path.join(where, *missing)
        incoming, made_incoming = make_parents(folder, path, [INCOMING], FOLDER_MODE, owner)
        os.close(incoming)
    except BaseException:
        os.close(folder)
        raise
    return folder, bool(made or made_incoming)


def place(folder, wanted, manifest, full, check_mode):
    """Verify what arrived, move it into place, remove the stale files, write the manifest and cache."""
    fd, _, missing = walk(folder)
    try:
        if missing:
            return {"failed": True, "bad": [f"{folder} is missing"], "moved": []}
        return place_in(fd, wanted, manifest, full, check_mode)
    finally:
        os.close(fd)


def place_in(fd, wanted, manifest, full, check_mode):
    current = plan_in(fd, wanted, manifest, full)
    cache, moved, bad = current["cache"], [], []
    try:
        incoming = open_folder(INCOMING, fd)
    except FileNotFoundError:
        incoming = None
    try:
        for entry in wanted:
            name = entry["shard"]
            if name not in current["send"]:
                continue
            digest = sha256_of(incoming, name) if incoming is not None else None
            if digest != entry["sha256"]:
                bad.append(f"{name} arrived with sha256 {digest or 'none (not received)'}, "
                           f"the manifest says {entry['sha256']}")
                continue
            if not check_mode:
                os.replace(name, name, src_dir_fd=incoming, dst_dir_fd=fd)
                cache[name] = {"stat": status_key(os.stat(name, dir_fd=fd, follow_symlinks=False)),
                               "sha256": entry["sha256"]}
            moved.append(name)
        if bad:
            return {"failed": True, "bad": bad, "moved": moved}
        if not check_mode:
            # Leftovers of an earlier run that nothing needs now.
            for name in os.listdir(incoming) if incoming is not None else ():
                if regular_status(incoming, name):
                    os.unlink(name, dir_fd=incoming)
            for name in current["stale"]:
                os.unlink(name, dir_fd=fd)
            if current["manifest_differs"]:
                write_json(fd, MANIFEST, manifest)
            if moved or current["cache_differs"]:
                write_json(fd, CACHE, cache)
    finally:
        if incoming is not None:
            os.close(incoming)
    changed = bool(moved or current["stale"] or current["manifest_differs"])
    return {"changed": changed, "moved": moved, "removed": current["stale"]}


def owner_ids(name):
    """(uid, gid) of the user name, or None when there is no such user."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def planned(module, folder, wanted, full):
    """state=planned: the exit_json or fail_json arguments."""
    node = module.params["node"] or "this node"
    owner_name = module.params["owner"]
    owner = owner_ids(owner_name) if owner_name else (os.getuid(), os.getgid())
    if owner is None:
        if not module.check_mode:
            return {"failed": True, "msg": f"{node}: the training user {owner_name} does not exist: "
                    "playbooks/provision.yml makes it (base role); run it, or site.yml, and rerun"}
        # A dry run before provisioning: the folder is that user's to be, nothing in it is read.
        result = plan_in(None, wanted, module.params["manifest"], full)
        result.pop("cache")
        return {"changed": False, "owner_exists": False, **result}
    try:
        fd, where, missing = walk(folder)
    except Refused as exc:
        return {"failed": True, "msg": f"{node}: {exc}"}
    created = False
    try:
        if not module.check_mode:
            try:
                folder_fd, created = make_folders(fd, where, missing, owner if owner_name else None)
            except OSError as exc:
                return {"failed": True, "msg": f"{node}: cannot make {folder} for the training user: "
                        f"{exc.strerror}. Its data folder must be that user's: give {os.path.dirname(folder)} "
                        "to the training user, or remove it, and rerun"}
            os.close(fd)
            fd, missing = folder_fd, []
        if not missing:
            owned = os.fstat(fd).st_uid
            if owned != owner[0]:
                return {"failed": True, "msg": f"{node}: {folder} belongs to {user_name(owned)}, not to the training "
                        f"user {owner_name}: give it to that user (chown -R), or remove it, and rerun"}
        result = plan_in(None if missing else fd, wanted, module.params["manifest"], full, owner[0])
        result.pop("cache")
        result.update(changed=created, owner_exists=True)
        short = space_short(folder, fd, wanted, result["send"])
        if short:
            return {"failed": True, "msg": f"{node}: {short}", **result}
        return result
    finally:
        os.close(fd)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "wanted": {"type": "list", "elements": "dict", "required": True},
            "manifest": {"type": "dict", "required": True},
            "state": {"type": "str", "choices": ["planned", "present"], "default": "planned"},
            "verify": {"type": "str", "choices": ["quick", "full"], "default": "quick"},
            "owner": {"type": "str"},
            # Named in the messages.
            "node": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    folder, wanted = module.params["path"], module.params["wanted"]
    if not os.path.isabs(folder):
        module.fail_json(msg=f"{folder}: the data folder must be an absolute path")
    for entry in wanted:
        if not safe_name(entry.get("shard")) or not isinstance(entry.get("bytes"), int) \
                or not isinstance(entry.get("sha256"), str):
            module.fail_json(msg=f"{folder}: bad wanted entry {entry!r}: a plain file name, its bytes and sha256")
    full = module.params["verify"] == "full"
    if module.params["state"] == "planned":
        result = planned(module, folder, wanted, full)
        if result.pop("failed", False):
            module.fail_json(**result)
        module.exit_json(**result)
    try:
        result = place(folder, wanted, module.params["manifest"], full, module.check_mode)
    except Refused as exc:
        module.fail_json(msg=f"{module.params['node'] or 'this node'}: {exc}")
    if result.get("failed"):
        module.fail_json(msg=f"{folder}: " + "; ".join(result["bad"]) + f". Kept out of place in {INCOMING}/; "
                         "rerun to send them again.", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
