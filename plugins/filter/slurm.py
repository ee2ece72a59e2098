"""slurm.conf from the inventory and the nodes' reports (plugins/module_utils/slurm_conf.py)."""

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.module_utils import slurm_conf, slurm_health


def slurm_hostlist(names):
    """['node1', 'node2', 'node3'] -> 'node[1-3]'."""
    return slurm_conf.hostlist(list(names))


def slurm_hardware(report, host="this node"):
    """{CPUs, Boards, SocketsPerBoard, CoresPerSocket, ThreadsPerCore, RealMemory} from `slurmd -C`."""
    try:
        return slurm_conf.hardware(report)
    except ValueError as error:
        raise AnsibleFilterError(f"{host}: {error}")


def slurm_node_lines(nodes):
    return slurm_conf.node_lines(list(nodes))


def slurm_cluster(hosts, hostvars, cgroup="auto", choices=None):
    """The cluster as slurm.conf needs it, from each training node's registered reports (config.yml): {plugins:
    the proctrack/task/cgroup choice, nodes: [{name, hardware, gpus}], def_mem_per_cpu}; None while a node has no slurmd report
    yet (a dry run on new nodes)."""
    nodes, kinds = [], []
    for host in hosts:
        facts = hostvars[host]
        report = facts.get("slurm_slurmd_report") or {}
        if report.get("rc") != 0:
            return None
        nodes.append({"name": host, "hardware": slurm_hardware(report.get("stdout", ""), host),
                      "gpus": int(facts.get("cluster_gpus") or 0)})
        freezer = ((facts.get("slurm_cgroup_freezer") or {}).get("stat") or {}).get("isdir", False)
        kinds.append(slurm_conf.cgroup_kind((facts.get("slurm_cgroup_fs") or {}).get("stdout", "").strip(), freezer))
    if cgroup == "auto":
        plugins = slurm_conf.cgroup_plugins(kinds)
    else:
        plugins = dict((choices or {})[cgroup])
    return {"plugins": plugins, "nodes": nodes, "kinds": dict(zip(hosts, kinds)),
            "def_mem_per_cpu": slurm_conf.default_mem_per_cpu(nodes)}


def slurm_release(apt_policy):
    """The release a node runs, else the one apt would install ('' when neither)."""
    installed, candidate = slurm_conf.release(apt_policy)
    return installed or candidate


def slurm_release_problems(releases, minimum=slurm_conf.MIN_RELEASE):
    return slurm_conf.release_problems(dict(releases), minimum)


def slurm_not_ready(sinfo_lines, hosts):
    return slurm_conf.not_ready(list(sinfo_lines), list(hosts))


def slurm_slow_links(reports, fraction):
    """{median, slow: [{node, rate, reason}], rates} from {node: `iperf3 -J -R` report of the link it sent on}."""
    try:
        rates = {node: slurm_health.iperf_rate(report) for node, report in dict(reports).items()}
    except (ValueError, KeyError, TypeError) as error:
        raise AnsibleFilterError(f"iperf3's report cannot be read: {error}")
    median, slow = slurm_health.slow_links(rates, float(fraction))
    return {"median": median, "rates": {node: round(rate) for node, rate in rates.items()},
            "slow": [{"node": node, "rate": rate, "reason": slurm_health.link_reason(node, rate, median, fraction)}
                     for node, rate in slow]}


def slurm_held(sinfo_lines, nodes):
    """[{node, state, reason}] for the nodes Slurm holds out of a job (drained, down, not listed)."""
    return [{"node": node, "state": state, "reason": reason}
            for node, state, reason in slurm_health.held(list(sinfo_lines), list(nodes))]


def slurm_held_words(held):
    """'node3 (drained: cntk-health: data: ...)' from a slurm_held entry."""
    return f"{held['node']} ({held['state']}" + (f": {held['reason']}" if held["reason"] else "") + ")"


class FilterModule:
    def filters(self):
        return {"slurm_hostlist": slurm_hostlist,
                "slurm_node_lines": slurm_node_lines, "slurm_release": slurm_release,
                "slurm_release_problems": slurm_release_problems,
                "slurm_cluster": slurm_cluster, "slurm_not_ready": slurm_not_ready,
                "slurm_slow_links": slurm_slow_links, "slurm_held": slurm_held,
                "slurm_held_words": slurm_held_words}
