"""known_hosts lines and authorized_keys options for the cluster's SSH mesh.

Host keys come from each node's own facts, gathered over Ansible's already
verified connection (as ElastiCluster does), never from a scan.
"""

from ansible.errors import AnsibleFilterError

KEY_TYPES = ("ed25519", "ecdsa", "rsa")


def _host_patterns(names, port):
    unique = []
    for name in names:
        if name and name not in unique:
            unique.append(name)
    if int(port) == 22:
        return unique
    return [f"[{name}]:{port}" for name in unique]


def ssh_known_hosts_lines(nodes, hostvars, port=22):
    """One line per node and host-key type: 'name,address keytype key'."""
    lines = []
    for node in nodes:
        hv = hostvars[node]
        facts = hv.get("ansible_facts", {}) or {}
        names = [node, facts.get("hostname"), hv.get("cluster_address", hv.get("ansible_host"))]
        patterns = ",".join(_host_patterns(names, port))
        found = False
        for key_type in KEY_TYPES:
            key = facts.get(f"ssh_host_key_{key_type}_public")
            algorithm = facts.get(f"ssh_host_key_{key_type}_public_keytype")
            if key and algorithm:
                lines.append(f"{patterns} {algorithm} {key}")
                found = True
        if not found:
            raise AnsibleFilterError(
                f"no SSH host key facts for {node}: gather facts from it (gather_subset: min) "
                "in the same play, and check that its sshd has host keys in /etc/ssh"
            )
    return lines


def ssh_from_option(nodes, hostvars):
    """The authorized_keys option that admits only the cluster's addresses."""
    addresses = []
    for node in nodes:
        hv = hostvars[node]
        address = str(hv.get("cluster_address", hv.get("ansible_host", node)))
        if address not in addresses:
            addresses.append(address)
    return 'from="{}"'.format(",".join(addresses))


class FilterModule:
    def filters(self):
        return {
            "ssh_known_hosts_lines": ssh_known_hosts_lines,
            "ssh_from_option": ssh_from_option,
        }
