"""The machines step on the real-CNTK cluster's containers (netns layout, tests/e2e/conftest.py), what containers
alone show of it: one clock served by the head node with chronyd -x (the containers share this machine's clock).
The rest (clock skew, disks, memlock, cgroup v2, the firewall and a blocked fabric named in seconds) runs on
machines of their own: tests/machines/test_machine_roles.py (VMs, in make test)."""

import re

from cluster_helpers import CNTK_CLUSTER, CNTK_NODES, node_shell


def _fabric_address(node):
    out = node_shell(CNTK_CLUSTER, node, "ip -4 -o addr show fab0").stdout
    return re.search(r"inet (\S+)/", out).group(1)


def test_the_nodes_follow_the_head_nodes_chrony(cntk_cluster):
    head = _fabric_address("node1")
    for node in CNTK_NODES[1:]:
        out = node_shell(CNTK_CLUSTER, node, "chronyc -n sources; cat /etc/default/chrony").stdout
        assert re.search(rf"^\^\*\s+{re.escape(head)}\s", out, re.M), out
        assert 'DAEMON_OPTS="-F 1 -x"' in out, out
    conf = node_shell(CNTK_CLUSTER, "node1", "cat /etc/chrony/chrony.conf").stdout
    assert "local stratum 10" in conf and f"bindaddress {head}" in conf, conf
    for node in CNTK_NODES[1:]:
        assert f"allow {_fabric_address(node)}" in conf, conf
