"""Ranks to samples: the balanced split of a source's samples, and its re-placement for another rank count.

A fresh split is contiguous: shard r holds samples [floor(r*n/W),
floor((r+1)*n/W)), so the shards concatenated in rank order are the source's
non-blank lines. When the rank count changes (nodes added or removed) over
the very same source, the shards are re-placed so that little moves: every
rank keeps the first of its old samples, up to its new size; the samples no
rank keeps go in source order to the ranks that need more, in rank order.
Adding nodes moves only the new ranks' share; removing them, only the gone
ranks' samples.
"""


def bounds(samples, ranks):
    """Shard r holds samples [b[r], b[r + 1])."""
    return [r * samples // ranks for r in range(ranks + 1)]


def merged(ranges):
    """Sorted half-open [start, end) ranges with touching ones joined, empty ones dropped."""
    out = []
    for start, end in sorted((start, end) for start, end in ranges if start < end):
        if out and out[-1][1] == start:
            out[-1][1] = end
        else:
            out.append([start, end])
    return out


def previous_ranges(old, samples):
    """Each old rank's source ranges from a manifest of this source's split, or None when they cannot be trusted.

    A manifest without "ranges" was a fresh split: its shards are consecutive runs of samples."""
    try:
        entries = sorted(old["shards"], key=lambda entry: entry["rank"])
        if [entry["rank"] for entry in entries] != list(range(len(entries))):
            return None
        if all("ranges" not in entry for entry in entries):
            edges = [0]
            for entry in entries:
                edges.append(edges[-1] + entry["samples"])
            ranges = [[[edges[r], edges[r + 1]]] for r in range(len(entries))]
        else:
            ranges = [[[int(start), int(end)] for start, end in entry["ranges"]] for entry in entries]
        for rank_ranges, entry in zip(ranges, entries):
            if merged(rank_ranges) != rank_ranges or sum(end - start for start, end in rank_ranges) != entry["samples"]:
                return None
        if merged(r for rank_ranges in ranges for r in rank_ranges) != [[0, samples]]:
            return None  # overlapping, or not every sample: lay out fresh
        return ranges
    except (KeyError, TypeError, ValueError):
        return None


def placement(samples, ranks, previous=None):
    """Each rank's source ranges of samples, [[start, end), ...] ascending: balanced, every sample once.

    With no previous placement, rank r holds [floor(r*n/W), floor((r+1)*n/W)).
    With one (another rank count over the same samples), a rank that held
    samples before keeps the first of them, up to its new size; the rest (cut
    tails, the ranks that are gone) go in source order, a contiguous run each,
    to the ranks that need more, in rank order. A shard file is its samples in
    source order, so a kept part is a prefix of the old file.
    """
    edges = bounds(samples, ranks)
    sizes = [edges[r + 1] - edges[r] for r in range(ranks)]
    if previous is None:
        return [[[edges[r], edges[r + 1]]] for r in range(ranks)]
    kept, pool = [], []
    for rank, old in enumerate(previous):
        room = sizes[rank] if rank < ranks else 0
        mine = []
        for start, end in old:
            take = min(end - start, room)
            if take:
                mine.append([start, start + take])
                room -= take
            if start + take < end:
                pool.append([start + take, end])
        if rank < ranks:
            kept.append(mine)
    kept += [[] for _ in range(ranks - len(kept))]
    pool = merged(pool)
    result = []
    for rank in range(ranks):
        need = sizes[rank] - sum(end - start for start, end in kept[rank])
        dealt = []
        while need:
            start, end = pool[0]
            take = min(end - start, need)
            dealt.append([start, start + take])
            need -= take
            if start + take == end:
                pool.pop(0)
            else:
                pool[0][0] = start + take
        result.append(merged(kept[rank] + dealt))
    return result


def same_source(old, manifest):
    """True when the old manifest is a split (a manifest without a layout predates the other layouts: a split) of
    the very source the new one describes: same bytes, files and samples."""
    try:
        return (old.get("layout", "shard") == "shard" == manifest["layout"]
                and old["source_sha256"] == manifest["source_sha256"] and old["samples"] == manifest["samples"]
                and old["files"] == manifest["files"])
    except (AttributeError, KeyError, TypeError):
        return False


def describes(old, manifest, expected):
    """True when the old manifest is of the same data and split as the new one: expected is
    [(shard, rank, samples, ranges)] by rank."""
    try:
        return (same_source(old, manifest) and old["ranks"] == manifest["ranks"]
                and [(e["shard"], e["rank"], e["samples"]) for e in old["shards"]] == [x[:3] for x in expected]
                and previous_ranges(old, manifest["samples"]) == [x[3] for x in expected])
    except (AttributeError, KeyError, TypeError):
        return False



# --- nodes: which entries a node holds, and the relay tree that passes them on -------------

def dataset_files_for(entries, ranks):
    """The manifest entries a node whose ranks are `ranks` holds: the entries of
    its ranks ("rank": r), and every entry all ranks read ("ranks": "all", the
    replicate layout). A node with no rank holds nothing."""
    ranks = set(ranks)
    if not ranks:
        return []
    return [entry for entry in entries if entry.get("ranks") == "all" or entry.get("rank") in ranks]


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
