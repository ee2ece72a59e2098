#!/usr/bin/python
"""One step of the fabric check: listen on this node's fabric address, reach every node's, or stop listening."""

DOCUMENTATION = r"""
module: fabric_check
short_description: Check the training nodes reach each other over the fabric, in seconds
description:
  - Three steps, each run on every node (roles/firewall/tasks/fabric_check.yml,
    plugins/module_utils/fabric_check.py). C(listen) (run in the background, async) accepts connections on
    I(address):I(port) until told to stop or I(lifetime) seconds pass. C(reach) connects to I(port) on every
    node in I(targets) (this node included, which proves its own listener is up), retrying until I(timeout)
    seconds have passed, and returns those it could not reach. C(stop) ends this node's listener.
  - A blocked pair shows as an error within I(timeout) seconds, where mpirun would hang. C(reach) also returns
    Yama's ptrace_scope and the memlock limit as this process sees them.
  - Changes nothing. Supports check mode.
options:
  step: {description: listen, reach or stop., type: str, required: true, choices: [listen, reach, stop]}
  name: {description: This node's name (inventory_hostname)., type: str, required: true}
  address: {description: This node's fabric address (cluster_address)., type: str, required: true}
  port: {description: The TCP port., type: int, required: true}
  targets: {description: "reach: every node, name -> fabric address.", type: dict, default: {}}
  timeout: {description: "reach: seconds for the whole step, once this node's own listener answered.",
    type: float, default: 10}
  start_timeout: {description: "reach: seconds to wait first for this node's own listener to start (0: no wait).",
    type: float, default: 0}
  lifetime: {description: "listen: seconds at most.", type: float, default: 120}
"""

RETURN = r"""
blocked: {description: "reach: nodes not reached, name -> error.", type: dict, returned: success}
seconds: {description: "reach: how long the connecting took on this node (at most timeout, and a little).",
  type: float, returned: success}
listener_start_seconds: {description: "reach: how long this node waited first for its own listener to answer.",
  type: float, returned: success}
heard_from: {description: "listen: the nodes that reached this one.", type: list, returned: success}
kernel: {description: "reach: this process's view of what Open MPI relies on: ptrace_scope (null without Yama),
  memlock ('unlimited' or bytes), and both in words (described).", type: dict, returned: success}
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.cntk.cluster.plugins.module_utils import fabric_check, mpi_kernel


def main():
    module = AnsibleModule(argument_spec={
        "step": {"type": "str", "required": True, "choices": ["listen", "reach", "stop"]},
        "name": {"type": "str", "required": True},
        "address": {"type": "str", "required": True},
        "port": {"type": "int", "required": True},
        "targets": {"type": "dict", "default": {}},
        "timeout": {"type": "float", "default": 10.0},
        "lifetime": {"type": "float", "default": 120.0},
        "start_timeout": {"type": "float", "default": 0.0},
    }, supports_check_mode=True)
    params = module.params
    if params["step"] == "listen":
        try:
            heard = fabric_check.listen(params["address"], params["port"], params["lifetime"])
        except OSError as error:
            module.fail_json(msg="{0}: {1}".format(params["name"], error))
        module.exit_json(changed=False, heard_from=heard)
    if params["step"] == "stop":
        module.exit_json(changed=False, stopped=fabric_check.stop(params["address"], params["port"]))
    targets = dict(params["targets"])
    started = time.time()
    blocked = {}
    if params["start_timeout"] > 0 and params["name"] in targets:
        error = fabric_check.own_listener_up(params["name"], targets[params["name"]], params["port"],
                                             params["start_timeout"])
        if error:
            blocked = {params["name"]: error}
    waited = round(time.time() - started, 2)
    started = time.time()
    if not blocked:
        blocked = fabric_check.reach(params["name"], targets, params["port"], params["timeout"])
    seconds = round(time.time() - started, 2)
    kernel = mpi_kernel.read()
    kernel["described"] = mpi_kernel.describe(params["name"], kernel)
    module.exit_json(changed=False, blocked=blocked, kernel=kernel, seconds=seconds, listener_start_seconds=waited)


if __name__ == "__main__":
    main()
