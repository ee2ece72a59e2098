"""GPUs read from nvidia-smi, lspci or sysfs and judged against a CUDA release's compute capability range."""

from pathlib import Path

import pytest
import yaml

from ansible_collections.cntk.cluster.plugins.module_utils import gpu_capability as gc

ROOT = Path(__file__).resolve().parents[4]
MATRIX = yaml.safe_load((ROOT / "matrix" / "cntk.yml").read_text())
CUDA10 = MATRIX["cuda"]["10.0"]
WHAT = "CUDA 10.0 (CNTK 2.7)"

# lspci -nn -d 10de: as pciutils prints it (names from pci.ids; an id its pci.ids lacks is "Device").
LSPCI = """\
3b:00.0 3D controller [0302]: NVIDIA Corporation GV100GL [Tesla V100 PCIe 16GB] [10de:1db4] (rev a1)
5e:00.0 3D controller [0302]: NVIDIA Corporation TU104GL [Tesla T4] [10de:1eb8] (rev a1)
"""
LSPCI_AMPERE_AND_FRIENDS = """\
0000:01:00.0 VGA compatible controller [0300]: NVIDIA Corporation GA102 [GeForce RTX 3090] [10de:2204] (rev a1)
0000:01:00.1 Audio device [0403]: NVIDIA Corporation GA102 High Definition Audio Controller [10de:1aef] (rev a1)
0000:03:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)
0000:18:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 40GB] [10de:20b0] (rev a1)
0000:9a:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:2335] (rev a1)
"""
SMI = "Tesla V100-SXM2-16GB, 7.0\nTesla T4, 7.5\n"
SMI_HOPPER = "NVIDIA H100 80GB HBM3, 9.0\nNVIDIA A100-SXM4-40GB, 8.0\n"
SMI_OLD_DRIVER = 'Field "compute_cap" is not a valid field to query.\n\nRun \'nvidia-smi --help\' for usage.\n'
SYSFS = """\
/sys/bus/pci/devices/0000:3b:00.0/vendor:0x10de
/sys/bus/pci/devices/0000:3b:00.0/device:0x1db4
/sys/bus/pci/devices/0000:3b:00.0/class:0x030200
/sys/bus/pci/devices/0000:3b:00.1/vendor:0x10de
/sys/bus/pci/devices/0000:3b:00.1/device:0x1aef
/sys/bus/pci/devices/0000:3b:00.1/class:0x040300
/sys/bus/pci/devices/0000:d8:00.0/vendor:0x10de
/sys/bus/pci/devices/0000:d8:00.0/device:0x20b5
/sys/bus/pci/devices/0000:d8:00.0/class:0x030200
"""


def judge(reading, accepted=False):
    return gc.report(reading, CUDA10["compute_capability_min"], CUDA10["compute_capability_max"], accepted,
                     "node1", WHAT)


def test_the_matrix_gives_each_cuda_a_range_that_the_known_gpus_fall_around():
    assert (CUDA10["compute_capability_min"], CUDA10["compute_capability_max"]) == ("3.0", "7.5")
    assert MATRIX["cuda"]["9.0"]["compute_capability_max"] == "7.0"
    for cuda in MATRIX["cuda"].values():
        assert gc.capability_tuple(cuda["compute_capability_min"]) <= gc.capability_tuple(
            cuda["compute_capability_max"])


def test_the_table_covers_the_common_datacenter_gpus_with_their_capabilities():
    by_model = {}
    for model, capability in gc.PCI_GPUS.values():
        by_model.setdefault(model, set()).add(capability)
    expected = {"K80": "3.7", "P100": "6.0", "V100": "7.0", "T4": "7.5", "A100": "8.0", "A10": "8.6",
                "L4": "8.9", "L40S": "8.9", "H100": "9.0", "H200": "9.0"}
    for model, capability in expected.items():
        assert by_model[model] == {capability}, model
    assert all(len(device) == 4 and device == device.lower() for device in gc.PCI_GPUS)


def test_lspci_gives_each_gpu_its_model_and_capability_from_the_pci_id():
    reading = gc.read_gpus(lspci=LSPCI)
    assert reading["source"] == "lspci"
    assert [(g["id"], g["model"], g["compute_capability"]) for g in reading["gpus"]] == [
        ("3b:00.0", "V100", "7.0"), ("5e:00.0", "T4", "7.5")]
    assert reading["gpus"][0]["name"] == "GV100GL [Tesla V100 PCIe 16GB]"
    assert judge(reading) == {"problem": "", "notes": []}


def test_audio_functions_and_nvswitch_bridges_are_not_gpus_and_an_unnamed_id_is_still_known():
    gpus = gc.from_lspci(LSPCI_AMPERE_AND_FRIENDS)
    assert [g["id"] for g in gpus] == ["0000:01:00.0", "0000:18:00.0", "0000:9a:00.0"]
    rtx, a100, h200 = gpus
    assert (rtx["model"], rtx["compute_capability"], rtx["pci_id"]) == ("GeForce RTX 3090", None, "10de:2204")
    assert (a100["model"], a100["compute_capability"]) == ("A100", "8.0")
    assert (h200["name"], h200["model"], h200["compute_capability"]) == ("NVIDIA device 10de:2335", "H200", "9.0")


def test_gpus_outside_the_range_are_refused_naming_host_model_and_capability():
    verdict = judge(gc.read_gpus(lspci=LSPCI_AMPERE_AND_FRIENDS))
    problem = verdict["problem"]
    assert problem.startswith("node1: ")
    assert "0000:18:00.0 GA100 [A100 SXM4 40GB] (A100), compute capability 8.0" in problem
    assert "NVIDIA device 10de:2335 (H200), compute capability 9.0" in problem
    # Unknown to the table: refused too, saying it cannot be told, not that it is out of range.
    assert "GA102 [GeForce RTX 3090] (GeForce RTX 3090), compute capability unknown (read by lspci" in problem
    assert "outside 3.0-7.5, the compute capabilities CUDA 10.0 (CNTK 2.7) can drive" in problem
    assert "cluster_gpu_unsupported_ok: [A100, GeForce RTX 3090, H200]" in problem
    assert "set cluster_device: cpu for node1" in problem and problem.endswith("Nothing was changed.")


def test_nvidia_smi_is_read_first_and_its_names_give_the_model():
    reading = gc.read_gpus(nvidia_smi=SMI_HOPPER, lspci=LSPCI)
    assert reading["source"] == "nvidia-smi"
    assert [(g["model"], g["compute_capability"]) for g in reading["gpus"]] == [("H100", "9.0"), ("A100", "8.0")]
    assert "GPU 0 NVIDIA H100 80GB HBM3 (H100), compute capability 9.0" in judge(reading)["problem"]
    assert [g["model"] for g in gc.read_gpus(nvidia_smi=SMI)["gpus"]] == ["V100", "T4"]
    assert gc.model_of("Tesla V100S-PCIE-32GB") == "V100S"
    assert gc.model_of("NVIDIA L40S") == "L40S"
    assert gc.model_of("NVIDIA GeForce RTX 2080 Ti") == "GeForce RTX 2080 Ti"


def test_a_driver_too_old_for_compute_cap_falls_back_to_lspci_then_sysfs():
    assert gc.from_nvidia_smi(SMI_OLD_DRIVER) is None
    assert gc.read_gpus(nvidia_smi=SMI_OLD_DRIVER, lspci=LSPCI)["source"] == "lspci"
    reading = gc.read_gpus(nvidia_smi=None, lspci=None, sysfs=SYSFS)
    assert reading["source"] == "sysfs"
    assert [(g["id"], g["model"], g["compute_capability"]) for g in reading["gpus"]] == [
        ("0000:3b:00.0", "V100", "7.0"), ("0000:d8:00.0", "A100", "8.0")]
    assert gc.read_gpus() == {"source": "none", "gpus": []}


@pytest.mark.parametrize("accepted, refused", [
    (True, False), ("true", False), (["a100", "H200", "GeForce RTX 3090"], False), (["10de:2204", "A100", "H200"], False),
    (["A100"], True), ([], True), (False, True), ("A100", True),
])
def test_the_user_accepts_gpus_explicitly_all_or_by_model(accepted, refused):
    verdict = judge(gc.read_gpus(lspci=LSPCI_AMPERE_AND_FRIENDS), accepted)
    assert bool(verdict["problem"]) == refused
    if not refused:
        assert len(verdict["notes"]) == 3
        assert "accepted by cluster_gpu_unsupported_ok" in verdict["notes"][0]


def test_the_range_edges_are_inside_and_a_bad_range_is_an_error():
    edges = {"source": "nvidia-smi", "gpus": [
        {"id": "GPU 0", "name": "Tesla K10", "model": "Tesla K10", "compute_capability": "3.0"},
        {"id": "GPU 1", "name": "Tesla T4", "model": "T4", "compute_capability": "7.5"}]}
    assert judge(edges)["problem"] == ""
    assert "compute capability 7.5" in gc.report(edges, "3.0", "7.0", False, "n", "CUDA 9.0 (CNTK 2.6)")["problem"]
    with pytest.raises(ValueError):
        gc.report(edges, "3", "7.5", False, "n", WHAT)
