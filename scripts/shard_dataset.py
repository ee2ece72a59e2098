#!/usr/bin/env python3
"""Split a CTF training set into one shard per MPI rank, and write a manifest.

    shard_dataset.py --source PATH --ranks W --out DIR [--name NAME]

Runs on the Ansible controller (Python 3.11, standard library only); Ansible
calls it with ansible.builtin.command and reads the one JSON line it prints:

    {"changed": bool, "manifest": "DIR/manifest.json", "samples": n, "ranks": W,
     "bytes": total shard bytes, "seconds": t, "removed": [stale shards removed]}

Errors go to stderr, exit status 2 for bad input (source missing, empty or
without *.ctf files, fewer samples than ranks, --ranks below 1) and 1 when the
file system fails.

Source: a CTF text file, or a directory whose *.ctf files (not hidden, not
recursive) are read in sorted name order and concatenated. A sample is one
non-blank line (a line of only spaces, tabs or CR is blank and skipped). A
file's last line ends at the end of the file, newline or not, so two files
never merge into one line. Output lines are the source lines verbatim but for
their end: each ends with exactly one "\\n" (the "\\r" of a CRLF is dropped).

Split: W contiguous shards balanced by samples. With n samples, shard r holds
samples [floor(r*n/W), floor((r+1)*n/W)): sizes differ by at most one, and
the shards concatenated in rank order are the source's non-blank lines.

Output: DIR/shard-{r:05d}.ctf for r in 0..W-1 and DIR/manifest.json:

    {"name":   --name, or the source's name without .ctf,
     "source": absolute path of --source,
     "source_sha256": sha256 of the source bytes exactly as read: of the file,
              or of the directory's *.ctf files concatenated in sorted name
              order (what `cat DIR/*.ctf | sha256sum` prints),
     "samples": n, "ranks": W,
     "files":  [{"name", "bytes", "samples"}, ...]   the source files, in order,
     "shards": [{"shard": "shard-00000.ctf", "rank": 0, "samples", "bytes", "sha256"}, ...]}

Idempotent: when DIR/manifest.json already describes this source (same
source_sha256, files and ranks) and every shard it lists exists with its
recorded size and sha256, no shard is written (changed=false; a new name or
source path only rewrites the manifest). Otherwise every shard and the
manifest are written to hidden temporary files in DIR and fsynced, the old
manifest is set aside, the shards are moved into place with os.replace and the
manifest last; shard files that the new manifest does not list (an earlier
split into more ranks) are then removed. If a move fails, the old shards and
manifest are put back. So a run that fails or is killed leaves the old
manifest with its shards, the new manifest with its shards, or (killed while
moving) no manifest, and the next run splits again: never a manifest that
describes shards that are not there. One run at a time per DIR (flock).

Speed: two streaming passes in 8 MiB reads (count and hash, then write),
memory bounded by a few chunks. sha256 and writes, which release the GIL,
run on worker threads beside the line scanning. The second pass hashes the
source again; if it changed in between, nothing is committed. A rerun whose
source files have the sizes the manifest records only hashes the source
(while a thread checks the shards): when the hash matches, the manifest's
sample counts hold too, so the lines are not counted again.

Quick check: after each run DIR/.stat.json records the size and mtime of
every source file and shard and the manifest's sha256. When all of them are
unchanged, a rerun hashes nothing and returns at once (changed=false), as
rsync's and make's quick checks do. --verify hashes everything regardless.

Python API: shard(source, ranks, out, name=None, verify=False) returns the
report dict and raises ShardError for bad input.
"""

import argparse
import fcntl
import hashlib
import json
import os
import re
import secrets
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

CHUNK = 8 << 20  # bytes per read
MANIFEST = "manifest.json"
STAT_CACHE = ".stat.json"
SHARD_RE = re.compile(r"shard-\d{5,}\.ctf")
# The hidden files of a run that was killed: .shard-00000.ctf.<hex>.tmp, .manifest.json.<hex>.old, ...
TEMP_RE = re.compile(r"\.(?:shard-\d{5,}\.ctf|manifest\.json)\.[0-9a-f]{12}\.(?:tmp|old)")
# A newline followed by a blank line: only spaces, tabs, CR, VT or FF up to the next newline.
BLANK_AFTER_NEWLINE = re.compile(rb"\n(?=[ \t\r\x0b\x0c]*\n)")


class ShardError(Exception):
    """Bad input; the message names the value and the fix (exit status 2)."""


def shard_name(rank):
    return "shard-%05d.ctf" % rank


def bounds(samples, ranks):
    """Shard r holds samples [b[r], b[r + 1])."""
    return [r * samples // ranks for r in range(ranks + 1)]


class Serial:
    """Runs calls in order on a thread of its own, one at a time: at most one
    call is pending, so the caller runs ahead by one step and memory stays
    bounded. A call's exception is raised by the next call or by wait()."""

    def __init__(self):
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._last = None

    def __call__(self, function, *args):
        self.wait()
        self._last = self._pool.submit(function, *args)
        return self._last

    def wait(self):
        last, self._last = self._last, None
        if last is not None:
            last.result()

    def close(self):
        self._pool.shutdown(wait=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Tally(Serial):
    """sha256 (on the worker thread) and size of the bytes read."""

    def __init__(self):
        super().__init__()
        self._digest = hashlib.sha256()
        self.bytes = 0

    def update(self, data):
        self.bytes += len(data)
        self(self._digest.update, data)

    def hexdigest(self):
        self.wait()
        return self._digest.hexdigest()


# --- reading ---------------------------------------------------------------

def source_files(source):
    """The source's files in reading order, or ShardError."""
    if not os.path.exists(source):
        raise ShardError("source %s does not exist: pass --source a CTF file or a directory of *.ctf files"
                         % source)
    if os.path.isdir(source):
        names = sorted(entry.name for entry in os.scandir(source)
                       if entry.name.endswith(".ctf") and not entry.name.startswith(".") and entry.is_file())
        if not names:
            raise ShardError("source %s has no *.ctf files: put the training set there as *.ctf files, "
                             "or pass the file itself as --source" % source)
        return [os.path.join(source, name) for name in names]
    if not os.path.isfile(source):
        raise ShardError("source %s is neither a file nor a directory: pass a CTF file or a directory of *.ctf files"
                         % source)
    return [source]


def segments(data, start, end):
    """Yield the non-blank lines of data[start:end] (complete lines) as (buffer, start, end) segments.

    Each segment is whole lines, each ending with exactly one newline. The usual
    range, with no blank line and no CR, is yielded as it is, without a copy.
    """
    first = data.index(b"\n", start, end)
    if data.find(b"\r", start, end) < 0 and data[start:first].strip() and \
            not BLANK_AFTER_NEWLINE.search(data, start, end):
        yield data, start, end
        return
    lines = [line.rstrip(b"\r") for line in data[start:end].split(b"\n") if line.strip()]
    if lines:
        block = b"\n".join(lines) + b"\n"
        yield block, 0, len(block)


def blocks(path, tally):
    """Yield the file's non-blank lines as (buffer, start, end) segments of up to CHUNK bytes.

    The raw bytes read go to tally. Reads are cut at their last newline; the
    line they cut is joined with the next read's first line (a small copy).
    """
    with open(path, "rb", buffering=0) as stream:
        carry = []  # the start of a line that the previous reads cut
        while data := stream.read(CHUNK):
            tally.update(data)
            start = data.find(b"\n") + 1
            if not start:  # no newline in the whole read: a very long line
                carry.append(data)
                continue
            if carry:
                carry.append(data[:start])
                line = b"".join(carry)
                yield from segments(line, 0, len(line))
            else:
                start = 0
            cut = data.rfind(b"\n") + 1
            if start < cut:
                yield from segments(data, start, cut)
            carry = [data[cut:]] if cut < len(data) else []
        if carry:  # the last line has no newline
            line = b"".join(carry) + b"\n"
            yield from segments(line, 0, len(line))


def scan(paths):
    """Pass 1: the source's sha256, and each file's bytes and samples."""
    sizes, counts = [], []
    with Tally() as tally:
        for path in paths:
            before = tally.bytes
            counts.append(sum(data.count(b"\n", start, end) for data, start, end in blocks(path, tally)))
            sizes.append(tally.bytes - before)
        return tally.hexdigest(), sizes, counts


def source_sha256_only(paths):
    """The source's sha256 and each file's bytes, without looking for lines (a quicker pass 1)."""
    sizes = []
    with Tally() as tally:
        for path in paths:
            before = tally.bytes
            with open(path, "rb", buffering=0) as stream:
                while data := stream.read(CHUNK):
                    tally.update(data)
            sizes.append(tally.bytes - before)
        return tally.hexdigest(), sizes


def file_sha256(path, stop=None):
    """The file's sha256, or None once stop (a threading.Event) is set."""
    with Tally() as tally, open(path, "rb", buffering=0) as stream:
        while data := stream.read(CHUNK):
            if stop is not None and stop.is_set():
                return None
            tally.update(data)
        return tally.hexdigest()


# --- writing ---------------------------------------------------------------

def temp_path(out, final, kind="tmp"):
    return os.path.join(out, ".%s.%s.%s" % (final, secrets.token_hex(6), kind))


def create(path):
    """A new file with mode 0666 less the umask (not mkstemp's 0600: these are copied on to the nodes)."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb")


def remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ShardFiles:
    """The temporary shard files of pass 2; next() and write() run on the writer thread."""

    def __init__(self, out, ranks):
        self.temps = [temp_path(out, shard_name(r)) for r in range(ranks)]
        self.rank = -1
        self.target = None

    def next(self):
        """Finish the shard being written (if any) and start the next one (if any)."""
        if self.target is not None:
            self.target.flush()
            os.fsync(self.target.fileno())
            self.target.close()
            self.target = None
        self.rank += 1
        if self.rank < len(self.temps):
            self.target = create(self.temps[self.rank])

    def write(self, data):
        self.target.write(data)

    def discard(self):
        if self.target is not None:
            self.target.close()
        for temp in self.temps:
            remove(temp)


def write_shards(paths, out, ranks, source_sha256, sizes, counts):
    """Pass 2: write every shard to a temporary file in out; return [(temp path, manifest entry)] by rank.

    sizes, counts and source_sha256 are pass 1's; if this read differs in any,
    the source changed in between: ShardError, and no file is left. Three
    worker threads hash the source, hash the shards and write them while this
    one finds the lines.
    """
    samples = sum(counts)
    edges = bounds(samples, ranks)
    changed = ShardError("source changed while it was being sharded: run again")
    files = ShardFiles(out, ranks)
    digests = [hashlib.sha256() for _ in range(ranks)]
    sizes_out = [0] * ranks
    with Serial() as writer, Serial() as hasher, Tally() as tally:
        try:
            writer(files.next)
            rank, done = 0, 0  # the shard being filled, samples handed to the writer
            for path, file_bytes, file_samples in zip(paths, sizes, counts):
                bytes_before, done_before = tally.bytes, done
                for data, start, end in blocks(path, tally):
                    view = memoryview(data)
                    lines = data.count(b"\n", start, end)
                    if done + lines > samples:
                        raise changed
                    while lines:
                        room = edges[rank + 1] - done
                        if lines <= room:
                            part, take = view[start:end], lines
                        else:  # the shard ends inside this segment, after its room-th line
                            stop = start
                            for _ in range(room):
                                stop = data.index(b"\n", stop, end) + 1
                            part, take, start = view[start:stop], room, stop
                        writer(files.write, part)
                        hasher(digests[rank].update, part)
                        sizes_out[rank] += len(part)
                        done += take
                        lines -= take
                        if done == edges[rank + 1] and rank + 1 < ranks:
                            writer(files.next)
                            rank += 1
                if tally.bytes - bytes_before != file_bytes or done - done_before != file_samples:
                    raise changed
            if tally.hexdigest() != source_sha256:
                raise changed
            writer(files.next)  # finish the last shard
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
    entries = [{"shard": shard_name(r), "rank": r, "samples": edges[r + 1] - edges[r], "bytes": sizes_out[r],
                "sha256": digests[r].hexdigest()} for r in range(ranks)]
    return list(zip(files.temps, entries))


def write_manifest_temp(out, manifest):
    path = temp_path(out, MANIFEST)
    try:
        with create(path) as target:
            target.write((json.dumps(manifest, indent=2) + "\n").encode())
            target.flush()
            os.fsync(target.fileno())
    except BaseException:
        remove(path)
        raise
    return path


def commit(out, shard_temps, manifest_temp):
    """Move the new shards into place, then the manifest; if a move fails, put the old ones back.

    The old manifest is set aside first: from the first shard moved until the
    new manifest is in place, DIR has no manifest.json at all. With no shards
    to move (a new name only), the manifest is replaced in one step.
    """
    manifest_path = os.path.join(out, MANIFEST)
    aside = None
    moved = []  # (final path, its old file set aside, or None)
    try:
        if shard_temps and os.path.exists(manifest_path):
            aside = temp_path(out, MANIFEST, "old")
            os.replace(manifest_path, aside)
            fsync_dir(out)
        for temp, entry in shard_temps:
            final = os.path.join(out, entry["shard"])
            previous = None
            if os.path.exists(final):
                previous = temp_path(out, entry["shard"], "old")
                os.replace(final, previous)
            moved.append((final, previous))
            os.replace(temp, final)
        fsync_dir(out)  # the shards are in place before the manifest that describes them
        os.replace(manifest_temp, manifest_path)
    except BaseException:
        try:  # the old shards back, then the old manifest; if that fails too, no manifest is left
            for final, previous in reversed(moved):
                if previous is not None:
                    os.replace(previous, final)
                else:
                    remove(final)
            if aside is not None:
                os.replace(aside, manifest_path)
        finally:
            for temp, _ in shard_temps:
                remove(temp)
            remove(manifest_temp)
        raise
    fsync_dir(out)
    for _, previous in moved:
        if previous is not None:
            remove(previous)
    if aside is not None:
        remove(aside)


# --- the check for "nothing to do" -------------------------------------------

def read_manifest(out):
    try:
        with open(os.path.join(out, MANIFEST), "rb") as stream:
            manifest = json.load(stream)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def shard_files_match(out, manifest, stop=None):
    """True when every shard the manifest lists exists with its recorded size and sha256.

    stop (a threading.Event), once set, ends the check early with False.
    """
    try:
        entries = manifest["shards"]
        paths = [os.path.join(out, entry["shard"]) for entry in entries]
        if not all(os.stat(p).st_size == e["bytes"] for p, e in zip(paths, entries)):  # cheap check first
            return False
        return all(file_sha256(p, stop) == e["sha256"] for p, e in zip(paths, entries))
    except (OSError, KeyError, TypeError, ValueError):
        return False


def describes(old, manifest, expected):
    """True when the old manifest is of the same data and split as the new one."""
    try:
        return (old["source_sha256"] == manifest["source_sha256"] and old["ranks"] == manifest["ranks"]
                and old["samples"] == manifest["samples"] and old["files"] == manifest["files"]
                and [(e["shard"], e["rank"], e["samples"]) for e in old["shards"]] == expected)
    except (KeyError, TypeError):
        return False


def stat_key(path):
    status = os.stat(path)
    return [status.st_size, status.st_mtime_ns]


def stat_cache(out, paths, manifest_bytes, manifest):
    """What the quick check compares: every file's size and mtime, and the manifest's hash."""
    return {"manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
            "source": [[p] + stat_key(p) for p in paths],
            "shards": [[e["shard"]] + stat_key(os.path.join(out, e["shard"])) for e in manifest["shards"]]}


def quick_unchanged(out, paths, ranks, name, source):
    """The old manifest when nothing changed by size and mtime since the last run, else None."""
    try:
        with open(os.path.join(out, MANIFEST), "rb") as handle:
            manifest_bytes = handle.read()
        with open(os.path.join(out, STAT_CACHE)) as handle:
            cached = json.load(handle)
        manifest = json.loads(manifest_bytes)
        if (manifest["ranks"] != ranks or manifest["name"] != name or manifest["source"] != source
                or cached != stat_cache(out, paths, manifest_bytes, manifest)):
            return None
        listed = {e["shard"] for e in manifest["shards"]}
        if any((SHARD_RE.fullmatch(n) and n not in listed) or TEMP_RE.fullmatch(n) for n in os.listdir(out)):
            return None  # a stale shard or a killed run's leftovers to remove: take the full path
        return manifest
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_stat_cache(out, paths):
    with open(os.path.join(out, MANIFEST), "rb") as handle:
        manifest_bytes = handle.read()
    temporary = os.path.join(out, STAT_CACHE + ".tmp")
    with open(temporary, "w") as handle:
        json.dump(stat_cache(out, paths, manifest_bytes, json.loads(manifest_bytes)), handle)
    os.replace(temporary, os.path.join(out, STAT_CACHE))


def lock(out):
    """Hold an exclusive flock on the directory itself (no lock file in DIR): one run at a time."""
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


# --- the whole job ---------------------------------------------------------

def shard(source, ranks, out, name=None, verify=False):
    """Shard source into ranks shards in out; return the report (see the module doc)."""
    started = time.monotonic()
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ShardError("--ranks must be at least 1 (got %r): pass the number of MPI ranks" % (ranks,))
    source, out = os.path.abspath(source), os.path.abspath(out)
    paths = source_files(source)
    if os.path.isdir(source) and os.path.realpath(source) == os.path.realpath(out):
        raise ShardError("--out %s is the source directory: write the shards to another directory" % out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise ShardError("--out %s exists and is not a directory: pass a directory for the shards" % out)
    for path in paths:
        if SHARD_RE.fullmatch(os.path.basename(path)) and os.path.realpath(os.path.dirname(path)) == \
                os.path.realpath(out):
            raise ShardError("source %s is one of the shards in --out %s: write the shards to another directory"
                             % (path, out))
    if name is None:
        base = os.path.basename(source)
        name = base[:-4] if base.endswith(".ctf") and os.path.isfile(source) else base

    if not verify and os.path.isdir(out):
        held = lock(out)
        try:
            old = quick_unchanged(out, paths, ranks, name, source)
        finally:
            os.close(held)
        if old is not None:
            return {"changed": False, "manifest": os.path.join(out, MANIFEST), "samples": old["samples"],
                    "ranks": ranks, "bytes": sum(e["bytes"] for e in old["shards"]),
                    "seconds": round(time.monotonic() - started, 3), "removed": []}

    def worth_verifying(manifest):  # cheap look before hashing the old shards
        try:
            return manifest["ranks"] == ranks and [(f["name"], f["bytes"]) for f in manifest["files"]] == \
                [(os.path.basename(p), os.path.getsize(p)) for p in paths]
        except (OSError, KeyError, TypeError):
            return False

    held = old = verified = None
    verifier, stop = Serial(), threading.Event()
    try:
        counts = None
        if os.path.isdir(out):
            held = lock(out)
            old = read_manifest(out)
            if old is not None and worth_verifying(old):
                # Likely nothing to do: while the source is hashed, check the old shards on
                # another thread. If the source's bytes are those the old manifest was made
                # from, so are its samples, and the lines need not be counted again.
                verified = verifier(shard_files_match, out, old, stop)
                source_sha256, sizes = source_sha256_only(paths)
                try:
                    if source_sha256 == old["source_sha256"] and sizes == [f["bytes"] for f in old["files"]] \
                            and all(isinstance(f["samples"], int) and f["samples"] >= 0 for f in old["files"]):
                        counts = [f["samples"] for f in old["files"]]
                except (KeyError, TypeError):
                    pass

        if counts is None:
            source_sha256, sizes, counts = scan(paths)  # pass 1
        samples = sum(counts)
        if samples == 0:
            raise ShardError("source %s has no samples (it is empty or only blank lines): "
                             "generate the training set first" % source)
        if samples < ranks:
            raise ShardError("dataset has %d samples, fewer than the %d ranks: use fewer ranks or more data"
                             % (samples, ranks))
        edges = bounds(samples, ranks)
        expected = [(shard_name(r), r, edges[r + 1] - edges[r]) for r in range(ranks)]
        manifest = {"name": name, "source": source, "source_sha256": source_sha256, "samples": samples,
                    "ranks": ranks,
                    "files": [{"name": os.path.basename(p), "bytes": size, "samples": count}
                              for p, size, count in zip(paths, sizes, counts)],
                    "shards": None}

        if held is None:
            os.makedirs(out, exist_ok=True)
            held = lock(out)
            old = read_manifest(out)  # another run may have made it meanwhile
            if old is not None and worth_verifying(old):
                verified = verifier(shard_files_match, out, old, stop)
        for stray in os.listdir(out):
            if TEMP_RE.fullmatch(stray):  # left by a run that was killed
                remove(os.path.join(out, stray))

        if verified is not None and describes(old, manifest, expected) and verified.result():
            manifest["shards"] = [{key: entry[key] for key in ("shard", "rank", "samples", "bytes", "sha256")}
                                  for entry in old["shards"]]
            changed = old != manifest  # a new name or source path: rewrite the manifest only
            if changed:
                commit(out, [], write_manifest_temp(out, manifest))
        else:
            shard_temps = write_shards(paths, out, ranks, source_sha256, sizes, counts)  # pass 2
            manifest["shards"] = [entry for _, entry in shard_temps]
            try:
                manifest_temp = write_manifest_temp(out, manifest)
            except BaseException:
                for temp, _ in shard_temps:
                    remove(temp)
                raise
            commit(out, shard_temps, manifest_temp)
            changed = True

        keep = {entry["shard"] for entry in manifest["shards"]}
        removed = sorted(n for n in os.listdir(out) if SHARD_RE.fullmatch(n) and n not in keep)
        for stale in removed:
            remove(os.path.join(out, stale))
        if removed:
            fsync_dir(out)
            changed = True
        write_stat_cache(out, paths)
    finally:
        stop.set()  # an error before the old shards' check ended: don't wait for it to finish
        verifier.close()
        if held is not None:
            os.close(held)

    return {"changed": changed, "manifest": os.path.join(out, MANIFEST), "samples": samples, "ranks": ranks,
            "bytes": sum(entry["bytes"] for entry in manifest["shards"]),
            "seconds": round(time.monotonic() - started, 3), "removed": removed}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Split a CTF training set into one shard per MPI rank, and write DIR/manifest.json.")
    parser.add_argument("--source", required=True, help="a CTF file, or a directory of *.ctf files")
    parser.add_argument("--ranks", required=True, type=int, help="the number of MPI ranks: one shard each")
    parser.add_argument("--out", required=True, help="the directory for shard-NNNNN.ctf and manifest.json")
    parser.add_argument("--name", help="the dataset's name in the manifest (default: the source's name)")
    parser.add_argument("--verify", action="store_true",
                        help="hash the source and the shards even when sizes and mtimes are unchanged")
    args = parser.parse_args(argv)
    try:
        report = shard(args.source, args.ranks, args.out, args.name, args.verify)
    except ShardError as error:
        print("shard_dataset.py: error: %s" % error, file=sys.stderr)
        return 2
    except OSError as error:
        print("shard_dataset.py: error: %s" % error, file=sys.stderr)
        return 1
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
