"""Follow a detached training job on the head node until it ends.

Polls the run directory over the task's connection every `poll_seconds`:
touches the heartbeat (run.sh stops the job when the controller stops
looking), prints rank 0's newest progress line as it comes, and returns when
run.sh has written exit_code. On Ctrl-C it stops the job before giving up.
Never fails itself: the role fails after collecting every rank's log.
"""

import re
import secrets
import shlex
import signal
import time

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.cntk.cluster.plugins.module_utils import job_files, slurm_job

display = Display()

SEPARATOR = "@@train_job_follow@@"
SLURM_SEPARATOR = "@@train_job_follow:slurm@@"
# squeue's job states (JOB STATE CODES in squeue(1), Slurm 20.11-23.x): a line whose state is not one of them is
# not Slurm's answer.
SLURM_STATES = frozenset(slurm_job.ACTIVE_STATES) | {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "REVOKED", "SPECIAL_EXIT", "TIMEOUT"}
# squeue's %r (a reason code: letters, digits, a few marks) and %N (a hostlist: names, brackets, ranges).
_SLURM_LINE = re.compile(r"([A-Z_]+)\|([A-Za-z0-9_:,.()/ -]{0,200})\|([A-Za-z0-9_.,\[\]-]{0,4096})")
# Polls in a row that find a Slurm job gone from the queue with no exit code written before its end is read
# from scontrol (the script may be writing the file as the job leaves the queue).
GONE_POLLS = 2
# Past the job's own time limit, how long the follower waits for run.sh to
# have stopped it; and, with no heartbeat timeout, how many polls in a row
# the head node may miss.
DEADLINE_GRACE_S = 120
MISSED_POLLS = 10
# What one poll reads and how long it may take on the head node: the run
# folder is the training user's, who could make any file there a FIFO, a
# device or one line of gigabytes.
PROBE_SECONDS = 20
METRICS_TAIL_BYTES = 64 * 1024
RECORD_BYTES = 4096
LOG_TAIL_BYTES = 256 * 1024


def progress_line(name, record):
    """One readable line from a metrics.jsonl record (fields that are not numbers are left out)."""
    parts = [name]
    for key, label, fmt in (("epoch", "epoch", "{:.0f}"), ("step", "step", "{:.0f}"), ("samples", "samples", "{:,.0f}"),
                            ("loss", "loss", "{:.4f}"), ("metric", "error", "{:.4f}"),
                            ("samples_per_sec", "samples/s", "{:,.0f}")):
        value = job_files.number(record.get(key))
        if value is not None:
            parts.append(f"{label} {fmt.format(value)}")
    return " | ".join(parts)


def mpirun_failure(text, layout):
    """(rank, host, reason) of the first failed rank in mpirun's output, as far as it says."""
    host_of = {rank: entry["host"] for entry in layout for rank in entry["ranks"]}
    patterns = [
        (r"MPI_ABORT was invoked on rank (\d+)", "called MPI_Abort"),
        (r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)(?: \(([^)]+)\))?", "signal"),
        (r"Process name: \[\[\d+,\d+\],(\d+)\]\s+Exit code:\s+(\d+)", "exit"),
    ]
    for pattern, kind in patterns:
        match = re.search(pattern, text)
        if not match:
            continue
        rank = int(match.group(1))
        host = host_of.get(rank, "unknown host")
        if kind == "signal":
            host = match.group(2)
            reason = f"rank {rank} on {host} was killed by signal {match.group(3)}"
            if match.group(4):
                reason += f" ({match.group(4)})"
        elif kind == "exit":
            reason = f"rank {rank} on {host} exited with code {match.group(2)}"
        else:
            reason = f"rank {rank} on {host} called MPI_Abort"
        return rank, host, reason
    return None, None, None


def _plain(name, limit=RECORD_BYTES):
    """A shell command printing the last `limit` bytes of a regular file of the run folder (never a symlink,
    a FIFO or a device)."""
    return f"{{ [ ! -L {name} ] && [ -f {name} ] && tail -c {limit} {name}; }} 2>/dev/null"


def separators(token):
    """This run's (separator, Slurm separator): a token the follower drew, so that nothing the job wrote
    before the poll (its metrics line, its exit code file) can carry one."""
    return f"@@train_job_follow:{token}@@", f"@@train_job_follow:slurm:{token}@@"


def probe_script(run_dir, separator=SEPARATOR):
    """One poll, as the training user: touch the heartbeat, print the exit code (if any), the separator and
    the metrics file's last line, reading at most METRICS_TAIL_BYTES of it and nothing but regular files."""
    return (f"cd {shlex.quote(run_dir)} && touch -h {job_files.HEARTBEAT} && {_plain(job_files.EXIT_CODE, 16)}; "
            f"echo {separator}; [ ! -L {job_files.OUTPUT_DIR} ] && "
            f"{_plain(job_files.OUTPUT_DIR + '/' + job_files.METRICS, METRICS_TAIL_BYTES)} | tail -n 1")


def slurm_probe(job_id, separator=SLURM_SEPARATOR):
    """squeue's state, reason and nodes of the job, then `separator` (nothing before it once the job left the
    queue). It runs first: what follows it (the job's own files) cannot pose as Slurm's answer."""
    return f"squeue --noheader --jobs={job_id} --format='%T|%r|%N' 2>/dev/null; echo {separator}; "


def slurm_line(text):
    """(state, reason, nodelist) of squeue's first line when it is one Slurm could have written (a known state,
    a reason code, a hostlist), else ('', '', '')."""
    match = _SLURM_LINE.fullmatch(text.strip().partition("\n")[0].strip())
    if not match or match.group(1) not in SLURM_STATES:
        return "", "", ""
    return match.groups()


def scontrol_fields(text, job_id, name):
    """`scontrol show job --oneliner`'s fields from JobState on, when its line is this job's as submitted
    ("JobId=<id> JobName=<name> UserId=..."): the job's name, which its owner may change, is the one free text
    before JobState, so a renamed job's line is not read at all ({})."""
    head = f"JobId={job_id} JobName={name} UserId="
    text = text.strip()
    if not text.startswith(head) or "\n" in text:
        return {}
    return dict(slurm_job.show_job(text[len(head):]), JobId=str(job_id))


class Interrupted(BaseException):
    """Ctrl-C reached this worker (as SIGINT, or as SIGTERM from Ansible's main process).

    A BaseException, as KeyboardInterrupt is: the signal most often lands while a poll
    runs inside Ansible's connection code, whose `except Exception` handlers would turn
    an Exception into a failed command and the follower would poll on."""


def _interrupt(signum, frame):
    # Ctrl-C arrives more than once (the terminal's SIGINT, Ansible's main process
    # forwarding it, then its SIGTERM): only the first may interrupt, or a second
    # one would cut the stop short.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signal.Signals(signum).name)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("run_dir", "layout", "poll_seconds", "name", "timeout", "user", "heartbeat_timeout",
                             "slurm_job", "pending_timeout"))

    def _remote(self, command):
        result = self._low_level_execute_command(command, sudoable=True)
        return result.get("stdout", "")

    def _as_user(self, user, script):
        """Run a shell script on the head node as the training user (runuser from root): the
        run folder is that user's, and nothing read or signalled there is done with root's rights."""
        return self._remote(f"runuser -u {shlex.quote(user)} -- sh -c {shlex.quote(script)}")

    def _poll(self, user, script):
        """_as_user for a poll, cut off after PROBE_SECONDS on the head node."""
        return self._remote(f"timeout -k 5 {PROBE_SECONDS} runuser -u {shlex.quote(user)} -- "
                            f"sh -c {shlex.quote(script)}")

    def _stop_job(self, run_dir, user, slurm_id=None):
        """TERM, then KILL, mpirun's process group (run.sh starts mpirun under setsid), by the pid
        in the run's file, which the training user owns: only a plain number above 1 (never -1,
        "every process") whose process belongs to that user; and as that user, so a group
        holding anyone else's process (a sudo) is out of reach. (dash's kill: "-PID" is the group.)"""
        if slurm_id:
            # Slurm's own stop: the job's every process on every node (and a job still queued).
            self._as_user(user, f"scancel {slurm_id}")
        self._as_user(user, f"cd {shlex.quote(run_dir)} && p=$(head -c 16 {job_files.MPIRUN_PID} 2>/dev/null); "
                            "case \"$p\" in ''|*[!0-9]*|0|1) exit 0;; esac; "
                            f"[ \"$(stat -c %U /proc/$p 2>/dev/null)\" = {shlex.quote(user)} ] || exit 0; "
                            "kill -TERM \"-$p\" 2>/dev/null; sleep 3; kill -KILL \"-$p\" 2>/dev/null; true")

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        run_dir, layout, name = args["run_dir"], args["layout"], args.get("name", "job")
        poll = max(1, int(args.get("poll_seconds", 3)))
        quoted = shlex.quote(run_dir)
        user = args["user"]
        separator, slurm_separator = separators(secrets.token_hex(16))
        # The training user's folder, read as that user, and never through a symlink there.
        probe = probe_script(run_dir, separator)
        slurm_id = str(args.get("slurm_job") or "")
        if slurm_id and not slurm_id.isdigit():
            raise AnsibleError(f"train_job_follow: slurm_job {slurm_id!r} is not a Slurm job id")
        if slurm_id:
            probe = slurm_probe(slurm_id, slurm_separator) + probe
        # How long a Slurm job may wait in the queue at a time (0: as long as it takes).
        pending_timeout = int(args.get("pending_timeout", 0))
        if pending_timeout < 0:
            raise AnsibleError(f"train_job_pending_timeout is {pending_timeout}: give seconds, or 0 for no bound")
        queued, gone, slurm_end, pending_since = None, 0, None, None
        # (state, nodes, rank 0's last step) at each poll: the attempts of a job Slurm requeued.
        history, running = [], False
        # run.sh stops the job once its heartbeat is this old: the follower gives up as late, not sooner.
        heartbeat = int(args.get("heartbeat_timeout", 0))
        started = time.monotonic()
        answered = started
        deadline = started + int(args.get("timeout", 7200)) + DEADLINE_GRACE_S
        last_record, last_line, rc, missed, gave_up = None, None, None, 0, None
        # Ansible's main process ends its workers on Ctrl-C; stop the job first.
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while rc is None:
                try:
                    raw = self._poll(user, probe)
                    # Slurm's answer first, up to its separator; the job's files after.
                    queue, _, answer = raw.partition(slurm_separator) if slurm_id else ("", "", raw)
                    if separator not in answer:
                        raise AnsibleError(f"the probe did not run as {user}: "
                                           f"{job_files.printable(raw.strip()[:200])!r}")
                    exit_text, _, metrics = answer.partition(separator)
                    missed, answered = 0, time.monotonic()
                except AnsibleError as exc:
                    missed += 1
                    silent = time.monotonic() - answered
                    if (silent >= heartbeat) if heartbeat > 0 else missed >= MISSED_POLLS:
                        gave_up = (f"the head node stopped answering ({missed} polls in a row over {silent:.0f} s, "
                                   f"last: {str(exc).splitlines()[0][:200]}); the job stops itself there once "
                                   "its heartbeat is not touched (train_job_heartbeat_timeout)")
                        break
                    time.sleep(poll)
                    continue
                if slurm_id:
                    state, why, nodelist = slurm_line(queue)
                    if state == "RUNNING":
                        running = True
                    elif running and state in ("PENDING", "REQUEUED", "REQUEUE_HOLD"):
                        # Back in the queue after it ran (the polls between may not see it): Slurm requeued it.
                        running = False
                        display.display(f"{name}: Slurm requeued job {slurm_id} ({why or state}): it starts again "
                                        "on the nodes left and continues from its last checkpoint")
                    if state == "PENDING":
                        # Its time starts when Slurm starts it; its wait has a bound of its own.
                        now = time.monotonic()
                        pending_since = now if pending_since is None else pending_since
                        deadline = now + int(args.get("timeout", 7200)) + DEADLINE_GRACE_S
                        if why != queued:
                            queued = why
                            display.display(f"{name}: Slurm job {slurm_id} is queued ({why})")
                        if pending_timeout and now - pending_since > pending_timeout:
                            self._stop_job(run_dir, user, slurm_id)
                            gave_up = (f"Slurm job {slurm_id} waited in the queue for more than {pending_timeout} s "
                                       f"({why or 'no reason given'}): cancelled by the controller. Free the "
                                       "nodes (squeue, sinfo -R) or raise train_job_pending_timeout")
                            break
                    else:
                        pending_since = None
                    gone = gone + 1 if state not in slurm_job.ACTIVE_STATES else 0
                if time.monotonic() > deadline:
                    self._stop_job(run_dir, user, slurm_id)
                    gave_up = (f"the job outlived train_job_timeout by {DEADLINE_GRACE_S} s without run.sh "
                               "stopping it: stopped by the controller")
                    break
                line = job_files.printable(metrics).strip()
                record = job_files.parse_metrics_line(line) if line != last_line else None
                # A line being written is None; the next poll has it whole.
                if record is not None:
                    last_line, last_record = line, record
                    display.display(progress_line(name, record))
                if slurm_id:
                    step = job_files.number(record.get("step")) if record is not None else None
                    history.append((state, nodelist, None if step is None else int(step)))
                rc = job_files.parse_exit_code(exit_text)
                if rc is None and gone >= GONE_POLLS:
                    fields = scontrol_fields(self._as_user(user, f"scontrol show job --oneliner {slurm_id} 2>&1"),
                                             slurm_id, name)
                    # Between a node's failure and its requeue the job may be out of squeue's view a moment.
                    if fields.get("JobState") in slurm_job.ACTIVE_STATES:
                        gone = 0
                    elif not fields:
                        rc, slurm_end = 255, (f"Slurm no longer shows job {slurm_id} as it was submitted (ended more "
                                              f"than MinJobAge ago, or renamed from {name}): its end is unknown")
                    else:
                        rc, slurm_end = slurm_job.ended(fields)
                if rc is None:
                    time.sleep(poll)
        except (Interrupted, KeyboardInterrupt):
            for sig in previous:
                signal.signal(sig, signal.SIG_IGN)
            # The stop first: Ansible's main process is going away, and a display
            # (sent through it) may block or fail.
            self._stop_job(run_dir, user, slurm_id)
            try:
                display.display(f"{name}: interrupted, the job was stopped on every node")
            except Exception:  # the main process may be gone: the job is stopped all the same
                pass
            raise KeyboardInterrupt from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        if slurm_id:
            result["slurm_job"] = int(slurm_id)
            attempts = slurm_job.attempts(history)
            held = slurm_job.held_out([entry["host"] for entry in layout], attempts)
            if len(attempts) > 1 or held:
                # job.json's record of each attempt; collect.yml leaves the failed and held-out nodes alone.
                result["attempts"] = attempts
                result["lost_nodes"] = sorted({node for attempt in attempts for node in attempt.get("lost", [])})
            if held:
                result["held_out"] = held
        if gave_up:
            result.update({job_files.JOB_RC: 255}, seconds=round(time.monotonic() - started, 1),
                          last_progress=last_record, reason=gave_up, changed=False, failed=False)
            return result
        log = self._as_user(user, f"cd {quoted} && {_plain(job_files.LAUNCHER_LOG['Linux'], LOG_TAIL_BYTES)}; "
                           f"{_plain(job_files.STOP_REASON)}")
        # Merged into job.json as the run's outcome.
        result.update({job_files.JOB_RC: rc}, seconds=round(time.monotonic() - started, 1),
                      last_progress=last_record, changed=False, failed=False)
        if rc != 0:
            rank, host, reason = mpirun_failure(log, layout)
            stop = self._as_user(user, f"cd {quoted} && {_plain(job_files.STOP_REASON)}").strip()
            result.update({job_files.JOB_FAILED_RANK: rank, job_files.JOB_FAILED_HOST: host},
                          reason=job_files.printable(stop or slurm_end or reason or f"mpirun exited with code {rc}"),
                          mpirun_log_tail=job_files.printable(log).splitlines()[-40:])
        return result
