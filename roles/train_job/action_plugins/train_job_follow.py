"""Follow a detached training job on the head node until it ends.

Polls the run directory over the task's connection every `poll_seconds`:
touches the heartbeat (run.sh stops the job when the controller stops
looking), prints rank 0's newest progress line as it comes, and returns when
run.sh has written exit_code. On Ctrl-C it stops the job before giving up.
Never fails itself: the role fails after collecting every rank's log.
"""

import re
import shlex
import signal
import sys
import time
from pathlib import Path

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

# Ansible loads a role's plugins by path, so they cannot import the role's
# files: the run directory's protocol is scripts/job_files.py (its docstring says why there).
sys.path.append(str(Path(__file__).resolve().parents[3] / "scripts"))
import job_files  # noqa: E402

display = Display()

SEPARATOR = "@@train_job_follow@@"


def progress_line(name, record):
    """One readable line from a metrics.jsonl record."""
    parts = [name]
    for key, label, fmt in (("epoch", "epoch", "{}"), ("step", "step", "{}"), ("samples", "samples", "{:,}"),
                            ("loss", "loss", "{:.4f}"), ("metric", "error", "{:.4f}"),
                            ("samples_per_sec", "samples/s", "{:,.0f}")):
        if record.get(key) is not None:
            parts.append(f"{label} {fmt.format(record[key])}")
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


class Interrupted(Exception):
    """Ctrl-C reached this worker (as SIGINT, or as SIGTERM from Ansible's main process)."""


def _interrupt(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("run_dir", "layout", "poll_seconds", "name"))

    def _remote(self, command):
        result = self._low_level_execute_command(command, sudoable=True)
        return result.get("stdout", "")

    def _stop_job(self, run_dir):
        quoted = shlex.quote(run_dir)
        pid = job_files.MPIRUN_PID
        self._remote(f"cd {quoted} && kill -TERM $(cat {pid}) 2>/dev/null; sleep 3; "
                     f"kill -KILL $(cat {pid}) 2>/dev/null; true")

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        run_dir, layout, name = args["run_dir"], args["layout"], args.get("name", "job")
        poll = max(1, int(args.get("poll_seconds", 3)))
        quoted = shlex.quote(run_dir)
        probe = (f"cd {quoted} && touch {job_files.HEARTBEAT} && cat {job_files.EXIT_CODE} 2>/dev/null; "
                 f"echo {SEPARATOR}; tail -n 1 {job_files.OUTPUT_DIR}/{job_files.METRICS} 2>/dev/null")
        started = time.monotonic()
        last_record, last_line, rc = None, None, None
        # Ansible's main process ends its workers on Ctrl-C; stop the job first.
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while rc is None:
                exit_text, _, metrics = self._remote(probe).partition(SEPARATOR)
                line = metrics.strip()
                record = job_files.parse_metrics_line(line) if line != last_line else None
                # A line being written is None; the next poll has it whole.
                if record is not None:
                    last_line, last_record = line, record
                    display.display(progress_line(name, record))
                rc = job_files.parse_exit_code(exit_text)
                if rc is None:
                    time.sleep(poll)
        except (Interrupted, KeyboardInterrupt):
            for sig in previous:
                signal.signal(sig, signal.SIG_IGN)
            display.display(f"{name}: interrupted, stopping the job on every node")
            self._stop_job(run_dir)
            raise KeyboardInterrupt from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        stop_reason = f"{quoted}/{job_files.STOP_REASON}"
        log = self._remote(f"cat {quoted}/{job_files.LAUNCHER_LOG['Linux']} {stop_reason} 2>/dev/null")
        # Merged into job.json as the run's outcome.
        result.update({job_files.JOB_RC: rc}, seconds=round(time.monotonic() - started, 1),
                      last_progress=last_record, changed=False, failed=False)
        if rc != 0:
            rank, host, reason = mpirun_failure(log, layout)
            stop = self._remote(f"cat {stop_reason} 2>/dev/null").strip()
            result.update({job_files.JOB_FAILED_RANK: rank, job_files.JOB_FAILED_HOST: host},
                          reason=stop or reason or f"mpirun exited with code {rc}",
                          mpirun_log_tail=log.splitlines()[-40:])
        return result
