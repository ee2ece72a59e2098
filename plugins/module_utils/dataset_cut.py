"""Lay a training set out for MPI ranks in a directory (DIR), with its manifest (dataset_manifest).

Layouts:

  shard      Any line-based text file, one sample a line: CTF, or a CNTK map
             file. The source is a file, or a directory whose non-hidden
             regular files (not recursive), which must all share one
             extension, are read in sorted name order and concatenated. A
             sample is one non-blank line (a line of only spaces, tabs, CR, VT
             or FF is blank and skipped); a file's last line ends at the end of
             the file, newline or not. Output lines are the source lines
             verbatim but for their end: each ends with exactly one "\\n". W
             shards balanced by samples (dataset_placement), each shard's lines
             in source order. Fewer samples than ranks is refused.
  replicate  Every rank reads the whole data set: a file, or a directory's
             non-hidden regular files (flat), kept under their own names.
  presplit   The user split the data already: a directory of exactly W
             non-hidden regular files, any format (binary too), taken in
             sorted name order; file i is rank i's.

The source's files are never changed. replicate and presplit files are hard
links to them when DIR is on the same filesystem (and the link is allowed),
else copies. In every layout a *.ctf source file is checked (dataset_ctf)
before anything is committed; only a source read anew is checked.

Idempotent: when the manifest already describes this source and layout and
every data file it lists exists with its recorded size and sha256, no data
file is written (changed false; a new name, test name or rank count of a
replicate layout only rewrites the manifest). Files that the new manifest
does not list and that either look like shards (shard-NNNNN.*) or the old
manifest listed are removed; other files in DIR (the shared filesystem's
test set) are left alone. One run at a time per DIR (flock).

The shard layout reads the source once. A source of the names and sizes
the manifest records is taken to be that source: its counts place the shards
before the read, which writes only the shards that are missing, damaged or
re-placed and proves the guess by the source's sha256 (a source of those
sizes with other bytes is then read again, fresh). Any other source is
checked, hashed, counted and written to a spool in its one read; the shards
are cut from the spool, each hashed as it is copied.

Quick check: when DIR/.stat.json shows every source and data file with the
size and mtime of the last run, nothing is hashed (as rsync's and make's
quick checks); a touched source is hashed, but a shard of the recorded size
and mtime is not read; verify=True hashes everything regardless. A run that
changes nothing writes nothing. check=True writes
nothing and answers what a run would do, or raises the error a run would.

shard(source, ranks, out, name=None, verify=False, layout="shard", test=None,
check=False) returns the report {"changed", "manifest" (its path), "layout",
"samples", "ranks", "files", "bytes", "seconds", "removed"} with "shards",
the manifest's entries, and raises ShardError for bad input.
"""

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.cntk.cluster.plugins.module_utils.dataset_io import (
    Serial, Tally, ShardFiles, blocks, clean_leftovers, commit, copy_range, data_file_matches, file_sha256,
    identity, lock, place_temp, read_whole_file, remove, remove_stale, scan, source_sha256_only, spool_offset,
    temp_path, write_manifest_temp)
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_ctf import CtfCheck
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import (
    EXT_RE, LAYOUTS, MANIFEST, NAME_RE, STAT_CACHE, ShardError, extension, is_ctf, quick_unchanged, read_manifest,
    report, shard_name, source_unchanged, stale_files, stat_key, whole_file_manifest, write_stat_cache)
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_placement import (
    bounds, describes, placement, previous_ranges)

WHAT = {"shard": "pass --source a line-based training file (CTF) or a directory of them",
        "replicate": "pass --source the file, or the directory of files, that every rank reads",
        "presplit": "pass --source the directory that holds one file per rank"}


def source_files(source, layout="shard"):
    """The source's files in reading order, or ShardError."""
    if not os.path.exists(source):
        raise ShardError("source %s does not exist: %s" % (source, WHAT[layout]))
    if os.path.isdir(source):
        names = sorted(entry.name for entry in os.scandir(source)
                       if not entry.name.startswith(".") and entry.is_file())
        if not names:
            raise ShardError("source %s has no files (hidden files and folders are not read): put the training "
                             "set there, or pass the file itself as --source" % source)
        if layout == "shard":
            kinds = {}
            for name in names:
                kinds.setdefault(extension(name), []).append(name)
            if len(kinds) > 1:
                raise ShardError(
                    "source %s mixes file types (%s): the shard layout joins its files into one list of samples, "
                    "so they must share one extension; move the others out, or choose the replicate or presplit "
                    "layout" % (source, "; ".join("%s: %s" % (ext or "no extension", ", ".join(files))
                                                  for ext, files in sorted(kinds.items()))))
        return [os.path.join(source, name) for name in names]
    if not os.path.isfile(source):
        raise ShardError("source %s is neither a file nor a directory: %s" % (source, WHAT[layout]))
    if layout == "presplit":
        raise ShardError("source %s is a file: the presplit layout needs a directory that holds one file per rank "
                         "(file i for rank i, in name order)" % source)
    return [source]


def output_names(paths, layout, ranks):
    """The data files' names in DIR, in manifest order; ShardError for a name that cannot be one."""
    for path in paths if layout != "replicate" else []:
        if not EXT_RE.fullmatch(extension(path)):
            raise ShardError("source file %s has the extension %r, which a shard's name cannot carry: rename it "
                             "(letters, digits, _ + - after the dot)" % (path, extension(path)))
    if layout == "shard":
        return [shard_name(r, extension(paths[0])) for r in range(ranks)]
    if layout == "presplit":
        return [shard_name(i, extension(path)) for i, path in enumerate(paths)]
    names = [os.path.basename(path) for path in paths]
    for path, name in zip(paths, names):
        if not NAME_RE.fullmatch(name) or name == MANIFEST:
            raise ShardError("source file %s cannot be sent under its own name: rename it (letters, digits, "
                             "_ . + -, starting with a letter, digit or _; not %s)" % (path, MANIFEST))
    return names


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


def unchanged_report(out, paths, expect, verify, started):
    """The report of a run with nothing to do (the quick check holds), or None."""
    if verify or not os.path.isdir(out):
        return None
    held = lock(out)
    try:
        old = quick_unchanged(out, paths, expect)
    finally:
        os.close(held)
    return None if old is None else report(False, out, old, expect["ranks"], [], started)


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


def read_sources(paths, names, layout, old):
    """Pass 1 of replicate and presplit: (the manifest's files, its entries, each source's os.stat).

    A file of the size the old manifest (of this layout) records is hashed
    only; when its sha256 is the recorded one, so are its samples, already
    checked. Any other file is hashed, and counted and checked if *.ctf.
    """
    known = {}
    try:
        if old.get("layout") == layout:
            known = {f["name"]: f for f in old["files"] if isinstance(f, dict)}
    except (AttributeError, KeyError, TypeError):
        pass
    files, entries, statuses = [], [], []
    for index, (path, name) in enumerate(zip(paths, names)):
        base = os.path.basename(path)
        prior, read = known.get(base), None
        try:
            if prior and prior["bytes"] == os.path.getsize(path) and \
                    (isinstance(prior.get("samples"), int) or not is_ctf(path)):
                read = read_whole_file(path, lines=False)
                if read["sha256"] == prior["sha256"]:
                    read["samples"] = prior.get("samples")
                else:
                    read = None
        except (KeyError, TypeError):
            read = None
        if read is None:
            read = read_whole_file(path)
        if read["bytes"] == 0 or read["samples"] == 0:
            reader = "every rank" if layout == "replicate" else "rank %d" % index
            raise ShardError("source file %s is empty (no samples): the %s layout gives it whole to %s; remove it "
                             "or fill it" % (path, layout, reader))
        extra = {} if read["samples"] is None else {"samples": read["samples"]}
        files.append(dict({"name": base, "bytes": read["bytes"], "sha256": read["sha256"]}, **extra))
        if layout == "replicate":
            entry = {"shard": name, "ranks": "all"}
        else:
            entry = {"shard": name, "rank": index, "source_file": base}
        entry.update({"bytes": read["bytes"], "sha256": read["sha256"]}, **extra)
        entries.append(entry)
        statuses.append(read["stat"])
    return files, entries, statuses


def lay_out_whole_files(paths, out, names, expect, verify, started):
    """The replicate and presplit layouts (see the module doc)."""
    unchanged = unchanged_report(out, paths, expect, verify, started)
    if unchanged is not None:
        return unchanged

    held = old = None
    try:
        if os.path.isdir(out):
            held = lock(out)
            old = read_manifest(out)
        files, entries, statuses = read_sources(paths, names, expect["layout"], old)  # pass 1
        manifest = whole_file_manifest(expect, files, entries)
        if held is None:
            os.makedirs(out, exist_ok=True)
            held = lock(out)
            old = read_manifest(out)  # another run may have made it meanwhile
        clean_leftovers(out)

        temps = []
        try:
            for path, entry, status in zip(paths, entries, statuses):
                if not data_file_matches(os.path.join(out, entry["shard"]), entry, status):
                    temps.append((place_temp(out, path, entry, status), entry))
            changed = bool(temps) or old != manifest
            if changed:
                manifest_temp = write_manifest_temp(out, manifest)
        except BaseException:
            for temp, _ in temps:
                remove(temp)
            raise
        if changed:
            commit(out, temps, manifest_temp)

        removed = remove_stale(out, manifest, old, expect["test"])
        changed = changed or bool(removed)
        write_stat_cache(out, paths)
    finally:
        if held is not None:
            os.close(held)
    return report(changed, out, manifest, expect["ranks"], removed, started)


def check_only(paths, out, names, expect, started):
    layout, ranks, source = expect["layout"], expect["ranks"], expect["source"]
    made = old = None
    unchanged = False
    if os.path.isdir(out):
        held = lock(out, shared=True)
        try:
            old = read_manifest(out)
            made = source_unchanged(out, paths, layout)
            unchanged = made is not None and quick_unchanged(out, paths, expect) is not None
        finally:
            os.close(held)
    if made is not None:  # the source the manifest was made from, checked then: nothing to read
        samples, size = made["samples"], sum(entry["bytes"] for entry in made["shards"])
        if layout == "shard":
            too_few(samples, ranks, source)
    elif layout == "shard":
        counts = None
        try:  # files of the sizes a manifest of this layout records: hashing them may spare counting and checking
            if old.get("layout") == "shard" and [(f["name"], f["bytes"]) for f in old["files"]] == \
                    [(os.path.basename(p), os.path.getsize(p)) for p in paths]:
                source_sha256, sizes = source_sha256_only(paths)
                if source_sha256 == old["source_sha256"] and all(isinstance(f["samples"], int) for f in old["files"]):
                    counts = [f["samples"] for f in old["files"]]
        except (AttributeError, OSError, KeyError, TypeError):
            counts = None
        if counts is None:
            source_sha256, sizes, counts = scan(paths)
        samples, size = sum(counts), sum(sizes)
        too_few(samples, ranks, source)
        try:
            unchanged = all(old.get(key) == value for key, value in expect.items()) \
                and old["source_sha256"] == source_sha256 and [f["bytes"] for f in old["files"]] == sizes \
                and all(os.path.getsize(os.path.join(out, e["shard"])) == e["bytes"] for e in old["shards"])
        except (AttributeError, OSError, KeyError, TypeError):
            unchanged = False
    else:
        files, entries, _ = read_sources(paths, names, layout, old)
        made = whole_file_manifest(expect, files, entries)
        samples, size = made["samples"], sum(entry["bytes"] for entry in entries)
        try:
            unchanged = old == made and \
                all(os.path.getsize(os.path.join(out, e["shard"])) == e["bytes"] for e in entries)
        except OSError:
            unchanged = False
    removed = stale_files(out, {"shards": [{"shard": name} for name in names]}, old, expect["test"])
    return {"changed": not unchanged or bool(removed), "manifest": os.path.join(out, MANIFEST), "layout": layout,
            "samples": samples, "ranks": ranks, "files": len(names), "bytes": size,
            "seconds": round(time.monotonic() - started, 3), "removed": removed,
            "shards": made["shards"] if made is not None else None}


def shard(source, ranks, out, name=None, verify=False, layout="shard", test=None, check=False):
    """Lay source out for ranks in out; return the report (see the module doc)."""
    started = time.monotonic()
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ShardError("--ranks must be at least 1 (got %r): pass the number of MPI ranks" % (ranks,))
    if layout not in LAYOUTS:
        raise ShardError("--layout %r is not one of %s" % (layout, ", ".join(LAYOUTS)))
    source, out = os.path.abspath(source), os.path.abspath(out)
    paths = source_files(source, layout)
    if os.path.isdir(source) and os.path.realpath(source) == os.path.realpath(out):
        raise ShardError("--out %s is the source directory: write the data files to another directory" % out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise ShardError("--out %s exists and is not a directory: pass a directory for the data files" % out)
    for path in paths:
        if os.path.realpath(os.path.dirname(path)) == os.path.realpath(out):
            raise ShardError("source %s is in --out %s, where the data files go: write them to another directory"
                             % (path, out))
    if layout == "presplit" and len(paths) != ranks:
        raise ShardError("source %s holds %d file%s for %d ranks: the presplit layout needs exactly one file per "
                         "rank (file i, in name order, for rank i); add or remove files, or change the number "
                         "of ranks" % (source, len(paths), "" if len(paths) == 1 else "s", ranks))
    names = output_names(paths, layout, ranks)
    if test is not None:
        if not NAME_RE.fullmatch(test) or test == MANIFEST:
            raise ShardError("--test-name %r cannot be a file name in --out: use letters, digits, _ . + - (not %s)"
                             % (test, MANIFEST))
        if test in names:
            raise ShardError("--test-name %s is also the name of a data file: rename the test set, or that file"
                             % test)
    if name is None:
        base = os.path.basename(source)
        name = os.path.splitext(base)[0] if os.path.isfile(source) else base
    expect = {"name": name, "source": source, "layout": layout, "ranks": ranks, "test": test}
    if check:
        return check_only(paths, out, names, expect, started)
    if layout == "shard":
        return split(paths, out, names, expect, verify, started)
    return lay_out_whole_files(paths, out, names, expect, verify, started)

