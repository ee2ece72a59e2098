#!/usr/bin/python
"""Reach every other training node's fabric address on a TCP port, listening on this node's meanwhile."""

DOCUMENTATION = r"""
module: fabric_check
short_description: Check this node and its peers reach each other over the fabric, in seconds
description:
  - Listens on I(address):I(port) and connects to I(port) on every peer's address, retrying until I(timeout)
    seconds have passed; each connection carries the connecting node's name. Run it on every node at once (one
    task): each node both answers its peers and reaches them (plugins/module_utils/fabric_check.py).
  - A blocked pair shows as an error within I(timeout) seconds, where mpirun would hang.
  - Changes nothing. Supports check mode.
options:
  name: {description: This node's name (inventory_hostname)., type: str, required: true}
  address: {description: This node's fabric address (cluster_address)., type: str, required: true}
  peers: {description: The other nodes, name -> fabric address., type: dict, required: true}
  port: {description: The TCP port to listen on and connect to., type: int, required: true}
  timeout: {description: Seconds for the whole check., type: float, default: 10}
"""

RETURN = r"""
blocked: {description: Peers not reached, name -> error., type: dict, returned: success}
heard_from: {description: Peers that reached this node., type: list, returned: success}
kernel: {description: "This process's view of what Open MPI relies on: ptrace_scope (null without Yama) and
  memlock ('unlimited' or bytes), and the same in words (described).", type: dict, returned: success}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.cntk.cluster.plugins.module_utils import fabric_check, mpi_kernel


def main():
    module = AnsibleModule(argument_spec={
        "name": {"type": "str", "required": True},
        "address": {"type": "str", "required": True},
        "peers": {"type": "dict", "required": True},
        "port": {"type": "int", "required": True},
        "timeout": {"type": "float", "default": 10.0},
    }, supports_check_mode=True)
    params = module.params
    try:
        report = fabric_check.probe(params["name"], params["address"], dict(params["peers"]), params["port"],
                                    params["timeout"])
    except OSError as error:
        module.fail_json(msg="{0}: {1}".format(params["name"], error))
    kernel = mpi_kernel.read()
    kernel["described"] = mpi_kernel.describe(params["name"], kernel)
    module.exit_json(changed=False, kernel=kernel, **report)


if __name__ == "__main__":
    main()
