"""Which nodes are Windows, and whether the inventory mixes platforms.

A job runs either on Linux nodes with Open MPI or on Windows nodes with
MS-MPI, never on both: the two MPI implementations do not talk to each other,
and the Linux plays (apt, sshd, mpirun) cannot provision a Windows node. This
is decided on the controller from inventory data alone, before any node is
contacted. A node is Windows when any of these holds:

- it is in the inventory group `windows`;
- `ansible_os_family` is `Windows` (set in the inventory, or a fact cached
  from an earlier run);
- `ansible_shell_type` is `powershell` or `cmd` (OpenSSH for Windows);
- `ansible_connection` is `winrm` or `psrp`.

Filters:

    hostvars[host] | cluster_host_is_windows(group_names)  -> bool
    hostvars | cluster_windows_hosts(groups, hosts)         -> [names]
    hostvars | cluster_platform_problem(groups)             -> '' or why the mix is refused
    hostvars | cluster_platform(groups)                     -> 'linux' | 'windows' | 'none'

Pure Python, unit-tested in tests/unit/plugins/filter/test_cluster_platform.py.
"""

from collections.abc import Mapping

WINDOWS_GROUP = "windows"
WINDOWS_SHELLS = ("powershell", "cmd")
WINDOWS_CONNECTIONS = ("winrm", "psrp")
# Hosts Ansible adds on its own; never cluster nodes.
IGNORED_HOSTS = ("localhost", "127.0.0.1")


def _text(value):
    return str(value).strip().lower() if value is not None else ""


def _connection_name(value):
    """'ansible.builtin.psrp' and 'psrp' are the same plugin."""
    return _text(value).rsplit(".", 1)[-1]


def cluster_host_is_windows(host_vars, group_names=None):
    """True when one host's inventory variables (or its groups) say it runs Windows."""
    host_vars = host_vars if isinstance(host_vars, Mapping) else {}
    groups_of_host = group_names if group_names is not None else host_vars.get("group_names", [])
    if WINDOWS_GROUP in (groups_of_host or []):
        return True
    if _text(host_vars.get("ansible_os_family")) == "windows":
        return True
    facts = host_vars.get("ansible_facts")
    if isinstance(facts, Mapping) and _text(facts.get("os_family")) == "windows":
        return True
    if _text(host_vars.get("ansible_shell_type")) in WINDOWS_SHELLS:
        return True
    return _connection_name(host_vars.get("ansible_connection")) in WINDOWS_CONNECTIONS


def _in_groups(host, groups):
    return [name for name, members in groups.items() if host in (members or [])]


def cluster_windows_hosts(hostvars, groups, hosts=None):
    """The Windows hosts among `hosts` (default: the `cluster` group), in inventory order."""
    if hosts is None:
        hosts = groups.get("cluster", [])
    return [host for host in hosts
            if cluster_host_is_windows(hostvars.get(host, {}), _in_groups(host, groups))]


def _split(hostvars, groups):
    nodes = [host for host in groups.get("cluster", []) if host not in IGNORED_HOSTS]
    # A host listed only under `windows` is a node too: it must not escape the check.
    for host in groups.get(WINDOWS_GROUP, []):
        if host not in nodes and host not in IGNORED_HOSTS:
            nodes.append(host)
    windows = cluster_windows_hosts(hostvars, groups, nodes)
    linux = [host for host in nodes if host not in windows]
    return linux, windows


def _names(hosts, limit=8):
    shown = ", ".join(hosts[:limit])
    if len(hosts) > limit:
        shown += f" and {len(hosts) - limit} more"
    return shown


def cluster_platform(hostvars, groups):
    """'linux', 'windows', 'mixed' or 'none' (no nodes)."""
    linux, windows = _split(hostvars, groups)
    if linux and windows:
        return "mixed"
    if windows:
        return "windows"
    return "linux" if linux else "none"


def cluster_platform_problem(hostvars, groups):
    """'' when every node runs the same platform, else a message naming both sides and the fix."""
    linux, windows = _split(hostvars, groups)
    if not (linux and windows):
        outside = [host for host in windows if host not in groups.get("cluster", [])]
        if outside:
            return (f"{_names(outside)} {'is' if len(outside) == 1 else 'are'} in the `windows` group but not "
                    "in `cluster`: put Windows training nodes under cluster -> training as well "
                    "(see inventory/example/hosts.yml and docs/windows.md)")
        return ""
    return (
        f"this inventory mixes Linux nodes ({_names(linux)}) and Windows nodes ({_names(windows)}). "
        "A job runs either on Linux nodes with Open MPI or on Windows nodes with MS-MPI, never on both: "
        "the two MPI implementations cannot join one job. Put the Windows nodes in an inventory of their own "
        "(their own `cluster` and `training` groups, plus the `windows` group; see inventory/example and "
        "docs/windows.md) and run each inventory separately. A node counts as Windows when it is in the "
        "`windows` group or its ansible_os_family is Windows, ansible_shell_type is powershell/cmd or "
        "ansible_connection is winrm/psrp."
    )


class FilterModule:
    def filters(self):
        return {
            "cluster_platform_problem": cluster_platform_problem,
        }
