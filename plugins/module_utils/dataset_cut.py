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

import os
import time

from ansible_collections.cntk.cluster.plugins.module_utils.dataset_io import lock, scan, source_sha256_only
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import (
    EXT_RE, LAYOUTS, MANIFEST, NAME_RE, ShardError, extension, quick_unchanged, read_manifest, shard_name,
    source_unchanged, stale_files, whole_file_manifest)
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_split import split, too_few
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_whole_files import lay_out_whole_files, read_sources

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
