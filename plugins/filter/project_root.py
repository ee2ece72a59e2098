"""The controller's project folder (plugins/module_utils/project_root.py)."""

from ansible_collections.cntk.cluster.plugins.module_utils import project_root


def project_root_problems(root, cluster_name=""):
    return project_root.problems(root, str(cluster_name or ""))


class FilterModule:
    def filters(self):
        return {"project_root_problems": project_root_problems}
