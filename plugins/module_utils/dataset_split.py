"""The shard layout's cut (dataset_cut's doc says what it makes): the source read once, its lines placed on
the ranks (dataset_placement), each shard hashed as it is written."""

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.cntk.cluster.plugins.module_utils.dataset_io import (
    Serial, Tally, ShardFiles, blocks, clean_leftovers, commit, copy_range, file_sha256, identity, lock, remove,
    remove_stale, source_sha256_only, spool_offset, temp_path, unchanged_report, write_manifest_temp)
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_ctf import CtfCheck
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import (
    MANIFEST, STAT_CACHE, ShardError, is_ctf, read_manifest, report, shard_name, stat_key, write_stat_cache)
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_placement import (
    bounds, describes, placement, previous_ranges)


class NotRecorded(ShardError):
    """The source is not the one the old manifest records (its bytes or lines differ): cut it fresh."""


def write_shards(paths, out, ranks, source_sha256, sizes, counts, names=None, ranges=None, wanted=None):
    """The cut when the lines are known (the old manifest's, for the source of its sizes): one read of the
    source writes the shards of the ranks in wanted (default all) to temporary files in out, hashing them, and
    hashes the source; return [(temp path, manifest entry)] of those ranks.

    ranges: each rank's source ranges (placement(); default a fresh split).
    If the source's bytes are not source_sha256's, its sizes or lines not
    sizes and counts, NotRecorded is raised and no file is left: the caller
    cuts it fresh. Worker threads hash the source, hash the shards and write
    them while this one finds the lines.
    """
    names = names or [shard_name(r) for r in range(ranks)]
    wanted = set(range(ranks)) if wanted is None else set(wanted)
    samples = sum(counts)
    ranges = ranges or placement(samples, ranks)
    # The source's runs in order: (first sample after the run, its rank).
    runs = sorted((end, rank) for rank in range(ranks) for start, end in ranges[rank])
    changed = NotRecorded("source is not the one the manifest records")
    files = ShardFiles(out, names)
    digests = [hashlib.sha256() for _ in range(ranks)]
    sizes_out = [0] * ranks
    with Serial() as writer, Serial() as hasher, Tally() as tally:
        try:
            run = 0  # the run being filled
            if runs[0][1] in wanted:
                writer(files.open, runs[0][1])
            done = 0  # samples handed to the writer
            for path, file_bytes, file_samples in zip(paths, sizes, counts):
                bytes_before, done_before = tally.bytes, done
                for data, start, end in blocks(path, tally):
                    view = memoryview(data)
                    lines = data.count(b"\n", start, end)
                    if done + lines > samples:
                        raise changed
                    while lines:
                        rank = runs[run][1]
                        room = runs[run][0] - done
                        if lines <= room:
                            part, take = view[start:end], lines
                        else:  # the run ends inside this segment, after its room-th line
                            stop = start
                            for _ in range(room):
                                stop = data.index(b"\n", stop, end) + 1
                            part, take, start = view[start:stop], room, stop
                        if rank in wanted:
                            writer(files.write, part)
                            hasher(digests[rank].update, part)
                            sizes_out[rank] += len(part)
                        done += take
                        lines -= take
                        if done == runs[run][0] and run + 1 < len(runs):
                            run += 1
                            if runs[run][1] in wanted:
                                writer(files.open, runs[run][1])
                if tally.bytes - bytes_before != file_bytes or done - done_before != file_samples:
                    raise changed
            if tally.hexdigest() != source_sha256:
                raise changed
            writer(files.finish)
            writer.wait()
            hasher.wait()
        except BaseException:
            for worker in (writer, hasher):
                try:
                    worker.wait()
                except BaseException:
                    pass
            files.discard()
            raise
    entries = [{"shard": names[r], "rank": r, "samples": sum(end - start for start, end in ranges[r]),
                "bytes": sizes_out[r], "sha256": digests[r].hexdigest(), "ranges": ranges[r]} for r in range(ranks)]
    return [(files.temps[r], entries[r]) for r in range(ranks) if r in wanted]


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def cut_fresh(paths, out, names, ranks, source):
    """The cut of a source not seen before, in its one read: each file is checked (*.ctf), hashed, its lines
    counted and written in order to a spool in out; a balanced split needs the count before its first
    boundary, so the shards are then cut from the spool (the output, not the source), each hashed as it is
    copied. Return (source sha256, sizes, counts, [(temp path, entry)] by rank); ShardError, and no file left,
    for bad input or a source that changed while it was read."""
    spool_path = temp_path(out, names[0])
    spool = os.open(spool_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    temps = [spool_path]
    try:
        sizes, counts, marks = [], [], []  # marks: (lines, offset) before each segment written
        lines = offset = 0
        with Serial() as writer, Tally() as tally:
            for path in paths:
                before, read_before, lines_before = os.stat(path), tally.bytes, lines
                for data, start, end in blocks(path, tally, CtfCheck(path) if is_ctf(path) else None):
                    marks.append((lines, offset))
                    lines += data.count(b"\n", start, end)
                    offset += end - start
                    writer(write_all, spool, memoryview(data)[start:end])
                after = os.stat(path)
                sizes.append(tally.bytes - read_before)
                counts.append(lines - lines_before)
                if identity(before) != identity(after) or sizes[-1] != after.st_size:
                    raise ShardError("source changed while it was being sharded: run again")
            source_sha256 = tally.hexdigest()
            writer.wait()
        marks.append((lines, offset))
        too_few(lines, ranks, source)
        edges = [spool_offset(spool, marks, bound) for bound in bounds(lines, ranks)]
        temps += [temp_path(out, names[r]) for r in range(1, ranks)]
        # Rank 0's shard is the spool's start: the others are copied out, then it is cut to its length.
        with ThreadPoolExecutor(max_workers=min(ranks, 4)) as pool:
            digests = list(pool.map(lambda r: copy_range(spool, temps[r] if r else None, edges[r], edges[r + 1]),
                                    range(ranks)))
        os.ftruncate(spool, edges[1])
        os.fsync(spool)
    except BaseException:
        for temp in temps:
            remove(temp)
        raise
    finally:
        os.close(spool)
    ranges = placement(lines, ranks)
    entries = [{"shard": names[r], "rank": r, "samples": ranges[r][0][1] - ranges[r][0][0],
                "bytes": edges[r + 1] - edges[r], "sha256": digests[r], "ranges": ranges[r]} for r in range(ranks)]
    return source_sha256, sizes, counts, list(zip(temps, entries))


def too_few(samples, ranks, source):
    if samples == 0:
        raise ShardError("source %s has no samples (it is empty or only blank lines): "
                         "generate the training set first" % source)
    if samples < ranks:
        raise ShardError("dataset has %d samples, fewer than the %d ranks: use fewer ranks or more data"
                         % (samples, ranks))


def recorded_counts(old, paths):
    """The old manifest's sample counts when it is a split of source files of these names and sizes (likely
    this very source), else None."""
    try:
        if old.get("layout", "shard") == "shard" and \
                [(f["name"], f["bytes"]) for f in old["files"]] == \
                [(os.path.basename(p), os.path.getsize(p)) for p in paths] and \
                all(isinstance(f["samples"], int) and f["samples"] >= 0 for f in old["files"]) and \
                isinstance(old["source_sha256"], str):
            return [f["samples"] for f in old["files"]]
    except (AttributeError, OSError, KeyError, TypeError):
        pass
    return None


def trusted_shards(out, old, verify):
    """Ranks whose shard file is as the last run left it: the size and mtime the quick check recorded (no
    read); with verify, or no record, its sha256 is checked."""
    cached = {}
    if not verify:
        try:
            with open(os.path.join(out, STAT_CACHE)) as handle:
                record = json.load(handle)
            with open(os.path.join(out, MANIFEST), "rb") as handle:
                if record["manifest_sha256"] == hashlib.sha256(handle.read()).hexdigest():
                    cached = {name: [size, mtime] for name, size, mtime in record["shards"]}
        except (OSError, ValueError, KeyError, TypeError):
            cached = {}
    good = set()
    for entry in old["shards"]:
        path = os.path.join(out, entry["shard"])
        try:
            if cached.get(entry["shard"]) == stat_key(path) and os.path.getsize(path) == entry["bytes"]:
                good.add(entry["rank"])
            elif os.path.getsize(path) == entry["bytes"] and file_sha256(path) == entry["sha256"]:
                good.add(entry["rank"])
        except (OSError, KeyError, TypeError):
            pass
    return good


def split(paths, out, names, expect, verify, started):
    """The shard layout (see the module doc): the source read once."""
    ranks = expect["ranks"]
    unchanged = unchanged_report(out, paths, expect, verify, started)
    if unchanged is not None:
        return unchanged

    created = not os.path.isdir(out)
    os.makedirs(out, exist_ok=True)
    held = lock(out)
    committed = False
    try:
        old = read_manifest(out)
        clean_leftovers(out)
        shard_temps = None
        counts = recorded_counts(old, paths)
        if counts is not None:
            # Likely the source the old manifest records: its counts place the shards before the read, which
            # cuts only the shards that are missing, damaged or re-placed, and proves the guess by the hash.
            samples = sum(counts)
            too_few(samples, ranks, expect["source"])
            sizes = [f["bytes"] for f in old["files"]]
            manifest = new_manifest(expect, old["source_sha256"], paths, sizes, counts)
            ranges = placement(samples, ranks, previous_ranges(old, samples))
            expected = [(names[r], r, sum(end - start for start, end in ranges[r]), ranges[r]) for r in range(ranks)]
            good = trusted_shards(out, old, verify) if describes(old, manifest, expected) else set()
            wanted = [r for r in range(ranks) if r not in good]
            try:
                if wanted:
                    shard_temps = write_shards(paths, out, ranks, old["source_sha256"], sizes, counts, names,
                                               ranges, wanted)
                elif source_sha256_only(paths) != (old["source_sha256"], sizes):
                    raise NotRecorded("source is not the one the manifest records")
                kept = {entry["rank"]: entry for entry in old["shards"]} if good else {}
                made = {entry["rank"]: entry for _, entry in shard_temps or []}
                manifest["shards"] = [
                    made[r] if r in made else
                    dict({key: kept[r][key] for key in ("shard", "rank", "samples", "bytes", "sha256")},
                         ranges=ranges[r]) for r in range(ranks)]
            except NotRecorded:  # same sizes, other bytes: cut fresh (this source's second read)
                counts = None
        if counts is None:
            source_sha256, sizes, counts, shard_temps = cut_fresh(paths, out, names, ranks, expect["source"])
            manifest = new_manifest(expect, source_sha256, paths, sizes, counts)
            manifest["shards"] = [entry for _, entry in shard_temps]

        if shard_temps:
            try:
                manifest_temp = write_manifest_temp(out, manifest)
            except BaseException:
                for temp, _ in shard_temps:
                    remove(temp)
                raise
            commit(out, shard_temps, manifest_temp)
            changed = True
        else:
            changed = old != manifest  # a new name, test or source path: rewrite the manifest only
            if changed:
                commit(out, [], write_manifest_temp(out, manifest))
        committed = True

        removed = remove_stale(out, manifest, old, expect["test"])
        changed = changed or bool(removed)
        write_stat_cache(out, paths)
    finally:
        os.close(held)
        if created and not committed:  # refused input: leave no folder behind
            try:
                os.rmdir(out)
            except OSError:
                pass
    return report(changed, out, manifest, ranks, removed, started)


def new_manifest(expect, source_sha256, paths, sizes, counts):
    return {"name": expect["name"], "layout": "shard", "source": expect["source"],
            "source_sha256": source_sha256, "samples": sum(counts), "ranks": expect["ranks"], "test": expect["test"],
            "files": [{"name": os.path.basename(p), "bytes": size, "samples": count}
                      for p, size, count in zip(paths, sizes, counts)],
            "shards": None}
