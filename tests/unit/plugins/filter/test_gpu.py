"""The GPU filters read Ansible's registered command results: a command that failed or was skipped is a way of
reading that was not available, and the next one is used."""

from ansible_collections.cntk.cluster.plugins.filter.gpu import (
    FilterModule, gpu_capability_report, gpu_reading, nvidia_distribution_driver, nvidia_module_verdict)

LSPCI = "18:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 40GB] [10de:20b0] (rev a1)\n"


def test_a_failed_or_skipped_nvidia_smi_falls_back_to_lspci():
    too_old = {"rc": 6, "stdout": 'Field "compute_cap" is not a valid field to query.'}
    lspci = {"rc": 0, "stdout": LSPCI}
    for smi in (too_old, {"rc": 2, "msg": "[Errno 2] No such file or directory: b'nvidia-smi'"},
                {"skipped": True}):
        reading = gpu_reading(smi, lspci, {"skipped": True})
        assert reading["source"] == "lspci" and reading["gpus"][0]["model"] == "A100"
    assert gpu_reading({"rc": 0, "stdout": "NVIDIA A100-SXM4-40GB, 8.0"}, {"skipped": True})["source"] == "nvidia-smi"
    assert gpu_reading({"rc": 9, "stdout": ""}, {"rc": 2}, {"rc": 2}) == {"source": "none", "gpus": []}


def test_the_report_refuses_what_the_reading_shows_outside_the_range():
    reading = gpu_reading({"rc": 0, "stdout": "NVIDIA A100-SXM4-40GB, 8.0"})
    assert "compute capability 8.0" in gpu_capability_report(reading, "3.0", "7.5", False, "n1", "CUDA 10.0")["problem"]
    assert gpu_capability_report(reading, "3.0", "8.0", False, "n1", "CUDA 11.0")["problem"] == ""


def test_the_driver_filters_take_apt_and_modprobe_as_registered():
    policy = "nvidia-driver:\n  Installed: (none)\n  Candidate: 535.183.01-1~deb12u1\n"
    assert nvidia_distribution_driver(policy, "n1", "nvidia-driver", "410.48", "CUDA 10.0", ["main", "non-free"],
                                      ["non-free"], "x")["version"] == "535.183.01"
    modprobe = {"rc": 1, "stderr": "modprobe: ERROR: could not insert 'nvidia_current': No such device"}
    assert nvidia_module_verdict(modprobe, "", "nvidia-current", "6.1.0-26-amd64")["state"] == "no_gpu"
    assert set(FilterModule().filters()) == {"gpu_reading", "gpu_capability_report", "nvidia_distribution_driver",
                                             "nvidia_module_verdict"}
