"""The run directory's files, named once and parsed here.

A run of the train_job role lives in <jobs dir>/<job>/runs/<run id>/ on the
head node and comes back to artifacts/<cluster>/<job>/<run id>/ on the controller.
roles/train_job/README.md ("The run directory") is the spec: each file, who
writes it, who reads it, its format.

Imported by job_report (the report page), the train_job_follow action and
the train_job filters. Standard library only.
"""

import json
import math
import os
import re

# Written by the role before the launch.
RUN_SCRIPT = "run.sh"
HOSTFILE = "hostfile"
JOB = "job.json"
# Written by run.sh on the head node (Linux): its own pid, mpirun's, why it
# stopped the job, and last, atomically, mpirun's exit code.
PID = "pid"
MPIRUN_PID = "mpirun.pid"
STOP_REASON = "stop_reason"
EXIT_CODE = "exit_code"
# Touched by the controller while it follows the job: run.sh stops a job
# whose heartbeat is older than train_job_heartbeat_timeout.
HEARTBEAT = "heartbeat"
# Made by playbooks/stop.yml (as the training user): run.sh stops the job.
STOP_REQUEST = "stop_request"
# The launcher's stdout and stderr.
LAUNCHER_LOG = {"Linux": "mpirun.log", "Windows": "mpiexec.log"}
# Rank 0's output (JOB_OUTPUT_DIR): every regular file there comes back
# beside the run's records. JOB_METRICS_FILE is OUTPUT_DIR/METRICS;
# training/common.py names the same files on the nodes.
OUTPUT_DIR = "output"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
MODELS = ("model.npz", "model.cntk")
# Every rank's stdout and stderr, on the node it ran on: logs/1/rank.N/.
LOGS_DIR = "logs"
# Written on the controller by job_report.py.
PLOT = "plot.png"
TIMING_PLOT = "timing.png"
REPORT = "report.html"

# job.json keys the readers interpret (the rest are shown as they are).
JOB_NAME = "job"
JOB_RUN_ID = "run_id"
JOB_COMMAND = "command"
JOB_RC = "rc"
JOB_FAILED_RANK = "failed_rank"
JOB_FAILED_HOST = "failed_host"
JOB_HOSTFILE = "hostfile"
JOB_FINGERPRINT = "fingerprint"
JOB_STAND_INS = "stand_ins"


def reserved_names(platform):
    """Names in the run's folder on the controller that rank 0's output may not take."""
    return sorted({RUN_SCRIPT, HOSTFILE, JOB, PID, MPIRUN_PID, STOP_REASON, EXIT_CODE, HEARTBEAT, STOP_REQUEST,
                   LAUNCHER_LOG[platform], LOGS_DIR, PLOT, TIMING_PLOT, REPORT})


def run_files(platform):
    """The names the role's tasks and templates use, for a Linux or Windows run."""
    launcher_log = LAUNCHER_LOG[platform]
    return {
        "run_script": RUN_SCRIPT, "hostfile": HOSTFILE, "job": JOB, "pid": PID, "mpirun_pid": MPIRUN_PID,
        "stop_reason": STOP_REASON, "exit_code": EXIT_CODE, "heartbeat": HEARTBEAT, "launcher_log": launcher_log,
        "output_dir": OUTPUT_DIR, "logs_dir": LOGS_DIR, "report": REPORT, "metrics": METRICS,
        "stop_request": STOP_REQUEST, "reserved": reserved_names(platform),
        # The run's records on the head node, fetched beside rank 0's output. Not job.json: the
        # controller writes its own before the launch (the node's is the training user's).
        "records": [HOSTFILE, launcher_log, STOP_REASON, EXIT_CODE],
    }


def number(value):
    """value as a finite float, or None (booleans, strings, NaN are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def parse_exit_code(text):
    """exit_code's integer, or None while run.sh has not written it (the job still runs).

    The file is the training user's: anything but an integer counts as a
    failure (255), never as an error of the reader."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        return 255


def parse_metrics_line(line):
    """One metrics.jsonl record (a JSON object with a numeric step), or None.

    A line being written, or cut by a crash, is None, never an error."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or number(record.get("step")) is None:
        return None
    return record


def read_metrics(path):
    """(records, skipped, problem): metrics.jsonl's records in file order, the
    count of lines that are not records, and why there are none."""
    if not os.path.exists(path):
        return [], 0, "missing"
    records, skipped = [], 0
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            for line in source:
                if not line.strip():
                    continue
                record = parse_metrics_line(line)
                if record is None:
                    skipped += 1
                else:
                    records.append(record)
    except OSError as error:
        return [], 0, "unreadable ({})".format(error)
    if not records:
        return [], skipped, "empty" if not skipped else "no readable record"
    return records, skipped, None


def read_json(path):
    """(document, problem) of job.json or summary.json: the object, or None and why not."""
    if not os.path.exists(path):
        return None, "missing"
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            document = json.load(source)
    except (OSError, ValueError) as error:
        return None, "unreadable ({})".format(error)
    if not isinstance(document, dict):
        return None, "not a JSON object"
    return document, None


TRACEBACK = "Traceback (most recent call last):"
ERROR_LINES = 6


# Terminal escape sequences (CSI, OSC and the rest) and every other control
# character but newline and tab: a rank's words reach the operator's terminal.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text):
    """text without terminal escape sequences or control characters (newlines and tabs kept)."""
    return _ESCAPES.sub("", text)


def _error_excerpt(text):
    """The lines of a rank's stderr that say what went wrong: the last
    traceback's final frame and exception, else the last few lines."""
    lines = [line.rstrip() for line in printable(text).splitlines() if line.strip()]
    if not lines:
        return ""
    if TRACEBACK in lines:
        start = len(lines) - 1 - lines[::-1].index(TRACEBACK)
        frames = lines[start + 1:]
        # The exception is the first line after the last frame's source line.
        last_frame = max((i for i, line in enumerate(frames) if line.lstrip().startswith('File "')), default=-1)
        excerpt = frames[max(0, last_frame):]
        # CNTK appends its C++ call stack to the message.
        excerpt = excerpt[:next((i for i, line in enumerate(excerpt) if line.startswith("[CALL STACK]")), None)]
        return "\n".join(excerpt[:ERROR_LINES])
    return "\n".join(lines[-3:])


def rank_error(logs_dir, host=None, rank=None):
    """(rank, host, excerpt) of a failed rank's stderr under logs_dir/<host>/1/rank.N/,
    or None. The named rank when its stderr says something; otherwise the
    lowest rank whose stderr holds a traceback."""
    def stderr_of(node, number):
        path = os.path.join(str(logs_dir), str(node), "1", "rank.{}".format(number), "stderr")
        try:
            with open(path, "rb") as source:
                source.seek(max(0, os.fstat(source.fileno()).st_size - 65536))
                return source.read(65536).decode("utf-8", errors="replace")
        except OSError:
            return ""

    if host is not None and rank is not None:
        excerpt = _error_excerpt(stderr_of(host, rank))
        if excerpt:
            return int(rank), host, excerpt
    candidates = []
    try:
        nodes = sorted(os.listdir(str(logs_dir)))
    except OSError:
        return None
    for node in nodes:
        ranks_dir = os.path.join(str(logs_dir), node, "1")
        try:
            names = os.listdir(ranks_dir)
        except OSError:
            continue
        for name in names:
            if name.startswith("rank.") and name[5:].isdigit():
                text = stderr_of(node, name[5:])
                if TRACEBACK in text:
                    candidates.append((int(name[5:]), node, _error_excerpt(text)))
    return min(candidates) if candidates else None
