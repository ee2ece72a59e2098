"""tests/gpu/check.py reads the matrix without PyYAML (it must read what PyYAML reads), fails naming why where
there is no driver, judges nvidia-smi's answer against the matrix's driver minimum, and on a machine with a GPU
passes its driver and CUDA checks."""

import json
import os
from pathlib import Path

import pytest
import source_modules
import yaml

ROOT = Path(__file__).resolve().parents[2]
check = source_modules.load(ROOT / "tests" / "gpu" / "check.py", "gpu_check")

MATRIX = yaml.safe_load((ROOT / "matrix" / "cntk.yml").read_text())
GPU = Path("/dev/nvidiactl").exists()


def test_driver_minimum_matches_the_matrix():
    for cuda in MATRIX["cuda"]:
        assert check.matrix_value(("cuda", cuda), "driver_min") == MATRIX["cuda"][cuda]["driver_min"]


def test_compute_capability_minimum_matches_the_matrix():
    for release in MATRIX["cntk"]:
        assert (check.matrix_value(("cntk", release), "min_compute_capability")
                == MATRIX["cntk"][release]["min_compute_capability"])


def test_without_a_driver_the_check_fails_and_says_why(tmp_path, monkeypatch):
    # No nvidia-smi on PATH, on any machine (a GPU machine's driver tools hidden).
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert check.main(["--out", str(tmp_path)]) == 1
    report = (tmp_path / "gpu_check.json").read_text()
    assert "nvidia-smi not found" in report


def fake_nvidia_smi(folder, lines):
    """A test double for nvidia-smi (no GPU on the machines `make test` runs on): prints `lines` as the CSV
    query's answer."""
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\ncat <<'EOF'\n" + "".join(line + "\n" for line in lines) + "EOF\n")
    script.chmod(0o755)
    return folder


def test_a_driver_below_the_matrix_minimum_fails_and_one_at_it_passes(tmp_path, monkeypatch):
    minimum = MATRIX["cuda"]["10.0"]["driver_min"]
    old = fake_nvidia_smi(tmp_path / "old", ["0, Tesla P100, 396.26, 16280 MiB, 00000000:3B:00.0",
                                              f"1, Tesla P100, {minimum}, 16280 MiB, 00000000:D8:00.0"])
    monkeypatch.setenv("PATH", f"{old}{os.pathsep}{os.environ['PATH']}")
    result = {}
    gpus = check.check_nvidia_smi(result, minimum)
    assert [gpu["driver"] for gpu in gpus] == ["396.26", minimum]
    assert result["nvidia_smi"]["status"] == "fail"
    at_minimum = fake_nvidia_smi(tmp_path / "at", [f"0, Tesla P100, {minimum}, 16280 MiB, 00000000:3B:00.0"])
    monkeypatch.setenv("PATH", f"{at_minimum}{os.pathsep}{os.environ['PATH']}")
    result = {}
    assert len(check.check_nvidia_smi(result, minimum)) == 1 and result["nvidia_smi"]["status"] == "ok"


# A GPU is not something .ci/run can install: on the machines without one this test skips (the GPU machine's
# tier runs it), and the checks above run everywhere.
@pytest.mark.skipif(not GPU, reason="no NVIDIA GPU here (/dev/nvidiactl)")
def test_on_a_gpu_machine_the_driver_and_cuda_checks_pass(tmp_path):
    assert check.main(["--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    gpus = report["nvidia_smi"]["gpus"]
    assert report["nvidia_smi"]["status"] == "ok" and len(gpus) >= 1, report
    assert report["cuda_driver_api"]["status"] == "ok" and report["cuda_driver_api"]["devices"] == len(gpus), report


def fake_tools(folder, smi_lines, cap_lines, lspci_lines=None):
    """TEST DOUBLES of nvidia-smi (both queries check.py asks) and, if given, lspci: no GPU on the machines
    `make test` runs on. cap_lines None: the capability query fails as a driver older than 510 does."""
    folder.mkdir(parents=True)
    cap = ("cat <<'EOF'\n" + "".join(line + "\n" for line in cap_lines) + "EOF\n" if cap_lines is not None
           else "echo 'Field \"compute_cap\" is not a valid field to query.' >&2; exit 2\n")
    (folder / "nvidia-smi").write_text(
        "#!/bin/sh\ncase \"$1\" in *compute_cap*)\n" + cap + ";;\n*)\ncat <<'EOF'\n"
        + "".join(line + "\n" for line in smi_lines) + "EOF\n;;\nesac\n")
    (folder / "nvidia-smi").chmod(0o755)
    if lspci_lines is not None:
        (folder / "lspci").write_text("#!/bin/sh\ncat <<'EOF'\n" + "".join(line + "\n" for line in lspci_lines)
                                      + "EOF\n")
        (folder / "lspci").chmod(0o755)
    return folder


def capability(tmp_path, monkeypatch, smi_lines, cap_lines, lspci_lines=None, driver_caps=None):
    tools = fake_tools(tmp_path / "tools", smi_lines, cap_lines, lspci_lines)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setattr(check, "sysfs_text", lambda root="": "")
    result = {"host": "gpu1"}
    check.check_nvidia_smi(result, MATRIX["cuda"]["10.0"]["driver_min"])
    if driver_caps is not None:
        result["cuda_driver_api"] = {"compute_capability": driver_caps}
    cuda = MATRIX["cuda"]["10.0"]
    check.check_compute_capability(result, "10.0", cuda["compute_capability_min"], cuda["compute_capability_max"])
    return result["compute_capability"]


def test_a_gpu_inside_the_matrix_range_is_ok_and_one_beyond_is_reported_outside(tmp_path, monkeypatch):
    t4 = capability(tmp_path, monkeypatch, ["0, Tesla T4, 535.183.01, 15360 MiB, 00000000:5E:00.0"], ["Tesla T4, 7.5"])
    assert (t4["status"], t4["range"], t4["source"]) == ("ok", "3.0-7.5", "nvidia-smi")
    assert [(g["model"], g["compute_capability"], g["covered"]) for g in t4["gpus"]] == [("T4", "7.5", True)]
    h200 = capability(tmp_path / "h", monkeypatch, ["0, NVIDIA H200, 570.124.06, 143771 MiB, 00000000:9A:00.0"],
                      ["NVIDIA H200, 9.0"])
    assert h200["status"] == "outside"
    assert "GPU 0 NVIDIA H200 (H200), compute capability 9.0: outside 3.0-7.5" in h200["why"]


def test_an_old_driver_takes_the_driver_apis_capability_and_the_pci_table_is_checked_against_it(tmp_path,
                                                                                                monkeypatch):
    smi = ["0, Tesla V100-PCIE-16GB, 418.87.01, 16160 MiB, 00000000:3B:00.0"]
    lspci = ["3b:00.0 3D controller [0302]: NVIDIA Corporation GV100GL [Tesla V100 PCIe 16GB] [10de:1db4] (rev a1)"]
    agrees = capability(tmp_path, monkeypatch, smi, None, lspci, driver_caps=["7.0"])
    assert (agrees["status"], agrees["source"], agrees["pci_table"]["source"]) == ("ok", "cuda driver api", "lspci")
    disagrees = capability(tmp_path / "d", monkeypatch, smi, None, lspci, driver_caps=["7.5"])
    assert disagrees["status"] == "fail" and "V100: table 7.0, driver 7.5" in disagrees["why"]
    # Neither nvidia-smi's compute_cap nor the driver API: the PCI table alone.
    table_only = capability(tmp_path / "t", monkeypatch, smi, None, lspci)
    assert (table_only["status"], table_only["source"]) == ("ok", "lspci")


def test_the_range_is_read_from_the_matrix_without_pyyaml():
    for cuda in MATRIX["cuda"]:
        for end in ("min", "max"):
            field = "compute_capability_" + end
            assert check.matrix_value(("cuda", cuda), field) == MATRIX["cuda"][cuda][field]
