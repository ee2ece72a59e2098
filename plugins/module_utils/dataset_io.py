"""Reading and writing a data folder's files: streamed reads with their sha256, temporary files, the commit.

Reads are 8 MiB; sha256 and writes, which release the GIL, run on worker
threads (Serial) beside the line scanning. Every file is written hidden
(.NAME.<hex>.tmp), fsynced, and moved into place by commit(): the data files
first, the manifest last, so that a run that fails or is killed leaves the old
manifest with its files, the new manifest with its files, or no manifest;
never a manifest that describes files that are not there.
"""

import bisect
import fcntl
import hashlib
import os
import re
import secrets
import stat
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.cntk.cluster.plugins.module_utils import dataset_manifest
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import (
    MANIFEST, TEMP_RE, ShardError, is_ctf, quick_unchanged, report, stale_files)
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_ctf import CtfCheck

CHUNK = 8 << 20  # bytes per read
# A newline followed by a blank line: only spaces, tabs, CR, VT or FF up to the next newline.
BLANK_AFTER_NEWLINE = re.compile(rb"\n(?=[ \t\r\x0b\x0c]*\n)")


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


def blocks(path, tally, check=None):
    """Yield the file's non-blank lines as (buffer, start, end) segments of up to CHUNK bytes.

    The raw bytes read go to tally. Reads are cut at their last newline; the
    line they cut is joined with the next read's first line (a small copy).
    check, when given, is called with every range of complete raw lines, in
    order, before its segments are yielded (CtfCheck).
    """
    check = check or (lambda data, start, end: None)
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
                check(line, 0, len(line))
                yield from segments(line, 0, len(line))
            else:
                start = 0
            cut = data.rfind(b"\n") + 1
            if start < cut:
                check(data, start, cut)
                yield from segments(data, start, cut)
            carry = [data[cut:]] if cut < len(data) else []
        if carry:  # the last line has no newline
            line = b"".join(carry) + b"\n"
            check(line, 0, len(line))
            yield from segments(line, 0, len(line))


def scan(paths):
    """Pass 1: the source's sha256, and each file's bytes and samples; *.ctf files are checked."""
    sizes, counts = [], []
    with Tally() as tally:
        for path in paths:
            before = tally.bytes
            check = CtfCheck(path) if is_ctf(path) else None
            counts.append(sum(data.count(b"\n", start, end) for data, start, end in blocks(path, tally, check)))
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


def identity(status):
    """What changes when a file is replaced or written: device, inode, size, mtime."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


def read_whole_file(path, lines=True):
    """Pass 1 of replicate and presplit for one file: {"sha256", "bytes", "samples", "stat"}.

    lines: count and check the lines of a *.ctf file ("samples"; None for
    other files, or when lines is false). ShardError if the file changed while
    it was read.
    """
    before = os.stat(path)
    samples = None
    with Tally() as tally:
        if lines and is_ctf(path):
            samples = sum(data.count(b"\n", start, end) for data, start, end in blocks(path, tally, CtfCheck(path)))
        else:
            with open(path, "rb", buffering=0) as stream:
                while data := stream.read(CHUNK):
                    tally.update(data)
        digest = tally.hexdigest()
    after = os.stat(path)
    if identity(before) != identity(after) or tally.bytes != after.st_size:
        raise ShardError("source file %s changed while it was being read: run again" % path)
    return {"sha256": digest, "bytes": tally.bytes, "samples": samples, "stat": after}


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


def fsync_path(path):
    """fsync a file's data or a folder's entries, by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ShardFiles:
    """The temporary shard files of pass 2; open() and write() run on the writer thread."""

    def __init__(self, out, names):
        self.temps = [temp_path(out, name) for name in names]
        self.started = set()
        self.target = None

    def close(self):
        if self.target is not None:
            self.target.close()
            self.target = None

    def open(self, rank):
        """Write on to rank's shard from here: a re-placed shard takes several runs of the source."""
        self.close()
        if rank in self.started:
            self.target = open(self.temps[rank], "ab")
        else:
            self.target = create(self.temps[rank])
            self.started.add(rank)

    def write(self, data):
        self.target.write(data)

    def finish(self):
        self.close()
        for rank in sorted(self.started):
            fsync_path(self.temps[rank])

    def discard(self):
        self.close()
        for temp in self.temps:
            remove(temp)


def write_manifest_temp(out, manifest):
    path = temp_path(out, MANIFEST)
    try:
        with create(path) as target:
            target.write(dataset_manifest.encode(manifest))
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
            fsync_path(out)
        for temp, entry in shard_temps:
            final = os.path.join(out, entry["shard"])
            previous = None
            if os.path.exists(final):
                previous = temp_path(out, entry["shard"], "old")
                os.replace(final, previous)
            moved.append((final, previous))
            os.replace(temp, final)
        fsync_path(out)  # the shards are in place before the manifest that describes them
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
    fsync_path(out)
    for _, previous in moved:
        if previous is not None:
            remove(previous)
    if aside is not None:
        remove(aside)


def copy_to_temp(source, temp, sha256):
    """Copy source to the new file temp, fsynced; ShardError (and no temp) if its bytes are not sha256's."""
    try:
        with Tally() as tally, create(temp) as target, open(source, "rb", buffering=0) as stream:
            while data := stream.read(CHUNK):
                tally.update(data)
                target.write(data)
            target.flush()
            os.fsync(target.fileno())
            if tally.hexdigest() != sha256:
                raise ShardError("source file %s changed while it was being copied: run again" % source)
    except BaseException:
        remove(temp)
        raise


def place_temp(out, source, entry, status):
    """A hidden temporary file in out with source's bytes: a hard link when the filesystem allows, else a copy.

    status is the source's os.stat from pass 1: a link to a file that is no
    longer that one (replaced or written since) is refused.
    """
    temp = temp_path(out, entry["shard"])
    try:
        os.link(source, temp)
    except OSError:  # another filesystem, links not allowed (protected_hardlinks) or not supported
        copy_to_temp(source, temp, entry["sha256"])
        return temp
    try:
        if identity(os.stat(temp)) != identity(status):
            raise ShardError("source file %s changed while it was being read: run again" % source)
        fsync_path(temp)  # the source's data, if it was not on disk yet
    except BaseException:
        remove(temp)
        raise
    return temp


def data_file_matches(path, entry, source_status):
    """True when path is a regular file with the entry's bytes: the source itself (a hard link), or its sha256."""
    try:
        status = os.lstat(path)
        if not stat.S_ISREG(status.st_mode) or status.st_size != entry["bytes"]:
            return False
        if (status.st_dev, status.st_ino) == (source_status.st_dev, source_status.st_ino):
            return True
        return file_sha256(path) == entry["sha256"]
    except OSError:
        return False


def lock(out, shared=False):
    """Hold a flock on the directory itself (no lock file in DIR): one run at a time, --check beside none."""
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
    return fd


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


def remove_stale(out, manifest, old, test):
    removed = stale_files(out, manifest, old, test)
    for stale in removed:
        remove(os.path.join(out, stale))
    if removed:
        fsync_path(out)
    return removed


def clean_leftovers(out):
    for stray in os.listdir(out):
        if TEMP_RE.fullmatch(stray):  # left by a run that was killed
            remove(os.path.join(out, stray))



def spool_offset(spool, marks, line):
    """The byte offset in spool (a file descriptor) where its line-th line starts; marks are (lines, offset)
    before each written segment, ascending, the last one the end."""
    index = bisect.bisect_right(marks, (line, float("inf"))) - 1
    lines, offset = marks[index]
    if lines == line:
        return offset
    data = os.pread(spool, marks[index + 1][1] - offset, offset)
    at = -1
    for _ in range(line - lines):
        at = data.index(b"\n", at + 1)
    return offset + at + 1


def copy_range(spool, target, start, end):
    """sha256 of spool's bytes [start, end), written to target (a path) unless it is None."""
    digest = hashlib.sha256()
    stream = create(target) if target is not None else None
    try:
        while start < end:
            data = os.pread(spool, min(CHUNK, end - start), start)
            if not data:
                raise ShardError("the spool of the cut ended early: run again")
            digest.update(data)
            if stream is not None:
                stream.write(data)
            start += len(data)
        if stream is not None:
            stream.flush()
            os.fsync(stream.fileno())
    finally:
        if stream is not None:
            stream.close()
    return digest.hexdigest()
