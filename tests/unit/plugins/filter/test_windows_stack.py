"""The Windows pins and what a Windows node installs, resolved from the real matrix."""

import re
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[4]

from ansible_collections.cntk.cluster.plugins.filter.version_matrix import cntk_stack
from ansible_collections.cntk.cluster.plugins.filter.windows_stack import win_stack_artifacts, win_stack_select

MATRIX = yaml.safe_load((ROOT / "matrix" / "cntk.yml").read_text())
PINS = MATRIX["windows"]


def files(node):
    if isinstance(node, dict):
        if "file" in node and "sha256" in node:
            yield node
        for value in node.values():
            yield from files(value)


def test_every_pin_has_a_sha256_or_says_why_not():
    for pin in files(PINS):
        assert pin["version"] and pin["file"] and pin["sha256_source"], pin
        if pin["sha256"] is not None:
            assert re.fullmatch(r"[0-9a-f]{64}", pin["sha256"]), pin["file"]
        else:
            assert "none published" in pin["sha256_source"] or "MD5" in pin["sha256_source"], pin["file"]


def test_wheels_are_the_win_amd64_cp36_release_of_the_matrix():
    release = MATRIX["cntk"]["2.7"]
    for device in ("cpu", "gpu"):
        wheel = PINS["wheels"]["2.7"][device]
        assert wheel["version"] == release["wheel_version"]
        assert wheel["name"] == release["wheels"][device]["package"]
        assert wheel["file"].endswith("-cp36-cp36m-win_amd64.whl")
        assert wheel["url"].endswith("/" + wheel["file"])


def test_gpu_cntk_node_gets_msmpi_python_and_wheels_and_driver_check_only():
    stack = cntk_stack(MATRIX, {"cntk_version": "2.7", "device": "gpu"})
    selected = win_stack_select(stack, PINS, "cntk")
    assert selected["msmpi"]["version"] == "7.0.12437.6"
    assert selected["python"]["version"] == "3.6.8"
    assert [w["name"] for w in selected["wheels"]] == ["numpy", "scipy", "cntk-gpu"]
    assert selected["nvidia"]["driver_min"] == "411.31"
    assert selected["nvidia"]["cuda"] is None and selected["nvidia"]["driver"] is None
    dests = [i["dest"] for i in win_stack_artifacts(selected)]
    assert dests == ["MSMpiSetup70.exe", "msmpisdk70.msi", "python-3.6.8-amd64.exe",
                     "numpy-1.19.5-cp36-cp36m-win_amd64.whl", "scipy-1.5.4-cp36-cp36m-win_amd64.whl",
                     "cntk_gpu-2.7.post2-cp36-cp36m-win_amd64.whl"]


def test_numpy_backend_cpu_node_gets_mpi4py_and_no_nvidia():
    stack = cntk_stack(MATRIX, {"cntk_version": "2.7", "device": "cpu"})
    selected = win_stack_select(stack, PINS, "numpy")
    assert [w["name"] for w in selected["wheels"]] == ["numpy", "mpi4py"]
    assert selected["nvidia"] is None and selected["cntk_wheel"] is None


def test_toolkit_and_driver_are_staged_only_when_asked():
    stack = cntk_stack(MATRIX, {"cntk_version": "2.7", "device": "gpu"})
    driver = {"file": "411.31-win10.exe", "version": "411.31", "url": "u", "sha256": "c" * 64}
    selected = win_stack_select(stack, PINS, "cntk", toolkit=True, driver=driver)
    names = [i["name"] for i in win_stack_artifacts(selected)]
    assert names[-3:] == ["nvidia-driver", "nvidia-cuda", "nvidia-cudnn"]
    assert selected["nvidia"]["cuda"]["components"][0] == "nvcc_10.0"


def test_a_release_without_a_windows_wheel_is_refused_with_the_fix():
    stack = cntk_stack(MATRIX, {"cntk_version": "2.6", "device": "gpu"})
    with pytest.raises(AnsibleFilterError, match="no Windows cntk-gpu wheel for CNTK 2.6 is pinned"):
        win_stack_select(stack, PINS, "cntk")
