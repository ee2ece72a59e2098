"""Which shards a node must receive, and which of its files are stale."""

import posixpath


def shards_to_send(stat_results):
    """Wanted entries whose file on the node is missing or has another sha256.

    `stat_results` is the registered result of a `stat` loop over the wanted
    entries (each result's `item` is the entry, with its manifest sha256).
    """
    send = []
    for result in stat_results:
        entry = result["item"]
        stat = result.get("stat", {})
        if not stat.get("exists") or stat.get("checksum") != entry["sha256"]:
            send.append(entry)
    return send


def stale_shards(found_files, node_dir, wanted):
    """Paths of shard files on the node that no wanted entry names."""
    keep = {posixpath.join(node_dir, entry["shard"]) for entry in wanted}
    return sorted(f["path"] for f in found_files if f["path"] not in keep)


def node_manifest(wanted, name):
    """What a node holds, for its manifest.json (no controller paths)."""
    return {"name": name,
            "shards": [{key: entry[key] for key in ("shard", "rank", "samples", "bytes", "sha256") if key in entry}
                       for entry in wanted]}


class FilterModule:
    def filters(self):
        return {"shards_to_send": shards_to_send, "stale_shards": stale_shards, "node_manifest": node_manifest}
