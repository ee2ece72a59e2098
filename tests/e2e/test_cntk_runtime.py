"""The cntk role's real steps on a 2-node cluster of its own (`cntkrt`, 127.0.0.71..72).

CNTK 2.7 needs CPython 3.5/3.6 and Open MPI 1.10, which cannot be installed
here, so three things stand in, each labelled:
- the wheel is a TEST DOUBLE (tests/doubles/cntk_wheel.py: `cntk` with a
  version and a CPU device, nothing more);
- Python is Debian's python3.11 (the role's OS-package path, as on Ubuntu
  18.04 with python3.6) instead of 3.6;
- Open MPI is Debian's 4.1 (openmpi package method) instead of the 1.10
  source build (molecule/source_builds covers the build).
Everything around them is the real code path: the controller downloads
mpi4py 3.1.5 and `wheel` from PyPI once, checked against the matrix's sha256,
copies them to the nodes, the venv is made, pip installs with no index,
mpi4py is compiled against the cluster's Open MPI, /run/lock is opened, every
node imports cntk, and the MPI check runs across both nodes over SSH.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "doubles"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster_helpers import node_shell, recap  # noqa: E402
import cntk_wheel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NAME = "cntkrt"
INVENTORY = ROOT / ".cluster" / NAME / "inventory"
TOOL = [sys.executable, str(ROOT / "scripts" / "local_cluster.py")]
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the local cluster needs root (Docker, debootstrap)")


def on_node(node, command):
    result = node_shell(NAME, node, command)
    return result.returncode, result.stdout + result.stderr


def run(world, playbook, *extra):
    return subprocess.run(
        [PLAYBOOK, "-i", str(INVENTORY), str(ROOT / "playbooks" / playbook), "-e", f"@{world['vars']}", *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=1500,
        env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cntkrt")
    wheel = cntk_wheel.build(tmp / "double")
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
    subprocess.run(TOOL + ["up", f"--name={NAME}", "--first-address=127.0.0.71", "--nodes=2"],
                   check=True, capture_output=True, text=True)
    variables = {
        "cluster_backend": "cntk",
        "cluster_device": "cpu",
        "cluster_artifact_cache_dir": str(tmp / "artifacts"),
        # Stand-ins (see the module's docstring).
        "openmpi_install_method": "package",
        "cntk_mpi_prefix": "/usr",
        "cntk_mpi_hostfile": "/etc/openmpi/cluster-hostfile",
        "cpython_stack": {"version": "3.11", "build_from_source": False,
                          "packages": ["python3.11", "python3.11-venv", "python3.11-dev", "libpython3.11"]},
        "cntk_python_version": "3.11",
        "cntk_python": "/usr/bin/python3.11",
        "cntk_wheel": {"name": "cntk", "version": cntk_wheel.VERSION, "file": wheel.name, "dest": wheel.name,
                       "url": wheel.as_uri(), "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()},
        "cntk_wheel_deps": [],
    }
    (tmp / "vars.json").write_text(json.dumps(variables))
    world = {"tmp": tmp, "vars": tmp / "vars.json"}
    for playbook in ("preflight.yml", "provision.yml", "ssh.yml"):
        result = run(world, playbook)
        if result.returncode != 0:
            pytest.fail(f"{playbook} failed:\n{result.stdout[-6000:]}")
        world[playbook] = result.stdout
    yield world
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)


def test_every_node_has_the_venv_with_the_pinned_packages(world):
    assert re.search(r"node1: \{\"version\": \"2\.7\", \"devices\": \[\"CPU \(test double\)\"\]", world["provision.yml"])
    for node in ("node1", "node2"):
        code, freeze = on_node(node, "/opt/cntk/venv/bin/pip freeze --all")
        assert code == 0, freeze
        assert {"cntk==2.7.post2+testdouble", "mpi4py==3.1.5", "wheel==0.37.1"} <= set(freeze.split()), freeze
        # mpi4py was compiled here, against the cluster's Open MPI.
        _, ldd = on_node(node, "ldd /opt/cntk/venv/lib/python3.11/site-packages/mpi4py/MPI.*.so")
        assert "libmpi.so.40 => /usr/lib/x86_64-linux-gnu/" in ldd, ldd
        _, mode = on_node(node, "stat -c %a /run/lock")
        assert mode.strip() == "1777"
        # The venv belongs to root: the job can use it, not change it.
        code, _ = on_node(node, "su cntk -s /bin/sh -c 'touch /opt/cntk/venv/x'")
        assert code != 0


def test_only_the_controller_downloaded(world):
    folder = world["tmp"] / "artifacts"
    assert (folder / "mpi4py-3.1.5.tar.gz").is_file()
    assert hashlib.sha256((folder / "mpi4py-3.1.5.tar.gz").read_bytes()).hexdigest() == \
        "a706e76db9255135c2fb5d1ef54cb4f7b0e4ad9e33cbada7de27626205f2a153"


def test_the_mpi_check_reaches_every_rank_on_every_node(world):
    result = run(world, "check.yml")
    assert result.returncode == 0, result.stdout[-5000:]
    assert "MPI check: 4 ranks on node1, node2" in result.stdout, result.stdout[-3000:]


def test_second_provision_changes_nothing(world):
    result = run(world, "provision.yml")
    assert result.returncode == 0, result.stdout[-5000:]
    assert all(counts["changed"] == 0 for counts in recap(result.stdout).values()), result.stdout[-5000:]


def test_a_node_that_lost_mpi4py_fails_the_check_then_provision_repairs_it(world):
    on_node("node2", "rm -rf /opt/cntk/venv/lib/python3.11/site-packages/mpi4py*")
    broken = run(world, "check.yml")
    assert broken.returncode != 0
    assert "The MPI check across the cluster failed (4 ranks wanted" in broken.stdout, broken.stdout[-4000:]
    assert "No module named 'mpi4py'" in broken.stdout
    repaired = run(world, "provision.yml")
    assert repaired.returncode == 0, repaired.stdout[-5000:]
    assert run(world, "check.yml").returncode == 0
