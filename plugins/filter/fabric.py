"""The fabric check's failed pairs in words (plugins/module_utils/fabric_check.py)."""

from ansible_collections.cntk.cluster.plugins.module_utils import fabric_check


def fabric_blocked(hosts, hostvars, register, port, interface):
    """['node2 cannot reach node3 at 10.0.1.3:47470 (fab0): no answer (packets dropped?)', ...] from each host's
    registered cntk.cluster.fabric_check result."""
    reports, addresses = {}, {}
    for host in hosts:
        facts = hostvars[host]
        addresses[host] = facts.get("cluster_address") or facts.get("ansible_host") or host
        value = facts.get(register) or {}
        if "blocked" in value:
            reports[host] = value
    return fabric_check.blocked_pairs(reports, addresses, port, interface)


class FilterModule:
    def filters(self):
        return {"fabric_blocked": fabric_blocked}
