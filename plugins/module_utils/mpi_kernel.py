"""The kernel settings Open MPI relies on, as the process reading them sees them: Yama's ptrace_scope (single-copy
shared memory, CMA, needs ptrace rights between a node's ranks) and the locked-memory limit (RDMA and pinned
buffers). Stdlib only, valid Python 3.6 (it runs on the nodes); tested in
tests/unit/plugins/module_utils/test_mpi_kernel.py."""

import resource

YAMA = "/proc/sys/kernel/yama/ptrace_scope"


def read(yama_path=YAMA):
    """{'ptrace_scope': int, or None without Yama, 'memlock': 'unlimited' or the soft limit in bytes}."""
    try:
        with open(yama_path) as handle:
            scope = int(handle.read().strip())
    except (OSError, ValueError):
        scope = None
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return {"ptrace_scope": scope, "memlock": "unlimited" if soft == resource.RLIM_INFINITY else soft}


def single_copy(ptrace_scope):
    """Open MPI's btl_vader_single_copy_mechanism for a node: 'none' where Yama stops a rank reading its sibling's
    memory (ptrace_scope 1 or more), else '' (Open MPI's own choice, CMA)."""
    return "none" if ptrace_scope not in (None, 0) else ""


def describe(host, settings):
    """'node1: ptrace_scope 1 (single copy off), memlock unlimited'."""
    scope = settings.get("ptrace_scope")
    if scope is None:
        yama = "no Yama"
    else:
        yama = "ptrace_scope {0}{1}".format(scope, " (Open MPI's single copy off)" if single_copy(scope) else "")
    memlock = settings.get("memlock")
    if memlock != "unlimited":
        memlock = "{0} KiB".format(int(memlock) // 1024)
    return "{0}: {1}, memlock {2}".format(host, yama, memlock)
