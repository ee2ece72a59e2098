"""Read a node's clock against the controller's: the controller's time before and after `date +%s.%N` runs on
the node bounds when the node read its clock, so the offset comes with its uncertainty (half the round trip).

    - cntk.cluster.clock_reading:
      register: reading       # {offset, uncertainty, node_time, round_trip}

Changes nothing; the arithmetic is plugins/module_utils/clock_offset.py's.
"""

import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.cntk.cluster.plugins.module_utils import clock_offset


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        sent = time.time()
        answer = self._execute_module(module_name="ansible.legacy.command",
                                      module_args={"argv": ["date", "+%s.%N"]}, task_vars=task_vars)
        received = time.time()
        if answer.get("failed") or answer.get("rc"):
            raise AnsibleActionFail("could not read the node's clock: {0}".format(
                answer.get("msg") or answer.get("stderr") or answer))
        try:
            node_time = clock_offset.parse_node_time(answer.get("stdout", ""))
            offset, uncertainty = clock_offset.reading(sent, node_time, received)
        except ValueError as error:
            raise AnsibleActionFail(str(error))
        result.update(changed=False, offset=round(offset, 3), uncertainty=round(uncertainty, 3),
                      node_time=node_time, round_trip=round(received - sent, 3))
        return result
