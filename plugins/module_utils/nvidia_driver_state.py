"""The NVIDIA driver from the distribution (nvidia_driver_source: distribution):
what apt would install, whether that meets the stack's minimum, and what
loading the kernel module afterwards says.

    apt_policy(text)          `apt-cache policy PKG` -> {installed, candidate}
    upstream_version(v)       '535.183.01-1~deb12u1' -> '535.183.01'
    distribution_driver(...)  {version, problem}: the version that will be on
                              the node, and '' or why it is refused
    module_verdict(...)       {state, message} from modprobe and dmesg: a node
                              with no GPU is 'no_gpu' (the role reports "driver
                              installed, no GPU on this node"), not a failure

Pure stdlib; plugins/filter/gpu.py exposes them to roles/nvidia_driver.
"""

import re

# Compared as driver_satisfies does (version_matrix_table.py), without its Ansible import.


def _numbers(version):
    return tuple(int(part) for part in re.findall(r"\d+", str(version)))


def _at_least(installed, minimum):
    have, need = _numbers(installed), _numbers(minimum)
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


def apt_policy(text):
    """{installed, candidate} from `apt-cache policy PKG` (None for '(none)' or a package apt does not know)."""
    found = {"installed": None, "candidate": None}
    for line in str(text).splitlines():
        match = re.match(r"^\s+(Installed|Candidate):\s+(\S+)", line)
        if match and match.group(2) != "(none)":
            found[match.group(1).lower()] = match.group(2)
    return found


def upstream_version(version):
    """A Debian version's upstream part: no epoch, no revision."""
    text = re.sub(r"^\d+:", "", str(version).strip())
    return text.rsplit("-", 1)[0] if "-" in text else text


def distribution_driver(host, package, policy_text, minimum, what, components, required_components, sources_fix):
    """What `apt install PKG` leaves on the node (the installed version, else the candidate) and '' or why it is
    refused: no candidate (naming the components the sources lack), or a version below `minimum`.

    components: the components apt's sources have (`apt-get indextargets`); required_components: those the
    distribution keeps the driver in; sources_fix: where to add them."""
    policy = apt_policy(policy_text)
    version = policy["installed"] or policy["candidate"]
    if version is None:
        missing = [name for name in required_components if name not in (components or [])]
        if missing:
            why = ("apt's sources have no %s component (they have %s): add %s to their Components (%s), "
                   "run apt-get update, and run again" % (
                       "/".join(missing), ", ".join(sorted(set(components or []))) or "none",
                       " ".join(required_components), sources_fix))
        else:
            why = ("no package %s in apt's sources (components %s): run apt-get update, or use "
                   "nvidia_driver_source: repository" % (package, ", ".join(sorted(set(components)))))
        return {"version": None, "problem": "%s: the distribution's NVIDIA driver cannot be installed: %s. "
                                            "Nothing was changed." % (host, why)}
    upstream = upstream_version(version)
    if not _at_least(upstream, minimum):
        state = "installed" if policy["installed"] else "candidate"
        return {"version": upstream, "problem": (
            "%s: the distribution's %s %s %s is below %s, the minimum NVIDIA driver for %s: use "
            "nvidia_driver_source: repository (NVIDIA's packages), or a distribution release with a newer "
            "driver. Nothing was changed." % (host, package, state, version, minimum, what))}
    return {"version": upstream, "problem": ""}


def module_verdict(rc, stderr, dmesg, module, kernel):
    """{state, message} after `modprobe MODULE` on a node where the PCI bus shows no NVIDIA GPU.

    loaded: rc 0. no_gpu: the driver is there and found nothing to drive ("No such device", or the kernel's
    "NVRM: No NVIDIA GPU found"), reported, not a failure. not_built: no module for the running kernel (DKMS did
    not build it). failed: anything else, with what modprobe said."""
    text = "%s\n%s" % (stderr or "", dmesg or "")
    if int(rc) == 0:
        return {"state": "loaded", "message": "the %s module loaded" % module}
    if "No such device" in str(stderr or "") or "NVRM: No NVIDIA GPU found" in text:
        return {"state": "no_gpu", "message": "modprobe %s: %s" % (
            module, "No such device" if "No such device" in str(stderr or "") else "NVRM: No NVIDIA GPU found")}
    if re.search(r"not found in directory|Module \S+ not found", str(stderr or "")):
        return {"state": "not_built", "message": (
            "no %s module for the running kernel %s: DKMS did not build it (`dkms status`; the kernel's headers, "
            "linux-headers-%s, must be installed; then `dkms autoinstall -k %s`)" % (module, kernel, kernel, kernel))}
    last = [line for line in str(stderr or "").splitlines() if line.strip()]
    return {"state": "failed", "message": "modprobe %s failed: %s" % (module, last[-1] if last else "rc %s" % rc)}
