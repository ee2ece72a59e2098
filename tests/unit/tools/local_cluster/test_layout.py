"""Node names and addresses of the loopback and netns layouts."""

import pytest

from local_cluster import ClusterError, layout


def test_nodes_get_consecutive_loopback_addresses():
    assert layout.nodes_for(3) == [
        {"name": "node1", "address": "127.0.0.11"},
        {"name": "node2", "address": "127.0.0.12"},
        {"name": "node3", "address": "127.0.0.13"},
    ]
    assert layout.node_addresses(2, "127.0.0.21") == ["127.0.0.21", "127.0.0.22"]


@pytest.mark.parametrize("count", [0, -1, layout.MAX_NODES + 1])
def test_node_count_out_of_range_is_refused(count):
    with pytest.raises(ClusterError, match="--nodes"):
        layout.node_addresses(count)


def test_addresses_never_leave_loopback():
    with pytest.raises(ClusterError, match="outside 127.0.0.0/8"):
        layout.node_addresses(4, "127.255.255.253")


def test_netns_link_names_fit_linux_and_stay_apart_per_cluster():
    short = layout.netns_links("nsdev", 2)
    assert short == {"mgmt_bridge": "cm-nsdev", "fabric_bridge": "cf-nsdev",
                     "veths": [("mnsdev-1", "fnsdev-1"), ("mnsdev-2", "fnsdev-2")]}
    long_a = layout.netns_links("a-very-long-cluster-name", layout.MAX_NODES)
    long_b = layout.netns_links("a-very-long-cluster-other", layout.MAX_NODES)
    names = [long_a["mgmt_bridge"], long_a["fabric_bridge"], *[n for pair in long_a["veths"] for n in pair]]
    assert max(len(name) for name in names) <= 15
    assert len(set(names)) == len(names)
    assert long_a["mgmt_bridge"] != long_b["mgmt_bridge"]


def test_netns_nodes_get_a_management_and_a_fabric_address_the_host_254():
    nodes, host_mgmt, host_fabric = layout.netns_nodes(2, "nsdev")
    mgmt, fabric = layout.netns_subnets("nsdev")
    assert [n["name"] for n in nodes] == ["node1", "node2"]
    assert [n["address"] for n in nodes] == [str(mgmt[1]), str(mgmt[2])]
    assert [n["fabric"] for n in nodes] == [str(fabric[1]), str(fabric[2])]
    assert (host_mgmt, host_fabric) == (str(mgmt[254]), str(fabric[254]))
    assert mgmt.is_private and fabric.is_private and not mgmt.overlaps(fabric)
    with pytest.raises(ClusterError, match="--nodes"):
        layout.netns_nodes(layout.MAX_NODES + 1, "nsdev")


def test_netns_networks_never_shadow_a_route_of_the_host():
    mgmt, _ = layout.netns_subnets("nsdev", ["192.0.2.0/24"])
    with pytest.raises(ClusterError, match="overlap this machine's route 10.0.0.0/8"):
        layout.netns_subnets("nsdev", ["192.0.2.0/24", "10.0.0.0/8"])
    with pytest.raises(ClusterError, match="choose another --name"):
        layout.netns_subnets("nsdev", [str(mgmt)])
