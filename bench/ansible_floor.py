"""Ansible's own floor for a playbook run: as many `ping` tasks as a host ran, same nodes, same command line.

A ping is the least a task can do on a node (one module round trip), so T pings over the hosts a run used, with
the same ansible.cfg (strategy, forks, SSH options), --limit and inventory, cost what T tasks of that run cost at
the least. A run's time over its floor is the project's own work; the floor itself is Ansible's per-task cost on
this controller, which no change to the project's tasks can go below (short of running fewer tasks).

The benchmarks time the floor beside the run it bounds, in the same loop, so both see the same load.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def recap_per_host(output):
    """{host: {"ok": n, "changed": n, "skipped": n, ...}} from the last PLAY RECAP of ansible-playbook's output."""
    recap = output.split("PLAY RECAP")[-1]
    hosts = {}
    for line in recap.splitlines():
        match = re.match(r"^(\S+)\s+:\s+(.*)$", line)
        if match:
            hosts[match.group(1)] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(2))}
    return hosts


def most_tasks(output):
    """The most tasks a host ran (ok, which counts the changed ones too): the T the floor repeats."""
    hosts = recap_per_host(output)
    if not hosts:
        raise ValueError("no PLAY RECAP in the output")
    return max(counts.get("ok", 0) for counts in hosts.values())


def floor_playbook(tasks, hosts, folder):
    """Write T ping tasks over `hosts` into `folder`; the path of the playbook."""
    # Tagged `always`: a run it bounds that selects --tags (fanout_bench's `--tags provision`) counted only the
    # tasks it selected, and the same command line must still run every ping.
    play = [{"name": "Ansible's floor", "hosts": hosts, "gather_facts": False,
             "tasks": [{"name": f"ping {index}", "ansible.builtin.ping": None, "tags": ["always"]}
                       for index in range(tasks)]}]
    path = Path(folder) / "floor.yml"
    # JSON is YAML: no dependency needed to write it.
    path.write_text(json.dumps(play))
    return path


def run_playbook(command, cwd=None, env=None):
    """(seconds, completed process, retried) of an ansible-playbook run; one retry when a node was unreachable.

    On these shared 2-core machines, at a load of 20, a node's SSH connection sometimes times out: the run that
    hit it is not timed, the retry is, and the caller records that it retried.
    """
    for attempt in range(2):
        start = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env)
        seconds = time.monotonic() - start
        unreachable = any(counts.get("unreachable") for counts in recap_per_host(result.stdout).values()) or (
            "UNREACHABLE!" in result.stdout)
        if result.returncode == 0 or not unreachable or attempt == 1:
            return seconds, result, attempt > 0
        print(f"a node was unreachable; running it once more: {' '.join(command)[:200]}", file=sys.stderr,
              flush=True)


def time_floor(command, playbook, tasks, hosts="cluster", cwd=None, env=None, retried=None):
    """Run `command` (an ansible-playbook command line) with `playbook` in it swapped for T pings over `hosts`.

    Returns (seconds, output). Every other argument stays (-i, --limit, --tags, -e), so the floor runs over the
    same nodes as the run it bounds. The playbook's temporary folder is removed whatever happens. With a list
    as `retried`, a run that hit an unreachable node is run once more (run_playbook) and True is appended.
    """
    if playbook not in command:
        raise ValueError(f"{playbook} is not in {command}")
    folder = tempfile.mkdtemp(prefix="ansible-floor-")
    try:
        floor = str(floor_playbook(tasks, hosts, folder))
        swapped = [floor if part == playbook else part for part in command]
        if retried is None:
            start = time.monotonic()
            result = subprocess.run(swapped, capture_output=True, text=True, cwd=cwd, env=env)
            seconds = time.monotonic() - start
        else:
            seconds, result, again = run_playbook(swapped, cwd, env)
            if again:
                retried.append(True)
        if result.returncode != 0:
            sys.exit(f"Ansible's floor ({tasks} pings over {hosts}) failed:\n{result.stdout[-3000:]}\n"
                     f"{result.stderr[-3000:]}")
        return seconds, result.stdout
    finally:
        shutil.rmtree(folder, ignore_errors=True)
