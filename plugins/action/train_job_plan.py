"""Plan a run of the train step on the controller: the run's id, fingerprint
and per-part digests, the records of the job's last success and latest run,
whether the job must run, whether it continues the latest run's checkpoint,
and the launcher that starts it (plugins/module_utils/train_plan.py decides);
rank_data, what each rank reads wherever it lives, goes into the run's record
so that a run with its ranks on other nodes can continue it.

The records are the controller's own (artifacts/<cluster>/<job>/): a file the
training user owns on a node never decides whether a run is skipped."""

import datetime
import json
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.cntk.cluster.plugins.module_utils import job_files, train_plan

ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "parts": {"type": "dict", "required": True},
    "artifacts_dir": {"type": "path", "required": True},
    "source": {"type": "str", "required": True},
    "owner": {"type": "str", "required": True},
    "force": {"type": "bool", "default": False},
    "resume": {"type": "bool", "default": True},
    "fresh": {"type": "bool", "default": False},
    "scheduler": {"type": "str", "default": "none"},
}
LAST_SUCCESS = "last_success.json"


def _record(path):
    """A JSON object from the controller's records; {} when there is none yet."""
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise AnsibleActionFail(f"the run record {path} cannot be read ({error}); move it aside to start afresh")
    return record if isinstance(record, dict) else {}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        parts = args["parts"]
        try:
            fingerprint = train_plan.fingerprint(parts)
            launcher = train_plan.launcher(parts.get("platform"), args["scheduler"])
        except ValueError as error:
            raise AnsibleActionFail(f"train_job_plan: {error}")
        digests = train_plan.part_digests(parts)
        rank_data = train_plan.rank_data(parts.get("data") or [])
        base = args["artifacts_dir"]
        last_success = _record(os.path.join(base, LAST_SUCCESS))
        latest = _record(os.path.join(base, "latest", job_files.JOB))
        report = os.path.join(base, str(last_success.get("run_id", "none")), job_files.REPORT)
        plan = train_plan.decide({
            "name": args["name"], "force": args["force"], "resume": args["resume"], "fresh": args["fresh"],
            "fingerprint": fingerprint, "parts": digests, "rank_data": rank_data,
            "source": args["source"], "owner": args["owner"],
            "last_success": last_success, "latest": latest, "report_exists": os.path.isfile(report)})
        run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        result.update(plan, changed=False, run_id=run_id, fingerprint=fingerprint, parts=digests,
                      rank_data=rank_data, latest=latest, launcher=launcher)
        return result
