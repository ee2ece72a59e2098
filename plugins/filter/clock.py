"""Preflight's clock check over every node's reading (plugins/module_utils/clock_offset.py)."""

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.module_utils import clock_offset


def clock_problems(hosts, hostvars, register, bound, fix):
    """{host: message or ''} from each host's registered cntk.cluster.clock_reading result (register: its name)."""
    readings = {}
    for host in hosts:
        value = hostvars[host].get(register) or {}
        if "offset" in value:
            readings[host] = value
    try:
        return clock_offset.problems(readings, float(bound), fix)
    except ValueError as error:
        raise AnsibleFilterError(str(error))


class FilterModule:
    def filters(self):
        return {"clock_problems": clock_problems}
