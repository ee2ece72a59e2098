"""plugins/module_utils/dataset_cut.py: balanced, deterministic, idempotent shards and a manifest that never
lies; the layouts, reruns that read nothing, and check mode."""

import hashlib
import json
import os
import random

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import dataset_cut as sd, dataset_io
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import STAT_CACHE
from dataset_helpers import (
    assert_consistent, ctf_lines, full_snapshot, listing, manifest_of, patch_everywhere, samples_of, shard_texts,
    snapshot, write)


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
    # Not CTF (*.txt: the lines are not checked): the cut between the files is mid-line.
    files = {"a.txt": text[:301], "b.txt": text[301:]}
    for name, part in files.items():
        write(tmp_path / "src" / name, part)
    expected = samples_of(files["a.txt"]) + samples_of(files["b.txt"])
    for chunk in (1, 2, 7, 64, 1 << 20):
        patch_everywhere(monkeypatch, "CHUNK", chunk)
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
    write(src / ".hidden.txt", "|f 9 |l 9\n")
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
    # Ranks 0-3 keep their 8 samples and take the gone ranks' 32, in source order.
    lines = ctf_lines(64)
    assert shard_texts(out) == ["".join(lines[8 * r:8 * r + 8] + lines[32 + 8 * r:40 + 8 * r]) for r in range(4)]
    assert_consistent(out)


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


def test_source_changing_while_it_is_read_commits_nothing(tmp_path, monkeypatch):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(30)))
    out = tmp_path / "out"
    sd.shard(source, 3, out)
    before = snapshot(out)
    write(source, "".join(ctf_lines(31)))
    real_blocks = dataset_io.blocks

    def read_then_edit(*args):
        for segment in real_blocks(*args):
            yield segment
            write(source, "".join(ctf_lines(31)).replace("features", "Features"))  # same size and lines

    patch_everywhere(monkeypatch, "blocks", read_then_edit)
    with pytest.raises(sd.ShardError, match="changed while it was being sharded"):
        sd.shard(source, 3, out)
    assert snapshot(out) == before


def test_unchanged_rerun_hashes_nothing(tmp_path, monkeypatch):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)

    def no_hashing(*args, **kwargs):
        raise AssertionError("the quick check should have answered")

    for name in ("scan", "source_sha256_only", "file_sha256", "blocks", "copy_range"):
        patch_everywhere(monkeypatch, name, no_hashing)
    assert sd.shard(source, 4, out)["changed"] is False


def test_a_touched_source_is_hashed_again(tmp_path, monkeypatch):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    hashed = []
    real = dataset_io.source_sha256_only
    patch_everywhere(monkeypatch, "source_sha256_only", lambda paths: hashed.append(paths) or real(paths))
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


def test_manifest_records_the_layout_and_the_test_set(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(9)))
    report = sd.shard(source, 3, tmp_path / "out", test="test.ctf")
    manifest = assert_consistent(tmp_path / "out")
    assert manifest["layout"] == "shard" and manifest["test"] == "test.ctf"
    assert report["layout"] == "shard" and report["files"] == 3
    assert sd.shard(source, 3, tmp_path / "out", test="test.ctf")["changed"] is False
    assert sd.shard(source, 3, tmp_path / "out")["changed"] is True  # no test set now: the manifest only
    assert manifest_of(tmp_path / "out")["test"] is None


def test_a_line_file_that_is_not_ctf_is_sharded_under_its_extension(tmp_path):
    lines = ["images/%04d.png\t%d\n" % (i, i % 10) for i in range(10)]  # a CNTK map file: not CTF, not checked
    source = write(tmp_path / "train.map", "".join(lines))
    report = sd.shard(source, 3, tmp_path / "out")
    assert [p.name for p in listing(tmp_path / "out")] == \
        ["manifest.json", "shard-00000.map", "shard-00001.map", "shard-00002.map"]
    assert "".join(shard_texts(tmp_path / "out")) == "".join(lines)
    assert report["samples"] == 10 and manifest_of(tmp_path / "out")["name"] == "train"
    write(tmp_path / "plain" / "a", "x\ny\n")  # no extension: none on the shards
    sd.shard(tmp_path / "plain", 2, tmp_path / "out2")
    assert [p.name for p in listing(tmp_path / "out2")] == ["manifest.json", "shard-00000", "shard-00001"]


def test_replicate_gives_every_rank_the_whole_files(tmp_path):
    src = tmp_path / "src"
    write(src / "train.ctf", "".join(ctf_lines(6)))
    write(src / "vocab.bin", bytes(range(256)))
    write(src / ".hidden", "not read")
    (src / "sub").mkdir()
    write(src / "sub" / "deep.ctf", "|f 1\n")
    out = tmp_path / "out"
    report = sd.shard(src, 4, out, layout="replicate", test="test.ctf")
    assert report["changed"] is True and report["files"] == 2 and report["samples"] is None
    assert [p.name for p in listing(out)] == ["manifest.json", "train.ctf", "vocab.bin"]
    assert (out / "vocab.bin").read_bytes() == bytes(range(256))
    manifest = manifest_of(out)
    assert manifest["layout"] == "replicate" and manifest["ranks"] == 4 and manifest["test"] == "test.ctf"
    assert manifest["shards"] == [
        {"shard": "train.ctf", "ranks": "all", "bytes": (src / "train.ctf").stat().st_size,
         "sha256": hashlib.sha256((src / "train.ctf").read_bytes()).hexdigest(), "samples": 6},
        {"shard": "vocab.bin", "ranks": "all", "bytes": 256, "sha256": hashlib.sha256(bytes(range(256))).hexdigest()}]
    assert [f["name"] for f in manifest["files"]] == ["train.ctf", "vocab.bin"]
    listing_hash = "".join("%s  %s\n" % (f["sha256"], f["name"]) for f in manifest["files"])
    assert manifest["source_sha256"] == hashlib.sha256(listing_hash.encode()).hexdigest()
    assert os.path.samefile(out / "train.ctf", src / "train.ctf")  # same filesystem: a hard link

    with open(src / "train.ctf", "a") as stream:  # an edit in place: the hard link in out is that file
        stream.write("|features 7 0.5 |labels 1 0\n")
    report = sd.shard(src, 4, out, layout="replicate", test="test.ctf")
    assert report["changed"] is True and manifest_of(out)["shards"][0]["samples"] == 7
    assert_consistent(out)

    one = sd.shard(src / "train.ctf", 2, tmp_path / "one", layout="replicate")  # a file source
    assert one["samples"] == 7 and [p.name for p in listing(tmp_path / "one")] == ["manifest.json", "train.ctf"]


def test_presplit_gives_file_i_to_rank_i(tmp_path):
    src = tmp_path / "parts"
    blobs = [os.urandom(100 + i) for i in range(3)]
    for name, blob in zip(["c-part.bin", "a-part.bin", "b-part.rec"], blobs):
        write(src / name, blob)
    out = tmp_path / "out"
    report = sd.shard(src, 3, out, layout="presplit")
    assert report["changed"] is True and report["files"] == 3
    assert [p.name for p in listing(out)] == ["manifest.json", "shard-00000.bin", "shard-00001.rec", "shard-00002.bin"]
    manifest = manifest_of(out)
    assert [(e["shard"], e["rank"], e["source_file"]) for e in manifest["shards"]] == \
        [("shard-00000.bin", 0, "a-part.bin"), ("shard-00001.rec", 1, "b-part.rec"),
         ("shard-00002.bin", 2, "c-part.bin")]
    assert (out / "shard-00000.bin").read_bytes() == blobs[1] and (out / "shard-00002.bin").read_bytes() == blobs[0]
    for entry in manifest["shards"]:
        data = (out / entry["shard"]).read_bytes()
        assert entry["bytes"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert "ranks" not in entry


@pytest.mark.parametrize("layout", ["replicate", "presplit"])
@pytest.mark.parametrize("links", [True, False], ids=["hard-links", "copies"])
def test_whole_file_layouts_rerun_repair_and_clean_up(tmp_path, monkeypatch, layout, links):
    if not links:
        def no_link(*args, **kwargs):
            raise OSError(18, "Invalid cross-device link (simulated)")
        monkeypatch.setattr(os, "link", no_link)
    src = tmp_path / "src"
    for i in range(3):
        write(src / ("part%d.ctf" % i), "".join(ctf_lines(4, start=10 * i)))
    out = tmp_path / "out"
    assert sd.shard(src, 3, out, layout=layout)["changed"] is True
    assert_consistent(out)
    names = [e["shard"] for e in manifest_of(out)["shards"]]
    assert all(os.path.samefile(out / n, src / ("part%d.ctf" % i)) == links for i, n in enumerate(names))

    before = full_snapshot(out)
    report = sd.shard(src, 3, out, layout=layout)
    assert report["changed"] is False and report["removed"] == []
    assert full_snapshot(out) == before  # nothing rewritten, the stat cache neither

    damaged = out / names[1]
    if links:  # the file in out is the source itself: damage by replacing it
        damaged.unlink()
        write(damaged, "|f 1 |l 0\n")
    else:  # same size, other bytes, mtime kept: only a hash sees it
        status = damaged.stat()
        damaged.write_bytes(damaged.read_bytes().replace(b"features", b"featureZ"))
        os.utime(damaged, ns=(status.st_atime_ns, status.st_mtime_ns))
    report = sd.shard(src, 3, out, layout=layout, verify=not links)
    assert report["changed"] is True
    assert damaged.read_bytes() == (src / "part1.ctf").read_bytes()
    assert (out / names[0]).stat().st_ino == before[names[0]][1]  # the undamaged files were left alone
    assert_consistent(out)

    write(out / "shard-00009.ctf", "from an old split\n")
    write(out / "notes.txt", "not ours\n")
    (src / "part2.ctf").unlink()
    ranks = 2 if layout == "presplit" else 3
    report = sd.shard(src, ranks, out, layout=layout)
    assert report["changed"] is True
    assert report["removed"] == sorted(["shard-00009.ctf", names[2]])
    assert sorted(p.name for p in listing(out)) == sorted(["manifest.json", "notes.txt"] + names[:2])
    assert_consistent(out)
    assert sd.shard(src, ranks, out, layout=layout)["changed"] is False


def test_changing_the_layout_removes_the_old_files(tmp_path):
    src = tmp_path / "src"
    write(src / "a.ctf", "".join(ctf_lines(8)))
    write(src / "b.ctf", "".join(ctf_lines(8, start=8)))
    out = tmp_path / "out"
    sd.shard(src, 4, out)
    report = sd.shard(src, 4, out, layout="replicate")
    assert report["removed"] == ["shard-%05d.ctf" % r for r in range(4)]
    assert [p.name for p in listing(out)] == ["a.ctf", "b.ctf", "manifest.json"]
    report = sd.shard(src, 2, out, layout="shard", test="test.ctf")
    assert report["removed"] == ["a.ctf", "b.ctf"]  # the old manifest listed them
    assert [p.name for p in listing(out)] == ["manifest.json", "shard-00000.ctf", "shard-00001.ctf"]


def test_a_replicated_rank_count_change_rewrites_only_the_manifest(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(8)))
    out = tmp_path / "out"
    sd.shard(source, 4, out, layout="replicate")
    before = snapshot(out)
    assert sd.shard(source, 8, out, layout="replicate")["changed"] is True
    after = snapshot(out)
    assert after["train.ctf"] == before["train.ctf"] and manifest_of(out)["ranks"] == 8


def test_names_that_cannot_be_sent_are_refused(tmp_path):
    write(tmp_path / "src" / "manifest.json", "{}")
    with pytest.raises(sd.ShardError, match="manifest.json cannot be sent under its own name"):
        sd.shard(tmp_path / "src", 1, tmp_path / "out", layout="replicate")
    write(tmp_path / "odd" / "-rf x", "data\n")
    with pytest.raises(sd.ShardError, match="cannot be sent under its own name: rename it"):
        sd.shard(tmp_path / "odd", 1, tmp_path / "out", layout="replicate")
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(4)))
    with pytest.raises(sd.ShardError, match="--test-name shard-00001.ctf is also the name of a data file"):
        sd.shard(source, 2, tmp_path / "out", test="shard-00001.ctf")
    with pytest.raises(sd.ShardError, match="--test-name '../test.ctf' cannot be a file name"):
        sd.shard(source, 2, tmp_path / "out", test="../test.ctf")
    assert not (tmp_path / "out").exists()


def test_a_manifest_of_the_previous_version_is_brought_up_to_date_without_rewriting_shards(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(12)))
    out = tmp_path / "out"
    sd.shard(source, 3, out)
    manifest = manifest_of(out)
    del manifest["layout"], manifest["test"]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (out / STAT_CACHE).unlink()
    before = snapshot(out)
    assert sd.shard(source, 3, out)["changed"] is True
    after = snapshot(out)
    assert {k: v for k, v in after.items() if k != "manifest.json"} == \
        {k: v for k, v in before.items() if k != "manifest.json"}
    assert manifest_of(out)["layout"] == "shard"


def test_check_answers_from_the_manifest_when_the_source_is_unchanged(tmp_path, monkeypatch):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)

    def no_reading(*args, **kwargs):
        raise AssertionError("--check should have answered from the manifest")

    for name in ("scan", "source_sha256_only", "file_sha256", "read_whole_file", "blocks"):
        patch_everywhere(monkeypatch, name, no_reading)
    report = sd.shard(source, 4, out, check=True)
    assert report["changed"] is False and report["samples"] == 40
    assert sd.shard(source, 5, out, check=True)["changed"] is True  # another rank count: a run would split again
    with pytest.raises(sd.ShardError, match="dataset has 40 samples, fewer than the 41 ranks"):
        sd.shard(source, 41, out, check=True)


def test_check_of_a_touched_source_hashes_it_but_counts_nothing(tmp_path, monkeypatch):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    stat = os.stat(source)
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))

    def no_scan(*args, **kwargs):
        raise AssertionError("the hash matched the manifest's: no need to count or check the lines")

    patch_everywhere(monkeypatch, "scan", no_scan)
    report = sd.shard(source, 4, out, check=True)
    assert report["changed"] is False and report["samples"] == 40
    write(source, "".join(ctf_lines(40)).replace("|labels 0 1", "|labels 1 0"))  # same size, other bytes
    with pytest.raises(AssertionError, match="no need to count"):
        sd.shard(source, 4, out, check=True)


@pytest.mark.parametrize("layout", ["shard", "replicate"])
def test_an_unchanged_verified_rerun_writes_nothing(tmp_path, layout):
    """verify=True (dataset_verify: full) hashes everything; finding it all as it was, it rewrites no file,
    the quick check's .stat.json neither."""
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out, layout=layout)
    before = full_snapshot(out)
    assert STAT_CACHE in before
    assert sd.shard(source, 4, out, layout=layout, verify=True)["changed"] is False
    assert full_snapshot(out) == before


def reads_of(monkeypatch):
    """Every read of a file's lines or bytes by the cutter, by path: blocks() and source_sha256_only()."""
    reads = []
    real_blocks, real_sha = dataset_io.blocks, dataset_io.source_sha256_only
    patch_everywhere(monkeypatch, "blocks", lambda path, *rest: reads.append(str(path)) or real_blocks(path, *rest))
    patch_everywhere(monkeypatch, "source_sha256_only",
                     lambda paths: reads.extend(map(str, paths)) or real_sha(paths))
    return reads


def test_the_cut_reads_the_source_once(tmp_path, monkeypatch):
    """Checked, counted, hashed and cut in one read: a new source, another rank count, a damaged shard."""
    src = tmp_path / "src"
    write(src / "a.ctf", "".join(ctf_lines(40)))
    write(src / "b.ctf", "".join(ctf_lines(30, start=40)))
    out = tmp_path / "out"
    reads = reads_of(monkeypatch)
    sd.shard(src, 4, out)
    assert sorted(reads) == [str(src / "a.ctf"), str(src / "b.ctf")]
    reads.clear()
    assert sd.shard(src, 6, out)["changed"] is True  # re-placed: the manifest's counts place it before the read
    assert sorted(reads) == [str(src / "a.ctf"), str(src / "b.ctf")]
    good = shard_texts(out)
    (out / "shard-00002.ctf").write_bytes(b"|features 0 |labels 0 1\n")
    reads.clear()
    assert sd.shard(src, 6, out)["changed"] is True  # only the damaged shard written again
    assert sorted(reads) == [str(src / "a.ctf"), str(src / "b.ctf")]
    assert shard_texts(out) == good
    assert_consistent(out)


def test_a_touched_source_rereads_no_shard(tmp_path, monkeypatch):
    """The source is hashed again; the shards, as the last run left them by size and mtime, are not read."""
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    stat = os.stat(source)
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    reads = reads_of(monkeypatch)

    def no_shard_hashing(*args, **kwargs):
        raise AssertionError("a shard the quick check vouches for was read")

    patch_everywhere(monkeypatch, "file_sha256", no_shard_hashing)
    before = snapshot(out)
    assert sd.shard(source, 4, out)["changed"] is False
    assert reads == [str(source)] and snapshot(out) == before
