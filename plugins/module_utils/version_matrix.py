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

This module is the resolver itself (cntk_stack, the stack's shape). Its
pieces live beside it:

    version_matrix_table.py       reading the matrix, its pins, version
                                  arithmetic, driver_satisfies
    version_matrix_components.py  Python, the GPU libraries and driver, Open
                                  MPI, an undocumented OS's consequences
    version_matrix_listings.py    cntk_artifacts, cntk_matrix_rows

The functions are plain Python and are unit-tested directly
(tests/unit/plugins/module_utils/test_version_matrix_*.py; the filters in
tests/unit/plugins/filter/test_version_matrix.py).
"""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.module_utils.version_matrix_components import (
    os_warning, resolve_gpu, resolve_openmpi, resolve_python)
from ansible_collections.cntk.cluster.plugins.module_utils.version_matrix_table import (
    DEVICES, MATRIX_FILE, as_bool, find_os, installable, load_matrix, major_minor, pin, section, sort_versions)


def cntk_stack(matrix, request=None):
    """Resolve the full stack for one kind of node.

    request: {cntk_version, device: gpu|cpu, python_version, cuda_version,
    cudnn_version, nccl_version, openmpi_version, driver_version (installed),
    compute_capability, os: {distribution, version}, force}; all optional,
    defaults from the matrix's `defaults`."""
    matrix = load_matrix(matrix)
    if request is None:
        request = {}
    if not isinstance(request, Mapping):
        raise AnsibleFilterError(f"cntk_stack: the request must be a mapping, got {type(request).__name__}")
    defaults = section(matrix, "defaults")
    releases = section(matrix, "cntk")
    force = as_bool(request.get("force", False))
    warnings = []

    def reject(message):
        if force:
            warnings.append(f"forced past: {message}")
        else:
            raise AnsibleFilterError(message)

    known = sort_versions(releases)
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
        os_name, os_info = find_os(section(matrix, "os"), os_request.get("distribution"),
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
        python = major_minor(python_request)
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
    python_stack = resolve_python(matrix, python, os_name, os_info, os_request, python_pinned)

    # ---- wheel
    wheels = release["wheels"][device]
    package = wheels["package"]
    wheel = None
    if python in wheels:
        wheel = pin(wheels[python], name=package, python=python)
        wheel.setdefault("dest", wheel["file"])
        if wheel.get("sha256") is None:
            reject(f"the {package} {wheel['version']} wheel for Python {python} has no published sha256 "
                   f"({wheel.get('sha256_source')}): it cannot be verified; use a CNTK release from PyPI "
                   f"({', '.join(installable(releases))}) or set force: "
                   f"true and provide the file yourself")
    else:
        warnings.append(f"no {package} {release['wheel_version']} wheel exists for Python {python}: "
                        f"nothing can be installed until one is provided")

    # ---- GPU libraries
    cuda = cudnn = nccl = None
    driver_min = None
    bundles = list(release.get("gpu_wheel_bundles") or [])
    if device == "gpu":
        cuda, cudnn, nccl, driver_min = resolve_gpu(matrix, releases, version, release, request, bundles,
                                                     reject, latest)
    else:
        for key in ("cuda_version", "cudnn_version", "nccl_version", "driver_version"):
            if request.get(key) not in (None, ""):
                warnings.append(f"{key}={request[key]} is ignored: device is cpu")

    # ---- Open MPI
    openmpi = resolve_openmpi(matrix, defaults, version, release, request.get("openmpi_version"), device, reject)

    # ---- OS consequences, now that Python and CUDA are known
    if os_info is not None and os_info.get("support") != "documented":
        warnings.append(os_warning(version, release, os_name, os_info, python_stack, device, cuda))

    wheel_deps = [pin(dep) for dep in (matrix.get("wheel_deps") or {}).get(python, [])]

    mpi4py_version = str(defaults.get("mpi4py_version"))
    mpi4py = pin(section(matrix, "mpi4py")[mpi4py_version])
    msmpi_version = str(release.get("msmpi"))
    msmpi = pin(section(matrix, "msmpi")[msmpi_version], version=msmpi_version)

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
    matrix = load_matrix(matrix)
    try:
        cntk_stack(matrix, request)
    except AnsibleFilterError as error:
        return str(error.message if hasattr(error, "message") else error)
    return ""

