"""The netns layout made on this machine: the cluster's two host bridges, a veth pair per bridge into each node's
namespace, and what is left of them removed. `cluster` is the cluster's name (layout.py names the links after
it)."""

import json
import re

from local_cluster.host import run
from local_cluster.layout import FABRIC_IFACE, MGMT_IFACE, netns_links, netns_tag


def netns_host_networks(cluster):
    """The host's IPv4 routes, less the default route and the bridges of the cluster named `cluster`."""
    links = netns_links(cluster, 0)
    routes = json.loads(run(["ip", "-j", "-4", "route", "show"]).stdout or "[]")
    return [route["dst"] for route in routes
            if route.get("dst") not in (None, "default")
            and route.get("dev") not in (links["mgmt_bridge"], links["fabric_bridge"])]


def ensure_bridges(cluster, host_mgmt, host_fabric, prefixlen=24):
    """The cluster's two host bridges, up, with the host's address on each; True when one was made."""
    links = netns_links(cluster, 0)
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


def plumb(cluster, container, node, prefixlen=24):
    """One veth per bridge into the running container's namespace, named mgmt0 and fab0 there, addressed
    and up. A container that already has them is left as it is (a restarted holder has a new namespace)."""
    pid = str(int(run(["docker", "inspect", "-f", "{{.State.Pid}}", container]).stdout.strip()))
    inside = ["nsenter", "-t", pid, "-n"]
    if run(inside + ["ip", "link", "show", "dev", MGMT_IFACE], check=False).returncode == 0:
        return False
    index = int(node["name"].removeprefix("node"))
    links = netns_links(cluster, index)
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


def remove_netns_links(cluster):
    """The cluster's bridges and any veth ends left on the host; the names removed."""
    removed = []
    links = netns_links(cluster, 0)
    tag = netns_tag(cluster)
    shown = json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]")
    for link in shown:
        name = link.get("ifname", "")
        if (name in (links["mgmt_bridge"], links["fabric_bridge"])
                or re.fullmatch(rf"[mf]{re.escape(tag)}-\d+", name)):
            run(["ip", "link", "del", name], check=False)
            removed.append(name)
    return removed


def interface_bytes(ip_json):
    """{interface: (rx bytes, tx bytes)} from `ip -j -s link show`'s output."""
    return {link["ifname"]: (link["stats64"]["rx"]["bytes"], link["stats64"]["tx"]["bytes"])
            for link in json.loads(ip_json) if "stats64" in link}
