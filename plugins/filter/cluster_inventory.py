"""Inventory checks that YAML expresses badly: the cluster as a whole.

`cluster_inventory_problems(hostvars, groups)` returns one message per
problem, each naming the host, the value and the fix; an empty list means the
inventory is sound. It reads the inventory only and changes nothing. Values
one run uses for every node are checked on the first node and must be the
same on every other (a per-host override is refused, naming the hosts).

`ansible_facts | mpi_interface_problem(interface, address, host)` checks one
node's facts: cluster_mpi_interface must be one of its interfaces and hold
its cluster_address (else MPI would leave by another network than the one
the nodes' names resolve to); '' when sound.
"""

import ipaddress
import re

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
IGNORED_HOSTS = {"localhost", "127.0.0.1"}
# Names that become a folder on the nodes and on the controller, a shell word
# in run.sh or a line of the hostfile: one path component, no '..', no
# whitespace or newline.
PATH_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
# A Linux interface name (IFNAMSIZ 16, NUL included); it becomes a word of
# mpirun's command line and a line of system files.
INTERFACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,14}$")
FOLDER_RE = re.compile(r"^(/[A-Za-z0-9._+-]+)+$")
# Values one run uses for every node (one MPI job, one user, one set of
# folders): a per-host override would be checked on one node and used on
# another. The secret environment's values are never shown. The MPI
# interface is checked on every node instead (its form here, its facts later).
CLUSTER_WIDE = ("cluster_name", "cluster_training_user", "cluster_training_uid",
                "cluster_openmpi_standin", "cluster_mpi_method", "cluster_dataset_name", "cluster_data_dir",
                "cluster_jobs_dir", "cluster_dataset_shared_dir", "train_job_name", "train_job_source",
                "train_job_entry", "train_job_args", "train_job_env", "train_job_secret_env")
SECRET = ("train_job_secret_env",)
MISSING = object()
# More ranks than this on one node is a typo, not a node (mpirun would oversubscribe it).
MAX_SLOTS = 256


def _is_positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _cluster_wide(first_vars):
    problems = []
    name = first_vars.get("cluster_name")
    if name is None:
        problems.append("cluster_name is not set: set it in group_vars/all.yml (for example `cluster_name: rack1`)")
    elif not isinstance(name, str) or not NAME_RE.fullmatch(name):
        problems.append(
            f"cluster_name={name!r} is not a short name: use lower-case letters, digits, '-' or '_' (for example rack1)"
        )
    user = first_vars.get("cluster_training_user")
    if user is None:
        problems.append("cluster_training_user is not set: set it in group_vars/all.yml (for example `cntk`)")
    elif not isinstance(user, str) or not USER_RE.fullmatch(user) or user == "root":
        problems.append(
            f"cluster_training_user={user!r}: the job runs as an unprivileged user; "
            "choose a valid user name other than root (for example cntk)"
        )
    uid = first_vars.get("cluster_training_uid")
    if uid is None:
        problems.append("cluster_training_uid is not set: set a fixed uid such as 2000 in group_vars/all.yml")
    elif not isinstance(uid, int) or isinstance(uid, bool) or not 1000 <= uid < 60000:
        problems.append(
            f"cluster_training_uid={uid!r}: choose a regular user's uid between 1000 and 59999 "
            "that no node uses for another user"
        )
    backend = first_vars.get("cluster_backend", "numpy")
    if backend not in ("numpy", "cntk"):
        problems.append(f"cluster_backend={backend!r}: choose numpy (the reference backend) or cntk")
    # The Open MPI stand-in (the distribution's Open MPI under the 1.10
    # sonames) is for test machines only: it runs only when asked for by name.
    standin = first_vars.get("cluster_openmpi_standin", False)
    method = first_vars.get("cluster_mpi_method")
    if not isinstance(standin, bool):
        problems.append(f"cluster_openmpi_standin={standin!r}: set true or false")
    elif standin and backend != "cntk":
        problems.append(
            f"cluster_openmpi_standin=true with cluster_backend={backend!r}: the stand-in only serves the cntk "
            "backend's wheel; remove cluster_openmpi_standin or set cluster_backend: cntk")
    elif method == "standin" and not standin:
        problems.append(
            "cluster_mpi_method=standin without cluster_openmpi_standin: true: the stand-in is Open MPI 4.x "
            "posing as 1.10 for test machines; set cluster_openmpi_standin: true to ask for it, or remove "
            "cluster_mpi_method to build the pinned Open MPI 1.10")
    interface = first_vars.get("cluster_mpi_interface")
    if not isinstance(interface, str) or not INTERFACE_RE.fullmatch(interface):
        problems.append(
            f"cluster_mpi_interface={interface!r}: name the network interface MPI uses on every node "
            "(for example eth1; `lo` on the local cluster)"
        )
    for name in ("cluster_data_dir", "cluster_jobs_dir"):
        folder = first_vars.get(name)
        if folder is not None and (not isinstance(folder, str) or not FOLDER_RE.fullmatch(folder)
                                   or ".." in folder.split("/") or "." in folder.split("/")):
            problems.append(f"{name}={folder!r}: give an absolute folder path of letters, digits, '.', '_', '+' "
                            "or '-' (no '..', spaces or newlines), e.g. /srv/cntk/jobs")
    return problems


def _differing(hostvars, nodes):
    """One message per cluster-wide value that a node overrides with another value."""
    problems = []
    for name in CLUSTER_WIDE:
        by_value = {}
        for host in nodes:
            value = hostvars[host].get(name, MISSING)
            key = repr(value) if not isinstance(value, dict) else repr(sorted(value.items(), key=repr))
            by_value.setdefault(key, (value, []))[1].append(host)
        if len(by_value) < 2:
            continue
        if name in SECRET:
            shown = "; ".join(", ".join(hosts) for _, hosts in by_value.values())
            problems.append(f"{name} differs between nodes ({shown} each have their own): the job runs with one "
                            "environment; set it once for the cluster (group_vars/all.yml), not per host")
            continue
        shown = "; ".join(f"{', '.join(hosts)}: {'(not set)' if value is MISSING else repr(value)}"
                          for value, hosts in by_value.values())
        problems.append(f"{name} differs between nodes ({shown}): one run uses it for every node; set it once "
                        "for the cluster (group_vars/all.yml), not per host")
    return problems


def _names(first_vars):
    """Values that become paths, shell words or file lines: one safe form each."""
    problems = []
    for name in ("cluster_dataset_name", "train_job_name"):
        value = first_vars.get(name)
        if value is not None and (not isinstance(value, str) or not PATH_NAME_RE.fullmatch(value) or ".." in value):
            problems.append(f"{name}={value!r} names a folder on the nodes and on the controller: use one name of "
                            "letters, digits, '.', '-' or '_' (no '/', '..', spaces or newlines), e.g. digits")
    args = first_vars.get("train_job_args")
    model = args.get("model") if isinstance(args, dict) else None
    if model is not None and (not isinstance(model, str) or not PATH_NAME_RE.fullmatch(model) or ".." in model):
        problems.append(f"train_job_args.model={model!r} is part of the job's name (a folder): use letters, "
                        "digits, '.', '-' or '_'")
    for variable in ("train_job_env", "train_job_secret_env"):
        env = first_vars.get(variable)
        if env is not None and not isinstance(env, dict):
            problems.append(f"{variable}: give a mapping of environment variable names to values")
        for key in env if isinstance(env, dict) else ():
            if not isinstance(key, str) or not ENV_NAME_RE.fullmatch(key):
                problems.append(f"{variable} has the name {key!r}: an environment variable name is letters, "
                                "digits and '_', not starting with a digit")
            elif key.startswith("JOB_"):
                problems.append(f"{variable} sets {key}: JOB_* variables are the cluster's word to the job "
                                "(training/README.md, the job contract); give yours another name")
    return problems


def cluster_inventory_problems(hostvars, groups):
    problems = []
    nodes = list(groups.get("cluster", []))
    if not nodes:
        return ["the inventory has no `cluster` group, or it is empty: put every node under `cluster` "
                "(see inventory/example/hosts.yml)"]
    if not groups.get("training"):
        problems.append("the `training` group is empty: list the nodes that run MPI ranks under "
                        "cluster -> training (see inventory/example/hosts.yml)")

    for host in groups.get("all", []):
        if host not in nodes and host not in IGNORED_HOSTS:
            problems.append(
                f"{host} is in no cluster group: add it under `cluster` (or `training`) "
                "in the inventory, or remove it"
            )
    for host in groups.get("training", []):
        if host not in nodes:
            problems.append(f"{host} is in `training` but not in `cluster`: make `training` a child of `cluster`")

    problems += _cluster_wide(hostvars[nodes[0]])
    problems += _names(hostvars[nodes[0]])
    problems += _differing(hostvars, nodes)
    for host in nodes:
        if not HOST_RE.fullmatch(host):
            problems.append(f"{host!r} is not a host name (letters, digits, '.', '-', '_'): it becomes a line of "
                            "the MPI hostfile and of /etc/hosts; rename it in the inventory")

    seen_names, seen_addresses, seen_endpoints = {}, {}, {}
    interface = hostvars[nodes[0]].get("cluster_mpi_interface")
    for host in nodes:
        hv = hostvars[host]
        own_interface = hv.get("cluster_mpi_interface")
        if host != nodes[0] and own_interface != interface and (
                not isinstance(own_interface, str) or not INTERFACE_RE.fullmatch(own_interface)):
            problems.append(f"{host}: cluster_mpi_interface={own_interface!r}: name the network interface MPI "
                            "uses on this node (for example eth1)")
        slots = hv.get("cluster_slots")
        if slots is None:
            problems.append(f"{host}: cluster_slots is not set: set the MPI ranks for this node (a positive integer)")
        elif not _is_positive_int(slots):
            problems.append(f"{host}: cluster_slots={slots!r} is not a positive integer: set it to the number "
                            "of MPI ranks for this node (for the cntk backend, its GPUs)")
        elif slots > MAX_SLOTS:
            problems.append(f"{host}: cluster_slots={slots} is more ranks than any node runs (at most "
                            f"{MAX_SLOTS}): set it to this node's GPUs (cntk) or cores (numpy)")

        short = host.split(".")[0].lower()
        if short in seen_names:
            problems.append(f"{host} and {seen_names[short]} have the same short host name {short!r}: "
                            "give every node its own name")
        seen_names[short] = host

        address = hv.get("cluster_address", hv.get("ansible_host", host))
        try:
            parsed = ipaddress.ip_address(str(address))
        except ValueError:
            problems.append(f"{host}: cluster_address={address!r} is not an IP address: set the node's "
                            "address on the MPI network")
            parsed = None
        for name, value in (("cluster_address", address), ("ansible_host", hv.get("ansible_host"))):
            try:
                if value is not None and ipaddress.ip_address(str(value)).version == 6:
                    problems.append(f"{host}: {name}={value} is an IPv6 address: the cluster runs over IPv4 "
                                    "(rsync's host:path and the MPI hostfile misread IPv6 addresses); give the "
                                    "node's IPv4 address, or a host name that resolves to it")
            except ValueError:
                pass
        if address in seen_addresses:
            problems.append(f"{host} and {seen_addresses[address]} have the same cluster_address {address}: "
                            "every node needs its own address")
        seen_addresses[address] = host
        if interface == "lo" and parsed is not None and not parsed.is_loopback:
            problems.append(f"{host}: cluster_address={address} is not a loopback address but "
                            "cluster_mpi_interface is lo: use the node's address on the MPI network's "
                            "interface, or a 127.x address on the local cluster")

        endpoint = (str(hv.get("ansible_host", host)), str(hv.get("ansible_port", 22)))
        if endpoint in seen_endpoints:
            problems.append(f"{host} and {seen_endpoints[endpoint]} are both reached at "
                            f"{endpoint[0]}:{endpoint[1]}: give each its own ansible_host")
        seen_endpoints[endpoint] = host
    return problems


def _interface_networks(facts, interface):
    """The IPv4 networks (address/prefix) of one interface in a node's facts, or None without address facts."""
    data = facts.get(interface.replace("-", "_").replace(".", "_"))
    if not isinstance(data, dict) or not isinstance(data.get("ipv4"), dict):
        return None
    entries = [data["ipv4"]] + [entry for entry in data.get("ipv4_secondaries", []) if isinstance(entry, dict)]
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_interface(f"{entry['address']}/{entry['netmask']}"))
        except (KeyError, ValueError):
            continue
    return networks


def mpi_interface_problem(facts, interface, address, host):
    """'' when the node has `interface` and `address` lies on it (one of its IPv4 networks), else one message
    naming the host, the value, what the node has and the fix. An address that is not an IP, or an interface
    without IPv4 facts, is left to the other checks."""
    interfaces = sorted(str(name) for name in facts.get("interfaces") or [])
    if interface not in interfaces:
        return (f"{host} has no interface {interface} (cluster_mpi_interface); it has {', '.join(interfaces)}. "
                "Set cluster_mpi_interface to the interface of the MPI network.")
    try:
        wanted = ipaddress.ip_address(str(address))
    except ValueError:
        return ""
    networks = _interface_networks(facts, interface)
    if not networks or any(wanted in net.network for net in networks):
        return ""
    holders = [name for name in interfaces if name != interface
               and any(wanted in net.network for net in _interface_networks(facts, name) or [])]
    where = f"it is on {', '.join(holders)}" if holders else "no interface of the node holds it"
    return (f"{host}: cluster_address {address} is not on {interface} (cluster_mpi_interface, "
            f"{', '.join(str(net) for net in networks)}); {where}. MPI would use one network and the nodes' "
            "names another: set cluster_mpi_interface to the interface of the MPI network, or cluster_address "
            f"to the node's address on {interface}.")


class FilterModule:
    def filters(self):
        return {"cluster_inventory_problems": cluster_inventory_problems,
                "mpi_interface_problem": mpi_interface_problem}
