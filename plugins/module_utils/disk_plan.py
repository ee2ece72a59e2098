"""What the disks role does with a whole block device the inventory names: make a filesystem on it, keep the one
it made before, wipe it (only when the inventory says so), or refuse it, naming what it holds.

The role probes the device with `lsblk -J -o NAME,PATH,TYPE,FSTYPE,LABEL,UUID,MOUNTPOINT DEVICE` and
`blkid -p -o export DEVICE` (a probe of the device itself, not udev's cache), and lists the mount point folder;
this module decides. A filesystem counts as the project's own when its type and label are the ones the role
gives it (mkfs -L): anything else on the device (a filesystem, a partition table, partitions, a mount, swap) is
someone's data. Pure Python (valid 3.6), unit-tested in tests/unit/plugins/module_utils/test_disk_plan.py.
"""

import json

# Whole devices only: a partition or a device-mapper volume is something another tool manages.
WHOLE_TYPES = ("disk", "loop")


def parse_blkid(text):
    """`blkid -p -o export` (KEY=value lines) as a dict; {} for no output (blkid's exit code 2: nothing found)."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _device(lsblk):
    data = json.loads(lsblk) if isinstance(lsblk, str) else lsblk
    devices = (data or {}).get("blockdevices") or []
    return devices[0] if devices else None


def _walk(node):
    yield node
    for child in node.get("children") or []:
        for sub in _walk(child):
            yield sub


def _describe(node):
    parts = [node.get("fstype") or "no filesystem"]
    if node.get("label"):
        parts.append("labelled {0!r}".format(node["label"]))
    if node.get("mountpoint"):
        parts.append("mounted at {0}".format(node["mountpoint"]))
    return "{0} ({1})".format(node.get("path") or node.get("name"), ", ".join(parts))


def holds(device, blkid):
    """What the device holds, in words ([] for a blank device): partitions, a partition table, a filesystem."""
    found = []
    children = device.get("children") or []
    if children:
        found.append("partitions " + ", ".join(_describe(child) for child in children))
    if blkid.get("PTTYPE") and not children:
        found.append("a {0} partition table".format(blkid["PTTYPE"]))
    fstype = device.get("fstype") or blkid.get("TYPE")
    if fstype:
        label = device.get("label") or blkid.get("LABEL")
        found.append("a {0} filesystem{1}{2}".format(
            fstype, " labelled {0!r}".format(label) if label else "",
            " mounted at {0}".format(device["mountpoint"]) if device.get("mountpoint") else ""))
    return found


def plan(lsblk, blkid, wanted, mountpoint_entries=()):
    """{'action': 'make' | 'wipe' | 'keep' | 'refuse', 'message': why, 'mounted': bool}; a wipe also lists what
    wipefs clears, in order ('wipe': partitions deepest first, then the device).

    wanted: {'device', 'mountpoint', 'fstype', 'label', 'wipe': bool (the device is in disks_wipe)}.
    mountpoint_entries: a few names found in the mount point folder: a folder holding files is refused rather
    than hidden under a new mount."""
    name, mountpoint = wanted["device"], wanted["mountpoint"]
    device = _device(lsblk)
    blkid = parse_blkid(blkid) if isinstance(blkid, str) else dict(blkid or {})
    if device is None:
        return _refuse("{0} is not a block device on this node (lsblk lists nothing); name a whole disk that "
                       "exists (lsblk -d)".format(name))
    if device.get("type") not in WHOLE_TYPES:
        return _refuse("{0} is a {1}, not a whole disk; name the disk itself (lsblk -d), and add it to disks_wipe "
                       "if what it holds may go".format(name, device.get("type")))
    ours = (not device.get("children") and device.get("fstype") == wanted["fstype"]
            and device.get("label") == wanted["label"] and not blkid.get("PTTYPE"))
    mounted_here = ours and device.get("mountpoint") == mountpoint
    mounts = [node for node in _walk(device) if node.get("mountpoint")]
    if mounts and not mounted_here:
        return _refuse("{0} is in use: {1}; it is never wiped or mounted elsewhere while mounted: unmount it (and "
                       "remove it from /etc/fstab) first".format(name, "; ".join(_describe(node) for node in mounts)))
    entries = sorted(mountpoint_entries or [])
    if entries and not mounted_here:
        return _refuse("{0} would be mounted at {1}, which already holds files ({2}); mounting would hide them: "
                       "move them away or empty the folder first".format(
                           name, mountpoint, ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")))
    if ours:
        return {"action": "keep", "mounted": mounted_here,
                "message": "{0} holds the {1} filesystem {2!r} this project made".format(
                    name, wanted["fstype"], wanted["label"])}
    found = holds(device, blkid)
    if not found:
        return {"action": "make", "mounted": False,
                "message": "{0} is blank: a {1} filesystem is made on it".format(name, wanted["fstype"])}
    if wanted.get("wipe"):
        # Deepest first: a partition's signatures go before the table that holds it.
        parts = [node.get("path") or "/dev/" + node["name"] for node in _walk(device)][1:]
        return {"action": "wipe", "mounted": False, "wipe": list(reversed(parts)) + [name],
                "message": "{0} held {1}; it is in disks_wipe: wiped and a {2} filesystem made".format(
                    name, "; ".join(found), wanted["fstype"])}
    return _refuse("{0} holds {1}, which this project did not make; nothing was changed. If that may be lost, add "
                   "the device to disks_wipe (disks_wipe: [{0}]); otherwise name another device".format(
                       name, "; ".join(found)))


def _refuse(message):
    return {"action": "refuse", "mounted": False, "message": message}
