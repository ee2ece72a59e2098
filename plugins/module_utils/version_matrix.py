"""Resolve a CNTK stack from the version matrix (matrix/cntk.yml).

The user names `cntk_version` and the kind of node (`device: gpu|cpu`);
everything else (CUDA, cuDNN, NCCL, Open MPI, Python, the minimum NVIDIA
driver, the wheel and its sha256) follows from the matrix. An override that
does not match is rejected with a message that names the conflict and the
fix, unless `force: true` turns the rejection into a warning. An unknown CNTK
version is always an error.

The filters of the same names (plugins/filter/version_matrix.py) expose these
(the matrix is the data loaded from matrix/cntk.yml, or the path of
that file: the resolver then reads it itself, once per process, so that the
whole matrix never passes through Ansible's templating, which costs seconds
per host):

    cntk_matrix | cntk_stack(request)        -> the resolved stack (a dict)
    cntk_matrix | cntk_stack_problem(request) -> '' or why the request is rejected
    cntk_matrix | cntk_artifacts(stacks)     -> every file to download, once
    installed | driver_satisfies(minimum)    -> bool
    cntk_matrix | cntk_matrix_rows           -> the matrix as table rows

The functions are plain Python and are unit-tested directly
(tests/unit/plugins/filter/test_version_matrix.py, through the filters).
"""

import copy
import functools
import os
import re
from collections.abc import Mapping

import yaml

from ansible.errors import AnsibleFilterError

DEVICES = ("gpu", "cpu")
MATRIX_FILE = "matrix/cntk.yml"
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# Open MPI 2.x+ breaks the libmpi.so.12 / libmpi_cxx.so.1 ABI every CNTK 2.x wheel links.
OPENMPI_ABI_ISSUE = "microsoft/CNTK#3392"


# ---------------------------------------------------------------- versions


def _version_tuple(value, what="version"):
    """'410.48' -> (410, 48). Raises AnsibleFilterError for anything else."""
    text = str(value).strip() if value is not None else ""
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        raise AnsibleFilterError(f"{what}={value!r} is not a dotted numeric version (like 410.48)")
    return tuple(int(part) for part in text.split("."))


def _matches(requested, pinned):
    """True when `requested` names `pinned` at its own precision:
    '10', '10.0' and '10.0.130' all name 10.0.130; '1.1' does not name 1.10.7."""
    req = str(requested).strip().split(".")
    pin = str(pinned).strip().split(".")
    return len(req) <= len(pin) and pin[: len(req)] == req


def _sort_versions(versions, reverse=True):
    def key(text):
        return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]", str(text)))

    return sorted(versions, key=key, reverse=reverse)


def driver_satisfies(installed, minimum):
    """Whether an installed NVIDIA driver version is at least `minimum`.

    Compared numerically per component, as NVIDIA numbers its drivers:
    410.104 is newer than 410.48, 535.104.05 newer than 535.54.03."""
    have = _version_tuple(installed, "driver_version")
    need = _version_tuple(minimum, "driver minimum")
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


def _as_bool(value):
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("", "0", "false", "no", "off"):
        return False
    raise AnsibleFilterError(f"force={value!r} is not a boolean")


def _major_minor(value):
    parts = str(value).strip().split(".")
    return ".".join(parts[:2])


# ---------------------------------------------------------------- lookups


@functools.lru_cache(maxsize=8)
def _read_matrix(path, mtime_ns):
    with open(path, encoding="utf-8") as source:
        return yaml.safe_load(source)


def _matrix(matrix):
    """The matrix itself, read from its file when given a path."""
    if isinstance(matrix, str):
        try:
            return copy.deepcopy(_read_matrix(matrix, os.stat(matrix).st_mtime_ns))
        except (OSError, yaml.YAMLError) as error:
            raise AnsibleFilterError(f"cannot read the version matrix {matrix}: {error}")
    return matrix


def _section(matrix, name):
    if not isinstance(matrix, Mapping) or name not in matrix:
        raise AnsibleFilterError(f"{MATRIX_FILE} has no '{name}' section: is this the version matrix?")
    return matrix[name]


def _find_os(os_table, distribution, version):
    """('Debian 12', entry) for Debian 12.5; (name, None) when not in the table."""
    distribution = str(distribution or "").strip()
    version = str(version or "").strip()
    parts = version.split(".")
    for count in range(len(parts), 0, -1):
        name = f"{distribution} {'.'.join(parts[:count])}"
        if name in os_table:
            return name, os_table[name]
    return f"{distribution} {version}".strip(), None


def _pin(entry, **extra):
    """A copy of an artifact pin from the matrix, marked pinned."""
    result = copy.deepcopy(dict(entry))
    result.update(extra)
    result.setdefault("pinned", True)
    return result


def _unpinned(version, **extra):
    result = {"version": str(version), "file": None, "url": None, "sha256": None,
              "sha256_source": None, "pinned": False}
    result.update(extra)
    return result


# ---------------------------------------------------------------- resolution


def cntk_stack(matrix, request=None):
    """Resolve the full stack for one kind of node.

    request: {cntk_version, device: gpu|cpu, python_version, cuda_version,
    cudnn_version, nccl_version, openmpi_version, driver_version (installed),
    compute_capability, os: {distribution, version}, force}; all optional,
    defaults from the matrix's `defaults`."""
    matrix = _matrix(matrix)
    if request is None:
        request = {}
    if not isinstance(request, Mapping):
        raise AnsibleFilterError(f"cntk_stack: the request must be a mapping, got {type(request).__name__}")
    defaults = _section(matrix, "defaults")
    releases = _section(matrix, "cntk")
    force = _as_bool(request.get("force", False))
    warnings = []

    def reject(message):
        if force:
            warnings.append(f"forced past: {message}")
        else:
            raise AnsibleFilterError(message)

    known = _sort_versions(releases)
    latest = known[0]
    version = request.get("cntk_version")
    version = str(defaults["cntk_version"] if version in (None, "") else version).strip()
    if version not in releases:
        raise AnsibleFilterError(
            f"cntk_version={version} is not in {MATRIX_FILE}: known CNTK versions are "
            f"{', '.join(known)} ({latest} is the last CNTK release); set cntk_version to one of them")
    release = releases[version]

    device = str(request.get("device") or defaults.get("device", "gpu")).strip().lower()
    if device not in DEVICES:
        raise AnsibleFilterError(f"device={device}: must be one of {', '.join(DEVICES)}")

    if release.get("superseded_by"):
        newer = release["superseded_by"]
        reject(f"CNTK {version}'s wheels bundle none of the libraries they load (MKL-ML, and for cntk-gpu "
               f"cuDNN, NCCL and the CUDA runtime); {newer} is the same release with them inside the wheel: "
               f"set cntk_version to {newer}")

    # ---- operating system
    os_request = request.get("os")
    os_name, os_info = None, None
    if os_request:
        if not isinstance(os_request, Mapping):
            raise AnsibleFilterError("os must be a mapping like {distribution: Ubuntu, version: '16.04'}")
        os_name, os_info = _find_os(_section(matrix, "os"), os_request.get("distribution"),
                                    os_request.get("version"))
        if os_info is None:
            documented = ", ".join(release.get("os_documented", []))
            accepted = ", ".join(name for name, entry in matrix["os"].items() if entry.get("support") == "warn")
            reject(f"os {os_name} is not in {MATRIX_FILE}: CNTK {version} documents {documented} and this "
                   f"project also accepts (with a warning) {accepted}; use one of those, or set force: true "
                   f"to try {os_name} (Python is then built from source)")

    # ---- Python
    available = [str(p) for p in release["python"]]
    python_request = request.get("python_version")
    python_pinned = True
    if python_request not in (None, ""):
        python = _major_minor(python_request)
        if python not in available:
            default_python = str(defaults.get("python_version", available[-1]))
            reject(f"python_version={python_request}: CNTK {version} has wheels for {', '.join(available)} only: "
                   f"remove python_version ({default_python} is the default) or set one of those")
            python_pinned = False
    else:
        python = str(defaults.get("python_version", available[-1]))
        if python not in available:
            python = available[-1]
    if python == "2.7":
        warnings.append("Python 2.7 is end of life and this project's training code targets Python 3.6; "
                        "the cp27 wheel is pinned but only the 3.x paths are tested")
    python_stack = _resolve_python(matrix, python, os_name, os_info, os_request, python_pinned)

    # ---- wheel
    wheels = release["wheels"][device]
    package = wheels["package"]
    wheel = None
    if python in wheels:
        wheel = _pin(wheels[python], name=package, python=python)
        wheel.setdefault("dest", wheel["file"])
        if wheel.get("sha256") is None:
            reject(f"the {package} {wheel['version']} wheel for Python {python} has no published sha256 "
                   f"({wheel.get('sha256_source')}): it cannot be verified; use a CNTK release from PyPI "
                   f"({', '.join(_installable(releases))}) or set force: "
                   f"true and provide the file yourself")
    else:
        warnings.append(f"no {package} {release['wheel_version']} wheel exists for Python {python}: "
                        f"nothing can be installed until one is provided")

    # ---- GPU libraries
    cuda = cudnn = nccl = None
    driver_min = None
    bundles = list(release.get("gpu_wheel_bundles") or [])
    if device == "gpu":
        cuda, cudnn, nccl, driver_min = _resolve_gpu(matrix, releases, version, release, request, bundles,
                                                     reject, latest)
    else:
        for key in ("cuda_version", "cudnn_version", "nccl_version", "driver_version"):
            if request.get(key) not in (None, ""):
                warnings.append(f"{key}={request[key]} is ignored: device is cpu")

    # ---- Open MPI
    openmpi = _resolve_openmpi(matrix, defaults, version, release, request.get("openmpi_version"), device, reject)

    # ---- OS consequences, now that Python and CUDA are known
    if os_info is not None and os_info.get("support") != "documented":
        warnings.append(_os_warning(version, release, os_name, os_info, python_stack, device, cuda))

    wheel_deps = [_pin(dep) for dep in (matrix.get("wheel_deps") or {}).get(python, [])]

    mpi4py_version = str(defaults.get("mpi4py_version"))
    mpi4py = _pin(_section(matrix, "mpi4py")[mpi4py_version])
    msmpi_version = str(release.get("msmpi"))
    msmpi = _pin(_section(matrix, "msmpi")[msmpi_version], version=msmpi_version)

    return _checked_stack({
        "cntk": {"version": version, "wheel_version": str(release["wheel_version"]), "device": device,
                 "package": package},
        "wheel": wheel,
        "wheel_deps": wheel_deps,
        "python": python_stack,
        "cuda": cuda,
        "cudnn": cudnn,
        "nccl": nccl,
        "driver_min": driver_min,
        "min_compute_capability": str(release.get("min_compute_capability")) if device == "gpu" else None,
        "openmpi": openmpi,
        "mpi4py": mpi4py,
        "msmpi": msmpi,
        "os": None if os_request is None else {
            "name": os_name,
            "support": os_info.get("support") if os_info else "unknown",
            "nvidia_repo": os_info.get("nvidia_repo") if os_info else None,
        },
        "forced": force,
        "warnings": warnings,
    })


# The resolved stack's shape, which the roles read as the fact cluster_stack
# (roles/cluster/README.md): every key always present; the sections that can
# be absent (no GPU, no OS facts) are None, never a missing key.
STACK_SHAPE = {
    "cntk": {"version", "wheel_version", "device", "package"},
    "wheel": None, "wheel_deps": None,
    "python": {"version", "abi", "pinned", "build_from_source", "reason", "packages", "source", "openssl",
               "openssl_needed"},
    "cuda": None, "cudnn": None, "nccl": None, "driver_min": None, "min_compute_capability": None,
    "openmpi": None, "mpi4py": None, "msmpi": None,
    "os": {"name", "support", "nvidia_repo"},
    "forced": None, "warnings": None,
}


def _checked_stack(stack):
    """The stack, after checking it has exactly STACK_SHAPE's keys."""
    if set(stack) != set(STACK_SHAPE):
        raise AnsibleFilterError(f"cntk_stack: keys {sorted(set(stack) ^ set(STACK_SHAPE))} differ from STACK_SHAPE")
    for key, fields in STACK_SHAPE.items():
        if fields is not None and stack[key] is not None and set(stack[key]) != fields:
            raise AnsibleFilterError(
                f"cntk_stack: {key} has keys {sorted(stack[key])}, STACK_SHAPE says {sorted(fields)}")
    return stack


def cntk_stack_problem(matrix, request=None):
    """'' when the request resolves, else the rejection's message (for a preflight's fail_msg)."""
    matrix = _matrix(matrix)
    try:
        cntk_stack(matrix, request)
    except AnsibleFilterError as error:
        return str(error.message if hasattr(error, "message") else error)
    return ""


def _installable(releases):
    """Releases whose wheels are all pinned and self-contained, newest first."""
    return [v for v in _sort_versions(releases)
            if not releases[v].get("superseded_by") and not _has_unverified_wheels(releases[v])]


def _has_unverified_wheels(release):
    for device in DEVICES:
        for key, wheel in release["wheels"][device].items():
            if key != "package" and wheel.get("sha256") is None:
                return True
    return False


def _resolve_python(matrix, python, os_name, os_info, os_request, pinned):
    source_pin = _section(matrix, "python_source").get(python)
    if os_info is not None:
        packages = list((os_info.get("python_packages") or {}).get(python) or [])
        build = not packages
        reason = (f"{os_name} packages Python {python} ({', '.join(packages)})" if packages
                  else f"{os_name} has no python{python} package")
    elif os_request:
        packages, build = [], True
        reason = f"{os_name} is not in {MATRIX_FILE}: assumed to have no python{python} package"
    else:
        packages, build = [], None
        reason = "no os given: whether Python is built from source is decided per node"

    openssl = None
    openssl_needed = False
    if build is not False and source_pin is not None:
        system = os_info.get("openssl") if os_info is not None else None
        if system is None:
            openssl_needed = None  # unknown OS: keep the pin at hand
        else:
            openssl_needed = _version_tuple(system, "openssl") > _version_tuple(source_pin["openssl_max"], "openssl")
        if openssl_needed is not False:
            series = str(source_pin["openssl_max"])
            for key, entry in _section(matrix, "openssl_source").items():
                if str(entry.get("series")) == series:
                    openssl = _pin(entry)
                    break
    return {
        "version": python,
        "abi": _python_abi(python),
        "pinned": pinned,
        "build_from_source": build,
        "reason": reason,
        "packages": packages,
        "source": _pin(source_pin) if (build is not False and source_pin is not None) else None,
        "openssl": openssl,
        "openssl_needed": openssl_needed,
    }


def _python_abi(python):
    digits = python.replace(".", "")
    return f"cp{digits}mu" if python.startswith("2.") else f"cp{digits}m"


def _resolve_gpu(matrix, releases, version, release, request, bundles, reject, latest):
    cuda_key, cudnn_key, nccl_key = str(release["cuda"]), str(release["cudnn"]), release.get("nccl")
    cuda_pin = _section(matrix, "cuda")[cuda_key]
    cudnn_pin = _section(matrix, "cudnn")[cudnn_key]
    nccl_pin = _section(matrix, "nccl")[str(nccl_key)] if nccl_key is not None else None

    cuda = _pin(cuda_pin, version=cuda_key, full_version=str(cuda_pin["version"]),
                bundled_in_wheel="cuda-runtime" in bundles)
    cudnn = _pin(cudnn_pin, version=cudnn_key, full_version=str(cudnn_pin["version"]),
                 bundled_in_wheel="cudnn" in bundles)
    nccl = (_pin(nccl_pin, version=str(nccl_key), full_version=str(nccl_pin["version"]),
                 bundled_in_wheel="nccl" in bundles) if nccl_pin is not None else None)
    driver_min = str(cuda_pin["driver_min"])

    requested = request.get("cuda_version")
    if requested not in (None, "") and not _matches(requested, cuda_pin["version"]):
        others = [v for v in _sort_versions(releases)
                  if _matches(requested, matrix["cuda"][str(releases[v]["cuda"])]["version"])]
        if others:
            fix = f"set cntk_version to a release built for CUDA {requested}: {', '.join(others)}"
        else:
            fix = (f"set cntk_version to a release built for CUDA {requested} "
                   f"(none is: {latest} is the last CNTK release)")
        reject(f"cuda_version={requested} does not match CNTK {version}, which needs CUDA {cuda_key} "
               f"(cuDNN {cudnn_key}): remove cuda_version or {fix}")
        cuda = _unpinned(requested, full_version=str(requested), driver_min=None, apt=None, runfile=None,
                         bundled_in_wheel=False)
        driver_min = None

    requested = request.get("cudnn_version")
    if requested not in (None, "") and not _matches(requested, cudnn_pin["version"]):
        where = " (the cntk-gpu wheel bundles it as libcudnn.so.7)" if "cudnn" in bundles else ""
        reject(f"cudnn_version={requested} does not match CNTK {version}, which needs cuDNN {cudnn_key} "
               f"for CUDA {cuda_key}{where}: remove cudnn_version")
        cudnn = _unpinned(requested, full_version=str(requested), apt=None, deb=None, bundled_in_wheel=False)

    requested = request.get("nccl_version")
    if requested not in (None, "") and (nccl_pin is None or not _matches(requested, nccl_pin["version"])):
        needs = f"NCCL {nccl_key}" if nccl_pin is not None else "no particular NCCL"
        where = " (the cntk-gpu wheel bundles it as libnccl.so.2)" if "nccl" in bundles else ""
        reject(f"nccl_version={requested} does not match CNTK {version}, which needs {needs}{where}: "
               f"remove nccl_version")
        nccl = _unpinned(requested, full_version=str(requested), apt=None, deb=None, bundled_in_wheel=False)

    installed = request.get("driver_version")
    if installed not in (None, "") and driver_min is not None and not driver_satisfies(installed, driver_min):
        older = [v for v in _installable(releases)
                 if driver_satisfies(installed, matrix["cuda"][str(releases[v]["cuda"])]["driver_min"])]
        fix = "upgrade the NVIDIA driver (to at least " + driver_min + ")"
        if older:
            other = older[0]
            other_cuda = str(releases[other]["cuda"])
            fix += (f", or set cntk_version to {other} (built for CUDA {other_cuda}, which needs "
                    f"{matrix['cuda'][other_cuda]['driver_min']})")
        reject(f"driver_version={installed} is below {driver_min}, the minimum NVIDIA driver for "
               f"CUDA {cuda_key} (CNTK {version}): {fix}")

    capability = request.get("compute_capability")
    minimum = str(release.get("min_compute_capability", "3.0"))
    if capability not in (None, "") and _version_tuple(capability, "compute_capability") < _version_tuple(minimum):
        reject(f"compute_capability={capability} is below {minimum}, the minimum for CNTK {version}'s GPU "
               f"kernels: run this node as device: cpu")
    return cuda, cudnn, nccl, driver_min


def _resolve_openmpi(matrix, defaults, version, release, requested, device, reject):
    pins = _section(matrix, "openmpi")
    series = str(release["openmpi_series"])
    default = str(defaults.get("openmpi_version"))
    if default not in pins or str(pins[default]["series"]) != series:
        default = next(key for key in _sort_versions(pins) if str(pins[key]["series"]) == series)
    chosen = default
    major = version.split(".")[0]
    if requested not in (None, ""):
        requested = str(requested).strip()
        wanted = requested.split(".")
        if wanted[: len(series.split("."))] != series.split("."):
            if _matches(requested, series):  # '1' alone: too vague to be a release
                detail = f"{requested} names no Open MPI {series}.x release"
            elif wanted[0].isdigit() and int(wanted[0]) >= 2:
                detail = (f"Open MPI 2.x and later are not ABI compatible with it and build no libmpi_cxx "
                          f"({OPENMPI_ABI_ISSUE})")
            else:
                detail = f"only Open MPI {series}.x provides those libraries"
            reject(f"openmpi_version={requested}: CNTK {major}.x needs Open MPI {series}.x (libmpi.so.12, "
                   f"libmpi_cxx.so.1); {detail}: remove openmpi_version to build the pinned {default} "
                   f"into {pins[default]['prefix']}")
            return _unpinned(requested, series=None, prefix=None, cuda_aware=False)
        if requested == series:
            chosen = default
        elif requested in pins:
            chosen = requested
        else:
            same_series = [k for k in _sort_versions(pins) if str(pins[k]["series"]) == series]
            reject(f"openmpi_version={requested} has no pinned sha256 in {MATRIX_FILE} (pinned {series}.x: "
                   f"{', '.join(same_series)}): set one of those, or add {requested} with its published sha256")
            return _unpinned(requested, series=series, prefix=pins[default]["prefix"],
                             cuda_aware=device == "gpu")
    pin = _pin(pins[chosen])
    pin["cuda_aware"] = device == "gpu"
    pin["configure_args"] = list(pin.get("configure_args") or [])
    if device == "gpu":
        pin["configure_args"] += list(pin.get("configure_args_cuda") or [])
    return pin


def _os_warning(version, release, os_name, os_info, python_stack, device, cuda):
    documented = ", ".join(release.get("os_documented", []))
    consequences = []
    python = python_stack["version"]
    if python_stack["build_from_source"]:
        text = f"Python {python} must be built from source ({os_name} has no python{python} package)"
        if python_stack.get("openssl_needed") and python_stack.get("openssl"):
            ossl = python_stack["openssl"]
            text += (f", against OpenSSL {ossl['version']} in {ossl.get('prefix')} (the system OpenSSL "
                     f"{os_info.get('openssl')} is newer than CPython {python} supports)")
        consequences.append(text)
    if device == "gpu" and cuda is not None and cuda.get("pinned"):
        repos = (cuda.get("apt") or {}).get("repos") or []
        if os_info.get("nvidia_repo") not in repos:
            if cuda.get("bundled_in_wheel"):
                consequences.append(f"NVIDIA packages no CUDA {cuda['version']} for {os_name}: the cntk-gpu "
                                    f"wheel's bundled CUDA libraries are used (the node needs only the driver), "
                                    f"the toolkit only from the runfile")
            else:
                consequences.append(f"NVIDIA packages no CUDA {cuda['version']} for {os_name}: the toolkit "
                                    f"comes from the runfile")
    if not os_info.get("image_reader_libs", True):
        consequences.append("libpng12 and libjasper1 are not packaged, so CNTK's image reader cannot load "
                            "(the CTF text reader is unaffected)")
    if not consequences:
        consequences.append("nothing known differs")
    return (f"{os_name} is not an OS CNTK {version} documents ({documented}); accepted, but: "
            + "; ".join(consequences))


# ---------------------------------------------------------------- artifacts


def cntk_artifacts(matrix, stacks, nvidia=False, msmpi=False):
    """Every file the resolved stacks download, once, for offline mode.

    stacks: one stack from cntk_stack or a list of them (e.g. one per host).
    nvidia: also the CUDA runfile and the cuDNN/NCCL .debs of GPU stacks.
    msmpi: also the MS-MPI installers (Windows nodes).
    Each item: name, version, file, dest (its name in the download folder),
    url, sha256 (None where the matrix has no published value), sha256_source.
    Two different files that want the same dest are an error."""
    matrix = _matrix(matrix)
    _section(matrix, "cntk")
    if stacks is None:
        stacks = []
    if isinstance(stacks, Mapping):
        stacks = [stacks]
    found = {}

    def add(name, pin):
        if not pin or not pin.get("url"):
            return
        item = {
            "name": name,
            "version": str(pin["version"]),
            "file": pin["file"],
            "dest": pin.get("dest") or pin["file"],
            "url": pin["url"],
            "sha256": pin.get("sha256"),
            "sha256_source": pin.get("sha256_source"),
        }
        previous = found.get(item["dest"])
        if previous is None:
            found[item["dest"]] = item
        elif (previous["url"], previous["sha256"]) != (item["url"], item["sha256"]):
            raise AnsibleFilterError(
                f"cntk_artifacts: {item['dest']} would be two different files ({previous['url']} and "
                f"{item['url']}): give one of them a distinct dest in {MATRIX_FILE}")

    for stack in stacks:
        if not isinstance(stack, Mapping) or "cntk" not in stack:
            raise AnsibleFilterError("cntk_artifacts: each stack must be a result of cntk_stack")
        wheel = stack.get("wheel")
        if wheel:
            add(wheel.get("name", stack["cntk"]["package"]), wheel)
        for dep in stack.get("wheel_deps") or []:
            add(dep["name"], dep)
        add("openmpi", stack.get("openmpi"))
        python = stack.get("python") or {}
        if python.get("build_from_source") is not False:
            add("python", python.get("source"))
            add("openssl", python.get("openssl"))
        add("mpi4py", stack.get("mpi4py"))
        for tool in (stack.get("mpi4py") or {}).get("build_requires") or []:
            add(tool["name"], tool)
        if nvidia and stack["cntk"].get("device") == "gpu":
            add("cuda", (stack.get("cuda") or {}).get("runfile"))
            add("cudnn", (stack.get("cudnn") or {}).get("deb"))
            add("nccl", (stack.get("nccl") or {}).get("deb"))
        if msmpi:
            for installer in (stack.get("msmpi") or {}).get("installers", []):
                add("msmpi", installer)
    return list(found.values())


# ---------------------------------------------------------------- table


def cntk_matrix_rows(matrix):
    """The matrix as the rows of matrix/README.md's table (newest first)."""
    matrix = _matrix(matrix)
    releases = _section(matrix, "cntk")
    defaults = _section(matrix, "defaults")
    rows = []
    for version in _sort_versions(releases):
        release = releases[version]
        cuda_key = str(release["cuda"])
        cuda = matrix["cuda"][cuda_key]
        bundles = release.get("gpu_wheel_bundles") or []
        nccl = release.get("nccl")
        if nccl is None:
            nccl_cell = "-"
        else:
            nccl_cell = f"{nccl} (bundled)" if "nccl" in bundles else str(nccl)
        wheels = release["wheels"]["cpu"]
        first = next(value for key, value in wheels.items() if key != "package")
        source = "PyPI" if "pythonhosted.org" in str(first.get("url")) else "cntk.ai, no sha256"
        series = str(release["openmpi_series"])
        default_mpi = str(defaults.get("openmpi_version"))
        rows.append({
            "CNTK": version,
            "wheel": f"{release['wheel_version']} ({source})",
            "CUDA": f"{cuda_key} ({cuda['version']})",
            "cuDNN": str(release["cudnn"]),
            "NCCL": nccl_cell,
            "Open MPI": f"{series}.x ({default_mpi})" if default_mpi.startswith(series + ".") else f"{series}.x",
            "MS-MPI": str(release["msmpi"]),
            "Python": ", ".join(str(p) for p in release["python"]),
            "min driver": str(cuda["driver_min"]),
            "OS": ", ".join(release.get("os_documented", [])),
        })
    return rows
