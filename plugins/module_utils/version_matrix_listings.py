"""Two listings made from the version matrix: every file the resolved stacks
download, once, for offline mode (cntk_artifacts), and the matrix as the
rows of matrix/README.md's table (cntk_matrix_rows).

Exposed as the filters of the same names (plugins/filter/version_matrix.py).
"""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.module_utils.version_matrix_table import (
    MATRIX_FILE, load_matrix, section, sort_versions)


# ---------------------------------------------------------------- artifacts


def cntk_artifacts(matrix, stacks, nvidia=False, msmpi=False):
    """Every file the resolved stacks download, once, for offline mode.

    stacks: one stack from cntk_stack or a list of them (e.g. one per host).
    nvidia: also the CUDA runfile and the cuDNN/NCCL .debs of GPU stacks.
    msmpi: also the MS-MPI installers (Windows nodes).
    Each item: name, version, file, dest (its name in the download folder),
    url, sha256 (None where the matrix has no published value), sha256_source.
    Two different files that want the same dest are an error."""
    matrix = load_matrix(matrix)
    section(matrix, "cntk")
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
    matrix = load_matrix(matrix)
    releases = section(matrix, "cntk")
    defaults = section(matrix, "defaults")
    rows = []
    for version in sort_versions(releases):
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
            "compute capability": f"{cuda['compute_capability_min']}-{cuda['compute_capability_max']}",
            "OS": ", ".join(release.get("os_documented", [])),
        })
    return rows
