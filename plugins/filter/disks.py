"""The disks role's decision per device (plugins/module_utils/disk_plan.py) from its probes."""

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.module_utils import disk_plan


def disk_plan_for(wanted, lsblk, blkid, entries, host):
    """{'action', 'message', 'mounted'}, the message starting with the host's name. lsblk, blkid, entries: the
    registered probe results for this device (command results; entries: find's stdout lines)."""
    if lsblk.get("rc") not in (0, None):
        lsblk_json = {"blockdevices": []}
    else:
        lsblk_json = lsblk.get("stdout") or '{"blockdevices": []}'
    try:
        decided = disk_plan.plan(lsblk_json, blkid.get("stdout", ""), wanted,
                                 [line.rsplit("/", 1)[-1] for line in entries.get("stdout_lines", []) if line])
    except (ValueError, KeyError) as error:
        raise AnsibleFilterError("{0}: {1}: {2}".format(host, wanted.get("device"), error))
    decided = dict(decided)
    decided["message"] = "{0}: {1}".format(host, decided["message"])
    return decided


class FilterModule:
    def filters(self):
        return {"disk_plan": disk_plan_for}
