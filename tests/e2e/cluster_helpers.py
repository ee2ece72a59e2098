"""What the end-to-end tests share: reading a play recap, and a shell on a test node.

Nodes are inspected through `docker exec`, the harness's own channel; the
playbooks under test connect over SSH with host keys checked."""

import re
import subprocess


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
