"""The CNTK backend's checkpoint: what each rank sees of it, whether the job
resumes, and the trainer's save and restore with the reader's position and
the loop's counters riding along as external state.

CNTK's save_checkpoint writes CHECKPOINT_FILES (the model, and the trainer,
learner and external state); restore_from_checkpoint reads both on EVERY
rank. Both are collective: all ranks call them at the same step; rank 0
writes the files, every rank reads them back and gets its own external
state. That is why the preflight (cntk_preflight.py) makes sure every rank
sees the same checkpoint, or none does. CPython 3.6 syntax.
"""

import hashlib
import os

from cntk_ranks import JobError

CHECKPOINT_NAME = "trainer.ckpt"
# CNTK's save_checkpoint writes both (the model, and the trainer, learner and
# external state); restore_from_checkpoint reads both on every rank.
CHECKPOINT_FILES = (CHECKPOINT_NAME, CHECKPOINT_NAME + ".ckp")


def checkpoint_view(checkpoint_dir):
    """What this rank sees of the checkpoint: state (ok, missing, incomplete,
    unreadable) and, when ok, a sha256 over both files, so the ranks can
    tell that they would restore the same checkpoint."""
    paths = [os.path.join(checkpoint_dir, name) for name in CHECKPOINT_FILES]
    present = [os.path.exists(path) for path in paths]
    if not any(present):
        return {"state": "missing", "dir": checkpoint_dir}
    if not all(present):
        return {"state": "incomplete", "dir": checkpoint_dir,
                "lacks": [name for name, there in zip(CHECKPOINT_FILES, present) if not there]}
    digest = hashlib.sha256()
    try:
        for path in paths:
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    except (IOError, OSError) as error:
        return {"state": "unreadable", "dir": checkpoint_dir, "error": str(error)}
    return {"state": "ok", "dir": checkpoint_dir, "sha256": digest.hexdigest()}


def resume_decision(views, hosts):
    """'restore' or 'fresh' from every rank's view of the checkpoint, or a
    JobError that names the ranks that do not see rank 0's checkpoint."""
    states = [view["state"] for view in views]
    if all(state == "missing" for state in states):
        return "fresh"
    if all(state == "ok" for state in states) and len(set(view["sha256"] for view in views)) == 1:
        return "restore"

    def who(ranks):
        return ", ".join("{} ({}: {}{})".format(
            r, hosts[r], views[r]["dir"],
            "" if views[r]["state"] == "ok" else ", " + {
                "missing": "no checkpoint",
                "incomplete": "lacks " + " and ".join(views[r].get("lacks", [])),
                "unreadable": "unreadable: " + views[r].get("error", ""),
            }[views[r]["state"]]) for r in ranks)

    seeing = [r for r, state in enumerate(states) if state == "ok"]
    lacking = [r for r, state in enumerate(states) if state != "ok"]
    remedy = ("On --resume every rank restores the checkpoint (CNTK reads {} on every rank), so the "
              "checkpoint dir must be readable by every rank with the same content: put it on storage "
              "every node mounts, or copy rank 0's {} into every node's checkpoint dir before resuming "
              "(or delete the checkpoint on every node to start fresh).").format(
                  " and ".join(CHECKPOINT_FILES), " and ".join(CHECKPOINT_FILES))
    if lacking:
        return JobError("cannot resume: the checkpoint is visible to rank(s) {} but not to rank(s) {}. {}".format(
            who(seeing) or "none", who(lacking), remedy))
    reference = views[0]["sha256"]
    differ = [r for r in seeing if views[r]["sha256"] != reference]
    return JobError("cannot resume: rank(s) {} hold a different checkpoint than rank 0 ({}). {}".format(
        who(differ), who([0]), remedy))


def save(trainer, source, checkpoint, step, sweeps, local_samples, workers):
    """Write the checkpoint (collective: every rank calls it at the same step)."""
    trainer.save_checkpoint(checkpoint, {
        "source": source.get_checkpoint_state(),
        "step": step,
        "sweeps": sweeps,
        "local_samples": local_samples,
        "workers": workers,
    })


def restore(trainer, source, checkpoint, workers):
    """Restore the trainer and the reader from the checkpoint (collective);
    return (step, sweeps, local_samples) as saved. A JobError when another
    number of ranks wrote it."""
    state = trainer.restore_from_checkpoint(checkpoint)
    saved_workers = int(state["workers"])
    if saved_workers != workers:
        raise JobError("checkpoint {} was written by {} ranks, this job has {}: the shards differ; "
                       "remove the checkpoint on every node to start over".format(
                           checkpoint, saved_workers, workers))
    source.restore_from_checkpoint(dict(state["source"]))
    return int(state["step"]), int(state["sweeps"]), int(state["local_samples"])
