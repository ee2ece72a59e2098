"""What the end-to-end tests share: reading a play recap, and a shell on a test node.

Nodes are inspected through `docker exec`, the harness's own channel; the
playbooks under test connect over SSH with host keys checked."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


def playbook_env():
    """The environment a user's shell gives ansible-playbook here: the project's config, no colour."""
    return dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1")


def playbook_argv(inventory, playbook, *extra):
    """ansible-playbook's argv for a playbook path relative to the project root."""
    return [PLAYBOOK, "-i", str(inventory), str(ROOT / playbook), *extra]


def ansible_playbook(inventory, playbook, *extra, check=True, timeout=1200):
    """Run a playbook to its end; with check, a failure fails the test with the output's tail."""
    result = subprocess.run(playbook_argv(inventory, playbook, *extra), capture_output=True, text=True,
                            env=playbook_env(), cwd=ROOT, timeout=timeout)
    if check and result.returncode != 0:
        pytest.fail(f"{playbook} failed:\n{result.stdout[-8000:]}\n{result.stderr[-2000:]}")
    return result


def recap(output):
    """{host: {'ok': n, 'changed': n, ...}} from the last PLAY RECAP."""
    hosts = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output.split("PLAY RECAP")[-1], re.M):
        hosts[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return hosts


def node_shell(cluster, node, command, timeout=120):
    """`sh -c command` on a node of a local test cluster (a CompletedProcess, output as text)."""
    return subprocess.run(["docker", "exec", f"cntk-{cluster}-{node}", "sh", "-c", command],
                          capture_output=True, text=True, timeout=timeout)
