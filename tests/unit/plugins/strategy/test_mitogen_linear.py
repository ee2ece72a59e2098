"""Mitogen, the project's default strategy, on a 1-node local cluster of its own
(`mitogen`, 127.0.0.101): it is what runs the tasks, and it still checks host
keys as the inventory says (UserKnownHostsFile, StrictHostKeyChecking=yes)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import prerequisites
from cluster_helpers import LOCAL_CLUSTER

ROOT = Path(__file__).resolve().parents[4]
NAME = "mitogen"
STATE = ROOT / ".cluster" / NAME
TOOL = LOCAL_CLUSTER
ANSIBLE = str(Path(sys.executable).with_name("ansible"))
# A shell task's parent: under mitogen, a Python that calls itself python3(mitogen:...).
PARENT = 'tr "\\0" " " </proc/$PPID/cmdline'


@pytest.fixture(scope="module")
def cluster():
    prerequisites.require(*prerequisites.CLUSTER_HOST)
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
    subprocess.run(TOOL + ["up", f"--name={NAME}", "--first-address=127.0.0.101", "--nodes=1", "--backend=numpy"],
                   check=True, capture_output=True, text=True)
    yield STATE / "known_hosts"
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)


def on_node1(tmp_path, strategy=None):
    """The parent command line of a shell task on node1, with the project's config."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               # A fresh SSH control socket: a master left by an earlier run would skip the key check.
               ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp_path / "cp"))
    env.pop("ANSIBLE_STRATEGY", None)
    if strategy:
        env["ANSIBLE_STRATEGY"] = strategy
    return subprocess.run([ANSIBLE, "-i", str(STATE / "inventory"), "node1", "-m", "ansible.builtin.shell",
                           "-a", PARENT], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


@pytest.mark.cluster
def test_mitogen_runs_the_tasks_by_default(cluster, tmp_path):
    result = on_node1(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(mitogen:" in result.stdout


@pytest.mark.cluster
def test_linear_turns_it_off(cluster, tmp_path):
    result = on_node1(tmp_path, "linear")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(mitogen:" not in result.stdout


# How each strategy reports ssh's refusal.
REFUSED = {"mitogen_linear": "SSH reported an unrecognized or mismatching host key",
           "linear": "Host key verification failed"}


@pytest.mark.cluster
@pytest.mark.parametrize("strategy", REFUSED)
def test_a_changed_host_key_is_refused(cluster, tmp_path, strategy):
    pinned = cluster.read_text()
    # Same address and key types, other keys: what a man in the middle would show.
    changed = []
    for n, line in enumerate(pinned.splitlines()):
        address, kind, _ = line.split()
        key = tmp_path / f"key{n}"
        subprocess.run(["ssh-keygen", "-q", "-N", "", "-t", kind.removeprefix("ssh-").split("-")[0], "-f", str(key)],
                       check=True)
        changed.append(f"{address} {kind} {(tmp_path / f'key{n}.pub').read_text().split()[1]}")
    cluster.write_text("\n".join(changed) + "\n")
    try:
        result = on_node1(tmp_path, strategy)
    finally:
        cluster.write_text(pinned)
    assert result.returncode != 0
    assert "node1 | UNREACHABLE" in result.stdout and REFUSED[strategy] in result.stdout
    assert on_node1(tmp_path / "again", strategy).returncode == 0


@pytest.mark.cluster
def test_an_unknown_host_is_refused(cluster, tmp_path):
    pinned = cluster.read_text()
    cluster.write_text("")
    try:
        result = on_node1(tmp_path)
    finally:
        cluster.write_text(pinned)
    assert "node1 | UNREACHABLE" in result.stdout and REFUSED["mitogen_linear"] in result.stdout


def test_commands_on_the_controller_may_use_every_cpu(tmp_path):
    """Mitogen pins its workers, and the commands they start on the controller, to one CPU of two on a small
    controller; the project's strategy shim turns that pinning off (plugins/strategy/mitogen_linear.py)."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("this process may use one CPU only: no narrowing to see")
    playbook = tmp_path / "affinity.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.command: grep Cpus_allowed_list /proc/self/status\n"
        "      register: affinity\n      changed_when: false\n"
        "    - ansible.builtin.debug: {msg: 'CPUS={{ affinity.stdout.split()[-1] }}'}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_STRATEGY", None)
    result = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c",
                             "local", "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    shown = re.search(r"CPUS=([0-9,-]+)", result.stdout).group(1)
    cpus = set()
    for part in shown.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    assert cpus == os.sched_getaffinity(0), shown


@pytest.mark.cluster
def test_a_collection_module_and_filter_run_with_the_collections_listed_once(cluster, tmp_path):
    """The shim lists the installed collections once per run and imports this collection's filter files
    before the workers fork: a collection module that imports the collection's module_utils still finds
    them on the node, under the name Ansible loads them by, and a filter still resolves."""
    playbook = tmp_path / "collection.yml"
    playbook.write_text(
        "- hosts: node1\n  gather_facts: false\n  tasks:\n"
        "    - cntk.cluster.dataset_shard: {source: /nonexistent, ranks: 2, out: /tmp/x}\n"
        "      check_mode: true\n      register: cut\n      failed_when: not cut.bad_input | default(false)\n"
        "    - ansible.builtin.debug: {msg: 'CUT={{ cut.msg }}'}\n"
        "    - ansible.builtin.debug: {msg: \"WAVES={{ ['node1', 'node2', 'node3'] | cntk.cluster.relay_waves }}\"}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp_path / "cp"))
    env.pop("ANSIBLE_STRATEGY", None)
    result = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(STATE / "inventory"),
                             str(playbook)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CUT=source /nonexistent does not exist" in result.stdout
    assert "WAVES=3" in result.stdout


# In a fresh interpreter with Ansible's collection loader, as ansible-playbook runs the shim.
IMPORTED_ONCE = """
import sys
from ansible.plugins.loader import filter_loader, init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.plugins.loader import strategy_loader
shim = strategy_loader.get("mitogen_linear", class_only=True)
shim = sys.modules[shim.__module__]
before = sorted(name for name in sys.modules if name.startswith(shim.FILTERS + "."))
shim.import_filters()
after = sorted(name.rpartition(".")[2] for name in sys.modules if name.startswith(shim.FILTERS + "."))
loaded = filter_loader.get("cntk.cluster.relay_waves")
print(before, after, loaded.j2_function is sys.modules[shim.FILTERS + ".dataset"].relay_waves)
"""


def test_the_filter_files_are_imported_once_under_the_names_ansible_loads_them_by():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    result = subprocess.run([sys.executable, "-c", IMPORTED_ONCE, str(ROOT / ".collections")], capture_output=True,
                            text=True, env=env, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    files = sorted(path.stem for path in (ROOT / "plugins" / "filter").glob("*.py"))
    # None before, every file after; Ansible's loader then finds the module imported and loads no second copy.
    assert result.stdout.split("\n")[0] == f"[] {files} True"
