"""The parts of a CNTK stack that take more than a lookup: Python (packaged
or built from source, and against which OpenSSL), the GPU libraries and the
driver they need, Open MPI, and what an OS the release does not document
changes.

cntk_stack (version_matrix.py) calls these once it knows the release, the
device and the OS. Each takes `reject`, cntk_stack's way to refuse an
override: an AnsibleFilterError, or with force: true a warning, after which
the part comes back unpinned (nothing is downloaded for it).
"""

from ansible_collections.cntk.cluster.plugins.module_utils.version_matrix_table import (
    MATRIX_FILE, driver_satisfies, installable, matches, pin, section, sort_versions, unpinned, version_tuple)

# Open MPI 2.x+ breaks the libmpi.so.12 / libmpi_cxx.so.1 ABI every CNTK 2.x wheel links.
OPENMPI_ABI_ISSUE = "microsoft/CNTK#3392"


def resolve_python(matrix, python, os_name, os_info, os_request, pinned):
    source_pin = section(matrix, "python_source").get(python)
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
            openssl_needed = version_tuple(system, "openssl") > version_tuple(source_pin["openssl_max"], "openssl")
        if openssl_needed is not False:
            series = str(source_pin["openssl_max"])
            for key, entry in section(matrix, "openssl_source").items():
                if str(entry.get("series")) == series:
                    openssl = pin(entry)
                    break
    return {
        "version": python,
        "abi": _python_abi(python),
        "pinned": pinned,
        "build_from_source": build,
        "reason": reason,
        "packages": packages,
        "source": pin(source_pin) if (build is not False and source_pin is not None) else None,
        "openssl": openssl,
        "openssl_needed": openssl_needed,
    }


def _python_abi(python):
    digits = python.replace(".", "")
    return f"cp{digits}mu" if python.startswith("2.") else f"cp{digits}m"


def resolve_gpu(matrix, releases, version, release, request, bundles, reject, latest):
    cuda_key, cudnn_key, nccl_key = str(release["cuda"]), str(release["cudnn"]), release.get("nccl")
    cuda_pin = section(matrix, "cuda")[cuda_key]
    cudnn_pin = section(matrix, "cudnn")[cudnn_key]
    nccl_pin = section(matrix, "nccl")[str(nccl_key)] if nccl_key is not None else None

    cuda = pin(cuda_pin, version=cuda_key, full_version=str(cuda_pin["version"]),
                bundled_in_wheel="cuda-runtime" in bundles)
    cudnn = pin(cudnn_pin, version=cudnn_key, full_version=str(cudnn_pin["version"]),
                 bundled_in_wheel="cudnn" in bundles)
    nccl = (pin(nccl_pin, version=str(nccl_key), full_version=str(nccl_pin["version"]),
                 bundled_in_wheel="nccl" in bundles) if nccl_pin is not None else None)
    driver_min = str(cuda_pin["driver_min"])

    requested = request.get("cuda_version")
    if requested not in (None, "") and not matches(requested, cuda_pin["version"]):
        others = [v for v in sort_versions(releases)
                  if matches(requested, matrix["cuda"][str(releases[v]["cuda"])]["version"])]
        if others:
            fix = f"set cntk_version to a release built for CUDA {requested}: {', '.join(others)}"
        else:
            fix = (f"set cntk_version to a release built for CUDA {requested} "
                   f"(none is: {latest} is the last CNTK release)")
        reject(f"cuda_version={requested} does not match CNTK {version}, which needs CUDA {cuda_key} "
               f"(cuDNN {cudnn_key}): remove cuda_version or {fix}")
        cuda = unpinned(requested, full_version=str(requested), driver_min=None, apt=None, runfile=None,
                         bundled_in_wheel=False)
        driver_min = None

    requested = request.get("cudnn_version")
    if requested not in (None, "") and not matches(requested, cudnn_pin["version"]):
        where = " (the cntk-gpu wheel bundles it as libcudnn.so.7)" if "cudnn" in bundles else ""
        reject(f"cudnn_version={requested} does not match CNTK {version}, which needs cuDNN {cudnn_key} "
               f"for CUDA {cuda_key}{where}: remove cudnn_version")
        cudnn = unpinned(requested, full_version=str(requested), apt=None, deb=None, bundled_in_wheel=False)

    requested = request.get("nccl_version")
    if requested not in (None, "") and (nccl_pin is None or not matches(requested, nccl_pin["version"])):
        needs = f"NCCL {nccl_key}" if nccl_pin is not None else "no particular NCCL"
        where = " (the cntk-gpu wheel bundles it as libnccl.so.2)" if "nccl" in bundles else ""
        reject(f"nccl_version={requested} does not match CNTK {version}, which needs {needs}{where}: "
               f"remove nccl_version")
        nccl = unpinned(requested, full_version=str(requested), apt=None, deb=None, bundled_in_wheel=False)

    installed = request.get("driver_version")
    if installed not in (None, "") and driver_min is not None and not driver_satisfies(installed, driver_min):
        older = [v for v in installable(releases)
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
    if capability not in (None, "") and version_tuple(capability, "compute_capability") < version_tuple(minimum):
        reject(f"compute_capability={capability} is below {minimum}, the minimum for CNTK {version}'s GPU "
               f"kernels: run this node as device: cpu")
    return cuda, cudnn, nccl, driver_min


def resolve_openmpi(matrix, defaults, version, release, requested, device, reject):
    pins = section(matrix, "openmpi")
    series = str(release["openmpi_series"])
    default = str(defaults.get("openmpi_version"))
    if default not in pins or str(pins[default]["series"]) != series:
        default = next(key for key in sort_versions(pins) if str(pins[key]["series"]) == series)
    chosen = default
    major = version.split(".")[0]
    if requested not in (None, ""):
        requested = str(requested).strip()
        wanted = requested.split(".")
        if wanted[: len(series.split("."))] != series.split("."):
            if matches(requested, series):  # '1' alone: too vague to be a release
                detail = f"{requested} names no Open MPI {series}.x release"
            elif wanted[0].isdigit() and int(wanted[0]) >= 2:
                detail = (f"Open MPI 2.x and later are not ABI compatible with it and build no libmpi_cxx "
                          f"({OPENMPI_ABI_ISSUE})")
            else:
                detail = f"only Open MPI {series}.x provides those libraries"
            reject(f"openmpi_version={requested}: CNTK {major}.x needs Open MPI {series}.x (libmpi.so.12, "
                   f"libmpi_cxx.so.1); {detail}: remove openmpi_version to build the pinned {default} "
                   f"into {pins[default]['prefix']}")
            return unpinned(requested, series=None, prefix=None, cuda_aware=False)
        if requested == series:
            chosen = default
        elif requested in pins:
            chosen = requested
        else:
            same_series = [k for k in sort_versions(pins) if str(pins[k]["series"]) == series]
            reject(f"openmpi_version={requested} has no pinned sha256 in {MATRIX_FILE} (pinned {series}.x: "
                   f"{', '.join(same_series)}): set one of those, or add {requested} with its published sha256")
            return unpinned(requested, series=series, prefix=pins[default]["prefix"],
                             cuda_aware=device == "gpu")
    chosen_pin = pin(pins[chosen])
    chosen_pin["cuda_aware"] = device == "gpu"
    chosen_pin["configure_args"] = list(chosen_pin.get("configure_args") or [])
    if device == "gpu":
        chosen_pin["configure_args"] += list(chosen_pin.get("configure_args_cuda") or [])
    return chosen_pin


def os_warning(version, release, os_name, os_info, python_stack, device, cuda):
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

