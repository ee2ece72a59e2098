"""The NVIDIA roles (driver, CUDA, cuDNN, NCCL) on a 2-node cluster of their own
(`nvstack`, 127.0.0.61..62), against a TEST DOUBLE of NVIDIA's repository.

NVIDIA's repository and GPUs cannot be reached here. tests/doubles/nvidia_packages.py
builds a signed repository of stand-in packages with the real names and
versions (and newer decoys), served over HTTP on 127.0.0.1 for this test. The
roles' real code paths run: key fingerprint check, repository, exact versions,
apt pins, dpkg holds, the no-GPU rules, idempotence, and the offline path from
the controller's artifact folder with the repository switched off. Nothing
pretends a GPU is there: node1 installs with nvidia_driver_without_gpu, node2
is a CPU node. The stand-in driver package asks for a reboot as NVIDIA's do
(/run/reboot-required), so node1 (a container running systemd, a new boot id
at each start) really reboots in the first install, and the play goes on.
nvidia_driver_source: distribution runs against the same double's stand-ins
with Debian's names (nvidia-driver, nvidia-kernel-dkms), presented to node1 as
its distribution's source: a candidate below the minimum refused, a new enough
one installed and "no GPU" reported.
"""

import functools
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import cluster_helpers
import source_modules
from cluster_helpers import LOCAL_CLUSTER, node_shell, recap
from prerequisites import CLUSTER_HOST, requires

# The NVIDIA package repository double (tests/doubles), by a name of its own.
nvidia_packages = source_modules.load(Path(__file__).resolve().parents[1] / "doubles" / "nvidia_packages.py",
                                      "nvidia_packages_double")

ROOT = Path(__file__).resolve().parents[2]
NAME = "nvstack"
INVENTORY = ROOT / ".cluster" / NAME / "inventory"
TOOL = LOCAL_CLUSTER
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
PINNED = {"cuda-drivers": "410.48-1", "cuda-cudart-10-0": "10.0.130-1", "cuda-libraries-10-0": "10.0.130-1",
          "libcudnn7": "7.3.1.20-1+cuda10.0", "libnccl2": "2.3.5-2+cuda10.0"}

pytestmark = requires(*CLUSTER_HOST)


def on_node(node, command):
    result = node_shell(NAME, node, command)
    return result.returncode, result.stdout + result.stderr


def boot_id(node):
    """Read through docker exec: the local cluster's harness gives each container start a new one."""
    return on_node(node, "cat /proc/sys/kernel/random/boot_id")[1].strip()


def booted(node, timeout=120):
    """systemd's state once the node's boot is over (docker restart returns before); read through docker exec."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = on_node(node, "systemctl is-system-running --wait")[1].strip()
        if state in ("running", "degraded"):
            break
        time.sleep(0.5)  # PID 1 is still the init script, not yet systemd
    return state


def host_keys(node):
    return on_node(node, "cat /etc/ssh/ssh_host_*_key.pub")[1]


def installed(node):
    _, out = on_node(node, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' "
                     + " ".join(PINNED) + " 2>/dev/null")
    # Status "ii" (installed) or "hi" (installed and held).
    return {fields[0]: fields[1] for fields in map(str.split, out.splitlines())
            if len(fields) == 3 and fields[2] in ("ii", "hi")}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nvidia")
    repo, debs = nvidia_packages.build(tmp / "doubles")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(repo))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    show = subprocess.run(["gpg", "--batch", "--show-keys", "--with-colons", str(repo / "test-double.asc")],
                          capture_output=True, text=True, check=True).stdout
    fingerprint = re.search(r"^fpr:+([0-9A-F]+):", show, re.M).group(1)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)
    up = subprocess.run(TOOL + ["up", f"--name={NAME}", "--first-address=127.0.0.61", "--nodes=2", "--backend=numpy"],
                        capture_output=True, text=True)
    if up.returncode != 0:
        server.shutdown()
        pytest.fail(f"python -m local_cluster up --name={NAME} failed:\n{up.stdout}\n{up.stderr}")
    variables = {
        "cluster_backend": "cntk",
        "cluster_nvidia_repo_url": url,
        "cluster_nvidia_repo_key_url": url + "test-double.asc",
        "cluster_nvidia_repo_key_fingerprint": fingerprint,
        "cluster_artifact_cache_dir": str(tmp / "artifacts"),
        # TEST DOUBLE's own packages: no DKMS or kernel headers to build a module with.
        "nvidia_driver_build_packages": [],
    }
    (tmp / "vars.json").write_text(json.dumps(variables))
    (INVENTORY / "host_vars").mkdir(exist_ok=True)
    (INVENTORY / "host_vars" / "node2.yml").write_text("cluster_device: cpu\n")
    yield {"tmp": tmp, "vars": tmp / "vars.json", "server": server, "debs": debs, "repo": repo}
    server.shutdown()
    subprocess.run(TOOL + ["down", f"--name={NAME}"], check=True, capture_output=True)


def provision(world, *extra, playbook="provision.yml"):
    tags = ["--tags", "nvidia"] if playbook == "provision.yml" else []
    return subprocess.run(
        [PLAYBOOK, "-i", str(INVENTORY), str(ROOT / "playbooks" / playbook), *tags,
         "-e", f"@{world['vars']}", *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=900,
        env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))


def test_nodes_boot_systemd_and_a_restart_is_a_reboot(world):
    for node in ("node1", "node2"):
        assert on_node(node, "cat /proc/1/comm")[1].strip() == "systemd", node
        # Nothing failed at boot: not "degraded".
        assert booted(node) == "running", (node, on_node(node, "systemctl --failed")[1])
        assert on_node(node, "systemctl is-active ssh.service")[1].strip() == "active", node
    before, keys = boot_id("node2"), host_keys("node2")
    assert before and boot_id("node2") == before
    subprocess.run(["docker", "restart", f"cntk-{NAME}-node2"], check=True, capture_output=True)
    assert booted("node2") == "running", on_node("node2", "systemctl --failed")[1]
    # sshd back at its address with its host keys (the inventory's known_hosts), as after a reboot.
    ping = subprocess.run([str(Path(sys.executable).with_name("ansible")), "-i", str(INVENTORY), "node2",
                           "-m", "ansible.builtin.ping"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert host_keys("node2") == keys
    assert boot_id("node2") not in ("", before)


def test_preflight_refuses_a_gpu_node_without_a_gpu(world):
    result, report = cluster_helpers.playbook_report(INVENTORY, "playbooks/preflight.yml", "-e", f"@{world['vars']}",
                                                     timeout=900)
    assert result.returncode != 0
    messages = cluster_helpers.failure_messages(report)
    assert "node1 has no NVIDIA GPU (no PCI device of vendor 0x10de)" in messages, messages[-5000:]
    # node2, a CPU node, failed no check.
    assert report["stats"]["node1"]["failures"] > 0 and report["stats"]["node2"]["failures"] == 0, report["stats"]
    ok = provision(world, "-e", "nvidia_driver_without_gpu=true", playbook="preflight.yml")
    assert ok.returncode == 0, ok.stdout[-5000:]


def test_the_driver_role_alone_refuses_a_gpu_node_without_a_gpu_before_any_change(world):
    result = provision(world)
    assert result.returncode != 0
    assert "node1 has no NVIDIA GPU (no PCI device of vendor 0x10de)" in result.stdout, result.stdout[-5000:]
    assert "set cluster_device: cpu for node1" in result.stdout
    code, _ = on_node("node1", "test -e /etc/apt/sources.list.d/cntk-nvidia.sources")
    assert code != 0, "the repository was added before the refusal"
    assert installed("node1") == {}


def test_a_key_file_holding_another_key_too_is_refused_before_any_change(world, tmp_path):
    """apt trusts every key of the keyring file: the pinned key plus any other is refused."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run(gpg + ["--quick-gen-key", "intruder <intruder@example.invalid>", "ed25519"], check=True,
                   capture_output=True)
    intruder = subprocess.run(gpg + ["--armor", "--export"], check=True, capture_output=True).stdout
    (world["repo"] / "test-double-plus.asc").write_bytes((world["repo"] / "test-double.asc").read_bytes() + intruder)
    url = f"http://127.0.0.1:{world['server'].server_address[1]}/test-double-plus.asc"
    result = provision(world, "-e", "nvidia_driver_without_gpu=true", "-e", f"cluster_nvidia_repo_key_url={url}")
    assert result.returncode != 0
    assert "refusing to trust it (apt would trust every key in it)" in result.stdout, result.stdout[-5000:]
    code, _ = on_node("node1", "test -e /etc/apt/keyrings/cntk-nvidia.asc")
    assert code != 0, "the key file was installed"
    # Nor does the refused file stay in the controller's cache under the pinned key's name.
    assert not list((world["tmp"] / "artifacts").glob("nvidia-apt-key-*.asc"))


def test_pinned_versions_are_installed_and_held_not_the_newer_ones(world):
    boots = {node: boot_id(node) for node in ("node1", "node2")}
    result = provision(world, "-e", "nvidia_driver_without_gpu=true")
    assert result.returncode == 0, result.stdout[-6000:]
    # The driver's package asked for a reboot: node1 rebooted (a new boot id), the flag went with the old
    # boot's /run, and the play went on to the end (CUDA, cuDNN and NCCL below came after it).
    reboot = result.stdout.split("TASK [nvidia_driver : Reboot to load the new driver]")[1].split("TASK [")[0]
    assert re.search(r"^changed: \[node1\]", reboot, re.M), reboot
    assert boot_id("node1") != boots["node1"]
    assert boot_id("node2") == boots["node2"]  # the CPU node: no driver, no reboot
    assert on_node("node1", "test -e /run/reboot-required")[0] != 0
    assert recap(result.stdout)["node1"]["failed"] == 0
    assert installed("node1") == PINNED
    _, holds = on_node("node1", "apt-mark showhold")
    assert set(holds.split()) == set(PINNED)
    # Newer versions sit in the repository; neither an upgrade nor a plain install moves to them.
    _, upgrade = on_node("node1", "apt-get -s -o Debug::NoLocking=1 upgrade")
    assert not re.search(r"^Inst (libcudnn7|libnccl2|cuda-drivers) ", upgrade, re.M), upgrade
    _, policy = on_node("node1", "apt-cache policy libcudnn7")
    assert "Candidate: 7.3.1.20-1+cuda10.0" in policy
    code, link = on_node("node1", "readlink /usr/local/cuda")
    assert link.strip() == "/usr/local/cuda-10.0"
    assert "installing the driver packages only" in result.stdout
    # The CPU node gets no NVIDIA package and says why.
    assert installed("node2") == {}
    assert "node2 is a CPU node (cluster_device: cpu): no NVIDIA driver installed." in result.stdout


def test_second_run_changes_nothing(world):
    boots = {node: boot_id(node) for node in ("node1", "node2")}
    result = provision(world, "-e", "nvidia_driver_without_gpu=true")
    assert result.returncode == 0, result.stdout[-6000:]
    assert all(counts["changed"] == 0 for counts in recap(result.stdout).values()), result.stdout[-4000:]
    assert {node: boot_id(node) for node in boots} == boots  # nothing changed, no reboot


# nvidia_driver_source: distribution. The node's "distribution" source is the TEST DOUBLE repository (its
# stand-ins with Debian's names), set up by the test; an apt pin first makes the old stand-in the candidate.
DISTRIBUTION_SOURCE = "/etc/apt/sources.list.d/cntk-test-double-distribution.sources"
DISTRIBUTION_KEY = "/etc/apt/keyrings/cntk-test-double-distribution.asc"
DISTRIBUTION_PIN = "/etc/apt/preferences.d/cntk-test-double-old-driver"


def test_the_distributions_driver_is_refused_below_the_minimum_and_installed_above_it(world):
    key = (world["repo"] / "test-double.asc").read_text()
    source = (f"Types: deb\nURIs: http://127.0.0.1:{world['server'].server_address[1]}/\nSuites: ./\n"
              f"Signed-By: {DISTRIBUTION_KEY}\n")
    code, out = on_node("node1", f"mkdir -p /etc/apt/keyrings && cat > {DISTRIBUTION_KEY} <<'EOF'\n{key}EOF\n"
                        f"cat > {DISTRIBUTION_SOURCE} <<'EOF'\n{source}EOF\n"
                        "printf 'Package: nvidia-driver nvidia-kernel-dkms\\nPin: version 390.*\\n"
                        f"Pin-Priority: 1001\\n' > {DISTRIBUTION_PIN} && apt-get update -q")
    assert code == 0, out
    # Containers share this machine's kernel: no module of theirs can be loaded, so no modprobe check here.
    distribution = ["-e", "nvidia_driver_without_gpu=true", "-e", "nvidia_driver_source=distribution",
                    "-e", "nvidia_driver_module_check=false"]
    try:
        refused = provision(world, *distribution)
        assert refused.returncode != 0
        assert ("node1: the distribution's nvidia-driver candidate 390.157-1~deb11u1 is below 410.48, the minimum "
                "NVIDIA driver for CUDA 10.0 (CNTK 2.7)") in refused.stdout, refused.stdout[-5000:]
        assert on_node("node1", "dpkg-query -W -f '${db:Status-Abbrev}' nvidia-driver")[1].strip() not in ("ii", "hi")
        on_node("node1", f"rm -f {DISTRIBUTION_PIN}")
        result = provision(world, *distribution)
        assert result.returncode == 0, result.stdout[-6000:]
        _, versions = on_node("node1", "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' "
                                        "nvidia-driver nvidia-kernel-dkms")
        assert sorted(versions.split()) == sorted("nvidia-driver 535.183.01-1~deb12u1 ii "
                                                  "nvidia-kernel-dkms 535.183.01-1~deb12u1 ii".split()), versions
        assert re.search(r"node1: driver installed, no GPU on this node \(no NVIDIA device on the PCI bus",
                         result.stdout), result.stdout[-5000:]
        again = provision(world, *distribution)
        assert all(counts["changed"] == 0 for counts in recap(again.stdout).values()), again.stdout[-4000:]
    finally:
        on_node("node1", f"rm -f {DISTRIBUTION_SOURCE} {DISTRIBUTION_KEY} {DISTRIBUTION_PIN} && apt-get update -q")


def test_offline_installs_from_the_controllers_folder_with_the_repository_gone(world):
    # A node as new: nothing NVIDIA on it; then the repository goes away.
    on_node("node1", "apt-mark unhold " + " ".join(PINNED) + " && apt-get purge -y -q " + " ".join(PINNED)
            + " && rm -f /etc/apt/sources.list.d/cntk-nvidia.sources && apt-get update -q")
    assert installed("node1") == {}
    world["server"].shutdown()
    offline = ["-e", "nvidia_driver_without_gpu=true", "-e", "cluster_offline=true"]
    refused = provision(world, *offline)
    assert refused.returncode != 0
    assert "have no published sha256" in refused.stdout  # NVIDIA publishes none: the user must pin them
    folder = world["tmp"] / "artifacts"
    folder.mkdir(exist_ok=True)
    sums = {}
    for deb in world["debs"].iterdir():
        (folder / deb.name).write_bytes(deb.read_bytes())
        sums[deb.name] = hashlib.sha256(deb.read_bytes()).hexdigest()
    (world["tmp"] / "sums.json").write_text(json.dumps({"cluster_artifact_sha256": sums}))
    result = provision(world, *offline, "-e", f"@{world['tmp'] / 'sums.json'}")
    assert result.returncode == 0, result.stdout[-6000:]
    assert installed("node1") == PINNED
    _, holds = on_node("node1", "apt-mark showhold")
    assert set(holds.split()) == set(PINNED)
    again = provision(world, *offline, "-e", f"@{world['tmp'] / 'sums.json'}")
    assert all(counts["changed"] == 0 for counts in recap(again.stdout).values()), again.stdout[-4000:]
