"""VM nodes (`up --machines vm`): each node a QEMU virtual machine with its own kernel, clock and disks, on the
netns layout's networks.

Software emulation only (TCG): this machine's /dev/kvm is a paravirtual nested KVM that cannot run Debian's
kernel (docs/local-cluster.md), so KVM is never tried. Per node: `qemu-system-x86_64 -accel tcg,tb-size=256 -cpu max
-m 1536 -smp 1`, booted with the kernel and initrd copied out of the image (vm_image.py), and

- vda: a qcow2 overlay on the cached base image (cache=unsafe: the root disk is the harness's own; flushes still
  reach the host's page cache, so a kill -9 of QEMU loses only what the guest had not flushed);
- vdb: a blank 4 GiB qcow2 data disk (cache=writeback: every flush the guest asks for is written through to the
  host's disk, so a `poweroff` (kill -9 of QEMU, a power loss) keeps exactly what the guest had made durable, as a
  disk with a volatile write cache would);
- vdc: the config disk (serial cluster-config, ext4 made with `mkfs.ext4 -d`, no mount here): hostname, SSH host
  keys made on this machine (known_hosts is pinned to them, no trust on first use), the controller's key,
  systemd .link files naming the NICs mgmt0 and fab0 by MAC, .network files with the node's addresses, the apt
  proxy; copied into place by a first-boot unit baked into the image, before sshd starts;
- two virtio NICs on tap devices, vm<tag>-N on the management bridge cm-<tag> and vf<tag>-N on the fabric
  bridge cf-<tag>: the same
  bridges, addresses (10.<n>.0.0/24 and 10.<n>.1.0/24, the host at .254) and apt-cacher-ng as the netns layout.

State under .cluster/NAME/vm/NODE/: the disks, qemu.pid, monitor.sock (QEMU's monitor), console.log (the serial
console, appended across boots) and qemu.json (the command, for `start` after a `poweroff`)."""

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from local_cluster import ROOT, ClusterError
from local_cluster.apt_proxy import APT_PROXY_PORT, ensure_apt_proxy
from local_cluster.backend import backend_settings, pyenv_python
from local_cluster.host import ensure_controller_tools, run, write_if_changed
from local_cluster.inventory import known_hosts_lines
from local_cluster.layout import FABRIC_IFACE, MGMT_IFACE, netns_links, netns_nodes, netns_tag
from local_cluster.netns import ensure_bridges, netns_host_networks
from local_cluster.vm_image import CONFIG_SERIAL, ensure_vm_image, ensure_vm_tools

VM_MEMORY_MIB = 1536
VM_CPUS = 1
# QEMU's translation cache (1 GiB by default): 256 MiB keeps a booted VM near 0.8 GB of host memory.
VM_TB_SIZE_MIB = 256
DATA_DISK_SIZE = "4G"
# What a VM may take of this machine at most (guest memory and the translation cache): checked before a start.
VM_HOST_MIB = VM_MEMORY_MIB + VM_TB_SIZE_MIB
# Free disk a node's overlay and data disk may grow into (sparse files: checked, not allocated).
VM_DISK_NEED_MIB = 3 * 1024
BOOT_TIMEOUT = 600
# The shared filesystems a VM cluster can have (glusterfs's client is FUSE, NFS is the kernel's).
VM_STORAGES = ("none", "glusterfs", "nfs")
HOST_KEY_TYPES = ("ed25519", "ecdsa", "rsa")
# The guest's PCI slots: fixed, so that vda, vdb and vdc are always the root, data and config disks.
PCI = {"root": "0x04", "data": "0x05", "config": "0x06", "mgmt": "0x08", "fabric": "0x09", "rng": "0x0a"}


# ---------------------------------------------------------------------- names (pure)

def vm_taps(cluster, index):
    """(management tap, fabric tap) of node `index` (1-based): at most 13 characters (Linux allows 15)."""
    tag = netns_tag(cluster)
    return f"vm{tag}-{index}", f"vf{tag}-{index}"


def vm_macs(cluster, index):
    """(management MAC, fabric MAC) of node `index`: locally administered, from the cluster's name and the index."""
    digest = hashlib.sha256(cluster.encode()).digest()
    return tuple(f"52:54:{digest[0]:02x}:{digest[1]:02x}:{kind:02x}:{index:02x}" for kind in (0, 1))


def node_index(node_name):
    match = re.fullmatch(r"node([1-9][0-9]*)", node_name)
    if not match:
        raise ClusterError(f"{node_name!r} is not a node name (node1, node2, ...)")
    return int(match.group(1))


def identity_files(node, host_mgmt, macs, host_keys, controller_public_key, prefixlen=24):
    """The config disk's tree for one node: {path under /: (mode, text)}, copied into place at its first boot.
    host_keys: {type: (private key text, public key text)}."""
    mgmt_mac, fabric_mac = macs
    files = {
        "etc/hostname": (0o644, node["name"] + "\n"),
        "root/.ssh/authorized_keys": (0o600, controller_public_key.strip() + "\n"),
        "etc/apt/apt.conf.d/01local-cluster-proxy":
            (0o644, f'Acquire::http::Proxy "http://{host_mgmt}:{APT_PROXY_PORT}";\n'),
    }
    for key_type, (private, public) in host_keys.items():
        files[f"etc/ssh/ssh_host_{key_type}_key"] = (0o600, private)
        files[f"etc/ssh/ssh_host_{key_type}_key.pub"] = (0o644, public)
    for iface, mac, address in ((MGMT_IFACE, mgmt_mac, node["address"]), (FABRIC_IFACE, fabric_mac, node["fabric"])):
        files[f"etc/systemd/network/10-{iface}.link"] = (
            0o644, f"[Match]\nMACAddress={mac}\n\n[Link]\nName={iface}\n")
        files[f"etc/systemd/network/20-{iface}.network"] = (
            0o644, f"[Match]\nName={iface}\n\n[Network]\nAddress={address}/{prefixlen}\n"
                   "LinkLocalAddressing=no\nIPv6AcceptRA=no\n")
    return files


# Directories of the tree and their modes: `cp -a` gives the node's own these modes.
IDENTITY_DIRS = {"": 0o755, "etc": 0o755, "etc/ssh": 0o755, "etc/apt": 0o755, "etc/apt/apt.conf.d": 0o755,
                 "etc/systemd": 0o755, "etc/systemd/network": 0o755, "root": 0o700, "root/.ssh": 0o700}


def qemu_argv(cluster, node, node_dir, image_dir, taps, macs):
    """QEMU's command for one node (TCG only; see the module's docstring for the disks' cache modes)."""
    mgmt_tap, fabric_tap = taps
    mgmt_mac, fabric_mac = macs
    append = " ".join([
        "root=/dev/vda", "rw", "console=ttyS0", f"systemd.hostname={node['name']}",
        # Emulated CPUs do not speculate: the mitigations would only cost (a page table switch per system call).
        "mitigations=off", "quiet", "loglevel=4"])
    return [
        "qemu-system-x86_64", "-name", f"{cluster}-{node['name']},process=qemu-{cluster}-{node['name']}",
        "-nodefaults", "-no-user-config", "-display", "none",
        "-accel", f"tcg,tb-size={VM_TB_SIZE_MIB}", "-cpu", "max", "-m", str(VM_MEMORY_MIB), "-smp", str(VM_CPUS),
        "-rtc", "base=utc",
        "-kernel", str(image_dir / "vmlinuz"), "-initrd", str(image_dir / "initrd.img"), "-append", append,
        "-drive", f"file={node_dir / 'root.qcow2'},format=qcow2,if=none,id=root,cache=unsafe,discard=unmap",
        "-device", f"virtio-blk-pci,drive=root,addr={PCI['root']}",
        "-drive", f"file={node_dir / 'data.qcow2'},format=qcow2,if=none,id=data,cache=writeback",
        "-device", f"virtio-blk-pci,drive=data,serial=data,addr={PCI['data']}",
        "-drive", f"file={node_dir / 'config.img'},format=raw,if=none,id=config,cache=unsafe,readonly=on",
        "-device", f"virtio-blk-pci,drive=config,serial={CONFIG_SERIAL},addr={PCI['config']}",
        "-netdev", f"tap,id=mgmt,ifname={mgmt_tap},script=no,downscript=no",
        "-device", f"virtio-net-pci,netdev=mgmt,mac={mgmt_mac},addr={PCI['mgmt']}",
        "-netdev", f"tap,id=fabric,ifname={fabric_tap},script=no,downscript=no",
        "-device", f"virtio-net-pci,netdev=fabric,mac={fabric_mac},addr={PCI['fabric']}",
        "-device", f"virtio-rng-pci,addr={PCI['rng']}",
        "-chardev", f"file,id=console,path={node_dir / 'console.log'},append=on", "-serial", "chardev:console",
        "-monitor", f"unix:{node_dir / 'monitor.sock'},server=on,wait=off",
        "-pidfile", str(node_dir / "qemu.pid"), "-daemonize",
    ]


def mem_available_mib(meminfo_text):
    """MemAvailable from /proc/meminfo's text, in MiB."""
    match = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo_text, re.M)
    if not match:
        raise ClusterError("no MemAvailable in /proc/meminfo")
    return int(match.group(1)) // 1024


def check_host_room(new_vms, available_mib, free_disk_mib, where):
    """Refuses, before any change, to start VMs this machine has no memory or disk for."""
    if new_vms <= 0:
        return
    need = new_vms * VM_HOST_MIB
    if available_mib < need:
        raise ClusterError(f"{new_vms} VM(s) may take {need} MiB of memory ({VM_MEMORY_MIB} MiB guest and "
                           f"{VM_TB_SIZE_MIB} MiB translation cache each) and this machine has {available_mib} MiB "
                           "available: stop something, or ask for fewer --nodes")
    need_disk = new_vms * VM_DISK_NEED_MIB
    if free_disk_mib < need_disk:
        raise ClusterError(f"{new_vms} VM(s) need about {need_disk} MiB free under {where} for their disks and "
                           f"{free_disk_mib} MiB are: free some space")


# ---------------------------------------------------------------------- one cluster's VMs

class VMs:
    """The VM nodes of one cluster (a local_cluster.cluster.Cluster)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.name = cluster.name
        self.dir = cluster.state_dir / "vm"

    def node_dir(self, node_name):
        return self.dir / node_name

    def recorded(self):
        """{node name: qemu.json's record} of every VM this cluster has, running or not."""
        found = {}
        if self.dir.is_dir():
            for record in sorted(self.dir.glob("node*/qemu.json")):
                found[record.parent.name] = json.loads(record.read_text())
        return found

    def pid(self, node_name):
        """The pid of the node's QEMU when it runs (its pidfile, checked against the process's command line)."""
        node_dir = self.node_dir(node_name)
        try:
            pid = int((node_dir / "qemu.pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if str(node_dir / "root.qcow2").encode() in cmdline else None

    # -------------------------------------------------------------- host side

    def check_links(self, nodes):
        """A tap of ours held by something else, or bridges of another cluster whose names clash with ours, is
        refused before any change."""
        tag = netns_tag(self.name)
        state_root = self.cluster.state_dir.parent
        if state_root.is_dir():
            for other in state_root.iterdir():
                if (other.name != self.name and other.is_dir() and netns_tag(other.name) == tag
                        and ((other / "vm").is_dir() or (other / "inventory" / "hosts.yml").exists())):
                    raise ClusterError(
                        f"cluster {other.name} (.cluster/{other.name}) uses the same bridge names as {self.name} "
                        f"(cm-{tag}, cf-{tag}): take it down (down --name {other.name}) or choose another --name")
        bridges = netns_links(self.name, 0)
        links = {link["ifname"]: link for link in json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]")}
        for node in nodes:
            index = node_index(node["name"])
            for tap, bridge in zip(vm_taps(self.name, index), (bridges["mgmt_bridge"], bridges["fabric_bridge"])):
                link = links.get(tap)
                if link and link.get("master") not in (None, bridge):
                    raise ClusterError(f"a link named {tap} exists on this machine, on {link.get('master')} not "
                                       f"{bridge}: left behind by something else? Remove it (ip link del {tap}) "
                                       "or choose another --name")

    def ensure_taps(self, node):
        index = node_index(node["name"])
        bridges = netns_links(self.name, 0)
        for tap, bridge in zip(vm_taps(self.name, index), (bridges["mgmt_bridge"], bridges["fabric_bridge"])):
            if run(["ip", "link", "show", "dev", tap], check=False).returncode != 0:
                run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"])
            run(["ip", "link", "set", tap, "master", bridge, "up"])

    def remove_taps(self, node_name):
        removed = []
        for tap in vm_taps(self.name, node_index(node_name)):
            if run(["ip", "link", "show", "dev", tap], check=False).returncode == 0:
                run(["ip", "link", "del", tap], check=False)
                removed.append(tap)
        return removed

    def make_node(self, node, image_dir, host_mgmt, controller_key):
        """A new node's disks and config disk; its host keys (public) returned for known_hosts."""
        node_dir = self.node_dir(node["name"])
        if node_dir.exists():
            shutil.rmtree(node_dir)
        node_dir.mkdir(parents=True)
        node_dir.chmod(0o700)
        run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(image_dir / "base.qcow2"), "-F", "qcow2",
             str(node_dir / "root.qcow2")])
        run(["qemu-img", "create", "-q", "-f", "qcow2", str(node_dir / "data.qcow2"), DATA_DISK_SIZE])
        keys = {}
        with tempfile.TemporaryDirectory(dir=node_dir) as tmp:
            for key_type in HOST_KEY_TYPES:
                path = Path(tmp) / key_type
                run(["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", f"root@{node['name']}", "-f", str(path)])
                keys[key_type] = (path.read_text(), Path(str(path) + ".pub").read_text())
            tree = Path(tmp) / "tree"
            files = identity_files(node, host_mgmt, vm_macs(self.name, node_index(node["name"])), keys,
                                   Path(str(controller_key) + ".pub").read_text())
            for rel, mode in IDENTITY_DIRS.items():
                (tree / "root" / rel).mkdir(parents=True, exist_ok=True)
                (tree / "root" / rel).chmod(mode)
            for rel, (mode, text) in files.items():
                path = tree / "root" / rel
                path.write_text(text)
                path.chmod(mode)
            run(["mkfs.ext4", "-q", "-L", "cluster-cfg", "-d", str(tree), str(node_dir / "config.img"), "8M"])
        (node_dir / "host_keys.pub").write_text("".join(public for _, public in keys.values()))
        return node_dir

    def launch(self, node_name):
        """Starts the node's QEMU from its record (same disks); returns its pid."""
        record = json.loads((self.node_dir(node_name) / "qemu.json").read_text())
        for tap in vm_taps(self.name, node_index(node_name)):
            if run(["ip", "link", "show", "dev", tap], check=False).returncode != 0:
                raise ClusterError(f"tap {tap} of {node_name} is missing: run up --machines vm --name {self.name}")
        result = run(record["argv"], check=False)
        pid = self.pid(node_name)
        if result.returncode != 0 or pid is None:
            raise ClusterError(f"QEMU of {node_name} did not start ({result.returncode}): "
                               f"{(result.stderr or result.stdout).strip()}")
        return pid

    def kill(self, node_name, sig=signal.SIGKILL, timeout=20):
        """Ends the node's QEMU and waits until the process is gone; True when one ran."""
        pid = self.pid(node_name)
        if pid is None:
            return False
        os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while Path(f"/proc/{pid}").exists():
            if time.monotonic() > deadline:
                raise ClusterError(f"QEMU of {node_name} (pid {pid}) is still there {timeout}s after signal {sig}")
            time.sleep(0.1)
        (self.node_dir(node_name) / "qemu.pid").unlink(missing_ok=True)
        return True

    def wait_for_ssh(self, nodes, timeout=BOOT_TIMEOUT):
        """Waits until each node's sshd answers on its management address and admits the controller's key
        against the pinned known_hosts; {node: seconds waited}."""
        started = time.monotonic()
        waited = {}
        pending = {node["name"]: node for node in nodes}
        while pending:
            for name, node in list(pending.items()):
                try:
                    with socket.create_connection((node["address"], 22), timeout=2) as conn:
                        conn.settimeout(5)
                        banner = conn.recv(4)
                except OSError:
                    continue
                if banner.startswith(b"SSH-") and self.ssh(name, "true", timeout=60).returncode == 0:
                    waited[name] = round(time.monotonic() - started, 1)
                    del pending[name]
            if pending and time.monotonic() - started > timeout:
                names = ", ".join(sorted(pending))
                raise ClusterError(f"{names} did not answer SSH within {timeout}s: read "
                                   f"{', '.join(str(self.node_dir(n) / 'console.log') for n in sorted(pending))}")
            if pending:
                time.sleep(1)
        return waited

    def ssh_argv(self, node_name, command):
        record = json.loads((self.node_dir(node_name) / "qemu.json").read_text())
        return ["ssh", "-i", str(self.cluster.controller_key()), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={self.cluster.state_dir / 'known_hosts'}",
                "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10", f"root@{record['address']}", command]

    def ssh(self, node_name, command, timeout=120):
        """`command` on the node as root over its management network, host key checked."""
        return subprocess.run(self.ssh_argv(node_name, command), capture_output=True, text=True, timeout=timeout)

    def write_known_hosts(self, records):
        known = []
        for node_name, record in sorted(records.items()):
            keys = (self.node_dir(node_name) / "host_keys.pub").read_text().strip().splitlines()
            for address in (record["address"], record["fabric"]):
                known += known_hosts_lines(address, 22, keys)
        return write_if_changed(self.cluster.state_dir / "known_hosts", "\n".join(known) + "\n")

    # -------------------------------------------------------------- verbs

    def up(self, count, port=22, backend="auto", suite="bookworm", scheduler="none", accounting=False,
           storage="none"):
        cluster = self.cluster
        if port != 22:
            raise ClusterError(f"--ssh-port {port}: VM nodes run sshd on port 22 (they have their own addresses)")
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise ClusterError("--machines vm needs root (tap devices, bridges) and iproute2's ip")
        if accounting and scheduler != "slurm":
            raise ClusterError("--accounting is Slurm's job accounting: add --scheduler slurm")
        if storage not in VM_STORAGES:
            raise ClusterError(f"--storage {storage!r}: choose {', '.join(VM_STORAGES)}")
        if cluster.has_containers():
            raise ClusterError(f"cluster {self.name} runs containers: take it down first (down --name {self.name}) "
                               "or choose another --name")
        backend_vars, backend_line = backend_settings(backend, python_prefix=pyenv_python())
        backend_vars = dict(backend_vars, cluster_scheduler=scheduler, slurm_accounting=accounting,
                            cluster_shared_storage=storage)
        nodes, host_mgmt, host_fabric = netns_nodes(count, self.name, netns_host_networks(self.name))
        wanted = {node["name"]: node for node in nodes}
        self.check_links(nodes)
        ensure_controller_tools()
        ensure_vm_tools()
        timings = {}
        started = time.monotonic()
        image_dir = ensure_vm_image(suite)
        timings["image"] = round(time.monotonic() - started, 1)
        key = cluster.controller_key()
        changes = []

        records = self.recorded()
        for node_name, record in records.items():
            node = wanted.get(node_name)
            if (node is None or record["image"] != str(image_dir) or record["address"] != node["address"]
                    or record["fabric"] != node["fabric"]):
                self.remove_node(node_name)
                changes.append(f"removed VM {node_name}")
        records = self.recorded()
        new = [n for n in nodes if n["name"] not in records]
        stopped = [n for n in nodes if n["name"] in records and self.pid(n["name"]) is None]
        self.dir.mkdir(parents=True, exist_ok=True)
        check_host_room(len(new) + len(stopped), mem_available_mib(Path("/proc/meminfo").read_text()),
                        shutil.disk_usage(self.dir).free >> 20, self.dir)

        if ensure_bridges(self.name, host_mgmt, host_fabric):
            changes.append(f"made bridges {' '.join(list(netns_links(self.name, 0).values())[:2])}")
        if ensure_apt_proxy(cluster.state_dir, host_mgmt):
            changes.append(f"started apt-cacher-ng on {host_mgmt}:{APT_PROXY_PORT}")
        booting = []
        started = time.monotonic()
        for node in nodes:
            self.ensure_taps(node)
            if node["name"] not in records:
                node_dir = self.make_node(node, image_dir, host_mgmt, key)
                index = node_index(node["name"])
                record = {"address": node["address"], "fabric": node["fabric"], "image": str(image_dir),
                          "suite": suite,
                          "argv": qemu_argv(self.name, node, node_dir, image_dir, vm_taps(self.name, index),
                                            vm_macs(self.name, index))}
                write_if_changed(node_dir / "qemu.json", json.dumps(record, indent=1) + "\n")
                self.launch(node["name"])
                changes.append(f"created VM {node['name']}")
                booting.append(node)
            elif self.pid(node["name"]) is None:
                self.launch(node["name"])
                changes.append(f"started VM {node['name']}")
                booting.append(node)
        if self.write_known_hosts(self.recorded()):
            changes.append(f"wrote {(cluster.state_dir / 'known_hosts').relative_to(ROOT)}")
        waited = self.wait_for_ssh(nodes)
        if booting:
            timings["boot_to_ssh"] = max(waited[n["name"]] for n in booting)
        # One rank per virtual CPU: with group_vars' two, Slurm holds the job (PartitionConfig) for ever.
        inventory_nodes = [dict(node, host_vars={"cluster_slots": VM_CPUS}) for node in nodes]
        if cluster.write_inventory(inventory_nodes, 22, key, cluster.state_dir / "known_hosts", backend_vars):
            changes.append(f"wrote {cluster.inventory_dir.relative_to(ROOT)}")
        write_if_changed(self.dir / "timings.json", json.dumps(timings) + "\n")
        for change in changes:
            print(change)
        print(backend_line)
        print(f"cluster {self.name} up: {count} VMs (TCG; management {nodes[0]['address']}..{nodes[-1]['address']} "
              f"({MGMT_IFACE}), fabric {nodes[0]['fabric']}..{nodes[-1]['fabric']} ({FABRIC_IFACE}), data disk "
              f"/dev/vdb), {'changed' if changes else 'unchanged'}; image {timings['image']}s"
              + (f", boot to SSH {timings['boot_to_ssh']}s" if "boot_to_ssh" in timings else "")
              + f"; inventory {cluster.inventory_dir.relative_to(ROOT)}")

    def remove_node(self, node_name):
        """The node's QEMU ended (verified gone), its taps and its disks removed; the names removed."""
        removed = []
        if self.kill(node_name, signal.SIGTERM):
            removed.append(f"VM {node_name}")
        removed += self.remove_taps(node_name)
        node_dir = self.node_dir(node_name)
        if node_dir.exists():
            shutil.rmtree(node_dir)
        return removed

    def down(self):
        """Every VM of the cluster and its taps and disks; the names removed."""
        removed = []
        for node_name in self.recorded():
            removed += self.remove_node(node_name)
        # Taps of nodes whose state is gone (a crashed up).
        tag = netns_tag(self.name)
        for link in json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]"):
            name = link.get("ifname", "")
            if re.fullmatch(rf"v[mf]{re.escape(tag)}-\d+", name):
                run(["ip", "link", "del", name], check=False)
                removed.append(name)
        shutil.rmtree(self.dir, ignore_errors=True)
        return removed

    def poweroff(self, node_name):
        """A power loss: kill -9 of the node's QEMU. Its disks stay as the loss left them."""
        if node_name not in self.recorded():
            raise ClusterError(f"cluster {self.name} has no VM {node_name}")
        if not self.kill(node_name, signal.SIGKILL):
            print(f"{node_name} was not running")
            return
        print(f"{node_name} powered off (QEMU killed with SIGKILL)")

    def start(self, node_name, wait=True):
        """Boots the node again with the same disks; waits for its SSH."""
        records = self.recorded()
        if node_name not in records:
            raise ClusterError(f"cluster {self.name} has no VM {node_name}")
        if self.pid(node_name) is not None:
            print(f"{node_name} is running")
            return
        record = records[node_name]
        self.ensure_taps({"name": node_name})
        check_host_room(1, mem_available_mib(Path("/proc/meminfo").read_text()), 1 << 30, self.dir)
        started = time.monotonic()
        self.launch(node_name)
        if wait:
            self.wait_for_ssh([{"name": node_name, "address": record["address"]}])
        print(f"{node_name} started" + (f", SSH in {time.monotonic() - started:.0f}s" if wait else ""))

    def status(self):
        """Prints the VMs; 0 when every one runs, 1 otherwise (or when there is none)."""
        records = self.recorded()
        if not records:
            return None
        all_up = True
        for node_name, record in records.items():
            pid = self.pid(node_name)
            all_up &= pid is not None
            state = f"running (pid {pid})" if pid else "stopped"
            print(f"{node_name:8} vm {record['address']:15} {record['fabric']:15} {state:22} "
                  f"{Path(record['image']).name}")
        return 0 if all_up else 1
