"""What the playbook tests on made-up inventories share: the cluster settings every inventory
needs, and a loopback port where nothing listens (a node there would show as unreachable,
never changed)."""

import socket

# dataset_generate: the demo data, written where it is missing (as the local inventory says): the data's check
# on the controller, before any node, then passes in a checkout that has no data yet.
GROUP_VARS = {"cluster_name": "t", "cluster_training_user": "cntk", "cluster_training_uid": 2000,
              "cluster_mpi_interface": "lo", "cluster_slots": 1, "dataset_generate": "digits"}


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
