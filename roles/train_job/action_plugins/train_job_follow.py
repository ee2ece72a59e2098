"""Follow a detached training job on the head node until it ends.

Polls the run directory over the task's connection every `poll_seconds`:
touches the heartbeat (run.sh stops the job when the controller stops
looking), prints rank 0's newest progress line as it comes, and returns when
run.sh has written exit_code. On Ctrl-C it stops the job before giving up.
Never fails itself: the role fails after collecting every rank's log.
"""

import json
import re
import shlex
import signal
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

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
        self._remote(f"cd {quoted} && kill -TERM $(cat mpirun.pid) 2>/dev/null; sleep 3; "
                     f"kill -KILL $(cat mpirun.pid) 2>/dev/null; true")

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        run_dir, layout, name = args["run_dir"], args["layout"], args.get("name", "job")
        poll = max(1, int(args.get("poll_seconds", 3)))
        quoted = shlex.quote(run_dir)
        probe = (f"cd {quoted} && touch heartbeat && cat exit_code 2>/dev/null; echo {SEPARATOR}; "
                 f"tail -n 1 output/metrics.jsonl 2>/dev/null")
        started = time.monotonic()
        last_record, last_line, rc = None, None, None
        # Ansible's main process ends its workers on Ctrl-C; stop the job first.
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while rc is None:
                exit_text, _, metrics = self._remote(probe).partition(SEPARATOR)
                line = metrics.strip()
                if line and line != last_line:
                    last_line = line
                    try:
                        last_record = json.loads(line)
                        display.display(progress_line(name, last_record))
                    except ValueError:
                        pass  # a line being written; the next poll has it whole
                if exit_text.strip():
                    rc = int(exit_text.strip())
                else:
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

        log = self._remote(f"cat {quoted}/mpirun.log {quoted}/stop_reason 2>/dev/null")
        result.update(rc=rc, seconds=round(time.monotonic() - started, 1), last_progress=last_record,
                      changed=False, failed=False)
        if rc != 0:
            rank, host, reason = mpirun_failure(log, layout)
            stop = self._remote(f"cat {quoted}/stop_reason 2>/dev/null").strip()
            result.update(failed_rank=rank, failed_host=host,
                          reason=stop or reason or f"mpirun exited with code {rc}",
                          mpirun_log_tail=log.splitlines()[-40:])
        return result
