"""The version matrix's filters (plugins/filter/version_matrix.py): registered, and given the
matrix file's path instead of its data. The resolver, the matrix and the listings behind them are
tested in tests/unit/plugins/module_utils/test_version_matrix*.py."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.filter import version_matrix as vm
from version_matrix_helpers import MATRIX_PATH, load_matrix


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def test_the_filters_are_registered():
    filters = vm.FilterModule().filters()
    assert {"cntk_stack", "cntk_artifacts"} <= set(filters)


def test_the_filters_read_the_matrix_file_given_its_path(matrix):
    path = str(MATRIX_PATH)
    request = {"cntk_version": "2.7", "device": "cpu"}
    assert vm.cntk_stack(path, request) == vm.cntk_stack(matrix, request)
    unknown = {"cntk_version": "9.9"}
    assert vm.cntk_stack_problem(path, unknown) == vm.cntk_stack_problem(matrix, unknown)
    with pytest.raises(AnsibleFilterError, match="cannot read the version matrix /nonexistent"):
        vm.cntk_stack("/nonexistent", request)
