"""The train step's decision, from the controller's records: the run's
fingerprint and its per-part digests, whether the job must run, whether it
continues an unfinished run's checkpoint, and which launcher starts it.

The cntk.cluster.train_job_plan action reads the records and returns this;
the train_job filters of the same names wrap it for the tests and the YAML."""

import base64
import binascii
import hashlib
import json

PLATFORMS = ("Linux", "Windows")
# The launcher seam: one task file per launcher (roles/train_job/tasks/launch-<launcher>.yml).
LAUNCHERS = {"Linux": "mpirun", "Windows": "mpiexec"}
# With a scheduler the train step submits the job instead (mpirun runs inside the allocation).
SCHEDULED_LAUNCHERS = {("Linux", "slurm"): "sbatch"}
SCHEDULERS = ("none", "slurm")


def platform_of(spec):
    """The spec's platform, checked: Linux or Windows."""
    platform = spec.get("platform")
    if platform not in PLATFORMS:
        raise ValueError(f"platform must be one of {', '.join(PLATFORMS)}, not {platform!r}")
    return platform


def launcher(platform, scheduler="none"):
    """The launcher for a run on this platform: mpirun (Open MPI, Linux) or mpiexec (MS-MPI, Windows) started by
    the train step itself; sbatch (Slurm, Linux) when the cluster has a scheduler."""
    platform = platform_of({"platform": platform})
    if scheduler not in SCHEDULERS:
        raise ValueError(f"cluster_scheduler must be one of {', '.join(SCHEDULERS)}, not {scheduler!r}")
    if scheduler == "none":
        return LAUNCHERS[platform]
    if (platform, scheduler) not in SCHEDULED_LAUNCHERS:
        raise ValueError(f"cluster_scheduler={scheduler} has no launcher for {platform} nodes: set "
                         "cluster_scheduler: none for them")
    return SCHEDULED_LAUNCHERS[(platform, scheduler)]


def fingerprint(parts):
    """sha256 over what decides a run's result: platform, code, data, arguments, placement."""
    platform_of(parts)
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def part_digests(parts):
    """sha256 of each part of the fingerprint: a run record names which parts another run differs in."""
    return {key: hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
            for key, value in parts.items()}


PART_WORDS = {"code": "code", "data": "data", "program": "program or arguments", "layout": "placement",
              "env": "environment", "secret_env": "secret environment's names", "mca": "MCA parameters",
              "backend": "backend", "platform": "platform", "cluster": "cluster"}


# Parts a run may differ in and still continue the latest run's checkpoint, when every rank reads the same
# shard as before (rank_data): the ranks are on other nodes (a dead node replaced by a spare), nothing else.
PLACEMENT_PARTS = ("data", "layout")


def rank_data(manifests):
    """sha256 over what each rank reads, wherever it lives: the rank count and every (rank, file, sha256) entry
    of the nodes' manifests (train_job_plan's parts.data: each node's manifest.json, base64), the same for the
    same shards on other nodes; "" when a manifest is missing or unreadable (nothing to compare)."""
    entries, ranks = set(), set()
    for content in manifests:
        try:
            manifest = json.loads(base64.b64decode(content, validate=True))
            ranks.add(int(manifest["ranks"]))
            for shard in manifest["shards"]:
                entries.add((str(shard.get("rank", shard.get("ranks"))), shard["shard"], shard["sha256"]))
        except (binascii.Error, ValueError, TypeError, KeyError, AttributeError):
            return ""
    if len(ranks) != 1 or not entries:
        return ""
    return hashlib.sha256(json.dumps([ranks.pop(), sorted(entries)]).encode()).hexdigest()


def _differing_keys(record, parts):
    theirs = record.get("parts") if isinstance(record.get("parts"), dict) else {}
    return [key for key in sorted(parts) if theirs.get(key) != parts[key]]


def _differing(record, parts):
    return [PART_WORDS.get(key, key) for key in _differing_keys(record, parts)]


def decide(spec):
    """Whether the job runs, whether it continues a run's checkpoint, and why, from the controller's records.

    spec: name, force, resume, fresh, fingerprint, parts (train_job_part_digests), rank_data (rank_data),
    source, owner, last_success and latest (the records, {} when none), report_exists (the last success's
    report is there). A latest run without an exit code was interrupted (Ctrl-C, a lost controller): it is
    resumable like a failed one, with the same fingerprint, or with the ranks alone on other nodes (the same
    rank_data: every rank reads the shard it read, so the checkpoint is still its own). A latest run of
    another code folder or owner under the same name holds the checkpoint: refused unless fresh is asked for."""
    name, parts = spec["name"], spec["parts"]
    latest = spec.get("latest") or {}
    previous = spec.get("last_success") or {}
    plan = {"previous": previous, "must_run": True, "resuming": False, "why": "", "refused": ""}
    # Records older than the source and owner fields name neither: nothing to compare.
    if latest.get("source") and not spec.get("fresh") and \
            (latest.get("source"), latest.get("owner")) != (spec.get("source"), spec.get("owner")):
        plan["refused"] = (
            f"job {name} holds the checkpoint of run {latest.get('run_id')}, started by "
            f"{latest.get('owner') or 'someone'} from {latest.get('source') or 'other code'}; this is "
            f"{spec.get('owner')}'s {spec.get('source')}. Give this job a name of its own (train_job_name), "
            f"or set train_job_fresh=true to start it fresh over that checkpoint. Nothing was changed.")
        return plan
    if (not spec.get("force") and previous.get("fingerprint") == spec["fingerprint"]
            and spec.get("report_exists")):
        plan["must_run"] = False
        return plan
    unfinished = bool(latest) and latest.get("rc") != 0
    if not (unfinished and spec.get("resume")):
        return plan
    how = "was interrupted" if latest.get("rc") is None else f"failed (rc {latest.get('rc')})"
    if spec.get("fresh"):
        plan["why"] = f"{name} starts fresh (train_job_fresh): run {latest.get('run_id')} {how}."
    elif latest.get("fingerprint") == spec["fingerprint"]:
        plan["resuming"] = True
        plan["why"] = f"{name} continues run {latest.get('run_id')}, which {how}, from its last checkpoint."
    elif set(_differing_keys(latest, parts)) <= set(PLACEMENT_PARTS) and spec.get("rank_data") and \
            latest.get("rank_data") == spec["rank_data"]:
        plan["resuming"] = True
        plan["why"] = (f"{name} continues run {latest.get('run_id')}, which {how}, from its last checkpoint: "
                       "its ranks are on other nodes now, each reading the shard it read before.")
    else:
        plan["why"] = (f"{name} starts fresh: run {latest.get('run_id')} {how}, but its checkpoint is of other "
                       f"{', '.join(_differing(latest, parts)) or 'settings'} than this run's.")
    return plan
