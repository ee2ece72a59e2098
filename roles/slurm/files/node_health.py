#!/usr/bin/python3
"""The node's own health check (cntk.cluster.slurm), installed as /usr/local/sbin/cntk-node-health.

slurmd runs it as root every HealthCheckInterval (HealthCheckProgram) and the
train step runs it once before each job. It checks, from
/etc/cntk-cluster/node-health.json (root's, written by the role):

  data    the data folder can hold the shards this node must hold: the
          bytes root's record from the data step lists (RECORD; never the
          training user's manifest.json) against what is there and free
  fabric  the MPI interface exists, is up and holds the node's cluster_address
  backend the job's Python imports its backend, run as the training user
  gpus    nvidia-smi lists cluster_gpus GPUs (GPU nodes only)

A failing node is drained with a reason that names the check and the value
("cntk-health: data: ..."), made of root's own values and numbers only: nothing
the training user wrote reaches it. A node this check drained (sinfo's state and
reason, the state first) is resumed once every check passes. A node drained for
any other reason is left as it is.
Prints one line per failed check; exit status 1 when any failed.
"""

import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys

CONFIG = "/etc/cntk-cluster/node-health.json"
# Root's record of what the data step put in the data folder, {data folder: {file: bytes}}
# (roles/dataset writes it, root's, 0644). The folder's manifest.json is the training user's.
RECORD = "/var/lib/cntk-cluster/data-record.json"
REASON_PREFIX = "cntk-health: "
RECORD_MAX = 16 << 20
# sinfo -o '%T|%E': the node's state (a word, flags, a suffix such as * or ~), then its reason.
_SINFO_STATE = re.compile(r"[a-z_+]+[*~#!%$@^-]*")
# Control characters and escape sequences: what a command printed reaches slurmd's log and the train step.
_UNPRINTABLE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])"
                          r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
COMMAND_TIMEOUT = 40
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def read_regular(path, limit):
    """The bytes of a regular file (never through a link), or None when it is not there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise ValueError(f"{path}: {error.strerror}")
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ValueError(f"{path} is not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {size(limit)}")
    return data


def measure(data_dir, files):
    """What the data folder holds of `files` ({name: bytes}, root's record): {present, missing, denied, free}
    as numbers (free None when the folder is missing). Run as the training user (data_as): only numbers leave."""
    present, missing, denied = 0, 0, 0
    for name, want in files.items():
        try:
            have = os.lstat(os.path.join(data_dir, name))
        except FileNotFoundError:
            missing += 1
            continue
        except OSError:
            denied += 1
            continue
        present += min(have.st_size, want) if stat.S_ISREG(have.st_mode) else 0
    try:
        free = shutil.disk_usage(data_dir).free
    except FileNotFoundError:
        free = None
    return {"present": present, "missing": missing, "denied": denied, "free": free}


def data_problem(data_dir, files, measured):
    """The data check's problem or None, from root's record `files` and the numbers `measured` (measure's)."""
    if not files:
        return None
    total = sum(files.values())
    if measured["free"] is None:
        return f"data: {data_dir} is missing: it must hold {len(files)} files, {size(total)}"
    if measured["denied"]:
        return (f"data: {measured['denied']} of the {len(files)} files in {data_dir} cannot be reached as the "
                "training user (the folder's owner and mode)")
    need = total - measured["present"]
    if need > measured["free"]:
        return (f"data: {data_dir} has {size(measured['free'])} free, {size(need)} short of the {len(files)} files "
                f"({size(total)}) this node holds for its ranks"
                + (f", {measured['missing']} missing" if measured["missing"] else ""))
    return None


def check_data(data_dir, files):
    """measure and data_problem in this process (root's record `files`)."""
    return data_problem(data_dir, files, measure(data_dir, files)) if files else None


def check_fabric(interface, address, ip_json):
    """ip_json: `ip -j addr show dev IFACE`'s output, or None when the interface is not there."""
    if ip_json is None:
        return f"fabric: no interface {interface} (cluster_mpi_interface) on this node"
    links = json.loads(ip_json or "[]")
    if not links:
        return f"fabric: no interface {interface} (cluster_mpi_interface) on this node"
    link = links[0]
    state = link.get("operstate", "UNKNOWN")
    flags = link.get("flags", [])
    if "UP" not in flags or state == "DOWN" or "NO-CARRIER" in flags:
        return f"fabric: {interface} is {state.lower()} (flags {','.join(flags)})"
    held = [info.get("local") for info in link.get("addr_info", [])]
    if address not in held:
        return (f"fabric: {interface} holds {', '.join(held) or 'no address'}, not this node's "
                f"cluster_address {address}")
    return None


def printable(text):
    return _UNPRINTABLE.sub("", text)


def check_backend(result, python, modules):
    """(problem or None, detail): result is the import's CompletedProcess. Its error is the training user's
    words (that user's Python path, its site-packages): said in the detail, never in the problem."""
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["exit status %d" % result.returncode])[-1]
        return (f"backend: {python} cannot import {', '.join(modules)} (exit status {result.returncode})",
                printable(last)[:200])
    return None, ""


def check_gpus(want, listing):
    """listing: `nvidia-smi -L`'s output, or None when nvidia-smi could not run."""
    if want <= 0:
        return None
    if listing is None:
        return f"gpus: nvidia-smi does not run, cluster_gpus={want}"
    have = [line for line in listing.splitlines() if line.startswith("GPU ")]
    if len(have) != want:
        return f"gpus: nvidia-smi lists {len(have)} GPUs, cluster_gpus={want}"
    return None


def run(argv, **options):
    return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, **options)


def output_or_none(argv):
    try:
        result = run(argv)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def import_as(user, python, modules):
    account = pwd.getpwnam(user)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": account.pw_dir, "LANG": "C.UTF-8"}
    code = "".join(f"import {module}\n" for module in modules)
    try:
        return run([shutil.which("runuser", path=SYSTEM_PATH) or "/usr/sbin/runuser", "-u", user, "--", python, "-c", code], env=env, cwd="/")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([], 124, "", f"the import took over {COMMAND_TIMEOUT} s")
    except OSError as error:
        return subprocess.CompletedProcess([], 127, "", str(error))


def load_record(data_dir):
    """{file: bytes} root's record lists for data_dir, {} when the data step has not recorded it."""
    try:
        record = json.loads(read_regular(RECORD, RECORD_MAX) or b"{}").get(data_dir) or {}
        return {str(name): int(want) for name, want in record.items() if int(want) >= 0}
    except (ValueError, TypeError, AttributeError):
        return {}


def numbers(text):
    """measure's answer {present, missing, denied, free} when it is non-negative integers (free may be null),
    else None."""
    try:
        answer = json.loads(text)
        measured = {key: answer[key] for key in ("present", "missing", "denied", "free")}
    except (ValueError, KeyError, TypeError):
        return None
    if not all(type(value) is int and value >= 0 for key, value in measured.items()
               if not (key == "free" and value is None)):
        return None
    return measured


def data_as(user, data_dir, files):
    """(problem or None, detail): measure run as the training user, whose folder it is (root reads nothing
    through a path that user controls): this program again, under root's own Python, isolated (-I), root's
    record on stdin. Its answer is numbers, checked as such; the problem is made here."""
    if not files:
        return None, ""
    account = pwd.getpwnam(user)
    env = {"PATH": SYSTEM_PATH, "HOME": account.pw_dir, "LANG": "C.UTF-8"}
    argv = [shutil.which("runuser", path=SYSTEM_PATH) or "/usr/sbin/runuser", "-u", user, "--",
            sys.executable, "-I", os.path.abspath(__file__), "--data-check", data_dir]
    try:
        result = run(argv, env=env, cwd="/", input=json.dumps(files))
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"data: the check of {data_dir} as {user} did not answer", printable(str(error))
    measured = numbers(result.stdout)
    if measured is None:
        return (f"data: the check of {data_dir} as {user} did not answer (exit status {result.returncode})",
                printable(result.stderr.strip())[-200:])
    return data_problem(data_dir, files, measured), ""


def problems(config):
    """[(problem, detail)]: the problem for the drain reason (root's values), the detail for the output only."""
    found = [data_as(config["user"], config["data_dir"], load_record(config["data_dir"])),
             (check_fabric(config["interface"], config["address"],
                           output_or_none(["ip", "-j", "addr", "show", "dev", config["interface"]])), "")]
    if config.get("python"):
        found.append(check_backend(import_as(config["user"], config["python"], config["modules"]),
                                   config["python"], config["modules"]))
    found.append((check_gpus(int(config.get("gpus", 0)),
                             output_or_none(["nvidia-smi", "-L"]) if int(config.get("gpus", 0)) > 0 else ""), ""))
    return [(problem, detail) for problem, detail in found if problem]


def parse_sinfo(text):
    """(state, reason) from `sinfo -h -N -n NODE -o '%T|%E'`'s first line: the state is Slurm's word and comes
    first, so nothing in a reason can pose as it; (None, '') when the line is not that."""
    state, bar, reason = (text or "").strip().partition("\n")[0].partition("|")
    if not bar or not _SINFO_STATE.fullmatch(state):
        return None, ""
    return state, reason


def node_state(node):
    """(state, reason) from sinfo, or (None, '') when slurmctld does not answer."""
    return parse_sinfo(output_or_none(["sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%T|%E"]))


def drained(state):
    """sinfo's drain states: drained, draining, and a drain flag (mixed+drain)."""
    return state is not None and "drain" in state


def scontrol_update(node, **fields):
    return run(["scontrol", "update", f"NodeName={node}"] + [f"{name}={value}" for name, value in fields.items()])


def main(argv):
    # slurmd starts it with its own environment: the system's tools, found on root's own path.
    os.environ["PATH"] = SYSTEM_PATH
    if argv[:1] == ["--data-check"]:
        files = json.loads(sys.stdin.read() or "{}")
        print(json.dumps(measure(argv[1], {str(name): int(want) for name, want in files.items()})))
        return 0
    with open(CONFIG) as handle:
        config = json.load(handle)
    node = config["node"]
    found = problems(config)
    slurm_state, reason = node_state(node)
    ours = reason.startswith(REASON_PREFIX)
    if found:
        words = REASON_PREFIX + "; ".join(problem for problem, _ in found)
        if "--no-drain" not in argv and slurm_state is not None and (ours or not drained(slurm_state)):
            scontrol_update(node, State="DRAIN", Reason=words[:1000])
        print(f"{node}: " + "; ".join(problem + (f": {detail}" if detail else "") for problem, detail in found))
        return 1
    if ours and drained(slurm_state) and "--no-drain" not in argv:
        scontrol_update(node, State="RESUME")
        print(f"{node}: healthy again, resumed (it was drained for: {printable(reason.strip())})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
