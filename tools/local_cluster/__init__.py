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

    python -m local_cluster up [--nodes N] [--backend B] [--suite S] [--network loopback|netns]
                                               create or reconcile
    python -m local_cluster down               remove nodes, stop the engine we started
    python -m local_cluster status             print what runs
    python -m local_cluster rebuild NODE       reinstall a node: new disk, new host keys
    python -m local_cluster fingerprints NODE  its host key fingerprints, read through docker exec

It runs from the checkout with tools/ on the import path (the Makefile exports
PYTHONPATH with it, pytest.ini adds it): `PYTHONPATH=tools .venv/bin/python -m
local_cluster status`. Its files, by concern: image.py (the node image),
engine.py (the Docker engine), layout.py (names and addresses of both layouts),
netns.py (the bridges and veths), apt_proxy.py, node.py (`docker run` of a
node), inventory.py, backend.py, cluster.py (the verbs), cli.py.

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

from pathlib import Path

# The checkout's root (tools/local_cluster/ is two levels down): .cluster/, inventory/local/, .cache/ and
# matrix/ are found from here.
ROOT = Path(__file__).resolve().parents[2]


class ClusterError(Exception):
    """A problem the user can fix; the message says how."""
