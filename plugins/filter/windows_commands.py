"""Every command line the Windows roles run, rendered from data and unit-tested.

Windows hands a program one string, not a list; the program splits it. The
Microsoft C runtime (and CommandLineToArgvW, which python.exe, mpiexec.exe,
msiexec.exe and the NVIDIA and Python installers use) splits on spaces and
tabs outside double quotes, and inside an argument `\\` is literal except
before a `"`. `win_quote` quotes one argument so that it comes back
unchanged (ansible.windows's `quote` filter); `win_cmdline` joins an argv.
ansible.windows.win_command's `argv` applies the same rules, so the roles
pass lists and these functions show (and test) the exact string the program
receives.

Filters:

    argv | win_cmdline                          -> one command line string
    arg | win_quote                             -> one quoted argument
    spec | win_mpiexec_argv                     -> mpiexec -hosts K h1 n1 ... -wdir DIR python train.py ...
    spec | win_mpiexec_display                  -> the same line with the password masked
    installer | win_installer_argv(path, log)   -> the silent install argv of an .exe or .msi
    msi_path | win_msiexec_argv(log, props)     -> msiexec.exe /i PATH /quiet /norestart /l*v LOG ...
    path | win_cuda_installer_argv(components)  -> CUDA installer: -s COMPONENTS... -n
    path | win_nvidia_driver_argv               -> driver installer: -s -noreboot -clean
    path | win_python_installer_argv(target)    -> python-3.6.8-amd64.exe /quiet InstallAllUsers=1 ...
    spec | win_firewall_rules                   -> rule definitions for community.windows.win_firewall_rule
    text | msmpi_version_from_output            -> '7.0.12437.6' from mpiexec's banner, '' if none
    pins | win_pip_requirements                 -> a requirements file with --hash lines
    pip_list_json | win_pip_missing(pins)       -> the pins that are not installed at their version
    path | win_relpath(start)                   -> 'a/b' relative path, '/'-separated, for the controller
    parts | win_join                            -> 'C:\\\\a\\\\b' joined Windows path
    hostvars | cluster_addresses(hosts)         -> MPI addresses of hosts (cluster_address, else ansible_host)
"""

import json
import ntpath
import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.ansible.windows.plugins.filter.quote import quote as windows_quote

MSMPI_BANNER_RE = re.compile(r"Microsoft MPI Startup Program \[Version (\d+(?:\.\d+){1,3})\]")
PASSWORD_MASK = "********"


# ---------------------------------------------------------------- quoting


def win_quote(arg):
    """Quote one argument for the Microsoft C runtime's argv parser: ansible.windows's own `quote` filter (the
    rules win_command's argv applies), named here so the display lines say what the program receives."""
    return windows_quote(str(arg))


def win_cmdline(argv):
    if isinstance(argv, (str, bytes)) or not hasattr(argv, "__iter__"):
        raise AnsibleFilterError(f"win_cmdline: expected a list of arguments, got {argv!r}")
    return " ".join(win_quote(arg) for arg in argv)


def win_join(parts):
    parts = [str(p) for p in parts if str(p)]
    if not parts:
        raise AnsibleFilterError("win_join: nothing to join")
    return ntpath.join(*parts).replace("/", "\\")


def win_relpath(path, start):
    """Path of `path` under `start`, '/'-separated (for the controller's side).

    Compared case-insensitively, as NTFS does. Raises when `path` is not under `start`."""
    norm_path = ntpath.normpath(str(path))
    norm_start = ntpath.normpath(str(start))
    if not norm_path.lower().startswith(norm_start.lower().rstrip("\\") + "\\"):
        raise AnsibleFilterError(f"win_relpath: {path} is not under {start}")
    return ntpath.relpath(norm_path, norm_start).replace("\\", "/")


# ---------------------------------------------------------------- mpiexec


def _require(spec, *keys):
    missing = [key for key in keys if spec.get(key) in (None, "", [])]
    if missing:
        raise AnsibleFilterError(f"missing {', '.join(missing)} in {sorted(spec)}")


def win_mpiexec_argv(spec):
    """MS-MPI's mpiexec argv for the job, from the same layout train_job uses.

    spec keys: mpiexec (path), layout ([{host, slots, ranks}], hostfile order),
    wdir, python, wrapper (optional per-rank log wrapper script), script
    (train.py), env ({name: value}), timeout (seconds, 0 for none), password
    (optional: passed with -pwd for the launch service in a workgroup),
    port (optional smpd/launch service port), args (a list appended as is)."""
    if not isinstance(spec, Mapping):
        raise AnsibleFilterError("win_mpiexec_argv: spec must be a mapping")
    _require(spec, "mpiexec", "layout", "wdir", "python", "script")
    layout = spec["layout"]
    argv = [str(spec["mpiexec"]), "-hosts", str(len(layout))]
    for entry in layout:
        slots = entry.get("slots")
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
            raise AnsibleFilterError(f"win_mpiexec_argv: {entry.get('host')} has slots={slots!r}")
        argv += [str(entry["host"]), str(slots)]
    argv += ["-wdir", str(spec["wdir"])]
    if spec.get("port"):
        argv += ["-p", str(spec["port"])]
    timeout = int(spec.get("timeout") or 0)
    if timeout > 0:
        argv += ["-timeout", str(timeout)]
    if spec.get("password"):
        argv += ["-pwd", str(spec["password"])]
    for name, value in sorted((spec.get("env") or {}).items()):
        argv += ["-env", str(name), str(value)]
    argv.append(str(spec["python"]))
    if spec.get("wrapper"):
        argv.append(str(spec["wrapper"]))
    argv.append(str(spec["script"]))
    argv += [str(arg) for arg in spec.get("args") or []]
    return argv


def win_mpiexec_display(spec):
    """The mpiexec command line as it may be shown and recorded: -pwd's value masked."""
    masked = dict(spec)
    if masked.get("password"):
        masked["password"] = PASSWORD_MASK
    return win_cmdline(win_mpiexec_argv(masked))


def msmpi_version_from_output(text):
    """'7.0.12437.6' from `mpiexec` run without arguments; '' when it printed no banner."""
    match = MSMPI_BANNER_RE.search(str(text or ""))
    return match.group(1) if match else ""


# ---------------------------------------------------------------- installers


def win_msiexec_argv(msi_path, log=None, properties=None):
    """msiexec's argv for a silent, no-reboot install of one .msi, with a verbose log."""
    argv = ["msiexec.exe", "/i", str(msi_path), "/quiet", "/norestart"]
    if log:
        argv += ["/l*v", str(log)]
    for name, value in sorted((properties or {}).items()):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", str(name)):
            raise AnsibleFilterError(f"win_msiexec_argv: {name!r} is not an MSI property name")
        argv.append(f"{name}={value}")
    return argv


def win_installer_argv(installer, path, log=None):
    """The silent install argv of one pinned installer staged at `path` on the node.

    installer: an entry of the version matrix ({file, install_args, msi_properties}).
    An .msi runs through msiexec /quiet /norestart; an .exe runs with its
    install_args, which must not be empty (an .exe without them would show a
    dialog and hang the play)."""
    if not isinstance(installer, Mapping):
        raise AnsibleFilterError("win_installer_argv: installer must be a mapping")
    name = str(installer.get("dest") or installer.get("file") or path)
    if name.lower().endswith(".msi") or str(path).lower().endswith(".msi"):
        return win_msiexec_argv(path, log, installer.get("msi_properties"))
    args = installer.get("install_args")
    if not args:
        raise AnsibleFilterError(f"win_installer_argv: {name} is an .exe with no install_args: "
                                 "add its silent flags (e.g. /unattend, /quiet) to its pin")
    return [str(path)] + [str(arg) for arg in args]


def win_cuda_installer_argv(path, components, reboot=False):
    """CUDA's Windows installer: -s (silent) with the components to install, -n (no reboot)."""
    components = [str(c) for c in (components or [])]
    bad = [c for c in components if not re.fullmatch(r"[A-Za-z0-9_]+_\d+\.\d+", c)]
    if bad:
        raise AnsibleFilterError(f"win_cuda_installer_argv: {', '.join(bad)} are not CUDA component names "
                                 "(like nvcc_10.0, cudart_10.0)")
    argv = [str(path), "-s"] + components
    if not reboot:
        argv.append("-n")
    return argv


def win_nvidia_driver_argv(path, clean=True):
    """NVIDIA's driver package: silent, no reboot (the role reboots when it must), clean install."""
    argv = [str(path), "-s", "-noreboot"]
    if clean:
        argv.append("-clean")
    return argv


def win_python_installer_argv(path, target_dir, include_pip=True):
    """python.org's Windows installer, silent, for all users, not on PATH, into target_dir."""
    return [str(path), "/quiet", "InstallAllUsers=1", "PrependPath=0", "Include_test=0",
            "Include_launcher=0", "Shortcuts=0", "AssociateFiles=0",
            f"Include_pip={1 if include_pip else 0}", f"TargetDir={target_dir}"]


# ---------------------------------------------------------------- firewall


def win_firewall_rules(spec):
    """Inbound allow rules for MS-MPI and the training interpreter, from the cluster's addresses only.

    spec keys: prefix (rule name prefix), addresses (list of IPs), programs
    ({label: path}), profiles (list, default domain/private/public)."""
    _require(spec, "prefix", "programs")
    addresses = [str(a) for a in spec.get("addresses") or []]
    if not addresses:
        raise AnsibleFilterError("win_firewall_rules: no cluster addresses: a rule without remote "
                                 "addresses would open the port to every network")
    if any(a.lower() in ("any", "*", "0.0.0.0/0", "localsubnet") for a in addresses):
        raise AnsibleFilterError("win_firewall_rules: addresses must name the cluster's nodes, not any/*")
    remote = ",".join(sorted(set(addresses), key=addresses.index))
    rules = []
    for label, program in sorted(spec["programs"].items()):
        rules.append({
            "name": f"{spec['prefix']} {label}",
            "description": f"{label} from the cluster's nodes only (managed by Ansible)",
            "program": str(program),
            "direction": "in",
            "action": "allow",
            "protocol": "tcp",
            "remoteip": remote,
            "profiles": list(spec.get("profiles") or ["domain", "private", "public"]),
            "enabled": True,
        })
    return rules


def cluster_addresses(hostvars, hosts):
    """Each host's address on the MPI network (cluster_address, else ansible_host, else its name)."""
    out = []
    for host in hosts:
        hv = hostvars.get(host, {}) if isinstance(hostvars, Mapping) else {}
        out.append(str(hv.get("cluster_address") or hv.get("ansible_host") or host))
    return out


# ---------------------------------------------------------------- pip


def _canonical(name):
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def win_pip_requirements(pins):
    """A requirements file pinning every wheel by version and sha256 (for pip --require-hashes).

    pins: [{name, version, sha256}, ...]."""
    lines = []
    for pin in pins:
        sha = str(pin.get("sha256") or "")
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise AnsibleFilterError(f"win_pip_requirements: {pin.get('name')} has no sha256 pin")
        lines.append(f"{pin['name']}=={pin['version']} --hash=sha256:{sha}")
    return "\n".join(lines) + "\n"


def win_pip_missing(pip_list, pins):
    """The pins that `pip list --format json` does not show at their version."""
    if isinstance(pip_list, str):
        try:
            pip_list = json.loads(pip_list or "[]")
        except ValueError as exc:
            raise AnsibleFilterError(f"win_pip_missing: pip list printed no JSON ({exc})") from exc
    installed = {_canonical(p.get("name")): str(p.get("version")) for p in pip_list or []}
    return [pin for pin in pins if installed.get(_canonical(pin["name"])) != str(pin["version"])]


class FilterModule:
    def filters(self):
        return {
            "win_join": win_join,
            "win_relpath": win_relpath,
            "win_mpiexec_argv": win_mpiexec_argv,
            "win_mpiexec_display": win_mpiexec_display,
            "msmpi_version_from_output": msmpi_version_from_output,
            "win_installer_argv": win_installer_argv,
            "win_cuda_installer_argv": win_cuda_installer_argv,
            "win_nvidia_driver_argv": win_nvidia_driver_argv,
            "win_python_installer_argv": win_python_installer_argv,
            "win_firewall_rules": win_firewall_rules,
            "cluster_addresses": cluster_addresses,
            "win_pip_requirements": win_pip_requirements,
            "win_pip_missing": win_pip_missing,
        }
