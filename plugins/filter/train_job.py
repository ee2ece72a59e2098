"""The job's program, environment, command lines, fingerprint and run directory names, from the inventory."""

import fnmatch
import hashlib
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.module_utils import cntk_porting, job_files, train_plan

SEPARATOR = {"Linux": "/", "Windows": "\\"}


def _platform(spec):
    try:
        return train_plan.platform_of(spec)
    except ValueError as error:
        raise AnsibleFilterError(str(error))


def train_job_program_args(args):
    """The program's arguments: a list of strings, passed as given (no shell); or a
    mapping of options without the leading -- (train.py's form): true is a flag,
    false and null leave the option out."""
    if isinstance(args, Mapping):
        argv = []
        for name, value in sorted(args.items()):
            if value is True:
                argv.append("--" + str(name))
            elif value not in (False, None):
                argv += ["--" + str(name), str(value)]
        return argv
    if isinstance(args, (list, tuple)) and all(isinstance(arg, str) for arg in args):
        return list(args)
    raise AnsibleFilterError(
        f"train_job_args={args!r}: give a list of strings (quote numbers: ['--epochs', '10']), passed to the "
        "program as they are, or a mapping of train.py's options")


def train_job_job_env(spec):
    """The contract's environment, the same for every rank (training/README.md, "The job contract").

    `spec` keys: platform, name, run_id, backend, data_dir, data_layout,
    test_file (the test set's name in data_dir, or empty), output_dir,
    checkpoint_dir, resume (whether this run continues a failed one)."""
    separator = SEPARATOR[_platform(spec)]
    test = spec.get("test_file") or ""
    return {
        "JOB_NAME": str(spec["name"]),
        "JOB_RUN_ID": str(spec["run_id"]),
        "JOB_BACKEND": str(spec["backend"]),
        "JOB_DATA_DIR": str(spec["data_dir"]),
        "JOB_DATA_LAYOUT": str(spec.get("data_layout") or "shard"),
        "JOB_TEST_FILE": str(spec["data_dir"]) + separator + test if test else "",
        "JOB_OUTPUT_DIR": str(spec["output_dir"]),
        "JOB_CHECKPOINT_DIR": str(spec["checkpoint_dir"]),
        "JOB_METRICS_FILE": str(spec["output_dir"]) + separator + job_files.METRICS,
        "JOB_RESUME": "1" if spec.get("resume") else "",
    }


def train_job_command(spec):
    """mpirun's argv for the job (Open MPI), from the role's settings.

    `spec` keys: layout, interface, mca, env (every variable the ranks get,
    exported by run.sh), python, runner (files/run_rank.py on the nodes: a
    failed rank ends at once), program (the entry script's path on the
    nodes), args (train_job_program_args' list), and mpirun (default "mpirun"). With `allocation` true (a
    Slurm job), no hostfile and no rank count: mpirun takes the nodes and slots of the allocation it runs in.
    With `requeue` (a Slurm job that may be requeued onto fewer nodes), the layout's rank count over whatever
    nodes it gets, mapped by run.sh (slurm_job.requeue_mapping), more than a node's slots where it must: a
    checkpoint restores only into as many ranks as wrote it.
    """
    ranks = sum(entry["slots"] for entry in spec["layout"])
    if spec.get("requeue"):
        placement = ["-np", str(ranks), "--oversubscribe"]
    elif spec.get("allocation"):
        placement = ["--map-by", "slot"]
    else:
        placement = ["--hostfile", job_files.HOSTFILE, "-np", str(ranks), "--map-by", "slot"]
    argv = [spec.get("mpirun") or "mpirun"] + placement + ["--bind-to", "none",
            "--mca", "btl_tcp_if_include", spec["interface"], "--mca", "oob_tcp_if_include", spec["interface"]]
    for name, value in sorted(spec.get("mca", {}).items()):
        argv += ["--mca", str(name), str(value)]
    for name in sorted(spec.get("env", {})):
        argv += ["-x", str(name)]
    # Every rank's stdout and stderr, on the node where it runs: logs/1/rank.N/, written by the runner
    # (Open MPI 5's --output-filename loses ranks' output; see files/run_rank.py).
    return (argv + [spec["python"], spec["runner"], "--logs", job_files.LOGS_DIR, spec["program"]]
            + list(spec["args"]))


def _excluded(relative, patterns):
    return any(fnmatch.fnmatch(part, pattern) for part in Path(relative).parts for pattern in patterns)


def train_job_source_files(source, excludes=()):
    """The job's code as it is sent: every file's path relative to source, in
    order, the excluded names (.git, __pycache__, ...) left out."""
    root = Path(source)
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not _excluded(d, excludes))
        for name in sorted(files):
            relative = (Path(directory) / name).relative_to(root).as_posix()
            if not _excluded(relative, excludes):
                found.append(relative)
    return found


def train_job_source_digest(source, excludes=()):
    """sha256 over the job's code on the controller as it is sent: every file's
    path, executable bit and bytes (a symlink: its target)."""
    digest = hashlib.sha256()
    for relative in train_job_source_files(source, excludes):
        path = Path(source) / relative
        if path.is_symlink():
            digest.update(f"L {relative} {os.readlink(path)}\n".encode())
            continue
        content = hashlib.sha256(path.read_bytes()).hexdigest()
        executable = "x" if os.access(path, os.X_OK) else "-"
        digest.update(f"F {relative} {executable} {content}\n".encode())
    return digest.hexdigest()


def _special_bits(source, excludes):
    """The job's files and folders (as sent) that carry setuid, setgid or sticky bits."""
    found = []
    for relative in train_job_source_files(source, excludes):
        path = Path(source) / relative
        for candidate in [path] + [Path(source) / parent for parent in Path(relative).parents if str(parent) != "."]:
            try:
                mode = candidate.lstat().st_mode
            except OSError:
                continue
            if not stat.S_ISLNK(mode) and mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX):
                name = candidate.relative_to(source).as_posix()
                if name not in found:
                    found.append(name)
    return found


# A poll that fails takes at most the SSH connect timeout, plus the time
# ssh needs to find a connection dead (ansible.cfg: ServerAliveInterval 5 x
# ServerAliveCountMax 3), plus the poll interval; the heartbeat must outlast
# two such polls in a row, or one blip of the management network stops a
# healthy job.
DEAD_CONNECTION_S = 15
FAILED_POLLS_SURVIVED = 2


def heartbeat_floor(poll_seconds, connect_timeout):
    return FAILED_POLLS_SURVIVED * (int(poll_seconds) + int(connect_timeout) + DEAD_CONNECTION_S)


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool) or (isinstance(value, str) and value.isdigit())


def _limit_problems(spec):
    """Timeouts, the poll interval and the fetch cap: whole numbers in range, the heartbeat outlasting polls."""
    if "timeout" not in spec:
        return []
    problems = []
    bounds = {"timeout": ("train_job_timeout", 1, "the job's time limit in seconds, e.g. 7200"),
              "poll_seconds": ("train_job_poll_seconds", 1, "seconds between polls, e.g. 3"),
              "fetch_max_mb": ("train_job_fetch_max_mb", 1, "the largest file brought back, in MB, e.g. 512"),
              "heartbeat_timeout": ("train_job_heartbeat_timeout", 0,
                                    "seconds without the controller before the job stops (0: never)")}
    for key, (name, least, what) in bounds.items():
        value = spec.get(key)
        if not _whole(value) or int(value) < least:
            problems.append(f"{name}={value!r}: give a whole number of at least {least}: {what}")
    if problems:
        return problems
    heartbeat, floor = int(spec["heartbeat_timeout"]), heartbeat_floor(spec["poll_seconds"],
                                                                       spec.get("connect_timeout", 30))
    if 0 < heartbeat < floor:
        problems.append(
            f"train_job_heartbeat_timeout={heartbeat} is shorter than two failed polls "
            f"(2 x (train_job_poll_seconds={spec['poll_seconds']} + SSH timeout {spec.get('connect_timeout', 30)} "
            f"+ {DEAD_CONNECTION_S} s to find a dead connection) = {floor} s): a short break of the management "
            f"network would stop a healthy job. Set it to {floor} or more, or 0 to never stop for the controller")
    return problems


def train_job_input_problems(spec):
    """What is wrong with the job's input, each naming the value and the fix; [] when nothing.

    `spec` keys: source (the code folder: on the controller, or with shared
    on a filesystem every node mounts), shared, entry, args. Checked on the
    controller before any node changes."""
    problems = []
    source, entry, shared = str(spec.get("source") or ""), str(spec.get("entry") or ""), bool(spec.get("shared"))
    if shared and not source.startswith("/"):
        problems.append(f"train_job_source={source!r} with train_job_source_shared: give the folder's absolute "
                        "path as every training node mounts it")
    elif not shared and not os.path.isdir(source):
        problems.append(f"train_job_source={source} is not a folder on the controller: point it at the folder "
                        "that holds your code (a relative path is from the project root)")
    if not entry or entry.startswith("/") or ".." in Path(entry).parts:
        problems.append(f"train_job_entry={entry!r} is outside train_job_source={source}: name the script by its "
                        "path inside that folder (e.g. distributed_train.py)")
    elif not shared and os.path.isdir(source):
        real_source = os.path.realpath(source)
        real_entry = os.path.realpath(os.path.join(source, entry))
        if os.path.commonpath([real_source, real_entry]) != real_source:
            problems.append(f"train_job_entry={entry} leads outside train_job_source={source} (a symlink to "
                            f"{real_entry}): put the script itself in that folder")
        elif not os.path.isfile(real_entry):
            problems.append(f"train_job_entry={entry} is not a file in train_job_source={source}: name the script "
                            "that starts your job")
    if not shared and os.path.isdir(source):
        special = _special_bits(source, spec.get("exclude") or ())
        if special:
            problems.append(f"train_job_source={source} holds set-user-ID, set-group-ID or sticky files: "
                            f"{', '.join(special[:5])}{' ...' if len(special) > 5 else ''}; root installs the "
                            "code on every node and keeps no such bit: clear them (chmod ug-s,-t FILE)")
    problems += _limit_problems(spec) + _retry_problems(spec) + cntk_porting.refusals(_script_findings(spec))
    args = spec.get("args")
    if not isinstance(args, Mapping) and not (isinstance(args, (list, tuple))
                                              and all(isinstance(arg, str) for arg in args)):
        wrong = [arg for arg in args if not isinstance(arg, str)] if isinstance(args, (list, tuple)) else args
        problems.append(f"train_job_args holds {wrong!r}: give a list of strings, passed to the program as they "
                        "are (quote numbers: ['--epochs', '10']), or a mapping of train.py's options")
    return problems


def _script_findings(spec):
    """The job's .py files, as sent, checked for walk-through lines CNTK 2.7 does not run
    (plugins/module_utils/cntk_porting.py); a shared source is not on the controller to read."""
    source = str(spec.get("source") or "")
    if spec.get("shared") or not os.path.isdir(source):
        return []
    return cntk_porting.check_files(source, train_job_source_files(source, spec.get("exclude") or ()))


def train_job_script_warnings(spec):
    """The walk-through lines in the job's script that run but should change (deprecated, or wrong but
    running), and the files not checked, each with what to write instead; [] when none. `spec` as for
    train_job_input_problems (source, shared, exclude). The lines that always fail are input problems."""
    if spec.get("shared"):
        return [f"train_job_source={spec.get('source')} is on the shared filesystem, not on the controller: "
                "not checked for walk-through lines that fail on CNTK 2.7 (docs/communication.md lists them)"]
    return cntk_porting.warnings(_script_findings(spec))


def _retry_problems(spec):
    """train_job_max_retries: a whole number below the node count, with Slurm to requeue the job, and the data
    and checkpoints where the nodes left can read the failed node's part.

    `spec` keys: max_retries, scheduler, nodes (how many), data_shared (every node reads every rank's shards:
    shared storage, the data step's shared folder, or the replicate layout), checkpoint_shared."""
    if "max_retries" not in spec:
        return []
    retries = spec["max_retries"]
    if not _whole(retries) or int(retries) < 0:
        return [f"train_job_max_retries={retries!r}: give a whole number of at least 0: how many times Slurm "
                "requeues the job after a node fails (0: never)"]
    retries, nodes = int(retries), int(spec.get("nodes") or 1)
    if retries == 0:
        return []
    problems = []
    if spec.get("scheduler") != "slurm":
        problems.append(f"train_job_max_retries={retries} needs cluster_scheduler: slurm (Slurm requeues the job "
                        f"after a node's failure; cluster_scheduler is {spec.get('scheduler')}): turn Slurm on, "
                        "or set train_job_max_retries: 0")
    if retries >= nodes:
        problems.append(f"train_job_max_retries={retries} would leave no node of the {nodes} training nodes: "
                        f"give at most {nodes - 1}")
    if not spec.get("data_shared"):
        problems.append(f"train_job_max_retries={retries}: each node holds only its own ranks' shards, so the "
                        "nodes left after a failure could not read the failed node's: put the data on storage "
                        "every node mounts (cluster_shared_storage: glusterfs, or cluster_dataset_shared_dir), "
                        "or use dataset_layout: replicate")
    if not spec.get("checkpoint_shared"):
        problems.append(f"train_job_max_retries={retries}: the checkpoints are on each node's own disk, so the "
                        "ranks that move to another node could not restore theirs: set "
                        "train_job_shared_checkpoint_root to a folder every node mounts (cluster_shared_storage "
                        "gives one)")
    return problems


def train_job_fingerprint(parts):
    """sha256 over what decides a run's result (plugins/module_utils/train_plan.py)."""
    try:
        return train_plan.fingerprint(parts)
    except ValueError as error:
        raise AnsibleFilterError(f"train_job_fingerprint: {error}")


def train_job_part_digests(parts):
    return train_plan.part_digests(parts)


def train_job_plan(spec):
    return train_plan.decide(spec)


def train_job_run_files(platform):
    """The run directory's file names for a Linux or Windows run (plugins/module_utils/job_files.py)."""
    return job_files.run_files(_platform({"platform": platform}))


SAFE_PATH = re.compile(r"[A-Za-z0-9._+/-]+")


def train_job_fetch_list(find_results, output_dir, reserved):
    """What comes back from the head node, as [{src, dest}]: dest is relative to the
    run's folder on the controller. Files found under output_dir keep their path
    below it, except one whose first part is a record's name (reserved); the
    run's records keep their name. A path with '..', odd characters, or not
    under the folder it was found in is left on the node: what the node
    reports is its word only."""
    wanted = []
    for result in find_results or []:
        base = str((result.get("item") or {}).get("path", "")).rstrip("/")
        is_output = base == str(output_dir).rstrip("/")
        for found in result.get("files") or []:
            path = str(found.get("path", ""))
            if not base or not path.startswith(base + "/"):
                continue
            relative = path[len(base) + 1:]
            parts = relative.split("/")
            if not SAFE_PATH.fullmatch(relative) or any(part in ("", ".", "..") for part in parts):
                continue
            if is_output and parts[0] in reserved:
                continue
            if not is_output and len(parts) != 1:
                continue
            wanted.append({"src": path, "dest": relative})
    return sorted(wanted, key=lambda entry: entry["dest"])


def train_job_failure(outcome, local_dir):
    """The failed rank's own words: `outcome` with failed_rank, failed_host and
    `error` (the last lines of that rank's stderr: a traceback's exception,
    CNTK's message) taken from the logs fetched to local_dir; the first rank
    whose stderr holds a traceback when mpirun did not name one."""
    outcome = dict(outcome)
    found = job_files.rank_error(Path(local_dir) / job_files.LOGS_DIR, outcome.get(job_files.JOB_FAILED_HOST),
                                 outcome.get(job_files.JOB_FAILED_RANK))
    if found:
        rank, host, error = found
        outcome.update({job_files.JOB_FAILED_RANK: rank, job_files.JOB_FAILED_HOST: host, "error": error})
    return outcome


class FilterModule:
    def filters(self):
        return {"train_job_program_args": train_job_program_args, "train_job_job_env": train_job_job_env,
                "train_job_command": train_job_command, "train_job_source_digest": train_job_source_digest,
                "train_job_source_files": train_job_source_files,
                "train_job_input_problems": train_job_input_problems,
                "train_job_script_warnings": train_job_script_warnings,
                "train_job_plan": train_job_plan,
                "train_job_run_files": train_job_run_files,
                "train_job_failure": train_job_failure, "train_job_fetch_list": train_job_fetch_list}
