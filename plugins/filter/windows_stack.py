"""The Windows side of a resolved CNTK stack: which pinned files a Windows node installs.

`cntk_stack` (version_matrix.py) resolves CNTK, CUDA, cuDNN and MS-MPI from
matrix/cntk.yml. Windows nodes also need files the Linux stack does not name:
python.org's 3.6 installer, the win_amd64 wheels (cntk or cntk-gpu, numpy,
scipy, mpi4py) and, only when asked for, NVIDIA's Windows CUDA and cuDNN
installers. Those pins live in the matrix's `windows` section.

    stack | win_stack_select(pins, backend, toolkit, driver) -> what a Windows node installs
    selected | win_stack_artifacts                           -> items for the artifact_cache role

Pure Python, unit-tested in tests/unit/plugins/filter/test_windows_stack.py.
"""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

BACKENDS = ("numpy", "cntk")


def _item(name, pin):
    return {"name": name, "version": str(pin["version"]), "file": pin["file"],
            "dest": pin.get("dest") or pin["file"], "url": pin.get("url"), "sha256": pin.get("sha256"),
            "sha256_source": pin.get("sha256_source")}


def win_stack_select(stack, pins, backend="cntk", toolkit=False, driver=None):
    """Pick the Windows pins that go with a resolved stack.

    stack: a cntk_stack result; pins: the `windows` pins; backend: numpy or
    cntk; toolkit: also NVIDIA's CUDA and cuDNN installers (the cntk-gpu
    wheel bundles their runtime DLLs, so only a node that builds code needs
    them); driver: the NVIDIA driver installer the inventory names (or None)."""
    if not isinstance(stack, Mapping) or "cntk" not in stack:
        raise AnsibleFilterError("win_stack_select: stack must be a result of cntk_stack")
    if not isinstance(pins, Mapping):
        raise AnsibleFilterError("win_stack_select: the windows pins must be a mapping")
    if backend not in BACKENDS:
        raise AnsibleFilterError(f"win_stack_select: backend={backend!r}: choose numpy or cntk")
    version = stack["cntk"]["version"]
    device = stack["cntk"]["device"]
    python = str(stack["python"]["version"])

    python_pin = (pins.get("python") or {}).get(python)
    if python_pin is None:
        raise AnsibleFilterError(f"no Windows Python {python} installer is pinned: add it to the windows "
                                 f"pins (matrix/cntk.yml `windows.python`)")
    pip = pins.get("pip") or {}
    wanted_pip = ["numpy", "scipy"] if backend == "cntk" else ["numpy", "mpi4py"]
    missing = [name for name in wanted_pip if name not in pip]
    if missing:
        raise AnsibleFilterError(f"no Windows wheel pinned for {', '.join(missing)} (windows.pip)")
    wheels = [dict(pip[name], name=name) for name in wanted_pip]

    cntk_wheel = None
    if backend == "cntk":
        release = (pins.get("wheels") or {}).get(version) or {}
        cntk_wheel = release.get(device)
        if cntk_wheel is None:
            known = ", ".join(sorted(pins.get("wheels") or {})) or "none"
            raise AnsibleFilterError(
                f"no Windows {stack['cntk']['package']} wheel for CNTK {version} is pinned (pinned: {known}): "
                f"set cluster_cntk_version to one of those for Windows nodes")
        cntk_wheel = dict(cntk_wheel)
        wheels.append(cntk_wheel)

    nvidia = None
    if device == "gpu":
        cuda_key = str((stack.get("cuda") or {}).get("version") or "")
        nvidia_pins = (pins.get("nvidia") or {}).get(cuda_key)
        if nvidia_pins is None:
            raise AnsibleFilterError(f"no Windows NVIDIA pins for CUDA {cuda_key} (windows.nvidia)")
        nvidia = {"cuda_version": cuda_key, "driver_min": str(nvidia_pins["driver_min"]),
                  "cuda": dict(nvidia_pins["cuda"]) if toolkit else None,
                  "cudnn": dict(nvidia_pins["cudnn"]) if toolkit else None,
                  "driver": dict(driver) if driver else None}

    return {
        "cntk_version": version,
        "device": device,
        "backend": backend,
        "python": dict(python_pin),
        "wheels": wheels,
        "cntk_wheel": cntk_wheel,
        "msmpi": {"version": str(stack["msmpi"]["version"]),
                  "installers": [dict(i) for i in stack["msmpi"]["installers"]]},
        "nvidia": nvidia,
    }


def win_stack_artifacts(selected):
    """Every file of a selection, once, as the artifact_cache role takes them."""
    items = []
    for installer in selected["msmpi"]["installers"]:
        items.append(_item("msmpi", installer))
    items.append(_item("python", selected["python"]))
    for wheel in selected["wheels"]:
        items.append(_item(wheel["name"], wheel))
    nvidia = selected.get("nvidia") or {}
    for key in ("driver", "cuda", "cudnn"):
        if nvidia.get(key):
            items.append(_item("nvidia-" + key, nvidia[key]))
    seen, unique = set(), []
    for item in items:
        if item["dest"] not in seen:
            seen.add(item["dest"])
            unique.append(item)
    return unique


class FilterModule:
    def filters(self):
        return {"win_stack_select": win_stack_select, "win_stack_artifacts": win_stack_artifacts}
