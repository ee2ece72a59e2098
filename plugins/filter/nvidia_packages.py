"""NVIDIA's apt packages: pinned names for apt, and their .deb files as artifacts for offline installs."""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def _packages(packages):
    if not isinstance(packages, Mapping):
        raise AnsibleFilterError(f"NVIDIA packages must map a name to its exact version, got {packages!r}")
    return [(str(name), str(version)) for name, version in packages.items()]


def nvidia_apt_pinned_names(packages):
    """{'libcudnn7': '7.3.1.20-1+cuda10.0'} -> ['libcudnn7=7.3.1.20-1+cuda10.0'] (apt's name=version)."""
    return [f"{name}={version}" for name, version in _packages(packages)]


def nvidia_apt_debs(packages, repo_url, arch="amd64"):
    """The .deb files of those packages as artifact items, in the order given.

    File names follow Debian's pool naming (name_version_arch.deb; an epoch is
    left out of the file name). NVIDIA publishes no checksums outside its signed
    index, so sha256 is None: artifact_cache refuses them until the user pins
    each file's sha256 in cluster_artifact_sha256."""
    base = str(repo_url or "").rstrip("/")
    items = []
    for name, version in _packages(packages):
        file_version = version.split(":", 1)[-1]
        file = f"{name}_{file_version}_{arch}.deb"
        items.append({"name": name, "version": version, "file": file, "dest": file,
                      "url": f"{base}/{file}" if base else f"file:///{file}", "sha256": None,
                      "sha256_source": "cluster_artifact_sha256 (NVIDIA publishes none outside its apt index)"})
    return items


NVIDIA_REPOS = "https://developer.download.nvidia.com/compute/cuda/repos/"


def cntk_nvidia_debs(stack, repo_url=""):
    """Every NVIDIA .deb a resolved GPU stack installs (driver, CUDA, cuDNN, NCCL), as artifact items.

    repo_url: the repository (or mirror) the files come from; by default NVIDIA's
    repository for the newest OS the matrix lists for the stack's CUDA."""
    if not isinstance(stack, Mapping) or "cntk" not in stack:
        raise AnsibleFilterError("cntk_nvidia_debs: the input must be a result of cntk_stack")
    if stack["cntk"].get("device") != "gpu":
        return []
    cuda = stack.get("cuda") or {}
    if not repo_url:
        repos = (cuda.get("apt") or {}).get("repos") or []
        if not repos:
            return []
        repo_url = f"{NVIDIA_REPOS}{repos[-1]}/x86_64/"
    items = []
    for packages in ((cuda.get("driver_apt") or {}).get("packages"), (cuda.get("apt") or {}).get("packages"),
                     ((stack.get("cudnn") or {}).get("apt") or {}).get("packages"),
                     ((stack.get("nccl") or {}).get("apt") or {}).get("packages")):
        if packages:
            items.extend(nvidia_apt_debs(packages, repo_url))
    return items


class FilterModule:
    def filters(self):
        return {"nvidia_apt_pinned_names": nvidia_apt_pinned_names, "nvidia_apt_debs": nvidia_apt_debs,
                "cntk_nvidia_debs": cntk_nvidia_debs}
