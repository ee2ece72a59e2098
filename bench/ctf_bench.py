#!/usr/bin/env python3
"""The data step's CTF check on hostile files against a clean one, side by side in one run.

    bench/ctf_bench.py [--repeat 3]

The files are tests/dataset_helpers.py's hostile_ctf_files (the ones the size tests refuse): demo-shaped lines
(64 and 1,024 values) with a misspelled stream on line 700 or the last line, a 1 MB line among short ones, bad
lines only, and a clean file of as many lines. Each is checked on both of the check's paths (one regex over each read, Python 3.11.7+; line by
line, older Pythons), the median of --repeat runs, by CtfCheck over the file's bytes as the data step's read
hands them (dataset_io.blocks). MB/s counts the bytes up to the refused line (what the check
had to read); the ratio is the clean file's MB/s (the same line width without the fault) over the file's: near 1 means a
bad file costs what a clean one does. Writes bench/results/ctf.json and bench/results/ctf.md.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ansible_collections.cntk.cluster.plugins.module_utils import dataset_ctf  # PYTHONPATH=.collections
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import ShardError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the files the size tests use, made by one helper
from dataset_helpers import hostile_ctf_files  # noqa: E402  pylint: disable=wrong-import-position

RESULTS = ROOT / "bench" / "results"


def checked_bytes(path, bad_line):
    """The bytes the check reads up to and including the refused line (the whole file when none)."""
    data = path.read_bytes()
    if not bad_line:
        return len(data)
    at = 0
    for _ in range(bad_line):
        found = data.find(b"\n", at)
        at = len(data) if found < 0 else found + 1
    return at


def check_once(path):
    """The check alone over the file's bytes, as one read of the data step hands it (a file under 8 MiB is one
    read): no file, thread or hashing cost, which would swamp a file refused at its first line."""
    data = path.read_bytes()
    data += b"" if data.endswith(b"\n") else b"\n"
    started = time.perf_counter()
    try:
        dataset_ctf.CtfCheck(str(path))(data, 0, len(data))
        refused = ""
    except ShardError as exc:
        refused = str(exc).split(": ", 1)[0]
    return time.perf_counter() - started, refused


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    fast_block = dataset_ctf.CTF_BLOCK
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        files = hostile_ctf_files(Path(folder))
        for path_name, block in (("one regex", fast_block), ("line by line", None)):
            dataset_ctf.CTF_BLOCK = block
            for name, (path, bad_line) in files.items():
                times = []
                for _ in range(args.repeat):
                    seconds, refused = check_once(path)
                    times.append(seconds)
                size = checked_bytes(path, bad_line)
                median = statistics.median(times)
                rows.append({"path": path_name, "file": name, "bytes_checked": size, "seconds": round(median, 4),
                             "mb_per_s": round(size / median / 1e6, 1),
                             "refused_at": refused.rsplit("/", 1)[-1] if refused else ""})
    dataset_ctf.CTF_BLOCK = fast_block
    for row in rows:
        base = "wide_clean" if row["file"].startswith("wide") else "clean"  # the same shape without the fault
        clean = next(r for r in rows if r["path"] == row["path"] and r["file"] == base)
        row["clean_over_this"] = round(clean["mb_per_s"] / row["mb_per_s"], 2)
    figures = {"machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
               "date": time.strftime("%Y-%m-%d %H:%M"), "load_average": list(os.getloadavg()[:2]),
               "repeat": args.repeat, "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ctf.json").write_text(json.dumps(figures, indent=2) + "\n")
    lines = ["# The CTF check on hostile files against a clean one", "",
             f"{figures['date']}, {figures['machine']}, load {figures['load_average'][0]:.1f}; median of "
             f"{args.repeat} runs each (bench/ctf_bench.py). MB/s counts the bytes read up to the refused line; "
             "the last column is the clean file's MB/s (of the same line width) over this file's (1.0: as fast as clean).", "",
             "| check | file | bytes checked | refused at | s | MB/s | clean / this |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: |"]
    for row in rows:
        lines.append(f"| {row['path']} | {row['file']} | {row['bytes_checked']} | {row['refused_at'] or '-'} | "
                     f"{row['seconds']} | {row['mb_per_s']} | {row['clean_over_this']} |")
    (RESULTS / "ctf.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
