"""slurm.conf from the inventory and the nodes' reports (plugins/module_utils/slurm_conf.py)."""

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.module_utils import slurm_conf


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
    the proctrack/task/cgroup choice, nodes: [{name, hardware, gpus}]}; None while a node has no slurmd report
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
    return {"plugins": plugins, "nodes": nodes, "kinds": dict(zip(hosts, kinds))}


def slurm_release(apt_policy):
    """The release a node runs, else the one apt would install ('' when neither)."""
    installed, candidate = slurm_conf.release(apt_policy)
    return installed or candidate


def slurm_release_problems(releases, minimum=slurm_conf.MIN_RELEASE):
    return slurm_conf.release_problems(dict(releases), minimum)




def slurm_not_ready(sinfo_lines, hosts):
    return slurm_conf.not_ready(list(sinfo_lines), list(hosts))


class FilterModule:
    def filters(self):
        return {"slurm_hostlist": slurm_hostlist, "slurm_hardware": slurm_hardware,
                "slurm_node_lines": slurm_node_lines, "slurm_release": slurm_release,
                "slurm_release_problems": slurm_release_problems,
                "slurm_cluster": slurm_cluster, "slurm_not_ready": slurm_not_ready}
