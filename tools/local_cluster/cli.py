"""The command line: python -m local_cluster up|down|status|rebuild|fingerprints."""

import argparse
import os
import sys

import local_cluster
from local_cluster import ClusterError
from local_cluster.cluster import MACHINES, Cluster
from local_cluster.vm import VM_STORAGES, VMs
from local_cluster.image import NODE_SUITE, NODE_SUITES
from local_cluster.layout import FIRST_ADDRESS, NETWORKS


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m local_cluster", description=local_cluster.__doc__.split("\n\n")[0])
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
    up_parser.add_argument("--scheduler", choices=("none", "slurm"), default=os.environ.get("SCHEDULER") or "none",
                           help="none: the train step starts mpirun itself (default); slurm: Slurm schedules the "
                                "jobs (cluster_scheduler in the inventory)")
    up_parser.add_argument("--accounting", action="store_true", default=os.environ.get("ACCOUNTING") == "true",
                           help="with --scheduler slurm: job accounting, slurmdbd and MariaDB on node1 "
                                "(slurm_accounting in the inventory)")
    up_parser.add_argument("--machines", choices=MACHINES, default=os.environ.get("MACHINES") or "container",
                           help="container: systemd containers (default); vm: QEMU virtual machines (software "
                                "emulation) with their own kernels, two NICs on the netns layout's bridges and a "
                                "blank data disk /dev/vdb each")
    up_parser.add_argument("--storage", choices=VM_STORAGES, default=os.environ.get("STORAGE") or "none",
                           help="none: no shared filesystem (default); glusterfs: a replicated GlusterFS volume "
                                "over the fabric NICs, mounted on every node (cluster_shared_storage; --network "
                                "netns or --machines vm); nfs: the kernel's NFS (--machines vm)")
    sub.add_parser("down", help="remove every node; stop the engine if this tool started it")
    sub.add_parser("status", help="list the nodes")
    for verb, text in (("rebuild", "reinstall a node: new disk, new host keys (known_hosts left as it is)"),
                       ("fingerprints", "print a node's host key fingerprints, read through docker exec"),
                       ("poweroff", "a VM node's power loss: kill -9 of its QEMU (--machines vm)"),
                       ("start", "boot a VM node again with the same disks, after a poweroff (--machines vm)")):
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
            cluster.up(args.nodes, args.ssh_port, args.backend, args.suite, args.network, args.scheduler,
                       args.accounting, args.storage, args.machines)
        elif args.command == "down":
            cluster.down()
        elif args.command == "rebuild":
            cluster.rebuild(args.node)
        elif args.command == "fingerprints":
            cluster.fingerprints(args.node)
        elif args.command == "poweroff":
            VMs(cluster).poweroff(args.node)
        elif args.command == "start":
            VMs(cluster).start(args.node)
        else:
            return cluster.status()
    except ClusterError as exc:
        print(f"local cluster: {exc}", file=sys.stderr)
        return 2
    return 0
