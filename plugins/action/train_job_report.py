"""Write a fetched run's plot and report page on the controller
(plugins/module_utils/job_report.py renders them)."""

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.cntk.cluster.plugins.module_utils import job_report

ARGUMENT_SPEC = {"run_dir": {"type": "path", "required": True}}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        run_dir = args["run_dir"]
        if not os.path.isdir(run_dir):
            raise AnsibleActionFail(f"the run folder {run_dir} is not a folder on the controller; "
                                    "the collect step writes the report into the run it fetched")
        path = job_report.report(run_dir)
        plot = os.path.join(os.path.dirname(path), job_report.PLOT_FILE)
        result.update(changed=True, report=path, plot=plot if os.path.isfile(plot) else None)
        return result
