#!/usr/bin/python3
"""The node's own health check (cntk.cluster.slurm), installed as /usr/local/sbin/cntk-node-health.

slurmd runs it as root every HealthCheckInterval (HealthCheckProgram) and the
train step runs it once before each job. It checks, from
/etc/cntk-cluster/node-health.json (root's, written by the role):

  data    the data folder can hold the shards this node must hold: the
          bytes its manifest lists (or, when the manifest is gone, the bytes
          recorded at the last good check) against what is there and free
  fabric  the MPI interface exists, is up and holds the node's cluster_address
  backend the job's Python imports its backend, run as the training user
  gpus    nvidia-smi lists cluster_gpus GPUs (GPU nodes only)

A failing node is drained with a reason that names the check and the value
("cntk-health: data: ..."); a node this check drained is resumed once every
check passes. A node drained for any other reason is left as it is.
Prints one line per failed check; exit status 1 when any failed.
"""

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys

CONFIG = "/etc/cntk-cluster/node-health.json"
# Root's record of what the data folder held at the last good check.
STATE = "/var/lib/cntk-cluster/health-data.json"
REASON_PREFIX = "cntk-health: "
MANIFEST = "manifest.json"
MANIFEST_MAX = 16 << 20
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


def manifest_files(data_dir):
    """{file name: bytes} of the data files this node's manifest lists, or None with no manifest."""
    raw = read_regular(os.path.join(data_dir, MANIFEST), MANIFEST_MAX)
    if raw is None:
        return None
    manifest = json.loads(raw)
    return {entry["shard"]: int(entry["bytes"]) for entry in manifest.get("shards", [])}


def check_data(data_dir, recorded):
    """(problem or None, the need to record). recorded: {file: bytes} from the last good check."""
    try:
        files = manifest_files(data_dir)
    except (ValueError, KeyError, TypeError) as error:
        return f"data: {data_dir}/{MANIFEST} cannot be read ({error}): run playbooks/data.yml", recorded
    if files is None:
        files = recorded
    if not files:
        return None, files
    present = 0
    missing = []
    for name, want in files.items():
        try:
            have = os.lstat(os.path.join(data_dir, name))
        except FileNotFoundError:
            missing.append(name)
            continue
        present += min(have.st_size, want) if stat.S_ISREG(have.st_mode) else 0
    need = sum(files.values()) - present
    try:
        free = shutil.disk_usage(data_dir).free
    except FileNotFoundError:
        return f"data: {data_dir} is missing: it must hold {len(files)} files, {size(sum(files.values()))}", files
    if need > free:
        return (f"data: {data_dir} has {size(free)} free, {size(need)} short of the {len(files)} files "
                f"({size(sum(files.values()))}) this node holds for its ranks"
                + (f", {len(missing)} missing" if missing else "")), files
    return None, files


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


def check_backend(result, python, modules):
    """result: the import's CompletedProcess."""
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["exit status %d" % result.returncode])[-1]
        return f"backend: {python} cannot import {', '.join(modules)}: {last[:200]}"
    return None


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


def load_state():
    try:
        return json.loads(read_regular(STATE, MANIFEST_MAX) or b"{}")
    except ValueError:
        return {}


def save_state(state):
    os.makedirs(os.path.dirname(STATE), mode=0o755, exist_ok=True)
    tmp = STATE + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(state, handle, sort_keys=True)
    os.replace(tmp, STATE)


def data_as(user, data_dir, recorded):
    """check_data run as the training user, whose folder it is: root reads nothing through a path that user
    controls. This program again, under root's own Python, isolated (-I), the record on stdin."""
    account = pwd.getpwnam(user)
    env = {"PATH": SYSTEM_PATH, "HOME": account.pw_dir, "LANG": "C.UTF-8"}
    argv = [shutil.which("runuser", path=SYSTEM_PATH) or "/usr/sbin/runuser", "-u", user, "--",
            sys.executable, "-I", os.path.abspath(__file__), "--data-check", data_dir]
    try:
        result = run(argv, env=env, cwd="/", input=json.dumps(recorded))
        answer = json.loads(result.stdout)
        return answer["problem"], answer["files"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError) as error:
        return f"data: the check of {data_dir} as {user} did not answer ({error})", recorded


def problems(config, state):
    """[problem], and the data record to keep."""
    found = []
    data, record = data_as(config["user"], config["data_dir"], state.get(config["data_dir"]))
    found.append(data)
    found.append(check_fabric(config["interface"], config["address"],
                              output_or_none(["ip", "-j", "addr", "show", "dev", config["interface"]])))
    if config.get("python"):
        found.append(check_backend(import_as(config["user"], config["python"], config["modules"]),
                                   config["python"], config["modules"]))
    found.append(check_gpus(int(config.get("gpus", 0)),
                            output_or_none(["nvidia-smi", "-L"]) if int(config.get("gpus", 0)) > 0 else ""))
    return [problem for problem in found if problem], record


def node_state(node):
    """(state, reason) from scontrol, or (None, '') when slurmctld does not answer."""
    out = output_or_none(["scontrol", "-o", "show", "node", node])
    if out is None:
        return None, ""
    fields = dict(part.split("=", 1) for part in out.split() if "=" in part)
    reason = out.split("Reason=", 1)[1] if "Reason=" in out else ""
    return fields.get("State", ""), reason


def scontrol_update(node, **fields):
    return run(["scontrol", "update", f"NodeName={node}"] + [f"{name}={value}" for name, value in fields.items()])


def main(argv):
    # slurmd starts it with its own environment: the system's tools, found on root's own path.
    os.environ["PATH"] = SYSTEM_PATH
    if argv[:1] == ["--data-check"]:
        problem, files = check_data(argv[1], json.loads(sys.stdin.read() or "null"))
        print(json.dumps({"problem": problem, "files": files}))
        return 0
    with open(CONFIG) as handle:
        config = json.load(handle)
    node = config["node"]
    state = load_state()
    found, record = problems(config, state)
    if not found and record != state.get(config["data_dir"]):
        state[config["data_dir"]] = record
        save_state(state)
    slurm_state, reason = node_state(node)
    ours = reason.startswith(REASON_PREFIX)
    if found:
        words = REASON_PREFIX + "; ".join(found)
        if "--no-drain" not in argv and slurm_state is not None and (ours or "DRAIN" not in slurm_state):
            scontrol_update(node, State="DRAIN", Reason=words[:1000])
        print(f"{node}: " + "; ".join(found))
        return 1
    if ours and "DRAIN" in (slurm_state or "") and "--no-drain" not in argv:
        scontrol_update(node, State="RESUME")
        print(f"{node}: healthy again, resumed (it was drained for: {reason.strip()})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
