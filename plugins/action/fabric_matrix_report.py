"""Write the fabric check's page on the controller from the probe's report fetched there
(plugins/module_utils/fabric_report.py renders it; fabric_matrix.py checks and judges the figures)."""

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.cntk.cluster.plugins.module_utils import fabric_report

ARGUMENT_SPEC = {
    "run_dir": {"type": "path", "required": True},
    "nodes": {"type": "list", "elements": "str", "required": True},
    "slots": {"type": "list", "elements": "int", "required": True},
    "cluster": {"type": "str", "required": True},
    "run_id": {"type": "str", "required": True},
    "interface": {"type": "str", "required": True},
    "pair_fraction": {"type": "float", "required": True},
    "tcp_fraction": {"type": "float", "required": True},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        for name in ("pair_fraction", "tcp_fraction"):
            if not 0 < args[name] < 1:
                raise AnsibleActionFail(f"fabric_matrix_{name}={args[name]}: give a fraction between 0 and 1 "
                                        "(0.25: a pair under a quarter of the reference is named)")
        if not os.path.isfile(os.path.join(args["run_dir"], fabric_report.PROBE_FILE)):
            raise AnsibleActionFail(f"{args['run_dir']} holds no {fabric_report.PROBE_FILE}: the probe's report "
                                    "did not come back from the head node")
        about = {key: args[key] for key in ("cluster", "run_id", "interface")}
        try:
            path, lines = fabric_report.report(args["run_dir"], args["nodes"], args["slots"], about,
                                               args["pair_fraction"], args["tcp_fraction"])
        except ValueError as error:
            raise AnsibleActionFail(f"The fabric probe's report from the head node cannot be used: {error}. "
                                    f"It is kept in {args['run_dir']}.")
        result.update(changed=True, page=path, lines=lines)
        return result
