"""Which data files a node must hold and receive, and which of its files are stale."""

import posixpath

# What a node's manifest.json keeps of a manifest entry (no controller paths).
NODE_KEYS = ("shard", "rank", "ranks", "source_file", "samples", "bytes", "sha256")


def dataset_files_for(entries, ranks):
    """The manifest entries a node whose ranks are `ranks` holds: the entries of
    its ranks ("rank": r), and every entry all ranks read ("ranks": "all", the
    replicate layout). A node with no rank holds nothing."""
    ranks = set(ranks)
    if not ranks:
        return []
    return [entry for entry in entries if entry.get("ranks") == "all" or entry.get("rank") in ranks]


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
    """Paths of the files found in the node's data folder that no wanted entry
    names: every non-hidden file but manifest.json, whatever its name (data
    files of another layout, rank or test set)."""
    keep = {posixpath.join(node_dir, entry["shard"]) for entry in wanted}
    keep.add(posixpath.join(node_dir, "manifest.json"))
    return sorted(f["path"] for f in found_files
                  if f["path"] not in keep and not posixpath.basename(f["path"]).startswith("."))


def node_manifest(wanted, name, layout=None, test=None):
    """What a node holds, for its manifest.json: the data set's name, its layout,
    the test set's file name on this node (or None), and the files."""
    return {"name": name, "layout": layout, "test": test or None,
            "shards": [{key: entry[key] for key in NODE_KEYS if key in entry} for entry in wanted]}


def relay_wave(nodes, host):
    """(wave, parent) of host in a binomial tree over nodes: wave 0 is the head
    node, fed by the controller (parent None); in wave k >= 1 the nodes
    2**(k-1) .. 2**k - 1 each take the files from the node 2**(k-1) before
    them, which has held them since an earlier wave. So the controller sends
    the bytes once and N nodes are served in 1 + ceil(log2 N) waves."""
    index = list(nodes).index(host)
    if index == 0:
        return [0, None]
    wave = index.bit_length()
    return [wave, nodes[index - (1 << (wave - 1))]]


def relay_waves(nodes):
    """How many waves relay_wave uses for these nodes."""
    return 1 + max(len(nodes) - 1, 0).bit_length()


class FilterModule:
    def filters(self):
        return {"dataset_files_for": dataset_files_for, "shards_to_send": shards_to_send,
                "stale_shards": stale_shards, "node_manifest": node_manifest,
                "relay_wave": relay_wave, "relay_waves": relay_waves}
