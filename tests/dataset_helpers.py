"""Shared by the data step's tests (tests/unit/plugins/module_utils/test_dataset_*.py and
tests/unit/plugins/modules/test_dataset_shard.py): sources written, shards read back and checked."""

import hashlib
import json

from ansible_collections.cntk.cluster.plugins.module_utils import (
    dataset_ctf, dataset_cut as sd, dataset_io, dataset_split, dataset_whole_files)
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import STAT_CACHE


def ctf_lines(count, start=0):
    return ["%d |features %d %.2f |labels 0 1\n" % (i, i, i / 7) for i in range(start, start + count)]


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def samples_of(text):
    """What the shards should hold: the non-blank lines, each ending in exactly one newline."""
    return [line.rstrip("\r") + "\n" for line in text.split("\n") if line.strip()]


def shard_texts(out):
    manifest = json.loads((out / "manifest.json").read_text())
    return [(out / entry["shard"]).read_bytes().decode() for entry in manifest["shards"]]  # no newline translation


def assert_consistent(out):
    """The manifest, if any, describes exactly the shard files present."""
    path = out / "manifest.json"
    if not path.exists():
        return None
    manifest = json.loads(path.read_text())
    for entry in manifest["shards"]:
        data = (out / entry["shard"]).read_bytes()
        assert len(data) == entry["bytes"], entry["shard"]
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["shard"]
        if "samples" in entry:  # line files; a binary file of replicate or presplit has none
            assert data.count(b"\n") == entry["samples"], entry["shard"]
    return manifest


def listing(out):
    """The directory's files but the quick check's stat cache."""
    return sorted(p for p in out.iterdir() if p.name != STAT_CACHE)


def snapshot(out):
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_ino, p.read_bytes()) for p in listing(out)}


def patch_everywhere(monkeypatch, name, value):
    """Replace name in every dataset module that holds it (a function is called from the module it was imported to)."""
    for module in (sd, dataset_split, dataset_whole_files, dataset_io, dataset_ctf):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, value)



def full_snapshot(out):
    """Every file in out, the stat cache too: what --check must leave exactly as it was."""
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_ino, p.read_bytes()) for p in sorted(out.iterdir())}


def manifest_of(out):
    return json.loads((out / "manifest.json").read_text())


def demo_ctf_line(features=64, labels=10, value="0.8125"):
    """A line shaped as the demo's data: dense |features and one-hot |labels."""
    return ("|features " + " ".join([value] * features) + " |labels " + " ".join(["0"] * (labels - 1) + ["1"])
            + "\n")


def hostile_ctf_files(folder, lines=1000):
    """{name: (path, the line the check must refuse)}: CTF files shaped as the demo's with one bad line where a
    backtracking check pays most (a misspelled stream after every value), a 1 MB line among short ones, and a
    file of bad lines only; "clean" and "wide_clean" (line 0: nothing to refuse) are their shapes without a fault."""
    good = demo_ctf_line()
    wide = demo_ctf_line(features=1024, value="12")
    files = {
        "clean": (good * lines, 0),
        "bad_name_line_700": (good * 699 + good.replace("|labels", "|lables") + good * (lines - 700), 700),
        "bad_name_last_line": (good * (lines - 1) + good.replace("|labels", "|lables").rstrip("\n"), lines),
        "wide_clean": (wide * lines, 0),
        "wide_bad_name_line_700": (wide * 699 + wide.replace("|labels", "|lables") + wide * (lines - 700), 700),
        "wide_bad_name_last_line": (wide * (lines - 1) + wide.replace("|labels", "|lables"), lines),
        "one_1mb_line": (good * 500 + demo_ctf_line(features=(1 << 20) // 7) + good * 499, 501),
        "only_bad_lines": (good.replace(" 1\n", " 1;\n") * lines, 1),  # not a value: no line is CTF
    }
    out = {}
    for name, (text, bad_line) in files.items():
        out[name] = (write(folder / name / "train.ctf", text), bad_line)
    return out
