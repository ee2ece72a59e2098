#!/usr/bin/env python3
"""The local cluster: N Debian nodes as containers on this machine.

Each node is a container with host networking, its own hostname (node1..nodeN),
its own host keys and its own sshd bound to its own loopback address
(127.0.0.11, .12, ...). Nothing but loopback is used. A node boots systemd
as PID 1, which runs sshd as Debian's ssh.service, as a machine does: `docker
restart`, or a reboot inside it (Docker's restart policy starts it again), is
a reboot with the same disk, address and host keys and a new boot id; `docker
stop` powers it off. The node image is built with debootstrap from the
mirror in this machine's apt sources and imported into Docker; it is tagged
with a hash of its recipe and rebuilt only when the recipe changes.

    local_cluster.py up [--nodes N] [--backend B] [--suite S] [--network loopback|netns]
                                                      create or reconcile
    local_cluster.py down                             remove nodes, stop the engine we started
    local_cluster.py status                           print what runs
    local_cluster.py rebuild NODE                     reinstall a node: new disk, new host keys
    local_cluster.py fingerprints NODE                its host key fingerprints, read through docker exec

`--backend cntk` gives the inventory real CNTK 2.7 on CPU nodes: the
controller's CPython 3.6 (pyenv's 3.6.15, shipped to the nodes by the cpython
role) or, when its source tarballs are in the artifact cache, the pinned
source build, and Debian's Open MPI as the labelled 1.10 stand-in.
`--backend auto` (the default) takes cntk when that Python can be had and
numpy otherwise, saying why; `--backend numpy` the reference backend.
`--suite trixie` builds Debian 13 nodes instead of Debian 12 (bookworm).
Use it with `--network netns`: its Open MPI 5 refuses the loopback-only
network the loopback layout's nodes share, and trains on the netns
layout's fabric NIC (tests/e2e/test_fabric_network.py runs there).

`--network netns` gives every node a network namespace of its own instead
(that of a holder container, `--network none`, plumbed from here, which the
node joins, so that its reboot keeps them) with two interfaces, as real
hardware has: mgmt0 on the management network (a host bridge cm-<tag>; the
controller, Ansible and SSH go there) and fab0 on the fabric network (a host
bridge cf-<tag>; MPI, the SSH mesh and the data go there), addresses from
10.<n>.0.0/24 and 10.<n>.1.0/24 (n from the cluster's name), the host at .254
on both. The inventory then says cluster_mpi_interface: fab0, ansible_host
is the management address, cluster_address and cluster_data_host the fabric
one. Such a node reaches nothing beyond the bridges: its apt goes through an
apt-cacher-ng (Debian's package) that this tool runs on the host, bound to the
management bridge's address, its cache in .cluster/NAME/apt-cacher-ng, which
fetches from the mirror in the node's sources (the machine's own apt sources,
as the image was built). `down` removes the bridges, the veths and the proxy.
The loopback layout (`--network loopback`, the default) stays for machines
where namespaces cannot be made.

`up` writes inventory/local/hosts.yml, a controller key and a known_hosts file
pinned to the nodes' real host keys (read through `docker exec`, a channel
that needs no trust on first use).

Every node mounts .cluster/NAME/shared at /shared, read-write, as a cluster's
shared filesystem (NFS, Lustre) would be: the data step can use it instead of
sending shards (cluster_dataset_shared_dir).

`--name NAME --first-address A` runs a second, separate cluster (the tests use
one, so that they never touch yours); its inventory is .cluster/NAME/inventory,
with inventory/local/group_vars copied in and cluster_name set to NAME.
"""

import argparse
import errno
import hashlib
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
LOCAL_INVENTORY = ROOT / "inventory" / "local"

IMAGE_NAME = "cntk-cluster-node"
LABEL = "io.cntk-cluster"
FIRST_ADDRESS = "127.0.0.11"
MAX_NODES = 64

# What the node image is made of. Any change here gives a new image tag.
NODE_SUITE = "bookworm"
# The Debian releases a node image can be built from (--suite), by version.
NODE_SUITES = {"bookworm": "12", "trixie": "13"}
# python3-apt as on a standard Debian install: Ansible's apt module needs it in check mode.
NODE_PACKAGES = ("openssh-server", "python3", "python3-apt", "sudo", "iproute2", "systemd", "systemd-sysv", "dbus")
NODE_INIT = """#!/bin/sh
# Starts one local-cluster node: writes what differs per node (from the
# container's environment), then becomes its systemd (PID 1), which starts
# sshd as the distribution's ssh.service. Done here rather than in a unit:
# the environment is at hand, and it all happens before any unit starts.
set -eu
: "${NODE_ADDRESS:?}" "${NODE_SSH_PORT:?}"
# TEST HARNESS: a container sees the host kernel's boot id, which never
# changes; the container stands in for a machine whose kernel would make a
# new one at every boot (Ansible's reboot module waits for it). A fresh one
# at every container start, read-only as the kernel's is.
cat /proc/sys/kernel/random/uuid >/run/cluster-node-boot-id
mount --bind /run/cluster-node-boot-id /proc/sys/kernel/random/boot_id
mount -o remount,bind,ro /proc/sys/kernel/random/boot_id
# Fresh host keys on the first start only: a restart is a reboot, same disk.
ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1 || ssh-keygen -A
if [ -n "${NODE_FABRIC_ADDRESS:-}" ]; then
  # The netns layout: mgmt0 and fab0 are already in the namespace (its holder
  # container's). Listen on both (the controller comes on the management one,
  # the mesh and mpirun's launches on the fabric one), leave from whichever
  # address the route gives, and send apt through the host's proxy.
  printf 'ListenAddress %s:%s\\nListenAddress %s:%s\\n' "$NODE_ADDRESS" "$NODE_SSH_PORT" \\
    "$NODE_FABRIC_ADDRESS" "$NODE_SSH_PORT" >/etc/ssh/sshd_config.d/10-local-cluster.conf
  rm -f /etc/ssh/ssh_config.d/10-local-cluster.conf
  printf 'Acquire::http::Proxy "%s";\\n' "${NODE_APT_PROXY:?}" >/etc/apt/apt.conf.d/01local-cluster-proxy
else
  printf 'ListenAddress %s:%s\\n' "$NODE_ADDRESS" "$NODE_SSH_PORT" >/etc/ssh/sshd_config.d/10-local-cluster.conf
  # All nodes share one network stack: leave from this node's own address so
  # that a key restricted with from="..." sees which node connects.
  printf 'BindAddress %s\\n' "$NODE_ADDRESS" >/etc/ssh/ssh_config.d/10-local-cluster.conf
fi
exec /sbin/init
"""
# What systemd as PID 1 needs of Docker here (--privileged is refused on these machines): mounts (SYS_ADMIN, also
# for the boot id above), the host's cgroup tree writable and the same cgroup namespace (so the paths in
# /proc/self/cgroup are paths in that tree), tmpfs /run, and the `container` hint. SYS_BOOT: a reboot() in the
# container's PID namespace ends its PID 1 with SIGHUP (exit 129), which the restart policy restarts, where
# without it systemd exits 0 and the node stays off. A poweroff (SIGINT, 130) restarts too: Docker's policies
# cannot tell them apart; `docker stop` is the power button (SIGRTMIN+3 asks systemd for a clean halt, and a
# stopped container stays stopped).
SYSTEMD_RUN_OPTIONS = (
    "--cap-add", "SYS_ADMIN", "--cap-add", "SYS_BOOT",
    "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
    "--cgroupns", "host", "--volume", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs", "/run", "--tmpfs", "/run/lock",
    "-e", "container=docker",
    "--stop-signal", "SIGRTMIN+3", "--restart", "on-failure",
)
# A node's /etc/hosts before Ansible's block is added: a file of the node's own under .cluster/NAME/hosts, as
# Docker would rewrite its own copy at every start and a reboot would lose what the base role wrote.
NODE_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
NETWORKS = ("loopback", "netns")
# Interface names inside a netns node, as on real hardware.
MGMT_IFACE = "mgmt0"
FABRIC_IFACE = "fab0"
# The host's own address on each bridge (.254 of each /24).
HOST_OCTET = 254
APT_PROXY_PORT = 3142


class ClusterError(Exception):
    """A problem the user can fix; the message says how."""


# ---------------------------------------------------------------- pure logic


def parse_apt_sources(files):
    """Return [(uri, suite, components)] of the `deb` entries in apt sources.

    `files` maps a file name to its text; names ending in .sources are deb822,
    the rest one-line format.
    """
    entries = []
    for name, text in files.items():
        if name.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line or line[0].isspace():
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.split()
                if "deb" not in fields.get("types", []):
                    continue
                if fields.get("enabled", ["yes"])[0].lower() == "no":
                    continue
                for uri in fields.get("uris", []):
                    for suite in fields.get("suites", []):
                        entries.append((uri, suite, fields.get("components", [])))
        else:
            for line in text.splitlines():
                words = line.split("#", 1)[0].split()
                if not words or words[0] != "deb":
                    continue
                words = words[1:]
                if words and words[0].startswith("["):
                    while words and not words[0].endswith("]"):
                        words = words[1:]
                    words = words[1:]
                if len(words) >= 2:
                    entries.append((words[0], words[1], words[2:]))
    return entries


DEBIAN_SUITES = ("buster", "bullseye", "bookworm", "trixie", "forky",
                 "oldstable", "stable", "testing", "unstable", "sid")


def debian_mirror(entries):
    """The URI of the first entry that serves Debian's main archive.

    Only a Debian suite name counts, so that a third-party repository
    (its own suite name) is never taken for the archive.
    """
    for uri, suite, components in entries:
        if suite in DEBIAN_SUITES and "main" in components and uri.startswith(("http://", "https://")):
            return uri
    raise ClusterError(
        "no Debian archive found in this machine's apt sources "
        "(/etc/apt/sources.list, /etc/apt/sources.list.d/*): add a 'deb' entry "
        "for Debian's main archive, the same one apt-get uses"
    )


def image_tag(suite, packages, init_script):
    """A tag that changes whenever the image recipe changes."""
    recipe = json.dumps([suite, sorted(packages), init_script], sort_keys=True)
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def node_addresses(count, first=FIRST_ADDRESS):
    """Loopback addresses for nodes 1..count, one each."""
    if not 1 <= count <= MAX_NODES:
        raise ClusterError(f"--nodes {count}: choose between 1 and {MAX_NODES}")
    start = ipaddress.IPv4Address(first)
    loopback = ipaddress.IPv4Network("127.0.0.0/8")
    addresses = [str(start + i) for i in range(count)]
    for address in addresses:
        if ipaddress.IPv4Address(address) not in loopback or address.endswith(".255"):
            raise ClusterError(
                f"node address {address} is outside 127.0.0.0/8: the local cluster "
                "uses loopback only; choose a lower first address or fewer nodes"
            )
    return addresses


def nodes_for(count, first=FIRST_ADDRESS):
    """[{'name': 'node1', 'address': '127.0.0.11'}, ...]"""
    return [
        {"name": f"node{i + 1}", "address": address}
        for i, address in enumerate(node_addresses(count, first))
    ]


def netns_tag(name):
    """A short tag for the cluster's bridge and veth names (Linux allows 15 characters):
    the name itself up to 8 characters, else its first 4 and 4 of its hash."""
    if len(name) <= 8:
        return name
    return name[:4] + hashlib.sha256(name.encode()).hexdigest()[:4]


def netns_links(name, count):
    """Host-side link names: {'mgmt_bridge', 'fabric_bridge', 'veths': [(mgmt end, fabric end) per node]}."""
    tag = netns_tag(name)
    return {
        "mgmt_bridge": f"cm-{tag}",
        "fabric_bridge": f"cf-{tag}",
        "veths": [(f"m{tag}-{i + 1}", f"f{tag}-{i + 1}") for i in range(count)],
    }


def netns_subnets(name, host_networks=()):
    """(management, fabric) IPv4 networks of a netns cluster: 10.<n>.0.0/24 and 10.<n>.1.0/24, n in 100..227 from
    the name's hash. host_networks: the host's routes (strings); an overlap with any (other than this cluster's own
    bridges, left out by the caller) is refused rather than shadowing a route."""
    n = 100 + int(hashlib.sha256(name.encode()).hexdigest(), 16) % 128
    mgmt = ipaddress.IPv4Network(f"10.{n}.0.0/24")
    fabric = ipaddress.IPv4Network(f"10.{n}.1.0/24")
    for text in host_networks:
        route = ipaddress.ip_network(text, strict=False)
        if route.version == 4 and route.prefixlen > 0 and (route.overlaps(mgmt) or route.overlaps(fabric)):
            raise ClusterError(
                f"cluster {name}'s networks {mgmt} and {fabric} overlap this machine's route {route}: "
                "choose another --name (the networks follow the name)")
    return mgmt, fabric


def netns_nodes(count, name, host_networks=()):
    """[{'name': 'node1', 'address': management address, 'fabric': fabric address}, ...] and the host's
    address on each network: (nodes, host management address, host fabric address)."""
    if not 1 <= count <= MAX_NODES:
        raise ClusterError(f"--nodes {count}: choose between 1 and {MAX_NODES}")
    mgmt, fabric = netns_subnets(name, host_networks)
    nodes = [{"name": f"node{i + 1}", "address": str(mgmt[i + 1]), "fabric": str(fabric[i + 1])}
             for i in range(count)]
    return nodes, str(mgmt[HOST_OCTET]), str(fabric[HOST_OCTET])


def interface_bytes(ip_json):
    """{interface: (rx bytes, tx bytes)} from `ip -j -s link show`'s output."""
    return {link["ifname"]: (link["stats64"]["rx"]["bytes"], link["stats64"]["tx"]["bytes"])
            for link in json.loads(ip_json) if "stats64" in link}


def apt_proxy_config(state_dir, address, port=APT_PROXY_PORT):
    """apt-cacher-ng's configuration for one cluster: its cache and logs under state_dir, listening on the
    management bridge's address only, and no remapping (it fetches what the node's sources name)."""
    return "\n".join([
        "# Written by scripts/local_cluster.py: the netns nodes' apt proxy.",
        f"CacheDir: {state_dir}/cache",
        f"LogDir: {state_dir}/log",
        "SupportDir: /usr/lib/apt-cacher-ng",
        f"BindAddress: {address}",
        f"Port: {port}",
        f"PidFile: {state_dir}/apt-cacher-ng.pid",
        f"SocketPath: {state_dir}/socket",
        "ForeGround: 1",
        "",
    ])


def holder_name(container):
    """The container that holds a netns node's network namespace (Kubernetes' pause container): the node joins
    it, so the node's restart (a reboot) keeps mgmt0 and fab0."""
    return container + "-net"


def holder_run_argv(container, node, ref, cluster_label):
    """`docker run` of a netns node's holder: no network but what local_cluster.py plumbs in, the node's
    hostname (the node shares its UTS namespace), and nothing running but a sleep."""
    return ["docker", "run", "-d", "--name", holder_name(container), "--hostname", node["name"],
            "--network", "none", "--init", "--label", cluster_label, "--label", f"{LABEL}.holder-of={container}",
            ref, "sleep", "infinity"]


def node_run_argv(container, node, port, ref, cluster_label, shared_dir, hosts_file):
    """`docker run` of one node: systemd as PID 1 (the image's CMD), on the host's network stack, or, for a
    node with a 'fabric' address (the netns layout), in its holder's namespace."""
    argv = ["docker", "run", "-d", "--name", container, *SYSTEMD_RUN_OPTIONS]
    if "fabric" in node:
        # The hostname comes with the holder's namespaces (Docker refuses --hostname here).
        argv += ["--network", f"container:{holder_name(container)}"]
    else:
        argv += ["--network", "host", "--hostname", node["name"]]
    argv += [
        "--label", cluster_label,
        "--label", f"{LABEL}.address={node['address']}",
        "--label", f"{LABEL}.ssh-port={port}",
        "--label", f"{LABEL}.shared={shared_dir}",
        "--volume", f"{shared_dir}:/shared",
        "--volume", f"{hosts_file}:/etc/hosts",
        "-e", f"NODE_ADDRESS={node['address']}", "-e", f"NODE_SSH_PORT={port}",
    ]
    if "fabric" in node:
        host_mgmt = str(ipaddress.IPv4Network(f"{node['address']}/24", strict=False)[HOST_OCTET])
        argv += [
            "--label", f"{LABEL}.network=netns",
            "--label", f"{LABEL}.fabric={node['fabric']}",
            "-e", f"NODE_FABRIC_ADDRESS={node['fabric']}",
            "-e", f"NODE_APT_PROXY=http://{host_mgmt}:{APT_PROXY_PORT}",
        ]
    return argv + [ref]


def known_hosts_lines(address, port, public_keys):
    """known_hosts lines for one node, host pattern as ssh writes it."""
    pattern = address if port == 22 else f"[{address}]:{port}"
    lines = []
    for key in public_keys:
        fields = key.split()
        if len(fields) < 2:
            raise ClusterError(f"unreadable host key for {address}: {key!r}")
        lines.append(f"{pattern} {fields[0]} {fields[1]}")
    return lines


def render_inventory(nodes, port, key_file, known_hosts_file, secrets_dir, artifacts_dir=None, backend=None):
    """inventory/local/hosts.yml for the running nodes (YAML, written by hand).

    backend: the backend's settings ({name: value}, values without newlines).
    A node with a 'fabric' address (the netns layout) is reached at its management address (ansible_host); the
    fabric address is its cluster_address (MPI, the mesh) and cluster_data_host (the controller's rsync), and
    its cluster_mpi_interface is fab0."""
    out = [
        "---",
        "# Generated by scripts/local_cluster.py up: the local cluster as it runs now.",
        "# Settings that do not depend on the running nodes: group_vars/all.yml.",
        "all:",
        "  vars:",
        "    ansible_user: root",
        f"    ansible_port: {port}",
        f"    ansible_ssh_private_key_file: {key_file}",
        "    ansible_ssh_common_args: >-",
        f"      -o UserKnownHostsFile={known_hosts_file}",
        "      -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes",
        f"    cluster_ssh_port: {port}",
        f"    cluster_controller_known_hosts: {known_hosts_file}",
        f"    ssh_mesh_key_dir: {secrets_dir}",
    ]
    if artifacts_dir:
        out.append(f"    cluster_artifacts_dir: {artifacts_dir}")
    for name, value in (backend or {}).items():
        out.append(f"    {name}: {json.dumps(value)}")
    out += [
        "  children:",
        "    cluster:",
    ]
    out += [
        "      children:",
        "        training:",
        "          hosts:",
    ]
    for node in nodes:
        out += [
            f"            {node['name']}:",
            f"              ansible_host: {node['address']}",
            f"              cluster_address: {node.get('fabric', node['address'])}",
        ]
        if "fabric" in node:
            # Host vars: group_vars/all.yml (lo, the loopback layout's) wins over any group's vars written here.
            out += [
                f"              cluster_data_host: {node['fabric']}",
                f"              cluster_mpi_interface: {FABRIC_IFACE}",
            ]
    return "\n".join(out) + "\n"


def pyenv_python(version="3.6.15"):
    """The controller's pyenv CPython <version> prefix, or None.

    pyenv is asked where it lives (`pyenv root`, else $PYENV_ROOT, else
    ~/.pyenv): machines differ."""
    roots = []
    if shutil.which("pyenv"):
        found = subprocess.run(["pyenv", "root"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            roots.append(found.stdout.strip())
    roots += [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv")]
    for root in filter(None, roots):
        prefix = Path(root) / "versions" / version
        if (prefix / "bin" / f"python{version.rsplit('.', 1)[0]}").exists():
            return prefix
    return None


def cached_python_sources(cache_dir, matrix_file=ROOT / "matrix" / "cntk.yml", python="3.6"):
    """True when the pinned CPython and the OpenSSL it is built against are already in the artifact cache."""
    matrix = yaml.safe_load(matrix_file.read_text())
    pin = matrix["python_source"][python]
    files = [pin["file"]] + [entry["file"] for entry in matrix["openssl_source"].values()
                             if entry.get("series") == pin.get("openssl_max")]
    return len(files) == 2 and all((cache_dir / name).is_file() for name in files)


def backend_settings(wanted, cache_dir=ROOT / ".cache" / "artifacts", python_prefix=None):
    """(settings for the inventory, a line saying what was chosen and why) for --backend.

    cntk needs CPython 3.6 with a shared libpython: the controller's pyenv
    3.6.15 (shipped as a prebuilt), or the pinned sources already in the
    artifact cache (built on a node). Neither: cntk is refused, auto falls
    back to numpy, each in one line."""
    if wanted not in ("auto", "cntk", "numpy"):
        raise ClusterError(f"--backend {wanted!r}: choose cntk, numpy or auto")
    if wanted == "numpy":
        return {"cluster_backend": "numpy"}, "backend numpy (the reference backend)"
    cntk = {"cluster_backend": "cntk", "cluster_device": "cpu", "cluster_openmpi_standin": True}
    stand_in = "Debian's Open MPI as the labelled stand-in for 1.10.7"
    if python_prefix:
        return (dict(cntk, cpython_prebuilt_prefix=str(python_prefix)),
                f"backend cntk: CNTK 2.7 on CPython 3.6 from {python_prefix} (shipped to the nodes), {stand_in}")
    if cached_python_sources(cache_dir):
        return cntk, f"backend cntk: CNTK 2.7 on CPython 3.6 built from the cached pinned sources, {stand_in}"
    why = ("no CPython 3.6.15 here (pyenv's versions/3.6.15) and the pinned Python/OpenSSL sources are not in "
           f"{cache_dir} (make artifacts on a connected machine)")
    if wanted == "cntk":
        raise ClusterError(f"--backend cntk: {why}; nothing was changed. Use BACKEND=numpy.")
    return {"cluster_backend": "numpy"}, f"backend numpy, not cntk: {why}"


def address_in_use(address, port):
    """True when something already listens on (address, port).

    SO_REUSEADDR, as sshd binds: a connection of a node that was just killed (TIME_WAIT on its address)
    is not a listener, and must not stop the node from coming back."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


# ------------------------------------------------------------ side effects


def run(cmd, check=True, capture=True, **kwargs):
    result = subprocess.run(cmd, text=True, capture_output=capture, **kwargs)
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip()
        raise ClusterError(f"{' '.join(cmd)} failed ({result.returncode}): {detail}")
    return result


def write_if_changed(path, text, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)
    return True


def apt_install(*packages):
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise ClusterError(
            f"{', '.join(packages)} missing: install Debian's packages "
            f"({' '.join(packages)}) as root, then run this again"
        )
    print(f"installing {' '.join(packages)} with apt-get", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-q"], env=env)
    run(["apt-get", "install", "-y", "-q", *packages], env=env)


ENGINE_DIR = ROOT / ".cluster"


def engine_running():
    return shutil.which("docker") is not None and run(["docker", "info"], check=False).returncode == 0


# What the controller itself runs against the nodes: Ansible's ssh and
# ssh-keygen, and rsync for the data step.
CONTROLLER_TOOLS = {"ssh": "openssh-client", "ssh-keygen": "openssh-client", "rsync": "rsync"}


def ensure_controller_tools():
    missing = sorted({package for tool, package in CONTROLLER_TOOLS.items() if shutil.which(tool) is None})
    if missing:
        apt_install(*missing)


def ensure_engine():
    """Start Debian's Docker engine on loopback terms when it is not running."""
    if engine_running():
        return
    if shutil.which("dockerd") is None:
        apt_install("docker.io")
        if engine_running():
            return
    ENGINE_DIR.mkdir(parents=True, exist_ok=True)
    log = open(ENGINE_DIR / "dockerd.log", "ab")
    # No bridge, no iptables: nodes use host networking on loopback only.
    proc = subprocess.Popen(
        ["dockerd", "--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    for _ in range(60):
        if engine_running():
            (ENGINE_DIR / "dockerd.pid").write_text(str(proc.pid))
            print(f"started the Docker engine (pid {proc.pid}, log .cluster/dockerd.log)")
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise ClusterError(
        "the Docker engine did not start: read .cluster/dockerd.log "
        "(another dockerd running, or no permission to start one?)"
    )


def stop_engine_if_ours():
    """Stop the dockerd this tool started once no cluster uses it."""
    pid_file = ENGINE_DIR / "dockerd.pid"
    if not pid_file.exists():
        return
    if engine_running() and run(["docker", "ps", "-aq", "--filter", f"label={LABEL}"]).stdout.strip():
        return
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 15)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.2)
        raise ClusterError(f"the Docker engine (pid {pid}) did not stop within 20s")
    except ProcessLookupError:
        print(f"stopped the Docker engine (pid {pid})")
    pid_file.unlink()


def apt_source_files():
    files = {}
    candidates = [Path("/etc/apt/sources.list")] + sorted(Path("/etc/apt/sources.list.d").glob("*"))
    for path in candidates:
        if path.is_file() and path.name.endswith((".list", ".sources")):
            files[path.name] = path.read_text()
    return files


def image_ref(suite=NODE_SUITE):
    return f"{IMAGE_NAME}:{image_tag(suite, NODE_PACKAGES, NODE_INIT)}"


def ensure_image(suite=NODE_SUITE):
    """Build the node image unless one from the same recipe exists."""
    ref = image_ref(suite)
    if run(["docker", "image", "inspect", ref], check=False).returncode == 0:
        return ref
    if shutil.which("debootstrap") is None:
        apt_install("debootstrap")
    mirror = debian_mirror(parse_apt_sources(apt_source_files()))
    print(f"building node image {ref} with debootstrap from {mirror} (about a minute)", flush=True)
    build_root = Path(tempfile.mkdtemp(prefix="node-image-", dir="/var/tmp"))
    try:
        run([
            "debootstrap", "--variant=minbase", f"--include={','.join(NODE_PACKAGES)}",
            suite, str(build_root), mirror,
        ])
        # Every node makes its own host keys on first start.
        for key in (build_root / "etc" / "ssh").glob("ssh_host_*"):
            key.unlink()
        init = build_root / "usr" / "local" / "sbin" / "cluster-node-init"
        init.write_text(NODE_INIT)
        init.chmod(0o755)
        shutil.rmtree(build_root / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", str(build_root), "-c", "."], stdout=subprocess.PIPE)
        run(["docker", "import", "--change", 'CMD ["/usr/local/sbin/cluster-node-init"]', "-", ref],
            stdin=tar.stdout)
        tar.stdout.close()
        if tar.wait() != 0:
            raise ClusterError("tar of the node image root failed")
    finally:
        shutil.rmtree(build_root, ignore_errors=True)
    return ref


def wait_for_sshd(address, port, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=1) as conn:
                if conn.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise ClusterError(f"sshd on {address}:{port} did not answer within {timeout}s")


class Cluster:
    """One local cluster: its containers, state directory and inventory."""

    def __init__(self, name="local", first_address=FIRST_ADDRESS):
        if not re.match(r"^[a-z0-9][a-z0-9_-]{0,31}$", name):
            raise ClusterError(f"--name {name!r}: use lower-case letters, digits, '-' or '_'")
        self.name = name
        self.first_address = first_address
        self.state_dir = ENGINE_DIR / name
        self.label = f"{LABEL}={name}"
        self.shared_dir = self.state_dir / "shared"
        self.prefix = f"cntk-{name}-"
        if name == "local":
            self.inventory_dir = LOCAL_INVENTORY
        else:
            self.inventory_dir = self.state_dir / "inventory"

    def containers(self, holders=False):
        """The nodes: {container name: {'running', 'image', 'address', 'port', ...}}; with holders, the netns
        layout's namespace holders instead: {holder name: {'running', 'image', 'node'}}."""
        names = run(["docker", "ps", "-a", "--filter", f"label={self.label}",
                     "--format", "{{.Names}}"]).stdout.split()
        found = {}
        for name in names:
            info = json.loads(run(["docker", "inspect", name]).stdout)[0]
            labels = info["Config"]["Labels"] or {}
            node = labels.get(f"{LABEL}.holder-of")
            if holders != (node is not None):
                continue
            if holders:
                found[name] = {"running": info["State"]["Running"], "image": info["Config"]["Image"], "node": node}
                continue
            found[name] = {
                "running": info["State"]["Running"],
                "image": info["Config"]["Image"],
                "address": labels.get(f"{LABEL}.address", ""),
                "port": labels.get(f"{LABEL}.ssh-port", ""),
                "shared": labels.get(f"{LABEL}.shared", ""),
                "network": labels.get(f"{LABEL}.network", "loopback"),
                "fabric": labels.get(f"{LABEL}.fabric", ""),
                "pid": info["State"].get("Pid", 0),
            }
        return found

    def controller_key(self):
        key = self.state_dir / "controller_ed25519"
        if not key.exists():
            self.state_dir.mkdir(parents=True, exist_ok=True)
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"controller@{self.name}", "-f", str(key)])
        key.chmod(0o600)
        return key

    def write_inventory(self, nodes, port, key, known_file, backend):
        changed = write_if_changed(
            self.inventory_dir / "hosts.yml",
            render_inventory(nodes, port, key, known_file, ROOT / ".secrets" / self.name,
                             None if self.name == "local" else self.state_dir / "artifacts", backend),
        )
        if self.name != "local":
            group_vars = (LOCAL_INVENTORY / "group_vars" / "all.yml").read_text()
            group_vars = re.sub(r"(?m)^cluster_name: .*$", f"cluster_name: {self.name}", group_vars)
            changed |= write_if_changed(self.inventory_dir / "group_vars" / "all.yml", group_vars)
        return changed

    # ------------------------------------------------ the netns layout's network

    def netns_host_networks(self):
        """The host's IPv4 routes, less the default route and this cluster's own bridges."""
        links = netns_links(self.name, 0)
        routes = json.loads(run(["ip", "-j", "-4", "route", "show"]).stdout or "[]")
        return [route["dst"] for route in routes
                if route.get("dst") not in (None, "default")
                and route.get("dev") not in (links["mgmt_bridge"], links["fabric_bridge"])]

    def ensure_bridges(self, host_mgmt, host_fabric, prefixlen=24):
        """The cluster's two host bridges, up, with the host's address on each; True when one was made."""
        links = netns_links(self.name, 0)
        made = False
        for bridge, address in ((links["mgmt_bridge"], host_mgmt), (links["fabric_bridge"], host_fabric)):
            if run(["ip", "link", "show", "dev", bridge], check=False).returncode != 0:
                run(["ip", "link", "add", bridge, "type", "bridge"])
                made = True
            addresses = run(["ip", "-o", "-4", "addr", "show", "dev", bridge]).stdout
            if f" {address}/" not in addresses:
                run(["ip", "addr", "add", f"{address}/{prefixlen}", "dev", bridge])
            run(["ip", "link", "set", bridge, "up"])
        return made

    def plumb(self, container, node, prefixlen=24):
        """One veth per bridge into the running container's namespace, named mgmt0 and fab0 there, addressed
        and up. A container that already has them is left as it is (a restarted holder has a new namespace)."""
        pid = str(int(run(["docker", "inspect", "-f", "{{.State.Pid}}", container]).stdout.strip()))
        inside = ["nsenter", "-t", pid, "-n"]
        if run(inside + ["ip", "link", "show", "dev", MGMT_IFACE], check=False).returncode == 0:
            return False
        index = int(node["name"].removeprefix("node"))
        links = netns_links(self.name, index)
        mgmt_end, fabric_end = links["veths"][index - 1]
        for host_end, bridge, iface, address in (
                (mgmt_end, links["mgmt_bridge"], MGMT_IFACE, node["address"]),
                (fabric_end, links["fabric_bridge"], FABRIC_IFACE, node["fabric"])):
            # A stale host end (its peer went with an old namespace) would block the name.
            run(["ip", "link", "del", host_end], check=False)
            run(["ip", "link", "add", host_end, "type", "veth", "peer", "name", iface, "netns", pid])
            run(["ip", "link", "set", host_end, "master", bridge, "up"])
            run(inside + ["ip", "addr", "add", f"{address}/{prefixlen}", "dev", iface])
            run(inside + ["ip", "link", "set", iface, "up"])
        return True

    def apt_proxy_dir(self):
        return self.state_dir / "apt-cacher-ng"

    def apt_proxy_pid(self):
        """The pid of the apt-cacher-ng this tool started for this cluster, when it still runs."""
        pid_file = self.apt_proxy_dir() / "started.pid"
        try:
            pid = int(pid_file.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        return pid if str(self.apt_proxy_dir()).encode() in cmdline else None

    def ensure_apt_proxy(self, address):
        """Debian's apt-cacher-ng on the management bridge's address, for this cluster's nodes; True when started."""
        state = self.apt_proxy_dir()
        for sub in ("cache", "log"):
            (state / sub).mkdir(parents=True, exist_ok=True)
        changed = write_if_changed(state / "acng.conf", apt_proxy_config(state, address))
        pid = self.apt_proxy_pid()
        if pid and not changed:
            return False
        if pid:
            self.stop_apt_proxy()
        if shutil.which("apt-cacher-ng") is None:
            apt_install("apt-cacher-ng")
            # The package may start its own service, on every interface (unless policy-rc.d forbids it, as in
            # containers): this tool runs its own instance, on the bridge only, so the system's is stopped and
            # left disabled.
            if Path("/run/systemd/system").is_dir():
                run(["systemctl", "disable", "--now", "apt-cacher-ng"], check=False)
            elif Path("/etc/init.d/apt-cacher-ng").exists():
                run(["/etc/init.d/apt-cacher-ng", "stop"], check=False)
                run(["update-rc.d", "apt-cacher-ng", "disable"], check=False)
            print("apt-cacher-ng: the package's own service is stopped and disabled; this tool runs one per "
                  "cluster, on its management bridge only")
        log = open(state / "log" / "stdout.log", "ab")
        proc = subprocess.Popen(["apt-cacher-ng", "-c", str(state)], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        (state / "started.pid").write_text(str(proc.pid))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                socket.create_connection((address, APT_PROXY_PORT), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.2)
        raise ClusterError(f"apt-cacher-ng did not listen on {address}:{APT_PROXY_PORT}: read "
                           f"{(state / 'log').relative_to(ROOT)}")

    def stop_apt_proxy(self):
        pid = self.apt_proxy_pid()
        if pid is None:
            return False
        os.kill(pid, 15)
        for _ in range(50):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        (self.apt_proxy_dir() / "started.pid").unlink(missing_ok=True)
        return True

    def remove_netns_network(self):
        """The proxy, the cluster's bridges and any veth ends left on the host; the names removed."""
        removed = ["apt-cacher-ng"] if self.stop_apt_proxy() else []
        links = netns_links(self.name, 0)
        tag = netns_tag(self.name)
        shown = json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]")
        for link in shown:
            name = link.get("ifname", "")
            if (name in (links["mgmt_bridge"], links["fabric_bridge"])
                    or re.fullmatch(rf"[mf]{re.escape(tag)}-\d+", name)):
                run(["ip", "link", "del", name], check=False)
                removed.append(name)
        return removed

    # ------------------------------------------------------------------ verbs

    def up(self, count, port, backend="auto", suite=NODE_SUITE, network="loopback"):
        if network not in NETWORKS:
            raise ClusterError(f"--network {network!r}: choose {' or '.join(NETWORKS)}")
        netns = network == "netns"
        if netns:
            if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nsenter") is None:
                raise ClusterError("--network netns needs root, iproute2's ip and util-linux's nsenter: "
                                   "or use --network loopback")
            nodes, host_mgmt, host_fabric = netns_nodes(count, self.name, self.netns_host_networks())
        else:
            nodes = nodes_for(count, self.first_address)
        # Decided before anything starts: a cntk cluster that cannot be had stops here.
        backend_vars, backend_line = backend_settings(backend, python_prefix=pyenv_python())
        ensure_controller_tools()
        ensure_engine()
        ref = ensure_image(suite)
        key = self.controller_key()
        existing = self.containers()
        wanted = {self.prefix + n["name"]: n for n in nodes}
        changes = []

        for name, info in existing.items():
            node = wanted.get(name)
            if (node is None or info["image"] != ref or info["address"] != node["address"]
                    or info["port"] != str(port) or info["shared"] != str(self.shared_dir)
                    or info["network"] != network or info["fabric"] != node.get("fabric", "")):
                run(["docker", "rm", "-f", "-v", name])
                changes.append(f"removed {name}")
        existing = self.containers()
        # A holder goes with its node, and with the netns layout; one of an older image is made anew.
        for holder, info in self.containers(holders=True).items():
            if not netns or info["node"] not in wanted or info["node"] not in existing or info["image"] != ref:
                run(["docker", "rm", "-f", holder])
                changes.append(f"removed {holder}")

        if netns:
            if self.ensure_bridges(host_mgmt, host_fabric):
                changes.append(f"made bridges {' '.join(list(netns_links(self.name, 0).values())[:2])}")
            if self.ensure_apt_proxy(host_mgmt):
                changes.append(f"started apt-cacher-ng on {host_mgmt}:{APT_PROXY_PORT}")
        else:
            removed = self.remove_netns_network() if shutil.which("ip") else []
            if removed:
                changes.append(f"removed {' '.join(removed)}")

        # Check every address we are about to bind before starting anything.
        for name, node in wanted.items():
            if netns or (name in existing and existing[name]["running"]):
                continue
            if address_in_use(node["address"], port):
                raise ClusterError(
                    f"{node['address']}:{port} ({node['name']}) is already in use on this machine: "
                    f"stop what listens there (ss -ltnp), or choose another --ssh-port or --first-address"
                )

        self.shared_dir.mkdir(parents=True, exist_ok=True)
        holders = self.containers(holders=True) if netns else {}
        for name, node in wanted.items():
            plumbed = False
            if netns:
                holder = holder_name(name)
                if holder not in holders:
                    run(holder_run_argv(name, node, ref, self.label))
                    changes.append(f"created {holder}")
                elif not holders[holder]["running"]:
                    run(["docker", "start", holder])
                    changes.append(f"started {holder}")
                plumbed = self.plumb(holder, node)
                if plumbed:
                    changes.append(f"plumbed {holder}: {MGMT_IFACE} {node['address']}, "
                                   f"{FABRIC_IFACE} {node['fabric']}")
            if name not in existing:
                self.create_node(name, node, port, ref)
                changes.append(f"created {name}")
            elif not existing[name]["running"]:
                run(["docker", "start", name])
                changes.append(f"started {name}")
            elif plumbed:
                # Its holder's namespace is a new one: the node joins it at its next start.
                run(["docker", "restart", name])
                changes.append(f"restarted {name} in its holder's new namespace")

        known = []
        for name, node in wanted.items():
            wait_for_sshd(node["address"], port)
            self.admit_controller(name, key)
            keys = run(["docker", "exec", name, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub"]).stdout
            # The controller reaches a netns node at both: Ansible on the management address, rsync of the
            # data on the fabric one (cluster_data_host).
            for address in (node["address"], node.get("fabric")):
                if address:
                    known += known_hosts_lines(address, port, keys.strip().splitlines())

        known_file = self.state_dir / "known_hosts"
        if write_if_changed(known_file, "\n".join(known) + "\n"):
            changes.append(f"wrote {known_file.relative_to(ROOT)}")
        if self.write_inventory(nodes, port, key, known_file, backend_vars):
            changes.append(f"wrote {self.inventory_dir.relative_to(ROOT)}")

        for change in changes:
            print(change)
        print(backend_line)
        layout = (f"network netns: management {nodes[0]['address']}..{nodes[-1]['address']} ({MGMT_IFACE}), "
                  f"fabric {nodes[0]['fabric']}..{nodes[-1]['fabric']} ({FABRIC_IFACE})" if netns
                  else f"{nodes[0]['address']}..{nodes[-1]['address']}")
        print(f"cluster {self.name} up: {count} nodes ({layout}, "
              f"port {port}), {'changed' if changes else 'unchanged'}; inventory "
              f"{self.inventory_dir.relative_to(ROOT)}")

    def create_node(self, name, node, port, ref):
        """A node container with a new disk; a netns one joins its holder's namespace, plumbed already."""
        hosts_file = self.state_dir / "hosts" / node["name"]
        hosts_file.parent.mkdir(parents=True, exist_ok=True)
        hosts_file.write_text(NODE_HOSTS)
        run(node_run_argv(name, node, port, ref, self.label, self.shared_dir, hosts_file))

    def admit_controller(self, name, key):
        """The controller's key for root, as an OS installer would leave it."""
        run(["docker", "exec", "-i", name, "sh", "-c",
             "install -d -m 700 /root/.ssh && cat > /root/.ssh/authorized_keys"
             " && chmod 600 /root/.ssh/authorized_keys"],
            input=Path(str(key) + ".pub").read_text())

    def node_container(self, node_name):
        name = self.prefix + node_name
        info = self.containers().get(name)
        if info is None:
            raise ClusterError(f"cluster {self.name} has no node {node_name} (scripts/local_cluster.py status "
                               f"--name {self.name} lists them)")
        return name, info

    def rebuild(self, node_name):
        """The node reinstalled: a new container (new disk, new host keys) at the same address. The known_hosts
        file is left as it is, so Ansible refuses the node until its new key is compared and accepted."""
        name, info = self.node_container(node_name)
        run(["docker", "rm", "-f", "-v", name])
        node = {"name": node_name, "address": info["address"]}
        if info["network"] == "netns":
            # Its holder (the network, not the disk) stays: mgmt0 and fab0 are there already.
            node["fabric"] = info["fabric"]
            self.plumb(holder_name(name), node)
        self.create_node(name, node, info["port"], info["image"])
        wait_for_sshd(info["address"], int(info["port"]))
        self.admit_controller(name, self.controller_key())
        print(f"rebuilt {node_name}: a new disk and new host keys at {info['address']}:{info['port']}. "
              f"{(self.state_dir / 'known_hosts').relative_to(ROOT)} still holds its old keys, so Ansible "
              f"refuses it until you compare its new key (scripts/local_cluster.py fingerprints {node_name}"
              f"{'' if self.name == 'local' else ' --name ' + self.name}) and accept it "
              f"(playbooks/accept_host_key.yml)")

    def fingerprints(self, node_name):
        """The node's host key fingerprints read through docker exec: the console of a real node."""
        name, _ = self.node_container(node_name)
        print(run(["docker", "exec", name, "sh", "-c",
                   "for key in /etc/ssh/ssh_host_*_key.pub; do ssh-keygen -l -f \"$key\"; done"]).stdout, end="")

    def down(self):
        if engine_running():
            # The nodes before the holders whose namespaces they use.
            for names in (list(self.containers()), list(self.containers(holders=True))):
                if names:
                    run(["docker", "rm", "-f", "-v", *names])
                    print(f"removed {' '.join(names)}")
        removed = self.remove_netns_network() if shutil.which("ip") else []
        if removed:
            print(f"removed {' '.join(removed)}")
        stop_engine_if_ours()
        (self.inventory_dir / "hosts.yml").unlink(missing_ok=True)
        (self.state_dir / "known_hosts").unlink(missing_ok=True)
        if self.name != "local":
            shutil.rmtree(self.inventory_dir, ignore_errors=True)
        print(f"cluster {self.name} down")

    def status(self):
        if not engine_running():
            print("Docker engine not running: no local cluster")
            return 1
        found = self.containers()
        if not found:
            print(f"no cluster {self.name} (run: make up)")
            return 1
        for name, info in sorted(found.items()):
            state = "running" if info["running"] else "stopped"
            print(f"{name[len(self.prefix):]:8} {info['address']}:{info['port']:5} {state:8} {info['image']}")
        return 0 if all(info["running"] for info in found.values()) else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up_parser = sub.add_parser("up", help="create the cluster, or bring it to the wanted shape")
    up_parser.add_argument("--nodes", type=int, default=int(os.environ.get("NODES", 4)))
    up_parser.add_argument("--ssh-port", type=int, default=22)
    up_parser.add_argument("--backend", default=os.environ.get("BACKEND") or "auto",
                           help="cntk, numpy, or auto: cntk when its Python can be had (default)")
    up_parser.add_argument("--network", choices=NETWORKS, default=os.environ.get("NETWORK") or "loopback",
                           help="loopback: every node on this machine's stack at its own 127.x address (default); "
                                "netns: a namespace per node with a management NIC (mgmt0) and a fabric NIC (fab0) "
                                "on two host bridges")
    up_parser.add_argument("--suite", choices=sorted(NODE_SUITES), default=os.environ.get("SUITE") or NODE_SUITE,
                           help=f"the Debian release of the nodes (default {NODE_SUITE}: Debian "
                                f"{NODE_SUITES[NODE_SUITE]})")
    sub.add_parser("down", help="remove every node; stop the engine if this tool started it")
    sub.add_parser("status", help="list the nodes")
    for verb, text in (("rebuild", "reinstall a node: new disk, new host keys (known_hosts left as it is)"),
                       ("fingerprints", "print a node's host key fingerprints, read through docker exec")):
        sub.add_parser(verb, help=text).add_argument("node", help="node1, node2, ...")
    for name, command in sub.choices.items():
        command.add_argument("--name", default="local", help="which cluster (default: local)")
        if name == "up":
            command.add_argument("--first-address", default=FIRST_ADDRESS,
                                 help=f"loopback address of node1 (default {FIRST_ADDRESS})")
    args = parser.parse_args(argv)
    try:
        cluster = Cluster(args.name, getattr(args, "first_address", FIRST_ADDRESS))
        if args.command == "up":
            cluster.up(args.nodes, args.ssh_port, args.backend, args.suite, args.network)
        elif args.command == "down":
            cluster.down()
        elif args.command == "rebuild":
            cluster.rebuild(args.node)
        elif args.command == "fingerprints":
            cluster.fingerprints(args.node)
        else:
            return cluster.status()
    except ClusterError as exc:
        print(f"local cluster: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
