"""The shared volume's shape: how many copies of each file, which bricks in which order, and what an existing
GlusterFS volume holds (`gluster volume info --xml`)."""

import xml.etree.ElementTree as ElementTree


def replica_count(nodes, replica=0):
    """The copies of each file a volume of one brick per node keeps. replica 0 picks: every node's brick a copy up
    to 4 nodes (one node down leaves a majority, so the volume stays writable), else 3 or 2 copies in as many sets
    as the nodes make (distributed-replicated). Raises ValueError naming the count and the fix."""
    count = len(nodes)
    if count == 0:
        raise ValueError("no storage nodes: put hosts in the `storage` group, or leave it empty for the training nodes")
    if replica:
        if replica < 1 or replica > count or count % replica:
            raise ValueError(f"shared_storage_replica={replica} does not divide the {count} storage nodes "
                             f"({', '.join(nodes)}) into sets of that many copies: choose a divisor of {count}")
        return replica
    if count <= 4:
        return count
    for copies in (3, 2):
        if count % copies == 0:
            return copies
    raise ValueError(f"{count} storage nodes ({', '.join(nodes)}) make no sets of 3 or 2 copies: set "
                     f"shared_storage_replica to a divisor of {count}, or use {count - 1} or {count + 1} nodes")


def bricks(nodes, brick_dir):
    """One brick per node, in inventory order: GlusterFS makes each run of `replica` bricks one set of copies."""
    return [f"{node}:{brick_dir}" for node in nodes]


def volume_info(xml_text, volume):
    """What `gluster volume info VOLUME --xml` says of an existing volume: {exists, bricks, status, replica,
    options} (options: the ones set on it, {name: value})."""
    if not xml_text.strip():
        return {"exists": False, "bricks": [], "status": "", "replica": 0, "options": {}}
    root = ElementTree.fromstring(xml_text)
    for found in root.iter("volume"):
        if (found.findtext("name") or "") != volume:
            continue
        names = [brick.findtext("name") or (brick.text or "").strip() for brick in found.iter("brick")]
        options = {(option.findtext("name") or ""): (option.findtext("value") or "")
                   for option in found.iter("option")}
        return {"exists": True, "bricks": names, "status": found.findtext("statusStr") or "",
                "replica": int(found.findtext("replicaCount") or 1), "options": options}
    return {"exists": False, "bricks": [], "status": "", "replica": 0, "options": {}}


# GlusterFS takes any of these for a boolean option and keeps the word it was given.
_TRUE = ("on", "yes", "true", "enable", "1")
_FALSE = ("off", "no", "false", "disable", "0")


def _same_value(have, want):
    have, want = str(have).strip().lower(), str(want).strip().lower()
    for words in (_TRUE, _FALSE):
        if have in words and want in words:
            return True
    if "," in want:
        return sorted(part.strip() for part in have.split(",")) == sorted(part.strip() for part in want.split(","))
    return have == want


def option_changes(options, wanted):
    """The [name, value] pairs of `wanted` that the volume's set options (volume_info's) do not already hold, in
    wanted's order; an option never set counts as not held (GlusterFS's defaults are what this role changes)."""
    return [[name, str(value)] for name, value in wanted.items()
            if name not in options or not _same_value(options[name], value)]
