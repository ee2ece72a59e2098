"""Kernel settings Open MPI relies on (plugins/module_utils/mpi_kernel.py)."""

import resource

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import mpi_kernel


def test_read_reports_yama_and_this_process_memlock(tmp_path):
    yama = tmp_path / "ptrace_scope"
    yama.write_text("1\n")
    settings = mpi_kernel.read(str(yama))
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    assert settings == {"ptrace_scope": 1,
                        "memlock": "unlimited" if soft == resource.RLIM_INFINITY else soft}


def test_no_yama_reads_as_none(tmp_path):
    assert mpi_kernel.read(str(tmp_path / "absent"))["ptrace_scope"] is None


@pytest.mark.parametrize("scope, expected", [(None, ""), (0, ""), (1, "none"), (2, "none"), (3, "none")])
def test_single_copy_is_turned_off_only_where_yama_forbids_it(scope, expected):
    assert mpi_kernel.single_copy(scope) == expected


def test_describe_says_what_mpi_gets():
    assert mpi_kernel.describe("node1", {"ptrace_scope": 1, "memlock": "unlimited"}) == \
        "node1: ptrace_scope 1 (Open MPI's single copy off), memlock unlimited"
    assert mpi_kernel.describe("node2", {"ptrace_scope": None, "memlock": 8388608}) == \
        "node2: no Yama, memlock 8192 KiB"
    assert mpi_kernel.describe("node3", {"ptrace_scope": 0, "memlock": "unlimited"}) == \
        "node3: ptrace_scope 0, memlock unlimited"
