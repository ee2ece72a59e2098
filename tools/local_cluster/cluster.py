"""One local cluster: its containers, state directory and inventory, and the verbs that change them."""

import json
import os
import re
import shutil
from pathlib import Path

from local_cluster import ROOT, ClusterError
from local_cluster.apt_proxy import APT_PROXY_PORT, ensure_apt_proxy, stop_apt_proxy
from local_cluster.backend import backend_settings, pyenv_python
from local_cluster.engine import ENGINE_DIR, LABEL, engine_running, ensure_engine, stop_engine_if_ours
from local_cluster.host import address_in_use, ensure_controller_tools, run, wait_for_sshd, write_if_changed
from local_cluster.image import NODE_SUITE, ensure_image
from local_cluster.inventory import LOCAL_INVENTORY, known_hosts_lines, render_inventory
from local_cluster.layout import FABRIC_IFACE, FIRST_ADDRESS, MGMT_IFACE, NETWORKS, netns_links, netns_nodes, nodes_for
from local_cluster.netns import ensure_bridges, netns_host_networks, plumb, remove_netns_links
from local_cluster.node import NODE_HOSTS, holder_name, holder_run_argv, node_run_argv
from local_cluster.vm import VMs

# The shared filesystems a local cluster can have: this kernel has no NFS client or server (docs/storage.md);
# VM nodes have their own kernels (vm.VM_STORAGES adds nfs).
STORAGES = ("none", "glusterfs")
# What a node is: a systemd container (the default) or a QEMU virtual machine (vm.py).
MACHINES = ("container", "vm")


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
                "fuse": labels.get(f"{LABEL}.fuse") == "yes",
                "pid": info["State"].get("Pid", 0),
            }
        return found

    def has_containers(self):
        """True when the Docker engine runs any container of this cluster."""
        return engine_running() and bool(run(["docker", "ps", "-aq", "--filter", f"label={self.label}"]).stdout.strip())

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

    def remove_netns_network(self):
        """The proxy, the cluster's bridges and any veth ends left on the host; the names removed."""
        removed = ["apt-cacher-ng"] if stop_apt_proxy(self.state_dir) else []
        return removed + remove_netns_links(self.name)

    # ------------------------------------------------------------------ verbs

    def up(self, count, port, backend="auto", suite=NODE_SUITE, network="loopback", scheduler="none",
           accounting=False, storage="none", machines="container"):
        if machines not in MACHINES:
            raise ClusterError(f"--machines {machines!r}: choose {' or '.join(MACHINES)}")
        if machines == "vm":
            # The VMs' own layout is the netns one (two NICs each); --network does not apply.
            return VMs(self).up(count, port, backend, suite, scheduler, accounting, storage)
        if VMs(self).recorded():
            raise ClusterError(f"cluster {self.name} runs VMs: take it down first (down --name {self.name}) or "
                               "choose another --name")
        if network not in NETWORKS:
            raise ClusterError(f"--network {network!r}: choose {' or '.join(NETWORKS)}")
        netns = network == "netns"
        if netns:
            if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nsenter") is None:
                raise ClusterError("--network netns needs root, iproute2's ip and util-linux's nsenter: "
                                   "or use --network loopback")
            nodes, host_mgmt, host_fabric = netns_nodes(count, self.name, netns_host_networks(self.name))
        else:
            nodes = nodes_for(count, self.first_address)
        # Decided before anything starts: a cntk cluster that cannot be had stops here.
        backend_vars, backend_line = backend_settings(backend, python_prefix=pyenv_python())
        if accounting and scheduler != "slurm":
            raise ClusterError("--accounting is Slurm's job accounting: add --scheduler slurm")
        if storage not in STORAGES:
            raise ClusterError(f"--storage {storage!r}: choose {', '.join(STORAGES)} (nfs: with --machines vm, "
                               "this kernel has no NFS)")
        # The nodes get FUSE whenever this machine has it: a node made without it is made again only for storage.
        fuse = Path("/dev/fuse").exists()
        if storage == "glusterfs" and not fuse:
            raise ClusterError("--storage glusterfs mounts through FUSE and this machine has no /dev/fuse: "
                               "modprobe fuse, or leave --storage none")
        if storage == "glusterfs" and not netns:
            raise ClusterError("--storage glusterfs needs --network netns: every glusterd listens on port 24007, "
                               "and loopback nodes share this machine's network stack")
        backend_vars = dict(backend_vars, cluster_scheduler=scheduler, slurm_accounting=accounting,
                            cluster_shared_storage=storage)
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
                    or info["network"] != network or info["fabric"] != node.get("fabric", "")
                    or (storage != "none" and not info["fuse"])):
                run(["docker", "rm", "-f", "-v", name])
                changes.append(f"removed {name}")
        existing = self.containers()
        # A holder goes with its node, and with the netns layout; one of an older image is made anew.
        for holder, info in self.containers(holders=True).items():
            if not netns or info["node"] not in wanted or info["node"] not in existing or info["image"] != ref:
                run(["docker", "rm", "-f", holder])
                changes.append(f"removed {holder}")

        if netns:
            if ensure_bridges(self.name, host_mgmt, host_fabric):
                changes.append(f"made bridges {' '.join(list(netns_links(self.name, 0).values())[:2])}")
            if ensure_apt_proxy(self.state_dir, host_mgmt):
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
                plumbed = plumb(self.name, holder, node)
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
        run(node_run_argv(name, node, port, ref, self.label, self.shared_dir, hosts_file,
                          fuse=Path("/dev/fuse").exists()))

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
            raise ClusterError(f"cluster {self.name} has no node {node_name} (python -m local_cluster status "
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
            plumb(self.name, holder_name(name), node)
        self.create_node(name, node, info["port"], info["image"])
        wait_for_sshd(info["address"], int(info["port"]))
        self.admit_controller(name, self.controller_key())
        print(f"rebuilt {node_name}: a new disk and new host keys at {info['address']}:{info['port']}. "
              f"{(self.state_dir / 'known_hosts').relative_to(ROOT)} still holds its old keys, so Ansible "
              f"refuses it until you compare its new key (python -m local_cluster fingerprints {node_name}"
              f"{'' if self.name == 'local' else ' --name ' + self.name}) and accept it "
              f"(playbooks/accept_host_key.yml)")

    def fingerprints(self, node_name):
        """The node's host key fingerprints read through docker exec: the console of a real node."""
        name, _ = self.node_container(node_name)
        print(run(["docker", "exec", name, "sh", "-c",
                   "for key in /etc/ssh/ssh_host_*_key.pub; do ssh-keygen -l -f \"$key\"; done"]).stdout, end="")

    def down(self):
        removed_vms = VMs(self).down() if shutil.which("ip") else []
        if removed_vms:
            print(f"removed {' '.join(removed_vms)}")
        had_containers = False
        if engine_running():
            nodes = [name[len(self.prefix):] for name in self.containers()]
            # The nodes before the holders whose namespaces they use.
            for names in (list(self.containers()), list(self.containers(holders=True))):
                if names:
                    run(["docker", "rm", "-f", "-v", *names])
                    print(f"removed {' '.join(names)}")
                    had_containers = True
            left = remove_slurm_cgroups(nodes)
            if left:
                print(f"removed {left} empty Slurm cgroups of {', '.join(nodes)} from the host's tree")
        removed = self.remove_netns_network() if shutil.which("ip") else []
        if removed:
            print(f"removed {' '.join(removed)}")
        # Only a cluster that had containers stops the engine: a VM cluster's down, run beside container
        # clusters (make test's machine tier), must not stop it between two of theirs.
        if had_containers:
            stop_engine_if_ours()
        (self.inventory_dir / "hosts.yml").unlink(missing_ok=True)
        (self.state_dir / "known_hosts").unlink(missing_ok=True)
        if self.name != "local":
            shutil.rmtree(self.inventory_dir, ignore_errors=True)
        print(f"cluster {self.name} down")

    def status(self):
        vms = VMs(self).status()
        if vms is not None:
            return vms
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


def remove_slurm_cgroups(nodes, root=Path("/sys/fs/cgroup")):
    """The slurm_<node> cgroups slurmd made at the root of the host's hierarchies (the nodes share the host's
    cgroup namespace), which outlive the containers: removed deepest first, and only where empty (rmdir fails on
    a cgroup that still holds a process, another cluster's node of the same name for one). The number removed."""
    removed = 0
    for node in nodes:
        for top in root.glob(f"*/slurm_{node}"):
            for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
                try:
                    directory.rmdir()
                    removed += 1
                except OSError:
                    pass
    return removed
