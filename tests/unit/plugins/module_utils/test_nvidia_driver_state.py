"""The distribution's NVIDIA driver: apt's candidate against the stack's minimum, and modprobe's verdict."""

from ansible_collections.cntk.cluster.plugins.module_utils import nvidia_driver_state as nds

WHAT = "CUDA 10.0 (CNTK 2.7)"
FIX = "/etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
DEBIAN = ["non-free", "non-free-firmware"]

# apt-cache policy as apt 2.6 prints it (Debian 12).
POLICY_BOOKWORM = """\
nvidia-driver:
  Installed: (none)
  Candidate: 535.183.01-1~deb12u1
  Version table:
     535.183.01-1~deb12u1 500
        500 http://deb.debian.org/debian bookworm/non-free amd64 Packages
"""
POLICY_OLD = """\
nvidia-driver:
  Installed: (none)
  Candidate: 390.157-1~deb11u1
  Version table:
     390.157-1~deb11u1 500
        500 http://deb.debian.org/debian bullseye/non-free amd64 Packages
"""
POLICY_INSTALLED = """\
nvidia-driver-535-server:
  Installed: 535.183.06-0ubuntu0.22.04.1
  Candidate: 535.216.01-0ubuntu0.22.04.1
"""
POLICY_NONE = ""  # apt-cache policy prints nothing for a package no source has
POLICY_NO_CANDIDATE = "nvidia-driver:\n  Installed: (none)\n  Candidate: (none)\n  Version table:\n"


def check(policy, components=("main", "contrib", "non-free", "non-free-firmware")):
    return nds.distribution_driver("node1", "nvidia-driver", policy, "410.48", WHAT, list(components), DEBIAN, FIX)


def test_policy_and_upstream_versions():
    assert nds.apt_policy(POLICY_BOOKWORM) == {"installed": None, "candidate": "535.183.01-1~deb12u1"}
    assert nds.apt_policy(POLICY_NONE) == {"installed": None, "candidate": None}
    assert nds.upstream_version("535.183.01-1~deb12u1") == "535.183.01"
    assert nds.upstream_version("1:410.48-1") == "410.48"
    assert nds.upstream_version("535.183.06-0ubuntu0.22.04.1") == "535.183.06"
    assert nds.upstream_version("410.48") == "410.48"


def test_bookworms_driver_meets_cuda_10s_minimum():
    assert check(POLICY_BOOKWORM) == {"version": "535.183.01", "problem": ""}


def test_a_candidate_below_the_minimum_is_refused_naming_host_candidate_and_minimum():
    result = check(POLICY_OLD)
    assert result["version"] == "390.157"
    assert result["problem"] == (
        "node1: the distribution's nvidia-driver candidate 390.157-1~deb11u1 is below 410.48, the minimum NVIDIA "
        "driver for CUDA 10.0 (CNTK 2.7): use nvidia_driver_source: repository (NVIDIA's packages), or a "
        "distribution release with a newer driver. Nothing was changed.")


def test_an_installed_driver_is_what_stays_and_is_what_is_checked():
    result = nds.distribution_driver("node1", "nvidia-driver-535-server", POLICY_INSTALLED, "410.48", WHAT,
                                     ["main", "restricted"], ["restricted"], FIX)
    assert result == {"version": "535.183.06", "problem": ""}
    assert "installed 535.183.06" in nds.distribution_driver(
        "node1", "nvidia-driver-535-server", POLICY_INSTALLED, "550", WHAT, ["restricted"], ["restricted"],
        FIX)["problem"]


def test_no_candidate_without_non_free_names_the_components_and_where_to_add_them():
    problem = check(POLICY_NONE, components=["main"])["problem"]
    assert problem == (
        "node1: the distribution's NVIDIA driver cannot be installed: apt's sources have no "
        "non-free/non-free-firmware component (they have main): add non-free non-free-firmware to their "
        f"Components ({FIX}), run apt-get update, and run again. Nothing was changed.")
    assert "no non-free-firmware component" in check(POLICY_NO_CANDIDATE, components=["main", "non-free"])["problem"]
    # The components are there, the package is not: say so.
    assert "no package nvidia-driver in apt's sources" in check(POLICY_NO_CANDIDATE)["problem"]


def test_modprobe_on_a_node_without_a_gpu_is_reported_not_failed():
    # What Debian 12's driver says in a VM with no GPU (../shared/machines.md).
    stderr = "modprobe: ERROR: could not insert 'nvidia_current': No such device\n"
    verdict = nds.module_verdict(1, stderr, "", "nvidia-current", "6.1.0-26-amd64")
    assert verdict == {"state": "no_gpu", "message": "modprobe nvidia-current: No such device"}
    dmesg = "[   12.3] NVRM: No NVIDIA GPU found.\n"
    assert nds.module_verdict(1, "modprobe: ERROR: could not insert 'nvidia': Unknown symbol", dmesg, "nvidia",
                              "6.8.0-45-generic")["state"] == "no_gpu"


def test_a_module_missing_for_the_running_kernel_or_another_error_fails():
    stderr = "modprobe: FATAL: Module nvidia-current not found in directory /lib/modules/6.1.0-26-amd64\n"
    verdict = nds.module_verdict(1, stderr, "", "nvidia-current", "6.1.0-26-amd64")
    assert verdict["state"] == "not_built"
    assert "linux-headers-6.1.0-26-amd64" in verdict["message"] and "dkms status" in verdict["message"]
    other = nds.module_verdict(1, "modprobe: ERROR: could not insert 'nvidia_current': Operation not permitted\n",
                               "", "nvidia-current", "k")
    assert other == {"state": "failed", "message": "modprobe nvidia-current failed: modprobe: ERROR: could not "
                                                   "insert 'nvidia_current': Operation not permitted"}
    assert nds.module_verdict(0, "", "", "nvidia", "k")["state"] == "loaded"
