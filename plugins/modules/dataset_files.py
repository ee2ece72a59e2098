#!/usr/bin/python
"""A node's data folder against the files its ranks need; runs as the training user.

state=planned (creates the folder and .incoming/ when missing, else reads
only): which wanted files are missing or differ, and which files in the
folder are stale; it fails, before anything is sent, when the folder's
filesystem has less free space than the files to send. A file is taken as
good without reading it when its size, mtime and inode are those recorded
when it was last verified with the same sha256 (.verified.json); otherwise
it is hashed.
verify=full hashes every file (a periodic check for damage that kept size
and mtime).

state=present: the files rsync put in .incoming/ are hashed and moved into
place only when their sha256 is the manifest's (a bad one stays in .incoming/
and the task fails naming it), stale files are removed, manifest.json and
.verified.json are written. No partial or unverified file is ever under a
name the job reads.
"""

DOCUMENTATION = r"""
module: dataset_files
short_description: A node's data folder checked against the files its ranks need, and put right
description:
  - >-
    Runs on a training node as the training user. C(state=planned) lists the wanted files
    that are missing or differ and the stale ones, and fails before anything is sent when
    the folder's filesystem has too little free space. C(state=present) moves the files
    rsync put in C(.incoming/) into place when their sha256 is the manifest's, removes the
    stale files and writes manifest.json and .verified.json.
  - Self-contained (standard library only), like every module that runs on the nodes.
  - Supports check mode.
options:
  path: {description: The node's data folder., type: path, required: true}
  wanted:
    description: The entries the node holds, each with C(shard), C(bytes) and C(sha256).
    type: list
    elements: dict
    required: true
  manifest: {description: The node's manifest.json., type: dict, required: true}
  state: {description: Plan, or put in place., type: str, choices: [planned, present], default: planned}
  verify: {description: C(full) hashes every file., type: str, choices: [quick, full], default: quick}
  node: {description: The node's name for the messages., type: str, default: ""}
"""

EXAMPLES = r"""
- name: Find the missing, damaged and stale data files on the node
  cntk.cluster.dataset_files:
    path: /srv/cntk/data
    wanted: "{{ dataset_wanted }}"
    manifest: "{{ dataset_node_manifest }}"
    state: planned
  register: dataset_plan
"""

RETURN = r"""
send: {description: The files to send (planned)., type: list, returned: state=planned}
stale: {description: The files to remove (planned)., type: list, returned: state=planned}
manifest_differs: {description: Whether manifest.json must be written., type: bool, returned: state=planned}
cache_differs: {description: Whether .verified.json must be written., type: bool, returned: state=planned}
moved: {description: The files moved into place., type: list, returned: state=present}
removed: {description: The stale files removed., type: list, returned: state=present}
"""

import hashlib
import json
import os
import stat

from ansible.module_utils.basic import AnsibleModule

MANIFEST = "manifest.json"
CACHE = ".verified.json"
INCOMING = ".incoming"
CHUNK = 8 << 20


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def safe_name(name):
    return (isinstance(name, str) and name not in ("", ".", "..", MANIFEST) and "/" not in name
            and "\0" not in name and not name.startswith("."))


def regular_status(path):
    """lstat of path when it is a regular file (never follows a link), else None."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    return status if stat.S_ISREG(status.st_mode) else None


def status_key(status):
    return [status.st_size, status.st_mtime_ns, status.st_ino]


def read_json(path):
    """The JSON object in path, or None when there is none."""
    try:
        with open(path, encoding="utf-8") as stream:
            value = json.load(stream)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_json(path, value):
    temp = path + ".tmp"
    with open(temp, "w", encoding="utf-8") as stream:
        stream.write(json.dumps(value, indent=2, sort_keys=True) + "\n")
        stream.flush()
        os.fsync(stream.fileno())
    os.chmod(temp, 0o640)
    os.replace(temp, path)


def verified(path, entry, cache, full):
    """(good, cache record or None): the file at path holds the entry's bytes."""
    status = regular_status(path)
    if status is None or status.st_size != entry["bytes"]:
        return False, None
    record = cache.get(entry["shard"])
    if not full and record == {"stat": status_key(status), "sha256": entry["sha256"]}:
        return True, record
    if sha256_of(path) != entry["sha256"]:
        return False, None
    return True, {"stat": status_key(status), "sha256": entry["sha256"]}


def stale_names(folder, wanted):
    keep = {entry["shard"] for entry in wanted} | {MANIFEST}
    return sorted(name for name in os.listdir(folder)
                  if name not in keep and not name.startswith(".") and regular_status(os.path.join(folder, name)))


def plan(folder, wanted, manifest, full):
    """What state=present would do: the files to send, the stale ones, and the cache as verified now."""
    cache = read_json(os.path.join(folder, CACHE)) or {}
    send, new_cache = [], {}
    for entry in wanted:
        good, record = verified(os.path.join(folder, entry["shard"]), entry, cache, full)
        if good:
            new_cache[entry["shard"]] = record
        else:
            send.append(entry["shard"])
    stale = stale_names(folder, wanted) if os.path.isdir(folder) else []
    manifest_differs = read_json(os.path.join(folder, MANIFEST)) != manifest
    return {"send": send, "stale": stale, "manifest_differs": manifest_differs,
            "cache_differs": new_cache != cache, "cache": new_cache}


def human(size):
    if size < 1024:
        return f"{size} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}"


def space_short(folder, wanted, send):
    """The message when the files to send do not fit on the folder's filesystem, else None.

    Counts every byte to send: rsync writes a whole new file beside a partial one, and a damaged
    file's old copy is only replaced once its new one is in .incoming/."""
    needed = sum(entry["bytes"] for entry in wanted if entry["shard"] in send)
    existing = folder
    while not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    status = os.statvfs(existing)
    free = status.f_bavail * status.f_frsize
    if needed <= free:
        return None
    return (f"{folder} has {human(free)} free, and the {len(send)} data files to send need {human(needed)}. "
            "Nothing was sent: free space there, or set cluster_dataset_dir to a folder on a bigger disk, "
            "then rerun")


def place(folder, wanted, manifest, full, check_mode):
    """Verify what arrived, move it into place, remove the stale files, write the manifest and cache."""
    current = plan(folder, wanted, manifest, full)
    incoming = os.path.join(folder, INCOMING)
    cache, moved, bad = current["cache"], [], []
    for entry in wanted:
        name = entry["shard"]
        if name not in current["send"]:
            continue
        arrived = os.path.join(incoming, name)
        status = regular_status(arrived)
        digest = sha256_of(arrived) if status is not None else None
        if digest != entry["sha256"]:
            bad.append(f"{name} arrived with sha256 {digest or 'none (not received)'}, "
                       f"the manifest says {entry['sha256']}")
            continue
        if not check_mode:
            os.replace(arrived, os.path.join(folder, name))
            cache[name] = {"stat": status_key(os.lstat(os.path.join(folder, name))), "sha256": entry["sha256"]}
        moved.append(name)
    if bad:
        return {"failed": True, "bad": bad, "moved": moved}
    if not check_mode:
        # Leftovers of an earlier run that nothing needs now.
        for name in os.listdir(incoming) if os.path.isdir(incoming) else ():
            if regular_status(os.path.join(incoming, name)):
                os.unlink(os.path.join(incoming, name))
        for name in current["stale"]:
            os.unlink(os.path.join(folder, name))
        if current["manifest_differs"]:
            write_json(os.path.join(folder, MANIFEST), manifest)
        if moved or current["cache_differs"]:
            write_json(os.path.join(folder, CACHE), cache)
    changed = bool(moved or current["stale"] or current["manifest_differs"])
    return {"changed": changed, "moved": moved, "removed": current["stale"]}


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "wanted": {"type": "list", "elements": "dict", "required": True},
            "manifest": {"type": "dict", "required": True},
            "state": {"type": "str", "choices": ["planned", "present"], "default": "planned"},
            "verify": {"type": "str", "choices": ["quick", "full"], "default": "quick"},
            # Named in the messages.
            "node": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    folder, wanted = module.params["path"], module.params["wanted"]
    for entry in wanted:
        if not safe_name(entry.get("shard")) or not isinstance(entry.get("bytes"), int) \
                or not isinstance(entry.get("sha256"), str):
            module.fail_json(msg=f"{folder}: bad wanted entry {entry!r}: a plain file name, its bytes and sha256")
    full = module.params["verify"] == "full"
    created = False
    if not module.check_mode:
        for path in (folder, os.path.join(folder, INCOMING)):
            if not os.path.isdir(path):
                try:
                    os.makedirs(path, mode=0o750)
                except OSError as exc:
                    module.fail_json(msg=f"{module.params['node'] or 'this node'}: cannot make {path} as the "
                                     f"training user: {exc.strerror}. Its data folder must be that user's: give "
                                     f"{os.path.dirname(path)} to the training user, or remove it, and rerun")
                created = True
    if module.params["state"] == "planned":
        result = plan(folder, wanted, module.params["manifest"], full)
        result.pop("cache")
        short = space_short(folder, wanted, result["send"])
        if short:
            module.fail_json(msg=(module.params["node"] + ": " if module.params["node"] else "") + short, **result)
        module.exit_json(changed=created, **result)
    result = place(folder, wanted, module.params["manifest"], full, module.check_mode)
    if result.get("failed"):
        module.fail_json(msg=f"{folder}: " + "; ".join(result["bad"]) + f". Kept out of place in {INCOMING}/; "
                         "rerun to send them again.", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
