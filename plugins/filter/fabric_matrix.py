"""The fabric check's launch (playbooks/fabric.yml, roles/fabric_matrix): ranks per node, addresses, the
hostfile and mpirun's argv for the probe."""

from ansible.errors import AnsibleFilterError


def fabric_matrix_launch(slots):
    """Ranks launched on a node: its job's slots, and two at least (inside-the-node figures need a pair)."""
    return max(2, int(slots))


def fabric_matrix_addresses(nodes, hostvars):
    """Each node's fabric address, as the fabric check takes it: cluster_address, else ansible_host, else its name."""
    return [str(hostvars[node].get("cluster_address") or hostvars[node].get("ansible_host") or node)
            for node in nodes]


def fabric_matrix_hostfile(nodes, launched):
    """The probe's hostfile: 'node slots=N' a line, in the inventory's order (mpirun --map-by slot)."""
    if len(nodes) != len(launched):
        raise AnsibleFilterError("fabric_matrix_hostfile: as many nodes as rank counts are needed")
    return "".join(f"{node} slots={int(count)}\n" for node, count in zip(nodes, launched))


def fabric_matrix_probe_argv(spec):
    """mpirun's argv for the probe, under coreutils' timeout. spec: mpirun, hostfile, nodes, launched, slots,
    interface, python, probe, addresses, iperf ('' for none), port, iperf_seconds, max_bytes, budget, out,
    timeout, and export (environment variables mpirun passes on: -x)."""
    nodes = [str(node) for node in spec["nodes"]]
    for node in nodes:
        if "," in node or not node:
            raise AnsibleFilterError(f"fabric_matrix: the node name {node!r} cannot go in the probe's --nodes")
    argv = ["timeout", "--kill-after=10", str(int(spec["timeout"])), spec["mpirun"],
            "--hostfile", spec["hostfile"], "-np", str(sum(int(n) for n in spec["launched"])),
            "--map-by", "slot", "--bind-to", "none",
            "--mca", "btl_tcp_if_include", spec["interface"], "--mca", "oob_tcp_if_include", spec["interface"]]
    for name in spec.get("export") or []:
        argv += ["-x", str(name)]
    argv += [spec["python"], spec["probe"], "--nodes", ",".join(nodes),
             "--launched", ",".join(str(int(n)) for n in spec["launched"]),
             "--slots", ",".join(str(int(n)) for n in spec["slots"]),
             "--max-bytes", str(int(spec["max_bytes"])), "--budget", str(spec["budget"]), "--out", spec["out"]]
    if spec.get("iperf"):
        argv += ["--addresses", ",".join(str(a) for a in spec["addresses"]), "--iperf", spec["iperf"],
                 "--port", str(int(spec["port"])), "--iperf-seconds", str(int(spec["iperf_seconds"]))]
    return argv


class FilterModule:
    def filters(self):
        return {"fabric_matrix_launch": fabric_matrix_launch, "fabric_matrix_addresses": fabric_matrix_addresses,
                "fabric_matrix_hostfile": fabric_matrix_hostfile, "fabric_matrix_probe_argv": fabric_matrix_probe_argv}
