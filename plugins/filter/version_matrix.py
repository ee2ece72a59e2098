"""The version matrix's filters: the resolver is plugins/module_utils/version_matrix.py."""

from ansible_collections.cntk.cluster.plugins.module_utils.version_matrix import cntk_stack, cntk_stack_problem
from ansible_collections.cntk.cluster.plugins.module_utils.version_matrix_listings import (
    cntk_artifacts, cntk_matrix_rows)


class FilterModule:
    def filters(self):
        return {
            "cntk_stack": cntk_stack,
            "cntk_stack_problem": cntk_stack_problem,
            "cntk_artifacts": cntk_artifacts,
        }
