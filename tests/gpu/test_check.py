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
