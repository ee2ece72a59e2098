"""Where the nodes are on the network, for both layouts: loopback (every node at its own 127.x address on this
machine's stack) and netns (a namespace per node, a management and a fabric network). Names and addresses only;
netns.py makes them."""

import hashlib
import ipaddress

from local_cluster import ClusterError

FIRST_ADDRESS = "127.0.0.11"
MAX_NODES = 64
NETWORKS = ("loopback", "netns")
# Interface names inside a netns node, as on real hardware.
MGMT_IFACE = "mgmt0"
FABRIC_IFACE = "fab0"
# The host's own address on each bridge (.254 of each /24).
HOST_OCTET = 254


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
