"""Which NVIDIA GPUs a stack's CUDA can drive: each GPU's model and compute
capability, read before anything changes on a node, judged against the range
matrix/cntk.yml gives that CUDA release (cuda.<version>.compute_capability_min
and _max).

A GPU is read three ways, best first:

    nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader
        the driver's own answer (compute_cap needs driver 510 or newer;
        an older one refuses the field and the next way is used)
    lspci -nn -d 10de:
        the PCI device id, looked up in PCI_GPUS below
    grep -H . /sys/bus/pci/devices/<dev>/device <dev>/class ...
        the same ids from sysfs, for a node without pciutils

Pure stdlib: the preflight's filters (plugins/filter/gpu.py) and
tests/gpu/check.py (loaded by path on a GPU machine) share it.
"""

import re

# PCI device id (vendor 0x10de) -> (model, compute capability), for the common
# datacenter GPUs. Ids and names: the PCI ID Repository's pci.ids
# (github.com/pciutils/pciids; Debian ships it in package pci.ids as
# /usr/share/misc/pci.ids, which hwdata's /usr/share/hwdata/pci.ids links to).
# Debian 12's copy (2023.04.10) has all but 26b9 (L40S) and 2335/233b (H200),
# which the repository's 2026.08.22 copy has. Compute capability per model:
# NVIDIA's CUDA GPUs table (developer.nvidia.com/cuda-gpus).
PCI_GPUS = {
    "102d": ("K80", "3.7"),     # GK210GL [Tesla K80]
    "15f7": ("P100", "6.0"),    # GP100GL [Tesla P100 PCIe 12GB]
    "15f8": ("P100", "6.0"),    # GP100GL [Tesla P100 PCIe 16GB]
    "15f9": ("P100", "6.0"),    # GP100GL [Tesla P100 SXM2 16GB]
    "1db1": ("V100", "7.0"),    # GV100GL [Tesla V100 SXM2 16GB]
    "1db4": ("V100", "7.0"),    # GV100GL [Tesla V100 PCIe 16GB]
    "1db5": ("V100", "7.0"),    # GV100GL [Tesla V100 SXM2 32GB]
    "1db6": ("V100", "7.0"),    # GV100GL [Tesla V100 PCIe 32GB]
    "1df5": ("V100", "7.0"),    # GV100GL [Tesla V100 SXM2 16GB]
    "1df6": ("V100S", "7.0"),   # GV100GL [Tesla V100S PCIe 32GB]
    "1eb8": ("T4", "7.5"),      # TU104GL [Tesla T4]
    "20b0": ("A100", "8.0"),    # GA100 [A100 SXM4 40GB]
    "20b1": ("A100", "8.0"),    # GA100 [A100 PCIe 40GB]
    "20b2": ("A100", "8.0"),    # GA100 [A100 SXM4 80GB]
    "20b3": ("A100", "8.0"),    # GA100 [A100-SXM-64GB]
    "20b5": ("A100", "8.0"),    # GA100 [A100 PCIe 80GB]
    "20f1": ("A100", "8.0"),    # GA100 [A100 PCIe 40GB]
    "20b7": ("A30", "8.0"),     # GA100GL [A30 PCIe]
    "2235": ("A40", "8.6"),     # GA102GL [A40]
    "2236": ("A10", "8.6"),     # GA102GL [A10]
    "2237": ("A10G", "8.6"),    # GA102GL [A10G]
    "27b8": ("L4", "8.9"),      # AD104GL [L4]
    "26b5": ("L40", "8.9"),     # AD102GL [L40]
    "26b9": ("L40S", "8.9"),    # AD102GL [L40S]
    "2321": ("H100", "9.0"),    # GH100 [H100L 94GB]
    "2330": ("H100", "9.0"),    # GH100 [H100 SXM5 80GB]
    "2331": ("H100", "9.0"),    # GH100 [H100 PCIe]
    "2336": ("H100", "9.0"),    # GH100 [H100]
    "2337": ("H100", "9.0"),    # GH100 [H100 SXM5 64GB]
    "2338": ("H100", "9.0"),    # GH100 [H100 SXM5 96GB]
    "2339": ("H100", "9.0"),    # GH100 [H100 SXM5 94GB]
    "233d": ("H100", "9.0"),    # GH100 [H100 96GB]
    "2335": ("H200", "9.0"),    # GH100 [H200 SXM 141GB]
    "233b": ("H200", "9.0"),    # GH100 [H200 NVL]
}
MODELS = sorted({model for model, _ in PCI_GPUS.values()}, key=len, reverse=True)

# PCI classes of a GPU: VGA compatible controller, 3D controller. An NVIDIA
# card's HDMI audio function (0403) and NVSwitch bridges (0680) are not GPUs.
GPU_CLASSES = ("0300", "0302")

_LSPCI = re.compile(r"^(?P<bus>\S+) [^\[]*\[(?P<cls>[0-9a-f]{4})\]: (?P<desc>.*?) ?\[10de:(?P<dev>[0-9a-f]{4})\]",
                    re.I)


def capability_tuple(value):
    """'7.5' -> (7, 5); ValueError for anything else."""
    text = str(value).strip()
    if not re.match(r"^\d+\.\d+$", text):
        raise ValueError("compute capability %r is not like 7.5" % (value,))
    major, minor = text.split(".")
    return int(major), int(minor)


def model_of(name):
    """The short model a user names ('A100', 'V100S') from nvidia-smi's or lspci's name; the name itself when no
    model of PCI_GPUS is in it."""
    text = re.sub(r"^(NVIDIA|Tesla)\s+", "", str(name).strip(), flags=re.I)
    text = re.sub(r"^(NVIDIA|Tesla)\s+", "", text, flags=re.I)
    first = re.split(r"[\s\-]", text, 1)[0]
    for model in MODELS:
        if first.upper() == model.upper():
            return model
    return text


def from_nvidia_smi(stdout):
    """GPUs from `nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader`; None when the answer has no
    capability (a driver older than 510 refuses the field)."""
    gpus = []
    for index, line in enumerate(line for line in str(stdout).splitlines() if line.strip()):
        if "," not in line:
            return None
        name, capability = (part.strip() for part in line.rsplit(",", 1))
        try:
            capability_tuple(capability)
        except ValueError:
            return None
        gpus.append({"id": "GPU %d" % index, "name": name, "model": model_of(name), "compute_capability": capability})
    return gpus or None


def _gpu_from_pci(bus, device, name):
    device = device.lower()
    if name in ("", "Device"):  # lspci names an id its pci.ids lacks "Device"
        name = ""
    model, capability = PCI_GPUS.get(device, (None, None))
    if model is None:
        bracket = re.findall(r"\[([^\]]+)\]", name)
        model = bracket[-1] if bracket else (name or "NVIDIA device 10de:" + device)
    return {"id": bus, "name": name or "NVIDIA device 10de:" + device, "model": model,
            "compute_capability": capability, "pci_id": "10de:" + device}


def from_lspci(stdout):
    """GPUs from `lspci -nn -d 10de:`: display controllers only, by their PCI device id."""
    gpus = []
    for line in str(stdout).splitlines():
        match = _LSPCI.match(line.strip())
        if not match or match.group("cls") not in GPU_CLASSES:
            continue
        name = re.sub(r"^NVIDIA Corporation\s*", "", match.group("desc")).strip()
        gpus.append(_gpu_from_pci(match.group("bus"), match.group("dev"), name))
    return gpus


def from_sysfs(stdout):
    """GPUs from `grep -H . <dev>/vendor <dev>/device <dev>/class ...` over /sys/bus/pci/devices."""
    devices = {}
    for line in str(stdout).splitlines():
        path, _, value = line.rpartition(":")
        folder, _, attribute = path.rpartition("/")
        devices.setdefault(folder, {})[attribute] = value.strip().lower()
    gpus = []
    for folder in sorted(devices):
        fields = devices[folder]
        if fields.get("vendor", "0x10de") != "0x10de" or "device" not in fields:
            continue
        if fields.get("class", "")[2:6] not in GPU_CLASSES:
            continue
        gpus.append(_gpu_from_pci(folder.rsplit("/", 1)[-1], fields["device"][2:], ""))
    return gpus


def read_gpus(nvidia_smi=None, lspci=None, sysfs=None):
    """{source, gpus} from the best answer given (None: that way was not available)."""
    if nvidia_smi is not None:
        gpus = from_nvidia_smi(nvidia_smi)
        if gpus:
            return {"source": "nvidia-smi", "gpus": gpus}
    if lspci is not None:
        return {"source": "lspci", "gpus": from_lspci(lspci)}
    if sysfs is not None:
        return {"source": "sysfs", "gpus": from_sysfs(sysfs)}
    return {"source": "none", "gpus": []}


def _accepted(gpu, accepted):
    if accepted is True or str(accepted).strip().lower() in ("true", "yes"):
        return True
    if not isinstance(accepted, (list, tuple)):
        return False
    names = {str(item).strip().lower() for item in accepted}
    return bool(names & {str(gpu["model"]).lower(), str(gpu["name"]).lower(), str(gpu.get("pci_id", "")).lower()})


def report(reading, minimum, maximum, accepted, host, what):
    """{problem, notes}: problem is '' or the refusal naming the host, every GPU out of range (model, capability)
    and the fix; notes say which GPUs were taken on the user's word. `what` names the CUDA and CNTK releases."""
    low, high = capability_tuple(minimum), capability_tuple(maximum)
    refused, notes = [], []
    for gpu in reading["gpus"]:
        capability = gpu["compute_capability"]
        label = "%s %s (%s)" % (gpu["id"], gpu["name"], gpu["model"]) if gpu["name"] != gpu["model"] \
            else "%s %s" % (gpu["id"], gpu["name"])
        if capability is None:
            why = "%s, compute capability unknown (read by %s: its PCI id is not in the project's table, " \
                  "plugins/module_utils/gpu_capability.py, and no driver 510 or newer reports it)" % (
                      label, reading["source"])
        elif not low <= capability_tuple(capability) <= high:
            why = "%s, compute capability %s" % (label, capability)
        else:
            continue
        if _accepted(gpu, accepted):
            notes.append("%s: %s, outside %s-%s, accepted by cluster_gpu_unsupported_ok" % (
                host, why, minimum, maximum))
        else:
            refused.append((gpu, why))
    problem = ""
    if refused:
        models = sorted({gpu["model"] for gpu, _ in refused})
        problem = ("%s: %s: outside %s-%s, the compute capabilities %s can drive (CUDA-10-era kernels are reported "
                   "failing on newer GPUs: 'device kernel image is invalid', tensorflow#47563). Use GPUs in that "
                   "range, set cluster_device: cpu for %s, or accept them explicitly with "
                   "cluster_gpu_unsupported_ok: [%s] (or true). Nothing was changed." % (
                       host, "; ".join(why for _, why in refused), minimum, maximum, what, host,
                       ", ".join(models)))
    return {"problem": problem, "notes": notes}
