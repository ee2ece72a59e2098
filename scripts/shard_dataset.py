#!/usr/bin/env python3
"""Lay a training set out for MPI ranks in a directory, and write a manifest.

    shard_dataset.py --source PATH --ranks W --out DIR [--layout shard|replicate|presplit]
                     [--name NAME] [--test-name FILE] [--verify] [--check]

Runs on the Ansible controller (standard library only; Python 3.8 or newer,
3.11 or newer for the fast CTF check) and, for a shared filesystem, on the
head node. Ansible calls it with ansible.builtin.command and reads the one
JSON line it prints:

    {"changed": bool, "manifest": "DIR/manifest.json", "layout": layout,
     "samples": n or null, "ranks": W, "files": how many data files DIR holds,
     "bytes": their total bytes, "seconds": t, "removed": [stale files removed]}

Errors go to stderr, exit status 2 for bad input (the message names the value
and the fix) and 1 when the file system fails.

Layouts (--layout, default shard):

  shard      Any line-based text file, one sample a line: CTF, or a CNTK map
             file. The source is a file, or a directory whose non-hidden
             regular files (not recursive), which must all share one
             extension, are read in sorted name order and concatenated. A
             sample is one non-blank line (a line of only spaces, tabs, CR, VT
             or FF is blank and skipped); a file's last line ends at the end of
             the file, newline or not, so two files never merge into one line.
             Output lines are the source lines verbatim but for their end: each
             ends with exactly one "\\n" (the "\\r" of a CRLF is dropped). W
             shards balanced by samples (sizes differ by at most one, shard r
             holds floor((r+1)*n/W) - floor(r*n/W) of the n samples), every
             non-blank line in exactly one shard, each shard's lines in source
             order. A fresh layout is contiguous: shard r holds samples
             [floor(r*n/W), floor((r+1)*n/W)), so the shards concatenated in
             rank order are the source's non-blank lines. Fewer samples than
             ranks is refused.
             Another rank count (nodes added or removed): when DIR's manifest
             is a split of this very source (same bytes, files and samples)
             for another W, the shards are re-placed, not laid out fresh, so
             that little moves: every rank that was there keeps the first of
             its old samples, up to its new size (its new shard is then a
             prefix of its old file when it shrinks); the samples no rank
             keeps (the cut tails, the ranks that are gone) go in source order,
             one contiguous run each, to the ranks that need more (new ranks,
             ranks that grew), in rank order. Adding nodes moves only the new
             ranks' share; removing them, only the gone ranks' samples. A
             changed source, or no usable manifest, is laid out fresh.
  replicate  Every rank reads the whole data set: a file, or a directory's
             non-hidden regular files (flat), kept under their own names.
  presplit   The user split the data already: a directory of exactly W
             non-hidden regular files, any format (binary too), taken in
             sorted name order; file i is rank i's.

The source's files are never changed. replicate and presplit files are the
source files byte for byte (an empty one, or a *.ctf one with no samples, is
refused): hard links to them when DIR is on the same filesystem (and the link
is allowed), else copies; do not edit files in DIR, a hard link is the source.

CTF check: in every layout a source file named *.ctf is checked line by line
before anything is written, and the first malformed line is refused (exit 2)
as "<file>:<line>: <what is wrong>". A CTF line is [sequence id] followed by
one or more fields "|stream v v ..." where stream matches [A-Za-z_][A-Za-z0-9_]*
and every value is a number (1, -0.5, .5, 1e-3) or a sparse index:value
(3:0.5); a field "|#..." is a comment up to the next "|". Only a source read
anew is checked: one whose bytes the manifest already describes was checked
when the manifest was made. It runs inside the first pass, which reads the
source anyway: with Python 3.11 one compiled regular expression over each
8 MiB read (possessive quantifiers, no backtracking), about 1.3 s of CPU per
100 MB of dense CTF (64 values a line), on top of about 1 s for the rest of a
first split; older Pythons match line by line, about 2.2 s per 100 MB.

Output names in DIR:

  shard      shard-{r:05d}{ext} for r in 0..W-1, ext the source's extension
             (shard-00000.ctf for a CTF source; no extension, none)
  replicate  each source file's own name (letters, digits, _ . + -; not
             manifest.json)
  presplit   shard-{i:05d}{ext of file i} for the i-th source file

DIR/manifest.json:

    {"name":   --name, or the source's name without its extension,
     "layout": "shard" | "replicate" | "presplit",
     "source": absolute path of --source,
     "source_sha256": shard: sha256 of the source bytes exactly as read, of
              the file or of the directory's files concatenated in sorted name
              order (what `cat DIR/* | sha256sum` prints); replicate and
              presplit: sha256 of the lines "<sha256>  <name>\\n" of the
              source files in order (what `sha256sum *` prints, hashed),
     "samples": n, the non-blank lines; replicate and presplit: the sum over
              their files when every file is *.ctf, else null,
     "ranks":  W,
     "test":   --test-name, the test set's name beside the data, or null,
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

So an entry is read by one rank ("rank": an int) or by every rank ("ranks":
"all", replicate only); a node holds the entries of its ranks, or all of them.

Idempotent: when DIR/manifest.json already describes this source and layout
and every data file it lists exists with its recorded size and sha256, no data
file is written (changed=false; a new name, test name or rank count of a
replicate layout only rewrites the manifest). Otherwise the data files to
write (shard: all of them; replicate, presplit: the missing or damaged ones)
and the manifest are written to hidden temporary files in DIR and fsynced, the
old manifest is set aside, the files are moved into place with os.replace and
the manifest last; files that the new manifest does not list and that either
look like shards (shard-NNNNN.*) or the old manifest listed are then removed
(other files in DIR, such as the shared filesystem's test set, are left
alone). If a move fails, the old files and manifest are put back. So a run
that fails or is killed leaves the old manifest with its files, the new
manifest with its files, or (killed while moving) no manifest, and the next
run lays the data out again: never a manifest that describes files that are
not there. One run at a time per DIR (flock).

Speed (shard): two streaming passes in 8 MiB reads (count, check and hash,
then write), memory bounded by a few chunks. sha256 and writes, which release
the GIL, run on worker threads beside the line scanning. The second pass
hashes the source again; if it changed in between, nothing is committed. A
rerun whose source files have the sizes the manifest records only hashes the
source (while a thread checks the shards): when the hash matches, the
manifest's sample counts hold too, so the lines are not counted or checked
again. replicate and presplit: one pass that hashes (and checks *.ctf), then
a link or a copy per changed file.

Quick check: after each run DIR/.stat.json records the size and mtime of
every source file and data file and the manifest's sha256. When all of them
are unchanged, a rerun hashes nothing and returns at once (changed=false), as
rsync's and make's quick checks do. --verify hashes everything regardless.

--check: validate only and write nothing (no directory, no temporary file, no
.stat.json); print the same JSON line for what a run would produce ("changed":
whether it would write or remove anything, judged by sizes, mtimes and the
source's hash; "removed": what it would remove) or exit 2 with the message a
run would give. When .stat.json shows the source unchanged since the manifest
was made, it answers from the manifest without reading the source; when only
its mtimes changed, it hashes the source and, the hash being the manifest's,
neither counts nor checks the lines again.

Python API: shard(source, ranks, out, name=None, verify=False, layout="shard",
test=None, check=False) returns the report dict and raises ShardError for bad
input.
"""

import argparse
import fcntl
import hashlib
import json
import os
import re
import secrets
import stat
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

CHUNK = 8 << 20  # bytes per read
MANIFEST = "manifest.json"
STAT_CACHE = ".stat.json"
LAYOUTS = ("shard", "replicate", "presplit")
# A name written into DIR and sent to the nodes: no path, option or template characters.
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
EXT_RE = re.compile(r"(?:\.[A-Za-z0-9_+-]+)?")
SHARD_RE = re.compile(r"shard-\d{5,}(?:\.[A-Za-z0-9_+-]+)?")
# The hidden files of a run that was killed: .shard-00000.ctf.<hex>.tmp, .manifest.json.<hex>.old, ...
TEMP_RE = re.compile(r"\.[A-Za-z0-9_][A-Za-z0-9_.+-]*\.[0-9a-f]{12}\.(?:tmp|old)")
# A newline followed by a blank line: only spaces, tabs, CR, VT or FF up to the next newline.
BLANK_AFTER_NEWLINE = re.compile(rb"\n(?=[ \t\r\x0b\x0c]*\n)")
WHAT = {"shard": "pass --source a line-based training file (CTF) or a directory of them",
        "replicate": "pass --source the file, or the directory of files, that every rank reads",
        "presplit": "pass --source the directory that holds one file per rank"}


class ShardError(Exception):
    """Bad input; the message names the value and the fix (exit status 2)."""


def shard_name(rank, ext=".ctf"):
    return "shard-%05d%s" % (rank, ext)


def extension(path):
    return os.path.splitext(os.path.basename(path))[1]


def is_ctf(path):
    return extension(path).lower() == ".ctf"


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


# --- the CTF check ---------------------------------------------------------

def _ctf_patterns(p):
    """(one line or blank line, a stream name, one value); p is "+" for possessive quantifiers, else ""."""
    digits = "[0-9]+" + p
    exponent = "(?:[eE][-+]?" + p + digits + ")?" + p
    number = "[-+]?" + p + "(?:" + digits + r"(?:\.[0-9]*" + p + ")?" + p + r"|\.[0-9]+" + p + ")" + exponent
    plain = digits + r"(?:\.[0-9]+" + p + ")?" + p  # 0 and 0.8125, most values: tried first
    value = "(?:" + plain + "|" + digits + ":" + number + "|" + number + ")"
    name = "[A-Za-z_][0-9A-Za-z_]*" + p
    field = (r"\|(?:#[^|\n]*" + p + "|" + name + r"(?:[ \t]+" + p + value + r"(?=[ \t|\r\n]))*" + p
             + r"[ \t]*" + p + ")")
    line = (r"(?:[ \t\r\x0b\x0c]*" + p + r"\n|[ \t]*" + p + "(?:" + digits + r"[ \t]*" + p + ")?" + p
            + "(?:" + field + ")+" + p + r"\r*" + p + r"\n)")
    return line, name, value


try:  # Python 3.11+: every quantifier possessive, a whole read in one match
    _LINE, _, _ = _ctf_patterns("+")
    CTF_BLOCK = re.compile(("(?:" + _LINE + ")*+").encode())
except re.error:  # older Pythons: line by line, backtracking (bounded: fields and values are delimited)
    CTF_BLOCK = None
_LINE, _NAME, _VALUE = _ctf_patterns("")
CTF_LINE = re.compile(_LINE.encode())
CTF_NAME = re.compile(_NAME)
CTF_VALUE = re.compile(_VALUE)


def ctf_problem(line):
    """What is wrong with one CTF line (bytes) that the pattern refused, in words."""
    text = line.rstrip(b"\n").rstrip(b"\r").decode("utf-8", "replace")
    if "|" not in text:
        return ("no |stream field (a CTF line is [sequence id] |stream value value ... |stream ...): %r"
                % text[:80])
    head, *fields = text.split("|")
    if head.strip(" \t") and not re.fullmatch(r"[ \t]*[0-9]+[ \t]*", head):
        return "%r before the first |stream field is not a sequence id (digits)" % head.strip()[:80]
    for field in fields:
        if field.startswith("#"):
            continue
        name = re.match(r"[^ \t]*", field).group()
        if not name:
            return "a | with no stream name after it"
        if not CTF_NAME.fullmatch(name):
            return "stream name %r is not a name ([A-Za-z_][A-Za-z0-9_]*)" % name[:80]
        for token in re.split(r"[ \t]+", field[len(name):].strip(" \t")):
            if token and not CTF_VALUE.fullmatch(token):
                return ("value %r of |%s is neither a number nor a sparse index:value"
                        % (token[:80], name))
    return "not a CTF line: %r" % text[:80]


def ctf_shape(line):
    """(sequence id given, {stream: number of values, or None when sparse}) of one valid CTF line (bytes)."""
    text = line.rstrip(b"\n").rstrip(b"\r").decode("utf-8", "replace")
    head, *fields = text.split("|")
    shape = {}
    for field in fields:
        if field.startswith("#"):
            continue
        name, _, rest = field.partition(" ") if " " in field.split("\t")[0] else field.partition("\t")
        values = rest.split()
        shape[name.strip()] = None if any(":" in value for value in values) else len(values)
    return bool(head.strip()), shape


def _shape_pattern(seq, shape):
    """A regex of the lines shaped as the first one: its dense streams with as many values, in its order (no
    sequence id), or any of its streams in any order (with sequence ids, which may leave streams out)."""
    p = "+" if CTF_BLOCK is not None else ""
    value = "(?:[ \t]+" + p + _VALUE + r"(?=[ \t|\r\n]))"
    comment = r"\|#[^|\n]*" + p
    fields = [r"\|" + re.escape(name) + (value + ("{%d}" % count if count is not None else "*" + p)) + r"[ \t]*" + p
              for name, count in shape.items()]
    if seq:
        body = r"[ \t]*" + p + "(?:[0-9]+" + p + r"[ \t]*" + p + ")?" + p + "(?:" + "|".join(fields + [comment]) \
            + ")+" + p
    else:
        between = "(?:" + comment + ")*" + p
        body = r"[ \t]*" + p + between + between.join(fields) + between
    return re.compile(("(?:" + body + r"\r*" + p + r"\n)*" + p).encode())


class CtfCheck:
    """Checks the complete lines of one file's reads in order; counts the file's lines for the message.

    Every line must be CTF and agree with the file's first line: without sequence ids, the same streams (in
    any order), a dense stream with as many values (its dimension); with sequence ids, where a line may leave
    streams out, every dense stream with the values it had where it first appeared. One regex per read; a
    line it stops at is looked at alone."""

    def __init__(self, path):
        self.path = path
        self.lines = 0  # lines of the file before the range being checked
        self.seq = None  # whether the file's first line has a sequence id
        self.dims = None  # stream -> values (None: sparse), from the first line (and, with ids, later ones)
        self.pattern = None

    def __call__(self, data, start, end):
        if CTF_BLOCK is not None:
            bad = CTF_BLOCK.match(data, start, end).end()
        else:
            bad = start
            while bad < end:
                match = CTF_LINE.match(data, bad, end)
                if match is None:
                    break
                bad = match.end()
        if bad != end:
            number = self.lines + data.count(b"\n", start, bad) + 1
            line = data[bad:data.index(b"\n", bad, end) + 1]
            raise ShardError("%s:%d: %s" % (self.path, number, ctf_problem(line)))
        self._check_shape(data, start, end)
        self.lines += data.count(b"\n", start, end)

    def _check_shape(self, data, start, end):
        at = start
        while at < end:
            if self.pattern is not None:
                at = self.pattern.match(data, at, end).end()
                if at == end:
                    return
            line_end = data.index(b"\n", at, end) + 1
            if not data[at:line_end].strip():
                at = line_end
                continue
            seq, shape = ctf_shape(data[at:line_end])
            if self.dims is None:
                self.seq, self.dims = seq, dict(shape)
            else:
                problem = self._shape_problem(shape)
                if problem:
                    number = self.lines + data.count(b"\n", start, at) + 1
                    raise ShardError("%s:%d: %s" % (self.path, number, problem))
                if not self.seq and list(shape) != list(self.dims):
                    at = line_end  # the same streams in another order: this line alone
                    continue
                for name, count in shape.items():
                    self.dims.setdefault(name, count)
            self.pattern = _shape_pattern(self.seq, self.dims)
            at = line_end

    def _shape_problem(self, shape):
        names = ", ".join("|" + name for name in self.dims)
        for name, count in shape.items():
            if name not in self.dims:
                if self.seq:
                    continue  # a stream a sequence gives first here
                return ("stream |%s is not in the file's first line (%s): every line gives the same streams"
                        % (name, names))
            known = self.dims[name]
            if (known is None) != (count is None) or (known is not None and count != known):
                return ("stream |%s has %s where %s has %s (its dimension): every line of a stream has as many "
                        "values" % (name, "sparse values" if count is None else "%d values" % count,
                                    "the file's first line" if not self.seq else "its first line",
                                    "sparse values" if known is None else "%d" % known))
        missing = [name for name in self.dims if name not in shape]
        if missing and not self.seq:
            return "stream %s is missing: the file's first line gives %s" % (", ".join("|" + m for m in missing),
                                                                            names)
        return ""


# --- reading ---------------------------------------------------------------

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
        for temp in self.temps:
            fsync_file(temp)

    def discard(self):
        self.close()
        for temp in self.temps:
            remove(temp)


def write_shards(paths, out, ranks, source_sha256, sizes, counts, names=None, ranges=None):
    """Pass 2: write every shard to a temporary file in out; return [(temp path, manifest entry)] by rank.

    ranges: each rank's source ranges (placement(); default a fresh split).
    sizes, counts and source_sha256 are pass 1's; if this read differs in any,
    the source changed in between: ShardError, and no file is left. Three
    worker threads hash the source, hash the shards and write them while this
    one finds the lines.
    """
    names = names or [shard_name(r) for r in range(ranks)]
    samples = sum(counts)
    ranges = ranges or placement(samples, ranks)
    # The source's runs in order: (first sample after the run, its rank).
    runs = sorted((end, rank) for rank in range(ranks) for start, end in ranges[rank])
    changed = ShardError("source changed while it was being sharded: run again")
    files = ShardFiles(out, names)
    digests = [hashlib.sha256() for _ in range(ranks)]
    sizes_out = [0] * ranks
    with Serial() as writer, Serial() as hasher, Tally() as tally:
        try:
            run = 0  # the run being filled
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
                        writer(files.write, part)
                        hasher(digests[rank].update, part)
                        sizes_out[rank] += len(part)
                        done += take
                        lines -= take
                        if done == runs[run][0] and run + 1 < len(runs):
                            run += 1
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


def fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        fsync_file(temp)  # the source's data, if it was not on disk yet
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


# --- the check for "nothing to do" -------------------------------------------

def read_manifest(out):
    try:
        with open(os.path.join(out, MANIFEST), "rb") as stream:
            manifest = json.load(stream)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def shard_files_match(out, manifest, stop=None):
    """True when every data file the manifest lists exists with its recorded size and sha256.

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
    with open(os.path.join(out, MANIFEST), "rb") as handle:
        manifest_bytes = handle.read()
    temporary = os.path.join(out, STAT_CACHE + ".tmp")
    with open(temporary, "w") as handle:
        json.dump(stat_cache(out, paths, manifest_bytes, json.loads(manifest_bytes)), handle)
    os.replace(temporary, os.path.join(out, STAT_CACHE))


def lock(out, shared=False):
    """Hold a flock on the directory itself (no lock file in DIR): one run at a time, --check beside none."""
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
    return fd


def remove_stale(out, manifest, old, test):
    removed = stale_files(out, manifest, old, test)
    for stale in removed:
        remove(os.path.join(out, stale))
    if removed:
        fsync_dir(out)
    return removed


def clean_leftovers(out):
    for stray in os.listdir(out):
        if TEMP_RE.fullmatch(stray):  # left by a run that was killed
            remove(os.path.join(out, stray))


def report(changed, out, manifest, ranks, removed, started):
    return {"changed": changed, "manifest": os.path.join(out, MANIFEST), "layout": manifest["layout"],
            "samples": manifest["samples"], "ranks": ranks, "files": len(manifest["shards"]),
            "bytes": sum(entry["bytes"] for entry in manifest["shards"]),
            "seconds": round(time.monotonic() - started, 3), "removed": removed}


# --- shard: split the lines ------------------------------------------------

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


def split(paths, out, names, expect, verify, started):
    """The shard layout (see the module doc)."""
    ranks = expect["ranks"]
    unchanged = unchanged_report(out, paths, expect, verify, started)
    if unchanged is not None:
        return unchanged

    def same_files(manifest):  # cheap look: the source files of the sizes the manifest records
        try:
            return [(f["name"], f["bytes"]) for f in manifest["files"]] == \
                [(os.path.basename(p), os.path.getsize(p)) for p in paths]
        except (OSError, KeyError, TypeError):
            return False

    def worth_verifying(manifest):  # cheap look before hashing the old shards
        return manifest.get("ranks") == ranks and same_files(manifest)

    held = old = verified = None
    verifier, stop = Serial(), threading.Event()
    try:
        counts = None
        if os.path.isdir(out):
            held = lock(out)
            old = read_manifest(out)
            if old is not None and same_files(old):
                # Likely nothing to do: while the source is hashed, check the old shards on
                # another thread. If the source's bytes are those the old manifest was made
                # from, so are its samples, and the lines need not be counted or checked again
                # (a manifest of this script's split was made from checked lines).
                if worth_verifying(old):
                    verified = verifier(shard_files_match, out, old, stop)
                source_sha256, sizes = source_sha256_only(paths)
                try:
                    if old.get("layout") == "shard" and source_sha256 == old["source_sha256"] \
                            and sizes == [f["bytes"] for f in old["files"]] \
                            and all(isinstance(f["samples"], int) and f["samples"] >= 0 for f in old["files"]):
                        counts = [f["samples"] for f in old["files"]]
                except (KeyError, TypeError):
                    pass

        if counts is None:
            source_sha256, sizes, counts = scan(paths)  # pass 1
        samples = sum(counts)
        too_few(samples, ranks, expect["source"])
        manifest = {"name": expect["name"], "layout": "shard", "source": expect["source"],
                    "source_sha256": source_sha256, "samples": samples, "ranks": ranks, "test": expect["test"],
                    "files": [{"name": os.path.basename(p), "bytes": size, "samples": count}
                              for p, size, count in zip(paths, sizes, counts)],
                    "shards": None}

        if held is None:
            os.makedirs(out, exist_ok=True)
            held = lock(out)
            old = read_manifest(out)  # another run may have made it meanwhile
            if old is not None and worth_verifying(old):
                verified = verifier(shard_files_match, out, old, stop)
        clean_leftovers(out)

        # The last split of this same source, for another rank count too: keep what each rank holds.
        ranges = placement(samples, ranks, previous_ranges(old, samples) if same_source(old, manifest) else None)
        expected = [(names[r], r, sum(end - start for start, end in ranges[r]), ranges[r]) for r in range(ranks)]
        if verified is not None and describes(old, manifest, expected) and verified.result():
            manifest["shards"] = [dict({key: entry[key] for key in ("shard", "rank", "samples", "bytes", "sha256")},
                                       ranges=ranges[entry["rank"]]) for entry in old["shards"]]
            changed = old != manifest  # a new name, test or source path: rewrite the manifest only
            if changed:
                commit(out, [], write_manifest_temp(out, manifest))
        else:
            shard_temps = write_shards(paths, out, ranks, source_sha256, sizes, counts, names, ranges)  # pass 2
            manifest["shards"] = [entry for _, entry in shard_temps]
            try:
                manifest_temp = write_manifest_temp(out, manifest)
            except BaseException:
                for temp, _ in shard_temps:
                    remove(temp)
                raise
            commit(out, shard_temps, manifest_temp)
            changed = True

        removed = remove_stale(out, manifest, old, expect["test"])
        changed = changed or bool(removed)
        write_stat_cache(out, paths)
    finally:
        stop.set()  # an error before the old shards' check ended: don't wait for it to finish
        verifier.close()
        if held is not None:
            os.close(held)
    return report(changed, out, manifest, ranks, removed, started)


# --- replicate and presplit: whole files -----------------------------------

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


def whole_file_manifest(expect, files, entries):
    listing = "".join("%s  %s\n" % (f["sha256"], f["name"]) for f in files)
    counts = [f.get("samples") for f in files]
    return {"name": expect["name"], "layout": expect["layout"], "source": expect["source"],
            "source_sha256": hashlib.sha256(listing.encode()).hexdigest(),
            "samples": None if None in counts else sum(counts), "ranks": expect["ranks"], "test": expect["test"],
            "files": files, "shards": entries}


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


# --- --check: the same answers, nothing written ------------------------------

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
            "seconds": round(time.monotonic() - started, 3), "removed": removed}


# --- the whole job ---------------------------------------------------------

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


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Lay a training set out for MPI ranks (split, replicated or presplit), "
                    "and write DIR/manifest.json.")
    parser.add_argument("--source", required=True,
                        help="a file or a directory of files (presplit: a directory, one file per rank)")
    parser.add_argument("--ranks", required=True, type=int, help="the number of MPI ranks")
    parser.add_argument("--out", required=True, help="the directory for the data files and manifest.json")
    parser.add_argument("--layout", choices=LAYOUTS, default="shard",
                        help="shard: split the lines into one shard per rank (default); replicate: every rank "
                             "reads every file; presplit: file i of the directory is rank i's")
    parser.add_argument("--name", help="the dataset's name in the manifest (default: the source's name)")
    parser.add_argument("--test-name", help="the test set's file name beside the data, recorded in the manifest")
    parser.add_argument("--verify", action="store_true",
                        help="hash the source and the data files even when sizes and mtimes are unchanged")
    parser.add_argument("--check", action="store_true",
                        help="validate only: write nothing, print what a run would produce")
    args = parser.parse_args(argv)
    try:
        report_ = shard(args.source, args.ranks, args.out, args.name, args.verify, args.layout, args.test_name,
                        args.check)
    except ShardError as error:
        print("shard_dataset.py: error: %s" % error, file=sys.stderr)
        return 2
    except OSError as error:
        print("shard_dataset.py: error: %s" % error, file=sys.stderr)
        return 1
    print(json.dumps(report_))
    return 0


if __name__ == "__main__":
    sys.exit(main())
