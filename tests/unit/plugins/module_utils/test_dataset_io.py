"""plugins/module_utils/dataset_io.py's commit: a failed or killed run leaves the old manifest with its files,
or no manifest, and the next run recovers."""

import os

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import dataset_cut as sd
from dataset_helpers import assert_consistent, ctf_lines, listing, shard_texts, snapshot, write


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
