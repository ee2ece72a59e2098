"""plugins/modules/dataset_shard.py run as Ansible runs it: its result, bad input refused with the reason
before anything is written, check mode, and concurrent runs on one folder."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import dataset_cut as sd
from dataset_helpers import ctf_lines, full_snapshot, shard_texts, assert_consistent, write

MODULE = Path(sd.__file__).resolve().parents[1] / "modules" / "dataset_shard.py"
# The folder that holds ansible_collections/, for the module run as a program.
COLLECTIONS = str(Path(sd.__file__).parents[5])


def module_args(*args):
    """The module's arguments for the old command line's: --source S --ranks W --out D [--layout L] [--check]."""
    args, params, check = list(map(str, args)), {}, False
    while args:
        flag = args.pop(0)
        if flag == "--check":
            check = True
        else:
            key = flag[2:].replace("-", "_")
            params[key] = int(args.pop(0)) if key == "ranks" else args.pop(0)
    return {"ANSIBLE_MODULE_ARGS": dict(params, _ansible_check_mode=check)}


def start_module(tmp_path, *args, **popen):
    """plugins/modules/dataset_shard.py run as Ansible runs it, its arguments in a file."""
    arguments = tmp_path / ("args-%s.json" % os.urandom(4).hex())
    arguments.write_text(json.dumps(module_args(*args)))
    return subprocess.Popen([sys.executable, str(MODULE), str(arguments)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=COLLECTIONS), **popen)


def run_module(tmp_path, *args):
    """The module's result: a failure carries msg and bad_input (true: refused input, false: the filesystem)."""
    process = start_module(tmp_path, *args)
    return json.loads(process.communicate(timeout=60)[0])


def test_cli_prints_json_report(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(20)))
    report = run_module(tmp_path, "--source", source, "--ranks", 2, "--out", tmp_path / "out")
    assert "failed" not in report, report.get("msg")
    assert report["changed"] is True and report["samples"] == 20 and report["ranks"] == 2
    assert report["bytes"] == source.stat().st_size and report["seconds"] >= 0
    second = run_module(tmp_path, "--source", source, "--ranks", 2, "--out", tmp_path / "out")
    assert second["changed"] is False


@pytest.mark.parametrize("setup,ranks,message", [
    (lambda d: write(d / "small.ctf", "".join(ctf_lines(3))), 4,
     "dataset has 3 samples, fewer than the 4 ranks: use fewer ranks or more data"),
    (lambda d: d / "missing.ctf", 2, "missing.ctf does not exist"),
    (lambda d: write(d / "empty.ctf", ""), 2, "has no samples (it is empty or only blank lines)"),
    (lambda d: write(d / "blank.ctf", "\n \n\r\n"), 1, "has no samples"),
    (lambda d: write(d / "data" / ".hidden.ctf", "|f 1\n").parent, 2, "has no files (hidden files and folders"),
    (lambda d: write(d / "ok.ctf", "".join(ctf_lines(3))), 0, "--ranks must be at least 1 (got 0)"),
], ids=["fewer-samples-than-ranks", "missing", "empty", "only-blank-lines", "no-files", "zero-ranks"])
def test_bad_input_exits_2_with_the_reason(tmp_path, setup, ranks, message):
    source = setup(tmp_path)
    result = run_module(tmp_path, "--source", source, "--ranks", ranks, "--out", tmp_path / "out")
    assert result["failed"] and result["bad_input"]
    assert message in result["msg"]
    assert "samples" not in result  # no report
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_concurrent_runs_on_one_directory_take_turns(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(300)))
    out = tmp_path / "out"
    out.mkdir()
    procs = [start_module(tmp_path, "--source", source, "--ranks", 3, "--out", out) for _ in range(3)]
    reports = [json.loads(proc.communicate(timeout=60)[0]) for proc in procs]
    assert sorted(report["changed"] for report in reports) == [False, False, True]
    assert "".join(shard_texts(out)) == "".join(ctf_lines(300))
    assert_consistent(out)


def test_a_directory_of_mixed_file_types_is_refused_naming_them(tmp_path):
    write(tmp_path / "src" / "a.ctf", "".join(ctf_lines(4)))
    write(tmp_path / "src" / "b.ctf", "".join(ctf_lines(4)))
    write(tmp_path / "src" / "notes.txt", "about the data\n")
    result = run_module(tmp_path, "--source", tmp_path / "src", "--ranks", 2, "--out", tmp_path / "out")
    assert result["failed"] and result["bad_input"]
    assert "mixes file types (.ctf: a.ctf, b.ctf; .txt: notes.txt)" in result["msg"]
    assert "replicate or presplit layout" in result["msg"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("line,problem", [
    ("features 1 2 3\n", "no |stream field"),
    ("|features 1 x 3 |labels 0 1\n", "value 'x' of |features is neither a number nor a sparse index:value"),
    ("|features 1 2 |2labels 0 1\n", "stream name '2labels' is not a name"),
    ("|feat.ures 1 2\n", "stream name 'feat.ures' is not a name"),
    ("|features 1 2 | 0 1\n", "a | with no stream name after it"),
    ("|features 1..2\n", "value '1..2' of |features"),
    ("|features 3:\n", "value '3:' of |features"),
    ("|features -1:0.5\n", "value '-1:0.5' of |features"),
    ("|features 1e\n", "value '1e' of |features"),
    ("|features nan\n", "value 'nan' of |features"),
    ("abc |features 1\n", "'abc' before the first |stream field is not a sequence id"),
], ids=["no-stream", "bad-value", "digit-name", "dotted-name", "empty-name", "two-dots", "sparse-no-value",
        "signed-index", "bare-exponent", "nan", "text-sequence-id"])
def test_a_malformed_ctf_line_is_refused_with_its_file_and_line(tmp_path, line, problem):
    # Line 5 of the file: blank lines and CRLFs count as lines.
    text = "|features 1 2 3 |labels 1 0\n\n|features 1 2 3 |labels 1 0\r\n  \n" + line + "|features 1 |labels 0\n"
    source = write(tmp_path / "src" / "b.ctf", text)
    write(tmp_path / "src" / "a.ctf", "".join(ctf_lines(5)))
    result = run_module(tmp_path, "--source", tmp_path / "src", "--ranks", 2, "--out", tmp_path / "out")
    assert result["failed"] and result["bad_input"]
    assert result["msg"].startswith("%s:5: " % source), result["msg"]
    assert problem in result["msg"]
    assert not (tmp_path / "out").exists()  # refused before anything was written
    check = run_module(tmp_path, "--source", tmp_path / "src", "--ranks", 2, "--out", tmp_path / "out", "--check")
    assert (check["bad_input"], check["msg"]) == (True, result["msg"])


def test_presplit_needs_one_file_per_rank(tmp_path):
    for i in range(3):
        write(tmp_path / "parts" / ("p%d.bin" % i), b"x")
    result = run_module(tmp_path, "--source", tmp_path / "parts", "--ranks", 4, "--out", tmp_path / "out",
                        "--layout", "presplit")
    assert result["failed"] and result["bad_input"]
    assert "source %s holds 3 files for 4 ranks" % (tmp_path / "parts") in result["msg"]
    assert not (tmp_path / "out").exists()
    check = run_module(tmp_path, "--source", tmp_path / "parts", "--ranks", 4, "--out", tmp_path / "out",
                       "--layout", "presplit", "--check")
    assert (check["bad_input"], check["msg"]) == (True, result["msg"])
    with pytest.raises(sd.ShardError, match="presplit layout needs a directory"):
        sd.shard(tmp_path / "parts" / "p0.bin", 1, tmp_path / "out", layout="presplit")
    write(tmp_path / "parts" / "p3.ctf", "|f 1\n|f y\n")  # four files now, the *.ctf one is checked
    with pytest.raises(sd.ShardError, match=r"p3\.ctf:2: value 'y' of \|f"):
        sd.shard(tmp_path / "parts", 4, tmp_path / "out", layout="presplit")
    write(tmp_path / "parts" / "p3.ctf", "")
    with pytest.raises(sd.ShardError, match=r"p3\.ctf is empty .* gives it whole to rank 3"):
        sd.shard(tmp_path / "parts", 4, tmp_path / "out", layout="presplit")


@pytest.mark.parametrize("layout", ["shard", "replicate", "presplit"])
def test_check_writes_nothing_and_says_what_a_run_would_do(tmp_path, layout):
    src = tmp_path / "src"
    for i in range(2):
        write(src / ("p%d.ctf" % i), "".join(ctf_lines(5, start=5 * i)))
    out = tmp_path / "out"
    report = run_module(tmp_path, "--source", src, "--ranks", 2, "--out", out, "--layout", layout, "--check")
    assert "failed" not in report, report.get("msg")
    assert not out.exists()
    assert report["changed"] is True and report["layout"] == layout and report["ranks"] == 2
    assert report["samples"] == 10 and report["files"] == 2 and report["removed"] == []

    made = sd.shard(src, 2, out, layout=layout)
    before = full_snapshot(out)
    report = sd.shard(src, 2, out, layout=layout, check=True)
    assert report["changed"] is False and (report["samples"], report["files"]) == (10, 2)
    assert report["bytes"] == made["bytes"]
    (src / "p1.ctf").unlink()  # a new file: writing into it would change its hard link in out too
    write(src / "p1.ctf", "".join(ctf_lines(6, start=5)))
    report = sd.shard(src, 2, out, layout=layout, check=True)
    assert report["changed"] is True and report["samples"] == 11
    assert full_snapshot(out) == before


@pytest.mark.parametrize("setup,args,message", [
    (lambda d: d / "missing.ctf", [], "missing.ctf does not exist"),
    (lambda d: write(d / "empty.ctf", ""), [], "has no samples"),
    (lambda d: write(d / "small.ctf", "".join(ctf_lines(3))), [], "dataset has 3 samples, fewer than the 4 ranks"),
    (lambda d: write(d / "bad.ctf", "|f 1\n|f 2 two\n"), [], "bad.ctf:2: value 'two' of |f"),
    (lambda d: write(d / "parts" / "a.bin", b"x").parent, ["--layout", "presplit"], "holds 1 file for 4 ranks"),
    (lambda d: write(d / "e" / "a.bin", b"").parent, ["--layout", "replicate"], "a.bin is empty"),
], ids=["missing", "empty", "fewer-samples-than-ranks", "malformed-ctf", "presplit-count", "empty-replicate"])
def test_check_refuses_bad_input_like_a_run(tmp_path, setup, args, message):
    source = setup(tmp_path)
    result = run_module(tmp_path, "--source", source, "--ranks", 4, "--out", tmp_path / "out", "--check", *args)
    assert result["failed"] and result["bad_input"] and message in result["msg"] and "samples" not in result
    assert not (tmp_path / "out").exists()
