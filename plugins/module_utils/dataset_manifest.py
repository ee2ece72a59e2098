"""The manifest of a laid-out data set (DIR/manifest.json): its structure, reader, writer and check.

The controller's cutter (dataset_cut) writes it, the data step returns its
entries to the tasks (no task reads the file), and each node keeps the part
it holds (plugins/filter/dataset.py node_manifest). Structure:

    {"name":   the data set's name, or the source's name without its extension,
     "layout": "shard" | "replicate" | "presplit",
     "source": absolute path of the source,
     "source_sha256": shard: sha256 of the source bytes exactly as read, of
              the file or of the directory's files concatenated in sorted name
              order (what `cat DIR/* | sha256sum` prints); replicate and
              presplit: sha256 of the lines "<sha256>  <name>\\n" of the
              source files in order (what `sha256sum *` prints, hashed),
     "samples": n, the non-blank lines; replicate and presplit: the sum over
              their files when every file is *.ctf, else null,
     "ranks":  W,
     "test":   the test set's file name beside the data, or null,
     "files":  the source files in order: [{"name", "bytes", "samples"}]
              (shard), [{"name", "bytes", "sha256", "samples"?}] (others;
              "samples" for *.ctf files only),
     "shards": the data files in DIR, in rank order:
       shard      {"shard": "shard-00000.ctf", "rank": 0, "samples", "bytes", "sha256",
                   "ranges": [[start, end], ...] the source samples it holds, half-open,
                   ascending (a manifest without them was a fresh layout)}
       presplit   {"shard": "shard-00000.bin", "rank": 0, "source_file": "part-a.bin",
                   "bytes", "sha256", "samples"? (*.ctf only)}
       replicate  {"shard": "train.ctf", "ranks": "all", "bytes", "sha256",
                   "samples"? (*.ctf only)}
    }

An entry is read by one rank ("rank": an int) or by every rank ("ranks":
"all", replicate only); a node holds the entries of its ranks, or all of them.

Data file names: shard-{r:05d}{ext} (shard; ext the source's extension),
shard-{i:05d}{ext of file i} (presplit), each source file's own name
(replicate). DIR/.stat.json (the quick check) records the size and mtime of
every source and data file and the manifest's sha256 after each run.
"""

import hashlib
import json
import os
import re
import stat
import time

MANIFEST = "manifest.json"
STAT_CACHE = ".stat.json"
LAYOUTS = ("shard", "replicate", "presplit")
# A name written into DIR and sent to the nodes: no path, option or template characters.
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
EXT_RE = re.compile(r"(?:\.[A-Za-z0-9_+-]+)?")
SHARD_RE = re.compile(r"shard-\d{5,}(?:\.[A-Za-z0-9_+-]+)?")
# The hidden files of a run that was killed: .shard-00000.ctf.<hex>.tmp, .manifest.json.<hex>.old, ...
TEMP_RE = re.compile(r"\.[A-Za-z0-9_][A-Za-z0-9_.+-]*\.[0-9a-f]{12}\.(?:tmp|old)")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
# What a node's manifest.json keeps of a manifest entry (no controller paths).
NODE_KEYS = ("shard", "rank", "ranks", "source_file", "samples", "bytes", "sha256")


class ShardError(Exception):
    """Bad input; the message names the value and the fix (exit status 2)."""


def shard_name(rank, ext=".ctf"):
    return "shard-%05d%s" % (rank, ext)


def extension(path):
    return os.path.splitext(os.path.basename(path))[1]


def is_ctf(path):
    return extension(path).lower() == ".ctf"


def read_manifest(out):
    try:
        with open(os.path.join(out, MANIFEST), "rb") as stream:
            manifest = json.load(stream)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def stale_files(out, manifest, old, test):
    """Files in out a run with this manifest removes: shard-like names or names the old manifest listed, that the
    new manifest does not list (never the manifest or the test set)."""
    keep = {entry["shard"] for entry in manifest["shards"]} | {MANIFEST}
    if test:
        keep.add(test)
    listed = set()
    try:
        listed = {entry["shard"] for entry in old["shards"] if isinstance(entry["shard"], str)}
    except (KeyError, TypeError):
        pass
    stale = []
    try:
        names = os.listdir(out)
    except FileNotFoundError:
        return []
    for name in sorted(names):
        if name in keep or not (SHARD_RE.fullmatch(name) or name in listed):
            continue
        try:
            if not stat.S_ISDIR(os.lstat(os.path.join(out, name)).st_mode):
                stale.append(name)
        except FileNotFoundError:
            pass
    return stale


def stat_key(path):
    status = os.stat(path)
    return [status.st_size, status.st_mtime_ns]


def stat_cache(out, paths, manifest_bytes, manifest):
    """What the quick check compares: every file's size and mtime, and the manifest's hash."""
    return {"manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
            "source": [[p] + stat_key(p) for p in paths],
            "shards": [[e["shard"]] + stat_key(os.path.join(out, e["shard"])) for e in manifest["shards"]]}


def last_run(out):
    """(manifest bytes, manifest, stat cache) that the last run left in out, or None."""
    try:
        with open(os.path.join(out, MANIFEST), "rb") as handle:
            manifest_bytes = handle.read()
        with open(os.path.join(out, STAT_CACHE)) as handle:
            cached = json.load(handle)
        manifest = json.loads(manifest_bytes)
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(cached, dict):
        return None
    return manifest_bytes, manifest, cached


def quick_unchanged(out, paths, expect):
    """The old manifest when nothing changed by size and mtime since the last run, else None.

    expect: the manifest's name, source, layout, ranks and test as this run
    would write them.
    """
    state = last_run(out)
    if state is None:
        return None
    manifest_bytes, manifest, cached = state
    try:
        if any(manifest.get(key) != value for key, value in expect.items()) or \
                cached != stat_cache(out, paths, manifest_bytes, manifest):
            return None
        listed = {e["shard"] for e in manifest["shards"]}
        if any((SHARD_RE.fullmatch(n) and n not in listed and n != expect["test"]) or TEMP_RE.fullmatch(n)
               for n in os.listdir(out)):
            return None  # a stale file or a killed run's leftovers to remove: take the full path
        return manifest
    except (OSError, ValueError, KeyError, TypeError):
        return None


def source_unchanged(out, paths, layout):
    """The last run's manifest when it was made with this layout from the source files as they are now (by size
    and mtime), else None: what --check answers from without reading the source."""
    state = last_run(out)
    if state is None:
        return None
    manifest_bytes, manifest, cached = state
    try:
        if manifest.get("layout") != layout or \
                cached.get("manifest_sha256") != hashlib.sha256(manifest_bytes).hexdigest() or \
                cached.get("source") != [[p] + stat_key(p) for p in paths] or \
                [f["name"] for f in manifest["files"]] != [os.path.basename(p) for p in paths]:
            return None
        return manifest
    except (OSError, KeyError, TypeError):
        return None


def write_stat_cache(out, paths):
    """Record the quick check's figures; a run that finds them as they are writes nothing (changed=0 means
    no write)."""
    with open(os.path.join(out, MANIFEST), "rb") as handle:
        manifest_bytes = handle.read()
    cached = stat_cache(out, paths, manifest_bytes, json.loads(manifest_bytes))
    try:
        with open(os.path.join(out, STAT_CACHE)) as handle:
            if json.load(handle) == cached:
                return
    except (OSError, ValueError):
        pass
    temporary = os.path.join(out, STAT_CACHE + ".tmp")
    with open(temporary, "w") as handle:
        json.dump(cached, handle)
    os.replace(temporary, os.path.join(out, STAT_CACHE))


def whole_file_manifest(expect, files, entries):
    listing = "".join("%s  %s\n" % (f["sha256"], f["name"]) for f in files)
    counts = [f.get("samples") for f in files]
    return {"name": expect["name"], "layout": expect["layout"], "source": expect["source"],
            "source_sha256": hashlib.sha256(listing.encode()).hexdigest(),
            "samples": None if None in counts else sum(counts), "ranks": expect["ranks"], "test": expect["test"],
            "files": files, "shards": entries}


def report(changed, out, manifest, ranks, removed, started):
    return {"changed": changed, "manifest": os.path.join(out, MANIFEST), "layout": manifest["layout"],
            "samples": manifest["samples"], "ranks": ranks, "files": len(manifest["shards"]),
            "bytes": sum(entry["bytes"] for entry in manifest["shards"]),
            "seconds": round(time.monotonic() - started, 3), "removed": removed, "shards": manifest["shards"]}



def problem(manifest):
    """What is wrong with a manifest's structure, in words, or "" (what the writer refuses to write)."""
    if not isinstance(manifest, dict):
        return "not a JSON object"
    if manifest.get("layout") not in LAYOUTS:
        return "layout %r is not one of %s" % (manifest.get("layout"), ", ".join(LAYOUTS))
    ranks = manifest.get("ranks")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        return "ranks %r is not a positive number" % (ranks,)
    if not isinstance(manifest.get("source_sha256"), str) or not SHA256_RE.fullmatch(manifest["source_sha256"]):
        return "source_sha256 is not a sha256"
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not shards:
        return "shards is not a list of data files"
    for entry in shards:
        if not isinstance(entry, dict) or not isinstance(entry.get("shard"), str) \
                or not NAME_RE.fullmatch(entry["shard"]) or entry["shard"] == MANIFEST:
            return "entry %r has no data file name" % (entry,)
        if not isinstance(entry.get("bytes"), int) or not SHA256_RE.fullmatch(str(entry.get("sha256"))):
            return "entry %s has no bytes or sha256" % entry["shard"]
        if entry.get("ranks") != "all" and not (isinstance(entry.get("rank"), int) and 0 <= entry["rank"] < ranks):
            return "entry %s is read by no rank" % entry["shard"]
    return ""


def encode(manifest):
    """The manifest's bytes as written to DIR/manifest.json; ValueError for a structure problem()."""
    wrong = problem(manifest)
    if wrong:
        raise ValueError("manifest not written: %s" % wrong)
    return (json.dumps(manifest, indent=2) + "\n").encode()


# --- a node's part of the manifest -------------------------------------------

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


def node_manifest(wanted, name, layout=None, test=None):
    """What a node holds, for its manifest.json: the data set's name, its layout,
    the test set's file name on this node (or None), and the files."""
    return {"name": name, "layout": layout, "test": test or None,
            "shards": [{key: entry[key] for key in NODE_KEYS if key in entry} for entry in wanted]}
