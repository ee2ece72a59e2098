"""The CNTK backend's preflight, before any training: every rank says what it
has (its shard readable, rank 0's test file, the job's options, its view of
the checkpoint, its shard's size under block momentum), and every rank
decides the same from the same table, so a problem on one rank stops all of
them at once, with the reason, instead of one rank dying mid-run or the
others hanging in a collective. CPython 3.6 syntax.
"""

import os

import cntk_checkpoint
import cntk_evaluation
import cntk_ranks
from cntk_ranks import JobError

PATH_OPTIONS = ("data_dir", "test_file", "output_dir", "checkpoint_dir")


def job_arguments(args):
    """The options every rank must share (all but the paths, which may
    differ per node)."""
    return {name: value for name, value in sorted(vars(args).items()) if name not in PATH_OPTIONS}


def count_samples(path):
    """Samples in a dense CTF shard: one sample a non-empty line."""
    count = 0
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                count += 1
    return count


def readable_file_problem(path, what):
    if not os.path.isfile(path):
        return "{} not found: {}".format(what, path)
    try:
        with open(path, "rb"):
            pass
    except (IOError, OSError) as error:
        return "{} not readable: {}: {}".format(what, path, error)
    return None


def preflight(C, communicator, rank, workers, args, host, shard, checkpoint_dir, block_momentum):
    """Every rank's report, by rank, the ranks' host names, and 'fresh' or
    'restore'; a JobError on every rank when any rank cannot start.

    Collective: every rank calls it once, before training."""
    problems = []
    shard_problem = readable_file_problem(shard, "shard")
    if shard_problem:
        problems.append(shard_problem)
    if rank == 0:
        test_file = cntk_evaluation.resolve_test_file(args)
        test_problem = test_file and readable_file_problem(test_file, "test file")
        if test_problem:
            problems.append(test_problem + " (rank 0 scores the model on it after training)")
    mine = {"host": host, "problems": problems, "job": job_arguments(args)}
    if args.resume:
        mine["checkpoint"] = cntk_checkpoint.checkpoint_view(checkpoint_dir)
    if block_momentum and not shard_problem:
        mine["shard_samples"] = count_samples(shard)
    peers = cntk_ranks.gather_json(C, communicator, rank, workers, mine)
    hosts = [peer["host"] for peer in peers]
    failures = ["rank {} on {}: {}".format(r, peer["host"], problem)
                for r, peer in enumerate(peers) for problem in peer["problems"]]
    for r, peer in enumerate(peers):
        differ = ["--{} {} (rank 0: {})".format(name.replace("_", "-"), peer["job"].get(name), value)
                  for name, value in sorted(peers[0]["job"].items()) if peer["job"].get(name) != value]
        if differ:
            failures.append("rank {} on {} runs another job than rank 0: {}".format(
                r, peer["host"], ", ".join(differ)))
    if failures:
        raise JobError("cannot start: " + "; ".join(failures))
    decision = "fresh"
    if args.resume:
        decision = cntk_checkpoint.resume_decision([peer["checkpoint"] for peer in peers], hosts)
        if isinstance(decision, JobError):
            raise decision
    return peers, hosts, decision
