#!/usr/bin/env python3
"""GPU checks for a real GPU machine: driver, CUDA driver API, NCCL, nccl-tests.

Needs only python3 (stdlib) and the NVIDIA driver; not run by `make test`
(no GPU here). Run on a GPU node, or on the project's lent GPU machine:

    python3 tests/gpu/check.py [--out DIR] [--nccl-tests DIR]

1. nvidia-smi lists every GPU with its driver; the driver must be at least
   the minimum matrix/cntk.yml names for the stack's CUDA (--cuda, 10.0).
2. libcuda.so.1 (driver API, ctypes): cuInit, device count equal to
   nvidia-smi's, each device's compute capability at least the matrix's
   minimum for CNTK 2.7 (3.0); a warning above sm_70, where CNTK 2.7's kernels
   rely on PTX JIT.
3. Each GPU's model and compute capability (nvidia-smi's name and
   compute_cap, else the CUDA driver API's, else the PCI id from lspci
   looked up in plugins/module_utils/gpu_capability.py) against the range
   matrix/cntk.yml gives the stack's CUDA (3.0-7.5 for CUDA 10.0): "ok"
   inside, "outside" (reported, not a failure of the machine) beyond it; a
   PCI-id table entry the driver contradicts is a failure.
4. libnccl.so.2 if the linker finds it: its version.
5. nccl-tests' all_reduce_perf (--nccl-tests: a built tree, a source tree,
   or the tarball matrix/cntk.yml pins, checked against its sha256; sources
   are built with nvcc) over every GPU, 8 B..256 MB: the bus bandwidth table.

Writes DIR/gpu_check.json (default bench/results/) and exits non-zero on a
failed check. Each check is skipped with the reason when its tool is absent.
"""

import argparse
import ctypes
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def matrix_value(section_key, field):
    """A scalar from matrix/cntk.yml without PyYAML: `field: "x"` under `  "<key>":` of a section."""
    section, key = section_key
    text = (ROOT / "matrix" / "cntk.yml").read_text()
    block = re.search(rf"^{section}:\n(.*?)(?=^\S)", text, re.M | re.S).group(1)
    entry = re.search(rf'^  "{re.escape(key)}":\n(.*?)(?=^  "|\Z)', block, re.M | re.S).group(1)
    return re.search(rf'^\s+{field}: "([^"]+)"', entry, re.M).group(1)


def version_tuple(text):
    return tuple(int(x) for x in re.findall(r"\d+", text))


def check_nvidia_smi(result, driver_min):
    if not shutil.which("nvidia-smi"):
        result["nvidia_smi"] = {"status": "fail", "why": "nvidia-smi not found: no NVIDIA driver installed"}
        return []
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,pci.bus_id",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=60)
    gpus = [dict(zip(("index", "name", "driver", "memory", "bus"), (f.strip() for f in line.split(","))))
            for line in out.stdout.splitlines() if line.strip()]
    low = [g for g in gpus if version_tuple(g["driver"]) < version_tuple(driver_min)]
    result["nvidia_smi"] = {"status": "ok" if gpus and not low and out.returncode == 0 else "fail",
                            "gpus": gpus, "driver_min": driver_min, "stderr": out.stderr.strip()}
    return gpus


def check_cuda_driver_api(result, expected, min_cc):
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        result["cuda_driver_api"] = {"status": "fail", "why": f"libcuda.so.1: {error}"}
        return
    if cuda.cuInit(0) != 0:
        result["cuda_driver_api"] = {"status": "fail", "why": "cuInit failed"}
        return
    count, version = ctypes.c_int(), ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(count))
    cuda.cuDriverGetVersion(ctypes.byref(version))
    devices = []
    for index in range(count.value):
        device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(device), index)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device)  # COMPUTE_CAPABILITY_MAJOR
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)  # COMPUTE_CAPABILITY_MINOR
        devices.append(f"{major.value}.{minor.value}")
    too_old = [cc for cc in devices if version_tuple(cc) < version_tuple(min_cc)]
    result["cuda_driver_api"] = {
        "status": "ok" if count.value == expected and not too_old else "fail",
        "devices": count.value, "nvidia_smi_gpus": expected, "compute_capability": devices,
        "driver_cuda_version": f"{version.value // 1000}.{version.value % 1000 // 10}",
        "min_compute_capability": min_cc,
        "warning": ("CNTK 2.7's GPU kernels stop at sm_70: newer GPUs run them through PTX JIT (unverified)"
                    if any(version_tuple(cc) > (7, 0) for cc in devices) else None)}


def gpu_capability_module():
    """plugins/module_utils/gpu_capability.py (pure stdlib), loaded by path: no Ansible needed here."""
    spec = importlib.util.spec_from_file_location(
        "gpu_capability", str(ROOT / "plugins" / "module_utils" / "gpu_capability.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(argv):
    if not shutil.which(argv[0]):
        return None
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return out.stdout if out.returncode == 0 else None


def sysfs_text(root="/sys/bus/pci/devices"):
    """What `grep -H . <dev>/vendor <dev>/device <dev>/class` prints for every NVIDIA PCI device (no pciutils)."""
    lines = []
    for folder in sorted(Path(root).glob("*")) if Path(root).is_dir() else []:
        try:
            fields = {name: (folder / name).read_text().strip() for name in ("vendor", "device", "class")}
        except OSError:
            continue
        if fields["vendor"] == "0x10de":
            lines += ["%s/%s:%s" % (folder, name, value) for name, value in fields.items()]
    return "\n".join(lines)


def check_compute_capability(result, cuda, minimum, maximum):
    gc = gpu_capability_module()
    smi = _run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"])
    lspci = _run(["lspci", "-nn", "-d", "10de:"])
    table = gc.read_gpus(None, lspci, None if lspci is not None else sysfs_text())
    reading = gc.read_gpus(smi)
    # A driver older than 510 has no compute_cap: nvidia-smi's names with the driver API's capabilities (check 2).
    driver = (result.get("cuda_driver_api") or {}).get("compute_capability") or []
    names = [gpu.get("name") for gpu in (result.get("nvidia_smi") or {}).get("gpus") or []]
    if not reading["gpus"] and driver and len(names) == len(driver):
        reading = {"source": "cuda driver api", "gpus": [
            {"id": "GPU %d" % i, "name": name, "model": gc.model_of(name), "compute_capability": cc}
            for i, (name, cc) in enumerate(zip(names, driver))]}
    # The project's PCI-id table (what preflight uses before a driver is there) against the driver's answer.
    by_model = {gpu["model"]: gpu["compute_capability"] for gpu in table["gpus"] if gpu["compute_capability"]}
    wrong = ["%s: table %s, driver %s" % (gpu["model"], by_model[gpu["model"]], gpu["compute_capability"])
             for gpu in reading["gpus"] if by_model.get(gpu["model"]) not in (None, gpu["compute_capability"])]
    if not reading["gpus"]:
        reading = table
    low, high = gc.capability_tuple(minimum), gc.capability_tuple(maximum)
    gpus = [dict(gpu, covered=gpu["compute_capability"] is not None
                 and low <= gc.capability_tuple(gpu["compute_capability"]) <= high) for gpu in reading["gpus"]]
    verdict = gc.report(reading, minimum, maximum, False, result["host"], "CUDA " + cuda)
    status = "skipped" if not gpus else "fail" if wrong else "ok" if all(g["covered"] for g in gpus) else "outside"
    result["compute_capability"] = {
        "status": status, "source": reading["source"], "cuda": cuda, "range": "%s-%s" % (minimum, maximum),
        "gpus": gpus, "pci_table": {"source": table["source"], "gpus": table["gpus"]},
        "why": ("no GPU read (nvidia-smi, lspci, sysfs)" if not gpus else
                "the PCI-id table disagrees with the driver: " + "; ".join(wrong) if wrong else
                verdict["problem"] or None)}


def check_nccl(result):
    try:
        nccl = ctypes.CDLL("libnccl.so.2")
    except OSError as error:
        result["nccl"] = {"status": "skipped", "why": f"libnccl.so.2 not found ({error})"}
        return
    version = ctypes.c_int()
    nccl.ncclGetVersion(ctypes.byref(version))
    v = version.value
    text = f"{v // 10000}.{v % 10000 // 100}.{v % 100}" if v >= 10000 else f"{v // 1000}.{v % 1000 // 100}.{v % 100}"
    result["nccl"] = {"status": "ok", "version": text}


def check_nccl_tests(result, source, gpus):
    if not source:
        result["all_reduce_perf"] = {"status": "skipped", "why": "no --nccl-tests DIR (nccl-tests source or build)"}
        return
    source = Path(source)
    if source.is_file():  # the pinned tarball (matrix: nccl_tests), checked and unpacked beside it
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        pinned = re.search(r"^nccl_tests:\n(?:.*\n)*?\s+sha256: ([0-9a-f]{64})",
                           (ROOT / "matrix" / "cntk.yml").read_text(), re.M).group(1)
        if digest != pinned:
            result["all_reduce_perf"] = {"status": "fail", "why": f"{source} has sha256 {digest}, not {pinned}"}
            return
        with tarfile.open(source) as archive:
            top = archive.getnames()[0].split("/")[0]
            archive.extractall(source.parent, filter="data")
        source = source.parent / top
    binary = source / "build" / "all_reduce_perf"
    if not binary.exists():
        if not shutil.which("nvcc") and not Path("/usr/local/cuda/bin/nvcc").exists():
            result["all_reduce_perf"] = {"status": "skipped", "why": "nccl-tests is not built and nvcc is absent"}
            return
        build = subprocess.run(["make", "-C", str(source), f"-j{os.cpu_count()}"], capture_output=True, text=True,
                               timeout=900)
        if build.returncode != 0:
            result["all_reduce_perf"] = {"status": "fail", "why": "build failed", "log": build.stderr[-3000:]}
            return
    run = subprocess.run([str(binary), "-b", "8", "-e", "256M", "-f", "2", "-g", str(max(gpus, 1))],
                         capture_output=True, text=True, timeout=900)
    rows = []
    for line in run.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 12 and fields[0].isdigit():
            rows.append({"bytes": int(fields[0]), "algbw_GBps": float(fields[-6]), "busbw_GBps": float(fields[-5])})
    avg = re.search(r"Avg bus bandwidth\s*:\s*([\d.]+)", run.stdout)
    result["all_reduce_perf"] = {"status": "ok" if run.returncode == 0 and rows else "fail", "rows": rows,
                                 "avg_busbw_GBps": float(avg.group(1)) if avg else None,
                                 "stderr": run.stderr[-2000:]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cuda", default="10.0", help="the stack's CUDA release (matrix key)")
    parser.add_argument("--cntk", default="2.7", help="the CNTK release (matrix key)")
    parser.add_argument("--nccl-tests", help="nccl-tests source or build folder")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    driver_min = matrix_value(("cuda", args.cuda), "driver_min")
    min_cc = matrix_value(("cntk", args.cntk), "min_compute_capability")
    cc_range = [matrix_value(("cuda", args.cuda), "compute_capability_" + end) for end in ("min", "max")]
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": os.uname().nodename}
    gpus = check_nvidia_smi(result, driver_min)
    check_cuda_driver_api(result, len(gpus), min_cc)
    check_compute_capability(result, args.cuda, *cc_range)
    check_nccl(result)
    check_nccl_tests(result, args.nccl_tests, len(gpus))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2) + "\n")
    for name, value in result.items():
        if isinstance(value, dict):
            print(f"{name:18} {value.get('status'):8} {value.get('why') or ''}")
    print(f"wrote {out / 'gpu_check.json'}")
    return 1 if any(isinstance(v, dict) and v.get("status") == "fail" for v in result.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
