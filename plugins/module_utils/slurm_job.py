"""The train step's job as Slurm sees it: the sbatch options from the run's layout, and what squeue and
scontrol say about it afterwards."""

import re

from ansible_collections.cntk.cluster.plugins.module_utils import slurm_conf

# Where the project's jobs say what they are (sbatch --comment): stop.yml cancels these and nothing else.
COMMENT_PREFIX = "cntk.cluster"
# squeue's states of a job that has not ended yet.
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
                 "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD")


def time_limit(seconds):
    """sbatch --time from seconds, rounded up to a minute: 'D-HH:MM:SS'."""
    minutes = max(1, -(-int(seconds) // 60))
    days, rest = divmod(minutes * 60, 86400)
    hours, rest = divmod(rest, 3600)
    return f"{days}-{hours:02d}:{rest // 60:02d}:00"


def comment(name, run_id):
    return f"{COMMENT_PREFIX}:{name}:{run_id}"


def sbatch_options(layout, name, run_id, run_dir, timeout, output, grace=120, retries=0):
    """sbatch's options for the run: the layout's nodes (nodelist and count), its ranks per node, a time limit
    `grace` seconds past train_job_timeout (the job's own watchdog stops it first and says why), its name, its
    comment (the project's mark), its folder and output file; no environment from the submitting shell. Nodes
    with different slot counts get the most of them each: mpirun's hostfile then places the ranks
    (uniform_slots).

    With `retries` (train_job_max_retries), Slurm may requeue the job after a node's failure: it asks for the
    head node and between len(layout) - retries and len(layout) whole nodes, as many as are up (Slurm gives the
    most of the range it can at once), so that a requeued job starts on the nodes left. No task count: Slurm
    fixes a job's count when it first starts it (nodes x --ntasks-per-node), which fewer nodes could not hold;
    run.sh places the ranks over the nodes it gets (requeue_mapping)."""
    hosts = [entry["host"] for entry in layout]
    slots = [int(entry["slots"]) for entry in layout]
    if retries:
        nodes = [f"--nodes={max(1, len(hosts) - int(retries))}-{len(hosts)}", f"--nodelist={hosts[0]}"]
        # Every attempt's launcher output in the one file (Slurm truncates it at each start otherwise).
        requeue, tasks = "--requeue", ["--exclusive", "--open-mode=append"]
    else:
        nodes = [f"--nodes={len(hosts)}", f"--nodelist={','.join(hosts)}"]
        requeue, tasks = "--no-requeue", [f"--ntasks-per-node={max(slots)}"]
    return ([f"--job-name={name}", f"--comment={comment(name, run_id)}", f"--chdir={run_dir}", f"--output={output}"]
            + nodes + [f"--time={time_limit(int(timeout) + grace)}", "--export=NONE", requeue, "--parsable"] + tasks)


def requeue_mapping(ranks):
    """run.sh's shell lines for a job Slurm may requeue: Open MPI's mapping policy (OMPI_MCA_rmaps_base_mapping_
    policy, what --map-by sets) of `ranks` over the nodes of this attempt's allocation, as few a node as the
    ranks allow (ppr:ceil(ranks / nodes):node): 8 ranks are 2 a node on 4 nodes, 3, 3 and 2 on 3."""
    return (f'nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | wc -l)\n'
            f'export OMPI_MCA_rmaps_base_mapping_policy="ppr:$(( ({int(ranks)} + nodes - 1) / nodes )):node"')


def uniform_slots(layout):
    """True when every node runs as many ranks: mpirun then takes its placement from the allocation alone."""
    return len({int(entry["slots"]) for entry in layout}) == 1


# A Key=value field where a word starts (so a long word with no "=" is tried once, not from each letter).
_FIELD = re.compile(r"(?<!\S)(\w+)=(\S*)")


def show_job(text):
    """`scontrol show job --oneliner ID`'s fields as a dict ('' when Slurm no longer knows the job)."""
    fields = {}
    for match in _FIELD.finditer(text):
        fields.setdefault(match.group(1), match.group(2))
    return fields


def ended(fields):
    """(exit code, reason) of a job that ended without its script writing an exit code (cancelled, timed out,
    its node failed), from scontrol's JobState, ExitCode ('a:b', b the signal) and Reason."""
    state = fields.get("JobState", "UNKNOWN")
    code, _, signal = fields.get("ExitCode", "0:0").partition(":")
    rc = 128 + int(signal) if signal.isdigit() and int(signal) else int(code) if code.isdigit() else 255
    if state != "COMPLETED" and rc == 0:
        rc = 255
    reason = fields.get("Reason", "None")
    text = f"Slurm ended job {fields.get('JobId', '?')}: {state}"
    if reason not in ("None", ""):
        text += f" ({reason})"
    return rc, text


def attempts(history):
    """The job's attempts from what the follower saw of it, [(state, nodelist, last step)] one per poll: a new
    attempt each time it runs again after a requeue. Each is {nodes, last_step}, and `lost` the nodes an attempt
    had that the next one lost (the failed ones)."""
    runs = []
    previous = None
    for state, nodelist, step in history:
        try:
            nodes = slurm_conf.hostnames(nodelist) if nodelist else []
        except ValueError:
            nodes = []  # not a hostlist: this poll says nothing of the nodes
        if state == "RUNNING" and nodes:
            if previous != "RUNNING" or not runs or nodes != runs[-1]["nodes"]:
                runs.append({"nodes": nodes, "last_step": step})
            elif step is not None:
                runs[-1]["last_step"] = step
        previous = state
    for attempt, following in zip(runs, runs[1:]):
        attempt["lost"] = [node for node in attempt["nodes"] if node not in following["nodes"]]
    return runs


def held_out(hosts, runs):
    """The layout's hosts the job's first attempt did not run on: nodes Slurm held out (drained, down) when it
    started a job that allows fewer nodes (train_job_max_retries)."""
    return [host for host in hosts if runs and host not in runs[0]["nodes"]]


def queue_lines(text, prefix=COMMENT_PREFIX):
    """The project's jobs in `squeue --noheader --format='%i|%j|%u|%T|%k'` output: [{id, name, user, state,
    comment}], others' jobs (another comment) left out."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|", 4)
        if len(parts) == 5 and parts[4].startswith(prefix + ":"):
            jobs.append(dict(zip(("id", "name", "user", "state", "comment"), parts)))
    return jobs


# squeue's format for busy_jobs: what Slurm fills in (id, user, state) before what the job's owner chose (name,
# comment, either of which may hold a "|").
BUSY_FORMAT = "%i|%u|%T|%j|%k"


def busy_jobs(text, user, name, prefix=COMMENT_PREFIX):
    """The jobs in `squeue --noheader --format=BUSY_FORMAT` output that hold this job's name for the project:
    the training `user`'s, named `name`, with the project's comment. Another account's job of the same name
    and comment is that account's (any user may set both) and does not count."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        job_name, _, job_comment = parts[3].partition("|")
        if parts[1] == user and job_name == name and job_comment.startswith(f"{prefix}:{name}:"):
            jobs.append({"id": parts[0], "name": job_name, "user": parts[1], "state": parts[2],
                         "comment": job_comment})
    return jobs


# squeue's format for queued_jobs: Slurm's own fields first, the name its owner chose last (it may hold a "|").
QUEUE_FORMAT = "%i|%T|%u|%j"


def queued_jobs(text):
    """Every job `squeue --noheader --all --format=QUEUE_FORMAT` lists that has not ended, any user's:
    [{id, state, user, name, label}], the name cut to 60 printable characters (its owner chose it), the label
    "id (state, user, name)" for a message. What the data and
    provision steps refuse to run under: a hand-submitted, pending or requeued job reads the nodes' data too."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) != 4 or not parts[0].isdigit() or parts[1] not in ACTIVE_STATES:
            continue
        name = "".join(char if " " <= char <= "~" else "?" for char in parts[3][:60])
        user = parts[2][:32]
        jobs.append({"id": parts[0], "state": parts[1], "user": user, "name": name,
                     "label": "%s (%s, %s, %s)" % (parts[0], parts[1], user, name)})
    return jobs

