"""slurm.conf's parts from the inventory and the nodes' own reports: hostlists, node lines from `slurmd -C`,
the release apt would install, and the one-release rule a cluster lives by."""

import re

# Slurm 20.11.0-2 hung Open MPI's mpirun (open-mpi/ompi#8378); fixed in 20.11.3.
MIN_RELEASE = "20.11.3"
# What `slurmd -C` reports that slurm.conf's node line takes, in slurm.conf's order.
HARDWARE_KEYS = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
_PREFIX = re.compile(r"[A-Za-z0-9_.-]*")
# One piece of a hostlist: a prefix and its [ranges], if any (matched where the last piece ended: linear).
_PIECE = re.compile(r"([^,\[\]]*)(?:\[([0-9,-]*)\])?")
# The most names one hostlist may stand for: far above any cluster, far below what would exhaust memory.
MAX_HOSTNAMES = 1 << 16


def _numbered(name):
    """(prefix, digits) of a name ending in a number ('node' and '07' of node07), or None."""
    prefix = name.rstrip("0123456789")
    if prefix == name or not _PREFIX.fullmatch(prefix):
        return None
    return prefix, name[len(prefix):]


def hostlist(names):
    """Slurm's compressed form of a list of node names: node1,node2,node3,gpu7 -> 'gpu7,node[1-3]'.
    Runs of numbers with the same prefix and width are ranges; the order of the names does not matter."""
    groups, plain = {}, []
    for name in sorted(set(names)):
        numbered = _numbered(name)
        if not numbered:
            plain.append(name)
            continue
        prefix, digits = numbered
        # node01 and node1 are different names: the width is part of the group.
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((prefix, width), []).append(int(digits))
    parts = list(plain)
    for (prefix, width), numbers in groups.items():
        numbers.sort()
        ranges, start, previous = [], numbers[0], numbers[0]
        for number in numbers[1:] + [None]:
            if number is not None and number == previous + 1:
                previous = number
                continue
            text = str(start).zfill(width)
            if previous != start:
                text += "-" + str(previous).zfill(width)
            ranges.append(text)
            if number is not None:
                start = previous = number
        parts.append(prefix + (ranges[0] if len(numbers) == 1 else "[" + ",".join(ranges) + "]"))
    return ",".join(sorted(parts))


def hostnames(text):
    """The node names a Slurm hostlist stands for, in its order: 'node[1-3,7],gpu01' -> node1 node2 node3
    node7 gpu01 (hostlist's inverse, as `scontrol show hostnames` prints them)."""
    names = []
    text, at = text.strip(), 0
    while at < len(text):
        match = _PIECE.match(text, at)
        prefix, ranges = match.group(1), match.group(2)
        at = match.end()
        if not prefix or (at < len(text) and text[at] != ","):
            raise ValueError("not a Slurm hostlist at character %d: %r" % (at, text[at:at + 40]))
        at += 1
        if ranges is None:
            names.append(prefix)
            continue
        for part in ranges.split(","):
            first, _, last = part.partition("-")
            if not first.isdigit() or not (last or first).isdigit() or int(last or first) < int(first):
                raise ValueError("not a Slurm hostlist range: %r in %r" % (part, prefix))
            width = len(first) if first.startswith("0") and len(first) > 1 else 0
            if len(names) + int(last or first) - int(first) >= MAX_HOSTNAMES:
                raise ValueError("a Slurm hostlist of more than %d names: %r" % (MAX_HOSTNAMES, text[:80]))
            names += [prefix + str(number).zfill(width) for number in range(int(first), int(last or first) + 1)]
    return names


def hardware(report):
    """The node's hardware from `slurmd -C`'s first line ('NodeName=node1 CPUs=2 Boards=1 ... RealMemory=24000'),
    as {key: int} for HARDWARE_KEYS; a key it does not print is left out."""
    fields = dict(item.split("=", 1) for item in report.split("\n", 1)[0].split() if "=" in item)
    found = {}
    for key in HARDWARE_KEYS:
        if key in fields:
            try:
                found[key] = int(fields[key])
            except ValueError:
                raise ValueError(f"slurmd -C printed {key}={fields[key]!r}: not a number ({report.strip()[:200]!r})")
    if "CPUs" not in found or "RealMemory" not in found:
        raise ValueError(f"slurmd -C did not print the node's CPUs and RealMemory: {report.strip()[:200]!r}")
    return found


def default_mem_per_cpu(nodes):
    """slurm.conf's DefMemPerCPU (MiB): the smallest node's RealMemory per CPU, so that a job without --mem gets its
    cores' share of a node (never more than the smallest has) and jobs still share nodes by core. `nodes` as
    node_lines takes; at least 1."""
    shares = [node["hardware"]["RealMemory"] // max(node["hardware"]["CPUs"], 1) for node in nodes]
    return max(min(shares), 1) if shares else 1


def node_lines(nodes):
    """slurm.conf NodeName lines. `nodes`: [{name, hardware: {HARDWARE_KEYS}, gpus: int}], in any order. Nodes
    with the same hardware and GPUs share one line, their names as a hostlist. No NodeAddr: every node resolves
    the others' names to their cluster_address (the base role's /etc/hosts block)."""
    shapes = {}
    for node in sorted(nodes, key=lambda entry: _sort_key(entry["name"])):
        shape = tuple((key, node["hardware"][key]) for key in HARDWARE_KEYS if key in node["hardware"])
        shapes.setdefault((shape, int(node.get("gpus") or 0)), []).append(node["name"])
    lines = []
    for (shape, gpus), names in shapes.items():
        line = f"NodeName={hostlist(names)}" + "".join(f" {key}={value}" for key, value in shape)
        if gpus:
            line += f" Gres=gpu:{gpus}"
        lines.append(line + " State=UNKNOWN")
    return lines


def _sort_key(name):
    numbered = _numbered(name)
    return (numbered[0], int(numbered[1]), name) if numbered else (name, -1, name)


def release(apt_policy):
    """(installed, candidate) upstream releases from `apt-cache policy slurmd`: '22.05.8' from
    '22.05.8-4+deb12u3' (epoch and Debian revision dropped); '' for '(none)' or a missing line."""
    found = {}
    for key in ("Installed", "Candidate"):
        match = re.search(rf"^\s*{key}:\s*(\S+)", apt_policy, re.M)
        value = match.group(1) if match else "(none)"
        found[key] = "" if value == "(none)" else re.sub(r"-[^-]*$", "", value.split(":", 1)[-1])
    return found["Installed"], found["Candidate"]


def _numbers(version):
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def release_problems(releases, minimum=MIN_RELEASE):
    """What is wrong with the Slurm releases the nodes would run ({host: release}): a node with none to be had,
    a release older than `minimum`, or more than one release in the cluster. [] when all is well."""
    problems = []
    missing = sorted(host for host, version in releases.items() if not version)
    if missing:
        problems.append(f"{', '.join(missing)}: no slurmd package to install (apt-cache policy slurmd has no "
                        "candidate): add the distribution's archive to the node's apt sources")
    old = sorted(host for host, version in releases.items() if version and _numbers(version) < _numbers(minimum))
    if old:
        problems.append(f"{', '.join(f'{host} ({releases[host]})' for host in old)}: Slurm older than {minimum} "
                        "(20.11.0-2 hangs mpirun, open-mpi/ompi#8378): upgrade the distribution or set "
                        "cluster_scheduler: none")
    by_release = {}
    for host, version in sorted(releases.items()):
        if version:
            by_release.setdefault(version, []).append(host)
    if len(by_release) > 1:
        named = "; ".join(f"{version} on {', '.join(hosts)}" for version, hosts in sorted(by_release.items()))
        problems.append(f"the nodes would run different Slurm releases ({named}): a cluster runs one release on "
                        "every node; put them on one distribution release, or hold slurmd at one version")
    return problems


def cgroup_kind(filesystem, has_freezer):
    """What a node mounts at /sys/fs/cgroup (`stat -fc %T`): 'v2' for the unified hierarchy (cgroup2fs), 'v1'
    where v1 controllers (freezer among them) are mounted on a tmpfs, the hybrid layout too (its v2 holds no
    controllers, which Slurm refuses: "Hybrid mode is not supported"), else 'none'."""
    if filesystem == "cgroup2fs":
        return "v2"
    return "v1" if has_freezer else "none"


def cgroup_plugins(kinds):
    """ProctrackType, TaskPlugin and cgroup.conf's CgroupPlugin, one choice for the whole cluster (slurm.conf is
    the same on every node) from each node's cgroup_kind: cgroup plugins when every node has cgroups (v1 or v2,
    autodetect for a mix), else proctrack/linuxproc and task/none (no cgroup.conf)."""
    kinds = set(kinds)
    if not kinds or "none" in kinds:
        return {"proctrack": "proctrack/linuxproc", "task": "task/none", "cgroup": ""}
    plugin = f"cgroup/{kinds.pop()}" if len(kinds) == 1 else "autodetect"
    return {"proctrack": "proctrack/cgroup", "task": "task/cgroup", "cgroup": plugin}


def not_ready(sinfo_lines, hosts):
    """The hosts slurmctld does not list as up, from `sinfo --noheader --Node --format='%N %T %E'` lines:
    ['node3 (down*: Not responding)', 'node4 (not listed)']; [] when every host is up (idle, allocated, ...
    drained by a health check is up: it registered). A state ending in '*' is a node that does not answer."""
    seen = {}
    for line in sinfo_lines:
        fields = line.split(None, 2)
        if len(fields) >= 2:
            seen[fields[0]] = (fields[1], fields[2].strip() if len(fields) > 2 else "")
    problems = []
    for host in hosts:
        if host not in seen:
            problems.append(f"{host} (not listed)")
            continue
        state, reason = seen[host]
        if state.endswith("*") or state.split("+")[0] in ("down", "unknown", "future", "not_responding"):
            problems.append(f"{host} ({state}" + (f": {reason}" if reason and reason != "none" else "") + ")")
    return problems
