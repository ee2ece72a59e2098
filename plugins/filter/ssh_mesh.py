"""known_hosts lines and authorized_keys options for the cluster's SSH mesh.

Host keys come from each node's own facts, gathered over Ansible's already
verified connection (as ElastiCluster does), never from a scan.
"""

import re

from ansible.errors import AnsibleFilterError

KEY_TYPES = ("ed25519", "ecdsa", "rsa")
# What a node may put into every node's ssh_known_hosts. A node's facts are
# its own word: a '*' hostname or a newline in a key would give a wildcard or
# an @cert-authority line that every node then trusts.
HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._:-]*[A-Za-z0-9])?")
ALGORITHMS = {"ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa"}
KEY_BLOB = re.compile(r"[A-Za-z0-9+/]{4,}={0,3}")


def _checked_name(node, what, value):
    if not isinstance(value, str) or not HOST_NAME.fullmatch(value):
        raise AnsibleFilterError(
            f"{node}: {what} {value!r} is not a host name or address (letters, digits, '.', '-', '_', ':'): "
            "it would become a pattern in every node's ssh_known_hosts. Fix the inventory, or the node's "
            "hostname; nothing was changed")
    return value


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
        names = [_checked_name(node, "the inventory name", node)]
        if facts.get("hostname"):
            names.append(_checked_name(node, "the hostname fact", facts["hostname"]))
        names.append(_checked_name(node, "cluster_address", str(hv.get("cluster_address", hv.get("ansible_host", node)))))
        patterns = ",".join(_host_patterns(names, port))
        found = False
        for key_type in KEY_TYPES:
            key = facts.get(f"ssh_host_key_{key_type}_public")
            algorithm = facts.get(f"ssh_host_key_{key_type}_public_keytype")
            if key and algorithm:
                if algorithm not in ALGORITHMS or not isinstance(key, str) or not KEY_BLOB.fullmatch(key):
                    raise AnsibleFilterError(
                        f"{node}: its {key_type} host key fact is not a public key ({algorithm!r} "
                        f"{str(key)[:40]!r}): it would become a line of every node's ssh_known_hosts. Check "
                        "the node's /etc/ssh/ssh_host_*_key.pub; nothing was changed")
                lines.append(f"{patterns} {algorithm} {key}")
                found = True
        if not found:
            raise AnsibleFilterError(
                f"no SSH host key facts for {node}: gather facts from it (gather_subset: min) "
                "in the same play, and check that its sshd has host keys in /etc/ssh"
            )
    return lines


def ssh_from_option(nodes, hostvars):
    """The authorized_keys options: no forwarding, pty or rc (restrict), and
    only from the cluster's addresses."""
    addresses = []
    for node in nodes:
        hv = hostvars[node]
        address = _checked_name(node, "cluster_address", str(hv.get("cluster_address", hv.get("ansible_host", node))))
        if address not in addresses:
            addresses.append(address)
    return 'restrict,from="{}"'.format(",".join(addresses))


class FilterModule:
    def filters(self):
        return {
            "ssh_known_hosts_lines": ssh_known_hosts_lines,
            "ssh_from_option": ssh_from_option,
        }
