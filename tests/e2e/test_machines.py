"""The machines step on the real-CNTK cluster's containers (netns layout, tests/e2e/conftest.py), what containers can
show of it: one clock served by the head node (chronyd -x: the containers share this machine's clock), the
firewall in each node's own namespace, and the fabric check naming a blocked pair in seconds. Clock skew, disks,
memlock and cgroup v2 need machines of their own: tests/machines/test_machine_roles.py (VMs).

The firewall test turns cluster_firewall on for its own runs only and takes the rules away at its end (its drop
rule in a finally), so the Slurm tests after it run on the cluster as site.yml left it."""

import re

from cluster_helpers import (CNTK_CLUSTER, CNTK_INVENTORY, CNTK_NODES, ansible_playbook, fabric_message,
                             fabric_reach_seconds, node_shell, playbook_report, recap)

FIREWALL_ON = ("-e", '{"cluster_firewall": true}')


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


def test_firewall_in_each_namespace_and_a_blocked_fabric_named_in_seconds(cntk_cluster):
    try:
        ansible_playbook(CNTK_INVENTORY, "playbooks/machines.yml", "--tags", "firewall", *FIREWALL_ON)
        again = ansible_playbook(CNTK_INVENTORY, "playbooks/machines.yml", "--tags", "firewall", *FIREWALL_ON)
        assert all(counts["changed"] == 0 for counts in recap(again.stdout).values()), again.stdout[-4000:]
        for node in CNTK_NODES:
            rules = node_shell(CNTK_CLUSTER, node, "nft list table inet cntk_cluster").stdout
            assert "policy drop" in rules and "ip saddr @cluster_v4 accept" in rules, rules
            assert _fabric_address(node) in rules, rules

        result, report = playbook_report(CNTK_INVENTORY, "playbooks/check.yml", "--tags", "fabric")
        verdict = fabric_message(report)
        assert result.returncode == 0, verdict
        assert f"Fabric check: {len(CNTK_NODES)} training nodes reach each other on fab0" in verdict, verdict

        shut, others = CNTK_NODES[-1], CNTK_NODES[:-1]
        blocked = node_shell(CNTK_CLUSTER, shut, "nft add table inet cntk_test && nft add chain inet cntk_test "
                                                    "input '{ type filter hook input priority -10; }' && "
                                                    "nft add rule inet cntk_test input iifname fab0 drop")
        assert blocked.returncode == 0, blocked.stderr
        result, report = playbook_report(CNTK_INVENTORY, "playbooks/check.yml", "--tags", "fabric")
        took = fabric_reach_seconds(report)
        message = fabric_message(report)
        assert result.returncode != 0, message
        for other in others:
            assert re.search(rf"{other} cannot reach {shut} at {re.escape(_fabric_address(shut))}:47470 \(fab0\): "
                             r"no answer", message), message
            assert f"{shut} cannot reach {other} at" in message, message
        assert len(re.findall(r"cannot reach", message)) == 2 * len(others), message
        # The check's own 10 s on every node: a verdict, not an mpirun left hanging.
        assert took is not None and took < 12, took
    finally:
        node_shell(CNTK_CLUSTER, CNTK_NODES[-1], "nft delete table inet cntk_test")
        for node in CNTK_NODES:
            node_shell(CNTK_CLUSTER, node, "nft delete table inet cntk_cluster; systemctl disable --now nftables")
