"""scripts/shard_dataset.py: balanced, deterministic, idempotent shards and a manifest that never lies."""

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import shard_dataset as sd

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "shard_dataset.py"


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
        assert data.count(b"\n") == entry["samples"], entry["shard"]
    return manifest


def listing(out):
    """The directory's files but the quick check's stat cache."""
    return sorted(p for p in out.iterdir() if p.name != sd.STAT_CACHE)


def snapshot(out):
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_ino, p.read_bytes()) for p in listing(out)}


def run_cli(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("samples,ranks", [(10, 3), (7, 7), (8, 7), (1000, 8), (5, 1), (13, 4)])
def test_shards_are_balanced_and_concatenate_to_the_source(tmp_path, samples, ranks):
    lines = ctf_lines(samples)
    source = write(tmp_path / "train.ctf", "".join(lines))
    report = sd.shard(source, ranks, tmp_path / "out")
    texts = shard_texts(tmp_path / "out")
    sizes = [text.count("\n") for text in texts]
    assert len(texts) == ranks and max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    assert sizes == [(r + 1) * samples // ranks - r * samples // ranks for r in range(ranks)]
    assert "".join(texts) == "".join(lines)
    assert report["changed"] is True and report["samples"] == samples and report["ranks"] == ranks
    assert [p.name for p in listing(tmp_path / "out")] == \
        ["manifest.json"] + ["shard-%05d.ctf" % r for r in range(ranks)]


def test_blank_lines_crlf_and_a_last_line_without_newline(tmp_path):
    text = "\n|f 1 |l 1\n\n  \t \n|f 2 |l 0\r\n\r\n|f 3 |l 1\n|f 4 |l 0"  # no newline at the end
    source = write(tmp_path / "odd.ctf", text)
    report = sd.shard(source, 2, tmp_path / "out")
    assert report["samples"] == 4
    assert shard_texts(tmp_path / "out") == ["|f 1 |l 1\n|f 2 |l 0\n", "|f 3 |l 1\n|f 4 |l 0\n"]


def test_chunk_boundaries_anywhere_give_the_same_shards(tmp_path, monkeypatch):
    """Reads are cut at arbitrary places (tiny chunks): CRLFs, blank lines and long lines across cuts."""
    rng = random.Random(7)
    pieces = ["|f %s |l 1" % ("x" * rng.randrange(0, 40)) for _ in range(60)]
    pieces += ["", " ", "\t\r", "\r"] * 5
    rng.shuffle(pieces)
    text = "".join(p + rng.choice(["\n", "\r\n", "\n\n"]) for p in pieces) + "|f last |l 0"
    files = {"a.ctf": text[:301], "b.ctf": text[301:]}  # the cut between the files is mid-line
    for name, part in files.items():
        write(tmp_path / "src" / name, part)
    expected = samples_of(files["a.ctf"]) + samples_of(files["b.ctf"])
    for chunk in (1, 2, 7, 64, 1 << 20):
        monkeypatch.setattr(sd, "CHUNK", chunk)
        out = tmp_path / ("out-%d" % chunk)
        report = sd.shard(tmp_path / "src", 5, out)
        assert report["samples"] == len(expected)
        assert "".join(shard_texts(out)) == "".join(expected), chunk
        assert_consistent(out)


def test_two_runs_give_identical_bytes(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(101)))
    sd.shard(source, 4, tmp_path / "one")
    sd.shard(source, 4, tmp_path / "two")
    one, two = snapshot(tmp_path / "one"), snapshot(tmp_path / "two")
    assert one.keys() == two.keys()
    assert all(one[name][2] == two[name][2] for name in one)


def test_directory_source_is_read_in_sorted_name_order(tmp_path):
    src = tmp_path / "src"
    write(src / "b.ctf", "".join(ctf_lines(3, start=10)))
    write(src / "a.ctf", "".join(ctf_lines(4)).rstrip("\n"))  # its last line must not merge with b's first
    write(src / "c.txt", "not a ctf file\n")
    write(src / ".hidden.ctf", "|f 9 |l 9\n")
    (src / "sub.ctf").mkdir()
    sd.shard(src, 2, tmp_path / "out")
    assert "".join(shard_texts(tmp_path / "out")) == "".join(ctf_lines(4) + ctf_lines(3, start=10))
    manifest = assert_consistent(tmp_path / "out")
    raw = (src / "a.ctf").read_bytes() + (src / "b.ctf").read_bytes()
    assert manifest["source_sha256"] == hashlib.sha256(raw).hexdigest()
    assert [f["name"] for f in manifest["files"]] == ["a.ctf", "b.ctf"]
    assert [f["samples"] for f in manifest["files"]] == [4, 3]
    assert manifest["name"] == "src"


def test_manifest_matches_the_files(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(50)))
    report = sd.shard(os.path.relpath(source), 3, tmp_path / "out", name="digits")
    manifest = assert_consistent(tmp_path / "out")
    assert manifest["name"] == "digits"
    assert manifest["source"] == str(source) and os.path.isabs(manifest["source"])
    assert manifest["source_sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert manifest["samples"] == 50 and manifest["ranks"] == 3
    assert [(e["shard"], e["rank"], e["samples"]) for e in manifest["shards"]] == \
        [("shard-00000.ctf", 0, 16), ("shard-00001.ctf", 1, 17), ("shard-00002.ctf", 2, 17)]
    assert report["bytes"] == sum(e["bytes"] for e in manifest["shards"]) == source.stat().st_size
    assert report["manifest"] == str(tmp_path / "out" / "manifest.json")


def test_second_run_changes_nothing(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    assert sd.shard(source, 4, out)["changed"] is True
    before = snapshot(out)
    report = sd.shard(source, 4, out)
    assert report["changed"] is False and report["removed"] == []
    assert snapshot(out) == before  # same files, bytes, inodes and mtimes


def test_new_name_rewrites_only_the_manifest(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    before = snapshot(out)
    assert sd.shard(source, 4, out, name="renamed")["changed"] is True
    after = snapshot(out)
    assert json.loads((out / "manifest.json").read_text())["name"] == "renamed"
    assert {k: v for k, v in after.items() if k != "manifest.json"} == \
        {k: v for k, v in before.items() if k != "manifest.json"}
    assert sd.shard(source, 4, out, name="renamed")["changed"] is False


def test_changed_source_or_damaged_shard_splits_again(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    write(source, "".join(ctf_lines(45)))
    report = sd.shard(source, 4, out)
    assert report["changed"] is True and report["samples"] == 45
    assert "".join(shard_texts(out)) == "".join(ctf_lines(45))
    assert_consistent(out)

    same_size = "".join(ctf_lines(45)).replace(" |labels", "\n|labels", 1)
    assert len(same_size) == source.stat().st_size
    write(source, same_size)  # same size, one line more: the lines must be counted again
    report = sd.shard(source, 4, out)
    assert report["changed"] is True and report["samples"] == 46
    assert "".join(shard_texts(out)) == same_size
    write(source, "".join(ctf_lines(45)))
    assert sd.shard(source, 4, out)["samples"] == 45

    damaged = out / "shard-00001.ctf"
    damaged.write_bytes(damaged.read_bytes().replace(b"features", b"featureZ"))  # same size, other bytes
    assert sd.shard(source, 4, out)["changed"] is True
    assert "".join(shard_texts(out)) == "".join(ctf_lines(45))


def test_fewer_ranks_removes_stale_shards(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(64)))
    out = tmp_path / "out"
    sd.shard(source, 8, out)
    report = sd.shard(source, 4, out)
    assert report["changed"] is True
    assert report["removed"] == ["shard-%05d.ctf" % r for r in range(4, 8)]
    assert [p.name for p in listing(out)] == ["manifest.json"] + ["shard-%05d.ctf" % r for r in range(4)]
    assert "".join(shard_texts(out)) == "".join(ctf_lines(64))
    assert_consistent(out)


def test_cli_prints_json_report(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(20)))
    first = run_cli("--source", source, "--ranks", 2, "--out", tmp_path / "out")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["changed"] is True and report["samples"] == 20 and report["ranks"] == 2
    assert report["bytes"] == source.stat().st_size and report["seconds"] >= 0
    second = run_cli("--source", source, "--ranks", 2, "--out", tmp_path / "out")
    assert json.loads(second.stdout)["changed"] is False


@pytest.mark.parametrize("setup,ranks,message", [
    (lambda d: write(d / "small.ctf", "".join(ctf_lines(3))), 4,
     "dataset has 3 samples, fewer than the 4 ranks: use fewer ranks or more data"),
    (lambda d: d / "missing.ctf", 2, "missing.ctf does not exist"),
    (lambda d: write(d / "empty.ctf", ""), 2, "has no samples (it is empty or only blank lines)"),
    (lambda d: write(d / "blank.ctf", "\n \n\r\n"), 1, "has no samples"),
    (lambda d: write(d / "data" / "readme.txt", "x\n").parent, 2, "has no *.ctf files"),
    (lambda d: write(d / "ok.ctf", "".join(ctf_lines(3))), 0, "--ranks must be at least 1 (got 0)"),
], ids=["fewer-samples-than-ranks", "missing", "empty", "only-blank-lines", "no-ctf-files", "zero-ranks"])
def test_bad_input_exits_2_with_the_reason(tmp_path, setup, ranks, message):
    source = setup(tmp_path)
    result = run_cli("--source", source, "--ranks", ranks, "--out", tmp_path / "out")
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_bad_input_leaves_an_existing_split_alone(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(8)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    before = snapshot(out)
    with pytest.raises(sd.ShardError, match="dataset has 8 samples, fewer than the 9 ranks"):
        sd.shard(source, 9, out)
    assert snapshot(out) == before


def test_out_may_not_be_the_source_directory(tmp_path):
    write(tmp_path / "src" / "a.ctf", "".join(ctf_lines(4)))
    with pytest.raises(sd.ShardError, match="is the source directory"):
        sd.shard(tmp_path / "src", 2, tmp_path / "src")


def test_failed_move_keeps_the_previous_manifest_true(tmp_path, monkeypatch):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    before = snapshot(out)
    write(source, "".join(ctf_lines(48)))  # new data: every shard changes

    real_replace = os.replace

    def failing_replace(src, dst):
        if os.path.basename(dst) == "shard-00002.ctf" and str(src).endswith(".tmp"):
            raise OSError(28, "No space left on device (simulated)")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated"):
        sd.shard(source, 4, out)
    assert snapshot(out) == before  # old manifest and shards back, no temporary left
    assert_consistent(out)

    monkeypatch.setattr(os, "replace", real_replace)
    assert sd.shard(source, 4, out)["changed"] is True
    assert "".join(shard_texts(out)) == "".join(ctf_lines(48))
    assert_consistent(out)


def test_failure_while_undoing_leaves_no_manifest_and_the_next_run_recovers(tmp_path, monkeypatch):
    """A run killed while moving shards: every os.replace after the first shard fails, undo included."""
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 8, out)
    write(source, "".join(ctf_lines(44)))
    real_replace = os.replace
    moved = []

    def dying_replace(src, dst):
        if str(src).endswith(".tmp") and os.path.basename(dst).startswith("shard-"):
            if moved:
                raise OSError(5, "Input/output error (simulated)")
            moved.append(dst)
        elif moved:
            raise OSError(5, "Input/output error (simulated)")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", dying_replace)
    with pytest.raises(OSError, match="simulated"):
        sd.shard(source, 4, out)
    assert moved
    assert assert_consistent(out) is None  # no manifest rather than a wrong one

    monkeypatch.setattr(os, "replace", real_replace)
    assert sd.shard(source, 4, out)["changed"] is True
    assert_consistent(out)
    assert "".join(shard_texts(out)) == "".join(ctf_lines(44))
    assert [p.name for p in listing(out)] == ["manifest.json"] + ["shard-%05d.ctf" % r for r in range(4)]


def test_source_changing_between_the_passes_commits_nothing(tmp_path, monkeypatch):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(30)))
    out = tmp_path / "out"
    sd.shard(source, 3, out)
    before = snapshot(out)
    write(source, "".join(ctf_lines(31)))
    real_scan = sd.scan

    def scan_then_edit(paths):
        result = real_scan(paths)
        write(source, "".join(ctf_lines(31)).replace("features", "Features"))  # same size and lines
        return result

    monkeypatch.setattr(sd, "scan", scan_then_edit)
    with pytest.raises(sd.ShardError, match="changed while it was being sharded"):
        sd.shard(source, 3, out)
    assert snapshot(out) == before


def test_leftovers_of_a_killed_run_are_cleaned_up(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(12)))
    out = tmp_path / "out"
    sd.shard(source, 3, out)
    write(out / ".shard-00001.ctf.0123456789ab.tmp", "half a shard")
    write(out / ".manifest.json.0123456789ab.old", "{}")
    write(out / "shard-00007.ctf", "from an old split\n")
    write(out / "notes.txt", "not ours\n")
    report = sd.shard(source, 3, out)
    assert report["changed"] is True and report["removed"] == ["shard-00007.ctf"]
    assert [p.name for p in listing(out)] == \
        ["manifest.json", "notes.txt", "shard-00000.ctf", "shard-00001.ctf", "shard-00002.ctf"]
    assert sd.shard(source, 3, out)["changed"] is False


def test_concurrent_runs_on_one_directory_take_turns(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(300)))
    out = tmp_path / "out"
    out.mkdir()
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), "--source", str(source), "--ranks", "3",
                               "--out", str(out)], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    reports = [json.loads(proc.communicate(timeout=60)[0]) for proc in procs]
    assert sorted(report["changed"] for report in reports) == [False, False, True]
    assert "".join(shard_texts(out)) == "".join(ctf_lines(300))
    assert_consistent(out)


def test_unchanged_rerun_hashes_nothing(tmp_path, monkeypatch):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)

    def no_hashing(*args, **kwargs):
        raise AssertionError("the quick check should have answered")

    for name in ("scan", "source_sha256_only", "file_sha256", "shard_files_match"):
        monkeypatch.setattr(sd, name, no_hashing)
    assert sd.shard(source, 4, out)["changed"] is False


def test_a_touched_source_is_hashed_again(tmp_path, monkeypatch):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    hashed = []
    real = sd.source_sha256_only
    monkeypatch.setattr(sd, "source_sha256_only", lambda paths: hashed.append(paths) or real(paths))
    stat = os.stat(source)
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert sd.shard(source, 4, out)["changed"] is False
    assert hashed


def test_verify_finds_damage_that_kept_size_and_mtime(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    shard = out / "shard-00002.ctf"
    stat = os.stat(shard)
    data = bytearray(shard.read_bytes())
    data[1] = ord("F") if data[1] != ord("F") else ord("f")
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert sd.shard(source, 4, out)["changed"] is False  # the quick check cannot see it
    assert sd.shard(source, 4, out, verify=True)["changed"] is True
    assert_consistent(out)
