"""A node's containers: `docker run` of the node (systemd as PID 1) and, in the netns layout, of the holder of its
network namespace."""

import ipaddress

from local_cluster.apt_proxy import APT_PROXY_PORT
from local_cluster.engine import LABEL
from local_cluster.layout import HOST_OCTET

# What systemd as PID 1 needs of Docker here (--privileged is refused on these machines): mounts (SYS_ADMIN, also
# for the boot id, see image.NODE_INIT), the host's cgroup tree writable and the same cgroup namespace (so the paths in
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


def holder_name(container):
    """The container that holds a netns node's network namespace (Kubernetes' pause container): the node joins
    it, so the node's restart (a reboot) keeps mgmt0 and fab0."""
    return container + "-net"


def holder_run_argv(container, node, ref, cluster_label):
    """`docker run` of a netns node's holder: no network but what netns.plumb puts in, the node's
    hostname (the node shares its UTS namespace), and nothing running but a sleep."""
    return ["docker", "run", "-d", "--name", holder_name(container), "--hostname", node["name"],
            "--network", "none", "--init", "--label", cluster_label, "--label", f"{LABEL}.holder-of={container}",
            ref, "sleep", "infinity"]


def node_run_argv(container, node, port, ref, cluster_label, shared_dir, hosts_file, fuse=False):
    """`docker run` of one node: systemd as PID 1 (the image's CMD), on the host's network stack, or, for a
    node with a 'fabric' address (the netns layout), in its holder's namespace. fuse: the host's /dev/fuse
    (GlusterFS's client mounts through it; a container may not mknod its own)."""
    argv = ["docker", "run", "-d", "--name", container, *SYSTEMD_RUN_OPTIONS]
    if fuse:
        argv += ["--device", "/dev/fuse", "--label", f"{LABEL}.fuse=yes"]
    if "fabric" in node:
        # The hostname comes with the holder's namespaces (Docker refuses --hostname here). NET_ADMIN over that
        # namespace, the node's own (never the host's: loopback nodes do not get it): its firewall (nftables).
        argv += ["--network", f"container:{holder_name(container)}", "--cap-add", "NET_ADMIN"]
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
