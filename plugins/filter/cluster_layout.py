"""Where ranks run and how the controller reaches a node, derived from the inventory.

Ranks are placed the way mpirun places them with a hostfile and
`--map-by slot`: the first training node takes ranks 0..slots-1, the next
the following ones, and so on. The data step sends each node the shards of
exactly those ranks, so both must use this one function.
"""

import shlex

from ansible.errors import AnsibleFilterError


def cluster_rank_layout(training_hosts, hostvars):
    """[{'host': 'node1', 'slots': 2, 'ranks': [0, 1]}, ...] in hostfile order."""
    layout, next_rank = [], 0
    for host in training_hosts:
        try:
            slots = int(hostvars[host]["cluster_slots"])
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleFilterError(f"{host}: cluster_slots is missing or not an integer ({exc})") from exc
        layout.append({"host": host, "slots": slots, "ranks": list(range(next_rank, next_rank + slots))})
        next_rank += slots
    return layout


def cluster_ranks_of(layout, host):
    """The ranks that run on one host (empty when it runs none)."""
    for entry in layout:
        if entry["host"] == host:
            return entry["ranks"]
    return []


def ssh_command_for(hostvars_of_host):
    """The ssh command (for rsync -e) that reaches a node as Ansible does:
    same user, port, key and options, host keys checked strictly."""
    hv = hostvars_of_host
    cmd = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
           "-p", str(hv.get("ansible_port", 22))]
    key = hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file")
    if key:
        cmd += ["-i", str(key)]
    for name in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if hv.get(name):
            cmd += shlex.split(str(hv[name]))
    return " ".join(shlex.quote(part) for part in cmd)


def rsync_remote_for(hostvars_of_host):
    """user@host where the controller's rsync reaches a node: its cluster_data_host when set (the node's
    address on a data network the controller is on too), else ansible_host, as Ansible connects."""
    hv = hostvars_of_host
    host = hv.get("cluster_data_host") or hv.get("ansible_host") or hv.get("inventory_hostname")
    return f"{hv.get('ansible_user') or 'root'}@{host}"


def rsync_path_for(hostvars_of_host, user):
    """rsync's --rsync-path that runs the node's end as `user`: runuser when Ansible logs in as root,
    sudo otherwise (root never reads or writes the user's folders for it)."""
    switch = "runuser -u" if hostvars_of_host.get("ansible_user", "root") == "root" else "sudo -u"
    return f"{switch} {shlex.quote(str(user))} -- rsync"


class FilterModule:
    def filters(self):
        return {
            "cluster_rank_layout": cluster_rank_layout,
            "cluster_ranks_of": cluster_ranks_of,
            "ssh_command_for": ssh_command_for,
            "rsync_path_for": rsync_path_for,
            "rsync_remote_for": rsync_remote_for,
        }
