"""The CTF check: every line of a *.ctf source is CNTK Text Format, shaped as the file's first.

A CTF line is [sequence id] followed by one or more fields "|stream v v ..."
where stream matches [A-Za-z_][A-Za-z0-9_]* and every value is a number (1,
-0.5, .5, 1e-3) or a sparse index:value (3:0.5); a field "|#..." is a comment
up to the next "|". The first malformed line is refused as
"<file>:<line>: <what is wrong>". It runs inside the pass that reads the
source anyway: with Python 3.11.7+ one compiled regular expression over each
read (possessive quantifiers, no backtracking); older Pythons match line by
line. Lines shaped as the file's first (its streams and dimensions) are
matched by that shape's expression alone, which accepts only CTF lines.

Linear in the input whatever it holds: a value has one pattern whose branches
start with different characters (a digit, a sign, a dot), so a line has one
way to match and a line that fails is given up in one pass, on any Python
(an alternation of overlapping value patterns under a counted repetition
retried every split of a failing line's values: 2.3x more time per value).
"""

import re
import sys

from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import ShardError


def _ctf_patterns(p):
    """(one line or blank line, a stream name, one value); p is "+" for possessive quantifiers, else ""."""
    digits = "[0-9]+" + p
    exponent = "(?:[eE][-+]?" + p + digits + ")?" + p
    fraction = r"(?:\.[0-9]*" + p + ")?" + p
    number = "[-+]?" + p + "(?:" + digits + fraction + r"|\.[0-9]+" + p + ")" + exponent
    # One way to read any value: after the leading digits, ":" starts a sparse value, anything else a number.
    value = ("(?:" + digits + "(?::" + number + "|" + fraction + exponent + ")"
             + "|[-+]" + p + "(?:" + digits + fraction + r"|\.[0-9]+" + p + ")" + exponent
             + r"|\.[0-9]+" + p + exponent + ")")
    name = "[A-Za-z_][0-9A-Za-z_]*" + p
    field = (r"\|(?:#[^|\n]*" + p + "|" + name + r"(?:[ \t]+" + p + value + r"(?=[ \t|\r\n]))*" + p
             + r"[ \t]*" + p + ")")
    line = (r"(?:[ \t\r\x0b\x0c]*" + p + r"\n|[ \t]*" + p + "(?:" + digits + r"[ \t]*" + p + ")?" + p
            + "(?:" + field + ")+" + p + r"\r*" + p + r"\n)")
    return line, name, value


# Python 3.11.7+: every quantifier possessive, a whole read in one match. Python 3.11.2 (Debian 12's) has
# possessive quantifiers that accept what they should not ('|l .|f' as CTF); older Pythons have none. There,
# line by line: one way to match a line, so a failing line costs one pass too.
if sys.version_info >= (3, 11, 7):
    _LINE, _, _ = _ctf_patterns("+")
    CTF_BLOCK = re.compile(("(?:" + _LINE + ")*+").encode())
else:
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
    fields = [r"\|" + re.escape(name) + (value + ("{%d}" % count + p if count is not None else "*" + p))
              + r"[ \t]*" + p for name, count in shape.items()]
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
    line it stops at is looked at alone, and the shape's regex goes on after it."""

    def __init__(self, path):
        self.path = path
        self.lines = 0  # lines of the file before the range being checked
        self.seq = None  # whether the file's first line has a sequence id
        self.dims = None  # stream -> values (None: sparse), from the first line (and, with ids, later ones)
        self.pattern = None

    def __call__(self, data, start, end):
        while start < end:
            stop = end
            if self.pattern is not None:
                # A line shaped as the file's first is CTF too: the usual read is this one match, not two.
                at = self.pattern.match(data, start, end).end()
                self.lines += data.count(b"\n", start, at)
                start = at
                if start == end:
                    return
                stop = data.index(b"\n", start, end) + 1  # the line the shape stopped at, alone
            self._check_lines(data, start, stop)
            start = stop

    def _check_lines(self, data, start, end):
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

