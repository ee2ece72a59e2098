"""plugins/module_utils/dataset_placement.py, through the cutter: another rank count over the same source
keeps each rank's prefix and moves only the rest."""

import json

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import dataset_cut as sd
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import STAT_CACHE
from dataset_helpers import assert_consistent, ctf_lines, manifest_of, shard_texts, snapshot, write



def indices(text):
    """The sample numbers (ctf_lines' sequence ids) of a shard's lines, in file order."""
    return [int(line.split(" ", 1)[0]) for line in text.splitlines()]


def placed(out):
    return [indices(text) for text in shard_texts(out)]


def assert_placement_invariants(out, samples, ranks, before=None):
    """Balanced sizes; every sample in exactly one shard, in source order; the manifest's ranges say which;
    with the shards of the previous run (before), every old rank kept a prefix of its samples."""
    manifest = assert_consistent(out)
    now = placed(out)
    sizes = [len(shard) for shard in now]
    assert sizes == [(r + 1) * samples // ranks - r * samples // ranks for r in range(ranks)]
    assert sorted(i for shard in now for i in shard) == list(range(samples))
    for shard, entry in zip(now, manifest["shards"]):
        assert shard == sorted(shard)
        assert shard == [i for start, end in entry["ranges"] for i in range(start, end)]
    if before is not None:
        for rank, (old, new) in enumerate(zip(before, now)):
            keep = min(len(old), len(new))
            assert set(old) & set(new) == set(old[:keep]), rank
    return now


def must_move(before, ranks, samples):
    """The samples the rule moves: the cut tails of the ranks that stay and the samples of the ranks that are gone."""
    sizes = [(r + 1) * samples // ranks - r * samples // ranks for r in range(ranks)]
    return sum(max(0, len(old) - (sizes[r] if r < ranks else 0)) for r, old in enumerate(before))


@pytest.mark.parametrize("samples,old_ranks,new_ranks", [(1438, 8, 12), (101, 4, 6), (101, 6, 4), (60, 12, 8),
                                                         (13, 2, 13)])
def test_another_rank_count_keeps_each_ranks_prefix_and_moves_only_the_rest(tmp_path, samples, old_ranks,
                                                                            new_ranks):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(samples)))
    out = tmp_path / "out"
    sd.shard(source, old_ranks, out)
    before = assert_placement_invariants(out, samples, old_ranks)
    report = sd.shard(source, new_ranks, out)
    assert report["changed"] is True and report["ranks"] == new_ranks and report["files"] == new_ranks
    assert report["removed"] == ["shard-%05d.ctf" % r for r in range(new_ranks, old_ranks)]
    now = assert_placement_invariants(out, samples, new_ranks, before)
    moved = sum(1 for r, shard in enumerate(now) for i in shard if r >= old_ranks or i not in before[r])
    assert moved == must_move(before, new_ranks, samples)
    # What moved went in source order, one contiguous run per rank that took some.
    taken = [[i for i in shard if r >= old_ranks or i not in before[r]] for r, shard in enumerate(now)]
    pool = sorted(i for r, old in enumerate(before) for i in old if r >= new_ranks or i not in now[r])
    assert [i for run in taken for i in run] == pool


def test_eight_to_twelve_ranks_the_old_shards_only_shrink(tmp_path):
    """4 -> 6 nodes of 2 ranks: every old rank's new shard is a prefix of its old file (what rsync sends as
    matched data); the new ranks take the cut tails in source order."""
    lines = ctf_lines(1438)
    source = write(tmp_path / "train.ctf", "".join(lines))
    out = tmp_path / "out"
    sd.shard(source, 8, out)
    old = shard_texts(out)
    sd.shard(source, 12, out)
    new = shard_texts(out)
    for rank in range(8):
        assert old[rank].startswith(new[rank]) and len(new[rank]) < len(old[rank]), rank
    tails = "".join(text[len(kept):] for text, kept in zip(old, new))
    assert "".join(new[8:]) == tails
    # Rank 0 kept [0, 119) of [0, 179), rank 1 [179, 299) of [179, 359): rank 8 takes both tails.
    assert manifest_of(out)["shards"][8]["ranges"] == [[119, 179], [299, 359]]


def test_repeated_rank_changes_keep_the_invariants_and_the_same_count_changes_nothing(tmp_path):
    samples = 997
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(samples)))
    out = tmp_path / "out"
    sd.shard(source, 8, out)
    before = placed(out)
    for ranks in (12, 8, 12, 6, 16, 3, 7):
        sd.shard(source, ranks, out)
        now = assert_placement_invariants(out, samples, ranks, before)
        moved = sum(1 for r, shard in enumerate(now) for i in shard if r >= len(before) or i not in before[r])
        assert moved == must_move(before, ranks, samples), ranks
        again = snapshot(out)
        assert sd.shard(source, ranks, out)["changed"] is False
        assert sd.shard(source, ranks, out, verify=True)["changed"] is False
        assert snapshot(out) == again
        before = now


def test_a_damaged_replaced_shard_is_written_again_with_the_same_samples(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(100)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    sd.shard(source, 6, out)
    good = shard_texts(out)
    damaged = out / "shard-00005.ctf"
    damaged.write_bytes(damaged.read_bytes().replace(b"features", b"featureZ", 1))
    assert sd.shard(source, 6, out)["changed"] is True
    assert shard_texts(out) == good
    assert_consistent(out)


def test_a_changed_source_is_laid_out_fresh(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(100)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    sd.shard(source, 6, out)
    assert "".join(shard_texts(out)) != "".join(ctf_lines(100))  # re-placed: not in rank order
    write(source, "".join(ctf_lines(101)))
    sd.shard(source, 6, out)
    assert "".join(shard_texts(out)) == "".join(ctf_lines(101))
    assert [e["ranges"] for e in manifest_of(out)["shards"]] == \
        [[[r * 101 // 6, (r + 1) * 101 // 6]] for r in range(6)]
    write(source, "".join(ctf_lines(100)))  # the old bytes again, but its manifest is gone: fresh too
    sd.shard(source, 4, out)
    assert "".join(shard_texts(out)) == "".join(ctf_lines(100))


def test_a_manifest_without_ranges_or_with_bad_ones(tmp_path):
    """The previous version's manifest (no ranges) was a fresh split: re-placed from it. Ranges that do not
    cover every sample once are not trusted: laid out fresh."""
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    manifest = manifest_of(out)
    for entry in manifest["shards"]:
        del entry["ranges"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    before = placed(out)
    sd.shard(source, 5, out)
    assert placed(out)[:4] == [shard[:8] for shard in before]
    manifest = manifest_of(out)
    manifest["shards"][1]["ranges"] = manifest["shards"][0]["ranges"]  # rank 0's samples twice
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / STAT_CACHE).unlink()
    sd.shard(source, 4, out)
    assert "".join(shard_texts(out)) == "".join(ctf_lines(40))


def test_check_of_another_rank_count_says_changed(tmp_path):
    source = write(tmp_path / "train.ctf", "".join(ctf_lines(40)))
    out = tmp_path / "out"
    sd.shard(source, 4, out)
    before = snapshot(out)
    report = sd.shard(source, 6, out, check=True)
    assert report["changed"] is True and report["files"] == 6 and snapshot(out) == before
