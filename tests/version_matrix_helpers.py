"""What the version matrix's tests share (tests/unit/plugins/module_utils/test_version_matrix*.py,
tests/unit/plugins/filter/test_version_matrix.py): the matrix and its README, two OS facts, and
cntk_stack called the way the roles call it, accepted or rejected."""

import re
from pathlib import Path

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.module_utils.version_matrix import cntk_stack

ROOT = Path(__file__).resolve().parents[1]
MATRIX_PATH = ROOT / "matrix" / "cntk.yml"
README_PATH = ROOT / "matrix" / "README.md"
HEX64 = re.compile(r"^[0-9a-f]{64}$")
UBUNTU_1604 = {"distribution": "Ubuntu", "version": "16.04"}
DEBIAN_12 = {"distribution": "Debian", "version": "12"}


def load_matrix():
    with MATRIX_PATH.open() as handle:
        return yaml.safe_load(handle)


def stack(matrix, **request):
    return cntk_stack(matrix, request)


def rejection(matrix, **request):
    with pytest.raises(AnsibleFilterError) as info:
        cntk_stack(matrix, request)
    return str(info.value)
