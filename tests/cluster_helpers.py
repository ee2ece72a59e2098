"""What the end-to-end tests share: reading a play recap, a shell on a test node, and the interface counters
of a netns node read while site.yml runs.

Nodes are inspected through `docker exec` and `nsenter`, the harness's own channels; the playbooks under test
connect over SSH with host keys checked."""

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from local_cluster import layout, netns

ROOT = Path(__file__).resolve().parents[1]
# The harness's cluster tool (tools/local_cluster) as a command, with tools/ on its import path: it runs the
# same under plain pytest (whose pythonpath reaches this process only) as under make.
LOCAL_CLUSTER = ["env", f"PYTHONPATH={ROOT / 'tools'}", sys.executable, "-m", "local_cluster"]
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
# The real-CNTK cluster the e2e session shares (tests/e2e/conftest.py): its name, nodes, inventory and runs.
# CNTK_E2E_CLUSTER names another, so that one file (test_storage.py) can run beside a session on `cntkreal`.
CNTK_CLUSTER = os.environ.get("CNTK_E2E_CLUSTER") or "cntkreal"
CNTK_NODES = ["node1", "node2", "node3", "node4"]
CNTK_INVENTORY = ROOT / ".cluster" / CNTK_CLUSTER / "inventory"
CNTK_ARTIFACTS = ROOT / ".cluster" / CNTK_CLUSTER / "artifacts"


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


def playbook_report(inventory, playbook, *extra, timeout=1200):
    """A playbook run with Ansible's JSON callback (ansible.posix.json) for the text one: (its CompletedProcess,
    the report). Tests read what the run did from the report (each task's result on each host, the files its
    tasks came from), not task or play names in the text: a renamed task would make an absent name pass
    whatever ran."""
    env = dict(playbook_env(), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    result = subprocess.run(playbook_argv(inventory, playbook, *extra), capture_output=True, text=True, env=env,
                            cwd=ROOT, timeout=timeout)
    # The report is the output's last JSON object; lines before it are the train step's live progress, which
    # its follower prints itself.
    for start in reversed([match.start() for match in re.finditer(r"^\{", result.stdout, re.M)]):
        try:
            report, _ = json.JSONDecoder().raw_decode(result.stdout, start)
        except ValueError:
            continue
        if isinstance(report, dict) and "plays" in report:
            return result, report
    pytest.fail(f"{playbook}: no JSON report:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")


def task_results(report):
    """(task file relative to the project, task name, host, result) for every task of a JSON report on every
    host, in the order they ran."""
    found = []
    for play in report["plays"]:
        for task in play["tasks"]:
            path = task["task"].get("path", "").rsplit(":", 1)[0]
            where = os.path.relpath(path, ROOT) if path else ""
            for host, result in task["hosts"].items():
                found.append((where, task["task"]["name"], host, result))
    return found


def files_that_ran(report):
    """The task files (relative to the project) of which a task ran on some host, not skipped."""
    return {where for where, _, _, result in task_results(report) if not result.get("skipped")}


def last_ran(report):
    """(task file, task name, result) of the last task that ran on some host, not skipped: where the run stopped."""
    where, name, _, result = [entry for entry in task_results(report) if not entry[3].get("skipped")][-1]
    return where, name, result


def failure_messages(report):
    """Every failed result's message, whitespace collapsed, in one string."""
    return " ".join(" ".join(str(result.get("msg", "")).split()) for _, _, _, result in task_results(report)
                    if result.get("failed") or result.get("unreachable"))


def changed_counts(report):
    """{host: tasks that changed it} from the report's stats."""
    return {host: stats["changed"] for host, stats in report["stats"].items()}


def rsync_results(report):
    """[(host, result)] of every rsync the run started (the controller's sends, a node's relay)."""
    def argv(result):
        cmd = result.get("cmd") or []
        return cmd.split() if isinstance(cmd, str) else cmd
    return [(host, result) for _, _, host, result in task_results(report)
            if not result.get("skipped") and any(os.path.basename(str(word)) == "rsync" for word in argv(result)[:3])]


def plays_that_ran(report):
    """The playbook files (relative to the project) of the plays of which a task ran on some host, not skipped."""
    ran = set()
    for play in report["plays"]:
        if any(not result.get("skipped") for task in play["tasks"] for result in task["hosts"].values()):
            ran.add(os.path.relpath(play["play"]["path"].rsplit(":", 1)[0], ROOT))
    return ran


# The plays that check and change nothing: a run that stops there ran tasks of these plays only (the tasks may
# come from other roles' check files, which preflight includes).
CHECK_PLAYS = {"playbooks/controller_check.yml", "playbooks/input_check.yml", "playbooks/preflight.yml"}


def check_stopped_in_preflight(report):
    """Only the checking plays ran a task, none changed a node, and some task failed."""
    ran = plays_that_ran(report)
    assert ran and ran <= CHECK_PLAYS, sorted(ran)
    assert all(changed == 0 for changed in changed_counts(report).values()), report["stats"]
    assert any(stats["failures"] for stats in report["stats"].values()), report["stats"]


def start_playbook(inventory, playbook, *extra):
    """A playbook in the background, in its own process group (as a terminal runs it), its output in one pipe."""
    return subprocess.Popen(playbook_argv(inventory, playbook, *extra), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=playbook_env(), cwd=ROOT,
                            start_new_session=True)


def read_until(proc, pattern, timeout=240):
    """A started playbook's output up to the first line matching pattern; the test fails with the output's tail
    when the playbook ends or `timeout` seconds pass first."""
    seen, deadline = [], time.monotonic() + timeout
    for line in proc.stdout:
        seen.append(line)
        if re.search(pattern, line):
            return "".join(seen)
        if time.monotonic() > deadline:
            break
    pytest.fail(f"no {pattern!r} in:\n{''.join(seen[-60:])}")


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


def job_processes(cluster, nodes):
    """{node: its training processes left (train.py, orted, mpirun), `pgrep -a` lines} for the nodes with any. The
    bracketed pattern does not match the shell that runs it."""
    found = {node: node_shell(cluster, node, "pgrep -af '[t]rain[.]py|[o]rted|[m]pirun'").stdout.strip()
             for node in nodes}
    return {node: lines for node, lines in found.items() if lines}


def wait_for_job_processes_gone(cluster, nodes, seconds):
    """{} once no node has a training process left, else what was left after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        left = job_processes(cluster, nodes)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


def node_pid(cluster, node):
    """The node container's first process on this machine (for nsenter into its namespaces)."""
    return subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", f"cntk-{cluster}-{node}"], check=True,
                          capture_output=True, text=True).stdout.strip()


# Where site.yml's output marks the windows the counters are read at: the data step, the job from mpirun's
# start to its end (the results' fetch after it is Ansible's and rsync's), and the run's end.
MARKS = {
    "data": re.compile(r"^PLAY \[Data - "),
    "train": re.compile(r"^PLAY \[Train - sort the nodes"),
    "job": re.compile(r"^TASK \[train_job : Start mpirun on the head node"),
    "job_end": re.compile(r"^TASK \[train_job : Bring the run's results back\]"),
}


def counters(cluster, nodes):
    """{node: {interface: (rx bytes, tx bytes)}}, read inside each node's network namespace."""
    found = {}
    for node in nodes:
        pid = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", f"cntk-{cluster}-{node}"],
                             capture_output=True, text=True, check=True).stdout.strip()
        shown = subprocess.run(["nsenter", "-t", pid, "-n", "ip", "-j", "-s", "link", "show"],
                               capture_output=True, text=True, check=True).stdout
        found[node] = netns.interface_bytes(shown)
    return found


def site_with_counters(cluster, nodes, inventory, *extra, timeout=2400):
    """site.yml to its end, the counters read as its output passes each mark: (CompletedProcess, {mark: counters}).
    The marks a run did not pass are missing from the readings."""
    readings = {"start": counters(cluster, nodes)}
    proc = subprocess.Popen(playbook_argv(inventory, "site.yml", *extra), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=playbook_env(), cwd=ROOT)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        for mark, pattern in MARKS.items():
            if mark not in readings and pattern.match(line):
                readings[mark] = counters(cluster, nodes)
    proc.wait(timeout=timeout)
    readings["end"] = counters(cluster, nodes)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines), ""), readings


def check_bytes_went_over_the_fabric(cluster, nodes, readings):
    """Every byte of each node's data files came over fab0 in the data step, the management network carrying
    only Ansible's own calls (a few kB: under half the node's shard bytes, so no copy of them went that way; a
    ratio to the fabric's bytes alone moved with the number of Ansible tasks in the step); the job's Allreduces
    (MBs) went over fab0, mgmt0 carrying at most a fifth of that (the playbook's progress reads from the head
    node). Returns {node: bytes in plus out per interface and window}."""
    missing = set(MARKS) - set(readings)
    assert not missing, f"site.yml's output had no {sorted(missing)} mark"

    def delta(start, end, node, interface):
        return sum(readings[end][node][interface]) - sum(readings[start][node][interface])
    figures = {node: {"data_fabric": delta("data", "train", node, "fab0"),
                      "data_mgmt": delta("data", "train", node, "mgmt0"),
                      "job_fabric": delta("job", "job_end", node, "fab0"),
                      "job_mgmt": delta("job", "job_end", node, "mgmt0")} for node in nodes}
    for node in nodes:
        shards = node_shell(cluster, node, "find /srv/cntk/data -type f -name '*.ctf' -printf '%s\\n'").stdout.split()
        shard_bytes = sum(map(int, shards))
        assert figures[node]["data_fabric"] >= shard_bytes > 0, figures
        assert figures[node]["data_mgmt"] * 2 < shard_bytes, (node, shard_bytes, figures)
        assert figures[node]["job_fabric"] > 1_000_000, figures
        assert figures[node]["job_mgmt"] * 5 < figures[node]["job_fabric"], figures
    return figures


def check_netns_inventory(cluster, inventory):
    """The inventory reaches the nodes on the management network and names the fabric NIC; MPI's interface
    settings and the hostfile's names resolve to the fabric."""
    hosts = yaml.safe_load((Path(inventory) / "hosts.yml").read_text())["all"]["children"]["cluster"][
        "children"]["training"]["hosts"]
    management, fabric = layout.netns_subnets(cluster)
    for hv in hosts.values():
        assert hv["cluster_mpi_interface"] == "fab0"
        assert ipaddress.ip_address(hv["ansible_host"]) in management
        assert ipaddress.ip_address(hv["cluster_address"]) in fabric
        assert hv["cluster_data_host"] == hv["cluster_address"]
    mca = node_shell(cluster, "node1", "cat /etc/openmpi/openmpi-mca-params.conf").stdout
    assert re.search(r"^btl_tcp_if_include = fab0$", mca, re.M), mca
    resolved = node_shell(cluster, "node1", "getent hosts node2").stdout.split()[0]
    assert resolved == hosts["node2"]["cluster_address"]


def check_wrong_mpi_interface_refused(inventory, tmp_path):
    """node1 names an interface it lacks (eth9), node2 its management NIC (mgmt0), which exists but does not
    hold its cluster_address: both refused by preflight, before anything is provisioned."""
    copy = tmp_path / "inventory"
    shutil.copytree(inventory, copy)
    hosts = yaml.safe_load((copy / "hosts.yml").read_text())
    training = hosts["all"]["children"]["cluster"]["children"]["training"]["hosts"]
    training["node1"]["cluster_mpi_interface"] = "eth9"
    training["node2"]["cluster_mpi_interface"] = "mgmt0"
    (copy / "hosts.yml").write_text(yaml.safe_dump(hosts))
    result, report = playbook_report(copy, "site.yml")
    out = failure_messages(report)
    assert result.returncode != 0
    assert "node1 has no interface eth9 (cluster_mpi_interface); it has fab0, lo, mgmt0." in out, out[-3000:]
    assert (f"node2: cluster_address {training['node2']['cluster_address']} is not on mgmt0 "
            "(cluster_mpi_interface, ") in out
    assert "it is on fab0" in out
    check_stopped_in_preflight(report)


def turn_on(*flags):
    """`python -m local_cluster up` of the real-CNTK cluster with more settings (--scheduler, --storage...) and
    site.yml on it: the same nodes (none remade), the new settings provisioned. {'site': its output, 'seconds'}."""
    up = subprocess.run(LOCAL_CLUSTER + ["up", f"--name={CNTK_CLUSTER}", "--nodes=4", "--backend=cntk",
                                         "--network=netns", *flags], capture_output=True, text=True)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "removed" not in up.stdout, f"the nodes were remade: {up.stdout}"
    started = time.monotonic()
    site = ansible_playbook(CNTK_INVENTORY, "site.yml")
    return {"site": site.stdout, "seconds": time.monotonic() - started}


FABRIC_CHECK_TASKS = "roles/firewall/tasks/fabric_check.yml"


def fabric_reach_seconds(report):
    """The longest any node's connecting step of the fabric check took (the module's own measure, not
    Ansible's start-up), from a run's JSON report."""
    return max((result["seconds"] for path, _, _, result in task_results(report)
                if path.endswith(FABRIC_CHECK_TASKS) and "seconds" in result), default=None)


def fabric_message(report):
    """The fabric check's verdict (its assert's message, passed or failed), whitespace collapsed."""
    return " ".join(" ".join(str(result.get("msg", "")).split()) for path, _, _, result in task_results(report)
                    if path.endswith(FABRIC_CHECK_TASKS) and "msg" in result)


def check_rank_timing(run, summary):
    """A finished run's per-rank timing (issue 46): summary.json's rank_timing has one entry per rank, on the host
    the rank ran on, each step split into compute and communication; the mean communication share is the
    ranks' own; timing.png is drawn and the report shows both."""
    timing = summary["rank_timing"]
    assert [entry["rank"] for entry in timing] == list(range(summary["ranks"])), timing
    assert [entry["host"] for entry in timing] == summary["hosts"], timing
    for entry in timing:
        assert entry["steps"] > 0 and entry["step_seconds"] > 0, entry
        assert entry["compute_seconds"] > 0 and entry["comm_seconds"] >= 0, entry
        assert 0 <= entry["comm_share"] <= 1, entry
    shares = [entry["comm_share"] for entry in timing]
    assert abs(summary["comm_share"] - sum(shares) / len(shares)) < 1e-3, summary["comm_share"]
    assert summary["timing_method"], summary
    assert (run / "timing.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (run / "report.html").read_text()
    assert "Share of step time spent communicating" in report and 'src="timing.png"' in report, report[-2000:]
