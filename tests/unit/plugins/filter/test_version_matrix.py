"""The CNTK version matrix (matrix/cntk.yml) and its resolver
(plugins/module_utils/version_matrix.py, through its filters): the table's shape and checksums, the
resolution of every release, each rejection and its message, force, the
offline artifact list, and matrix/README.md's table against the YAML."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]

from ansible.errors import AnsibleFilterError  # noqa: E402

from ansible_collections.cntk.cluster.plugins.filter import version_matrix as vm

MATRIX_PATH = ROOT / "matrix" / "cntk.yml"
README_PATH = ROOT / "matrix" / "README.md"
HEX64 = re.compile(r"^[0-9a-f]{64}$")
UBUNTU_1604 = {"distribution": "Ubuntu", "version": "16.04"}
DEBIAN_12 = {"distribution": "Debian", "version": "12"}


@pytest.fixture(scope="module")
def matrix():
    with MATRIX_PATH.open() as handle:
        return yaml.safe_load(handle)


def stack(matrix, **request):
    return vm.cntk_stack(matrix, request)


def rejection(matrix, **request):
    with pytest.raises(AnsibleFilterError) as info:
        vm.cntk_stack(matrix, request)
    return str(info.value)


# ------------------------------------------------------------ the table itself


def _artifacts(node, path=()):
    """Every mapping in the matrix that describes a download (has a url or a sha256)."""
    if isinstance(node, dict):
        if "url" in node or "sha256" in node:
            yield path, node
        for key, value in node.items():
            yield from _artifacts(value, path + (str(key),))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _artifacts(value, path + (str(index),))


def test_matrix_loads_with_every_section(matrix):
    for section in ("defaults", "cntk", "cuda", "cudnn", "nccl", "openmpi", "msmpi", "python_source",
                    "openssl_source", "mpi4py", "os"):
        assert section in matrix, section
    assert {"2.4", "2.5", "2.5.1", "2.6", "2.7"} <= set(matrix["cntk"])
    assert matrix["defaults"]["cntk_version"] in matrix["cntk"]


def test_every_artifact_has_version_sha256_and_source(matrix):
    found = list(_artifacts(matrix))
    assert len(found) > 40  # 24 PyPI wheels alone
    for path, artifact in found:
        where = "/".join(path)
        for key in ("file", "version", "url", "sha256", "sha256_source"):
            assert key in artifact, f"{where} lacks {key}"
        assert isinstance(artifact["version"], str) and artifact["version"], where
        # Only a download behind NVIDIA's login has no URL; the user puts it in the artifact folder.
        assert (artifact["url"] or "").startswith("https://") or "login" in artifact["sha256_source"], where
        assert artifact["sha256"] is None or HEX64.match(artifact["sha256"]), f"{where}: {artifact['sha256']!r}"
        assert isinstance(artifact["sha256_source"], str) and len(artifact["sha256_source"]) > 20, where
        # GitHub's archive URLs name the tag, not the file; NVIDIA's runfile URLs drop the suffix.
        assert artifact["url"] is None or artifact["url"].rstrip("/").endswith(artifact["file"].split("/")[-1]) \
            or "cuda" in where or "/archive/v" + artifact["version"] in artifact["url"], where


def test_every_version_is_a_string(matrix):
    for version, release in matrix["cntk"].items():
        assert isinstance(version, str)
        for key in ("wheel_version", "cuda", "cudnn", "openmpi_series", "msmpi", "min_compute_capability"):
            assert isinstance(release[key], str), f"{version}.{key}"
        assert all(isinstance(p, str) for p in release["python"])


def test_pypi_wheels_are_all_pinned_and_named_for_their_python(matrix):
    for version, release in matrix["cntk"].items():
        for device in ("cpu", "gpu"):
            wheels = release["wheels"][device]
            assert set(wheels) - {"package"} == set(release["python"]), (version, device)
            for python, wheel in wheels.items():
                if python == "package":
                    continue
                assert f"-cp{python.replace('.', '')}-" in wheel["file"], wheel["file"]
                if "pythonhosted.org" in wheel["url"]:
                    assert HEX64.match(wheel["sha256"]), wheel["file"]
                    assert wheel["version"] == release["wheel_version"]
                    assert wheel["file"].startswith(wheels["package"].replace("-", "_") + "-")


def test_the_known_cntk_wheel_hashes_are_the_pinned_ones(matrix):
    # The wheel the real-wheel tests install with --require-hashes (tests/training/cntk_env.py).
    wheel = matrix["cntk"]["2.7"]["wheels"]["cpu"]["3.6"]
    assert wheel["file"] == "cntk-2.7.post2-cp36-cp36m-manylinux1_x86_64.whl"
    assert wheel["sha256"] == "71133245e10cdc1eca0b44b5fe241b2c97d0c16b8e12425896541a94ab1b5589"


def test_only_documented_gaps_are_null(matrix):
    nulls = {"/".join(path) for path, artifact in _artifacts(matrix) if artifact["sha256"] is None}
    allowed = re.compile(r"^(cntk/2\.4/wheels/|cudnn/[^/]+/deb$|nccl/[^/]+/deb$|windows/nvidia/)")
    assert nulls and all(allowed.match(path) for path in nulls), sorted(nulls)


def test_defaults_and_references_resolve(matrix):
    for version, release in matrix["cntk"].items():
        assert release["cuda"] in matrix["cuda"], version
        assert release["cudnn"] in matrix["cudnn"], version
        assert release["nccl"] is None or release["nccl"] in matrix["nccl"], version
        assert release["msmpi"] in matrix["msmpi"], version
        for python in release["python"]:
            assert python in matrix["python_source"], (version, python)
    assert matrix["defaults"]["openmpi_version"] in matrix["openmpi"]
    assert matrix["defaults"]["mpi4py_version"] in matrix["mpi4py"]
    for entry in matrix["python_source"].values():
        assert any(o["series"] == entry["openssl_max"] for o in matrix["openssl_source"].values())


# ------------------------------------------------------------ resolution


@pytest.mark.parametrize("version", ["2.7", "2.6", "2.5.1"])
@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_each_pypi_release_resolves(matrix, version, device):
    result = stack(matrix, cntk_version=version, device=device, os=UBUNTU_1604)
    release = matrix["cntk"][version]
    assert result["cntk"] == {"version": version, "wheel_version": release["wheel_version"], "device": device,
                              "package": "cntk-gpu" if device == "gpu" else "cntk"}
    assert result["wheel"]["sha256"] == release["wheels"][device]["3.6"]["sha256"]
    assert result["wheel"]["file"].endswith("-cp36-cp36m-manylinux1_x86_64.whl")
    assert result["python"]["version"] == "3.6"
    assert result["python"]["abi"] == "cp36m"
    assert result["openmpi"]["version"] == "1.10.7"
    assert result["openmpi"]["prefix"] == "/usr/local/mpi"
    assert HEX64.match(result["openmpi"]["sha256"])
    assert result["msmpi"]["version"] == "7.0.12437.6"
    assert result["warnings"] == []
    assert result["forced"] is False
    if device == "gpu":
        assert result["cuda"]["version"] == release["cuda"]
        assert result["cudnn"]["version"] == release["cudnn"]
        assert result["nccl"]["version"] == release["nccl"]
        assert result["driver_min"] == matrix["cuda"][release["cuda"]]["driver_min"]
        assert result["cuda"]["bundled_in_wheel"] and result["cudnn"]["bundled_in_wheel"]
        assert "--with-cuda=/usr/local/cuda" in result["openmpi"]["configure_args"]
        assert result["min_compute_capability"] == "3.0"
    else:
        assert result["cuda"] is None and result["cudnn"] is None and result["nccl"] is None
        assert result["driver_min"] is None
        assert "--with-cuda=/usr/local/cuda" not in result["openmpi"]["configure_args"]


def test_the_2_7_gpu_stack_is_the_documented_one(matrix):
    result = stack(matrix, cntk_version="2.7", device="gpu", os=UBUNTU_1604)
    assert result["cuda"]["full_version"] == "10.0.130"
    assert result["cudnn"]["full_version"] == "7.3.1.20"
    assert result["nccl"]["full_version"] == "2.3.5"
    assert result["driver_min"] == "410.48"
    assert result["wheel"]["name"] == "cntk-gpu"
    assert result["wheel"]["version"] == "2.7.post2"
    assert result["wheel"]["sha256"] == "6954c67b71aa637eb661df720ec72429b3298de9f14f67bfa7ce89752cfccc0d"


def test_cuda_9_releases_need_driver_384_81(matrix):
    for version in ("2.6", "2.5.1"):
        result = stack(matrix, cntk_version=version, device="gpu", os=UBUNTU_1604)
        assert result["cuda"]["full_version"] == "9.0.176"
        assert result["cudnn"]["full_version"] == "7.0.4.31"
        assert result["driver_min"] == "384.81"


def test_defaults_are_cntk_2_7_on_gpu_with_python_3_6(matrix):
    result = stack(matrix)
    assert result["cntk"]["version"] == "2.7" and result["cntk"]["device"] == "gpu"
    assert result["python"]["version"] == "3.6"
    assert result["python"]["build_from_source"] is None  # no os: decided per node
    assert result["python"]["source"]["version"] == "3.6.15"


def test_matching_overrides_are_accepted_at_any_precision(matrix):
    result = stack(matrix, cntk_version="2.7", device="gpu", cuda_version="10.0.130", cudnn_version="7.3",
                   nccl_version="2.3.5", openmpi_version="1.10", python_version="3.6.9", driver_version="410.104",
                   compute_capability="7.0", os=UBUNTU_1604)
    assert result["warnings"] == []
    assert result["openmpi"]["version"] == "1.10.7"
    assert result["python"]["version"] == "3.6"


def test_the_other_pinned_openmpi_can_be_chosen(matrix):
    result = stack(matrix, openmpi_version="1.10.3", os=UBUNTU_1604)
    assert result["openmpi"]["version"] == "1.10.3"
    assert result["openmpi"]["file"] == "openmpi-1.10.3.tar.bz2"


def test_python_3_5_on_ubuntu_16_04_uses_the_os_package(matrix):
    result = stack(matrix, python_version="3.5", os=UBUNTU_1604)
    assert result["python"]["build_from_source"] is False
    assert "python3.5" in result["python"]["packages"]
    assert result["python"]["source"] is None
    assert result["wheel"]["file"].endswith("-cp35-cp35m-manylinux1_x86_64.whl")


def test_python_3_6_on_ubuntu_16_04_is_built_against_the_system_openssl(matrix):
    result = stack(matrix, os=UBUNTU_1604)
    assert result["python"]["build_from_source"] is True
    assert result["python"]["source"]["file"] == "Python-3.6.15.tgz"
    assert "--enable-shared" in result["python"]["source"]["configure_args"]
    assert result["python"]["openssl_needed"] is False
    assert result["python"]["openssl"] is None
    assert result["warnings"] == []  # documented OS: building Python is not a warning


def test_python_2_7_resolves_with_a_warning(matrix):
    result = stack(matrix, python_version="2.7", os=UBUNTU_1604)
    assert result["python"]["abi"] == "cp27mu"
    assert result["wheel"]["file"] == "cntk_gpu-2.7.post2-cp27-cp27mu-manylinux1_x86_64.whl"
    assert any("Python 2.7 is end of life" in w for w in result["warnings"])


# ------------------------------------------------------------ the OS


def test_ubuntu_16_04_is_accepted_without_warning(matrix):
    result = stack(matrix, cntk_version="2.7", device="cpu", os=UBUNTU_1604)
    assert result["os"] == {"name": "Ubuntu 16.04", "support": "documented", "nvidia_repo": "ubuntu1604"}
    assert result["warnings"] == []


def test_debian_12_is_accepted_with_a_warning_that_python_3_6_is_built(matrix):
    result = stack(matrix, cntk_version="2.7", device="gpu", os=DEBIAN_12)
    assert result["os"]["name"] == "Debian 12" and result["os"]["support"] == "warn"
    assert result["python"]["build_from_source"] is True
    assert result["python"]["openssl_needed"] is True
    assert result["python"]["openssl"]["version"] == "1.1.1w"
    [warning] = result["warnings"]
    assert warning.startswith("Debian 12 is not an OS CNTK 2.7 documents (Ubuntu 16.04); accepted")
    assert "Python 3.6 must be built from source (Debian 12 has no python3.6 package)" in warning
    assert "OpenSSL 1.1.1w" in warning
    assert "NVIDIA packages no CUDA 10.0 for Debian 12" in warning


def test_a_point_release_finds_its_os_entry(matrix):
    result = stack(matrix, device="cpu", os={"distribution": "Debian", "version": "12.5"})
    assert result["os"]["name"] == "Debian 12"


def test_ubuntu_18_04_uses_its_python_3_6_package(matrix):
    result = stack(matrix, os={"distribution": "Ubuntu", "version": "18.04"})
    assert result["python"]["build_from_source"] is False
    assert "libpython3.6" in result["python"]["packages"]
    [warning] = result["warnings"]
    assert "must be built" not in warning and "image reader" in warning


def test_an_unknown_os_is_rejected_unless_forced(matrix):
    message = rejection(matrix, os={"distribution": "Rocky", "version": "9"})
    assert message.startswith("os Rocky 9 is not in matrix/cntk.yml: CNTK 2.7 documents Ubuntu 16.04")
    assert "Debian 12" in message and "force: true" in message
    result = stack(matrix, os={"distribution": "Rocky", "version": "9"}, force=True)
    assert result["python"]["build_from_source"] is True
    assert result["python"]["openssl"] is not None  # system OpenSSL unknown: keep the pin at hand
    assert any(w.startswith("forced past: os Rocky 9") for w in result["warnings"])


# ------------------------------------------------------------ rejections


def test_cuda_11_with_2_7_is_rejected(matrix):
    message = rejection(matrix, cntk_version="2.7", device="gpu", cuda_version="11.0")
    assert message == ("cuda_version=11.0 does not match CNTK 2.7, which needs CUDA 10.0 (cuDNN 7.3.1): "
                       "remove cuda_version or set cntk_version to a release built for CUDA 11.0 "
                       "(none is: 2.7 is the last CNTK release)")


def test_cuda_9_with_2_7_names_the_releases_built_for_it(matrix):
    message = rejection(matrix, cntk_version="2.7", device="gpu", cuda_version="9.0")
    assert message.endswith("set cntk_version to a release built for CUDA 9.0: 2.6, 2.5.1, 2.5, 2.4")


def test_python_3_7_is_rejected(matrix):
    message = rejection(matrix, cntk_version="2.7", python_version="3.7")
    assert message == ("python_version=3.7: CNTK 2.7 has wheels for 2.7, 3.5, 3.6 only: "
                       "remove python_version (3.6 is the default) or set one of those")


def test_open_mpi_4_is_rejected_for_the_cntk_backend(matrix):
    message = rejection(matrix, cntk_version="2.7", openmpi_version="4.1.4")
    assert message.startswith("openmpi_version=4.1.4: CNTK 2.x needs Open MPI 1.10.x (libmpi.so.12, "
                              "libmpi_cxx.so.1); Open MPI 2.x and later are not ABI compatible")
    assert "(microsoft/CNTK#3392)" in message
    assert message.endswith("remove openmpi_version to build the pinned 1.10.7 into /usr/local/mpi")


def test_an_unpinned_open_mpi_1_10_is_rejected(matrix):
    message = rejection(matrix, openmpi_version="1.10.5")
    assert message == ("openmpi_version=1.10.5 has no pinned sha256 in matrix/cntk.yml (pinned 1.10.x: "
                       "1.10.7, 1.10.3): set one of those, or add 1.10.5 with its published sha256")


def test_an_unknown_cntk_version_lists_the_known_ones(matrix):
    message = rejection(matrix, cntk_version="2.8")
    assert message == ("cntk_version=2.8 is not in matrix/cntk.yml: known CNTK versions are "
                       "2.7, 2.6, 2.5.1, 2.5, 2.4 (2.7 is the last CNTK release); set cntk_version to one of them")


def test_an_unknown_cntk_version_is_an_error_even_when_forced(matrix):
    message = rejection(matrix, cntk_version="3.0", force=True)
    assert "known CNTK versions are 2.7, 2.6" in message


def test_a_driver_below_the_minimum_is_rejected(matrix):
    message = rejection(matrix, cntk_version="2.7", device="gpu", driver_version="390.116")
    assert message == ("driver_version=390.116 is below 410.48, the minimum NVIDIA driver for CUDA 10.0 "
                       "(CNTK 2.7): upgrade the NVIDIA driver (to at least 410.48), or set cntk_version to 2.6 "
                       "(built for CUDA 9.0, which needs 384.81)")


def test_a_driver_below_every_minimum_offers_only_the_upgrade(matrix):
    message = rejection(matrix, cntk_version="2.6", device="gpu", driver_version="375.26")
    assert message.endswith("(CNTK 2.6): upgrade the NVIDIA driver (to at least 384.81)")


def test_the_driver_is_not_checked_on_cpu_nodes(matrix):
    result = stack(matrix, device="cpu", driver_version="390.116")
    assert result["warnings"] == ["driver_version=390.116 is ignored: device is cpu"]


def test_a_mismatched_cudnn_is_rejected(matrix):
    message = rejection(matrix, cntk_version="2.7", cudnn_version="7.6.5")
    assert message == ("cudnn_version=7.6.5 does not match CNTK 2.7, which needs cuDNN 7.3.1 for CUDA 10.0 "
                       "(the cntk-gpu wheel bundles it as libcudnn.so.7): remove cudnn_version")


def test_an_old_gpu_is_rejected(matrix):
    message = rejection(matrix, compute_capability="2.1")
    assert message.startswith("compute_capability=2.1 is below 3.0, the minimum for CNTK 2.7's GPU kernels")


def test_cntk_2_5_points_to_2_5_1(matrix):
    message = rejection(matrix, cntk_version="2.5")
    assert message.endswith("2.5.1 is the same release with them inside the wheel: set cntk_version to 2.5.1")


def test_cntk_2_4_is_rejected_for_its_unverifiable_wheels(matrix):
    message = rejection(matrix, cntk_version="2.4", device="cpu")
    assert message.startswith("the cntk 2.4 wheel for Python 3.6 has no published sha256")
    assert "use a CNTK release from PyPI (2.7, 2.6, 2.5.1)" in message


def test_a_bad_device_is_an_error_even_when_forced(matrix):
    assert "device=tpu: must be one of gpu, cpu" in rejection(matrix, device="tpu", force=True)


def test_malformed_versions_are_reported(matrix):
    assert "driver_version='latest' is not a dotted numeric version" in rejection(
        matrix, driver_version="latest")


# ------------------------------------------------------------ force


def test_force_turns_a_cuda_rejection_into_a_warning(matrix):
    result = stack(matrix, cntk_version="2.7", device="gpu", cuda_version="11.0", force=True)
    assert result["forced"] is True
    assert result["cuda"]["version"] == "11.0" and result["cuda"]["pinned"] is False
    assert result["driver_min"] is None
    assert result["warnings"][0].startswith("forced past: cuda_version=11.0 does not match CNTK 2.7")


def test_force_turns_each_override_rejection_into_a_warning(matrix):
    result = stack(matrix, cntk_version="2.7", python_version="3.7", openmpi_version="4.1.4",
                   driver_version="390.116", force=True)
    text = "\n".join(result["warnings"])
    assert "forced past: python_version=3.7" in text
    assert "forced past: openmpi_version=4.1.4" in text
    assert "forced past: driver_version=390.116 is below 410.48" in text
    assert "no cntk-gpu 2.7.post2 wheel exists for Python 3.7" in text
    assert result["wheel"] is None
    assert result["openmpi"] == {"version": "4.1.4", "file": None, "url": None, "sha256": None,
                                 "sha256_source": None, "pinned": False, "series": None, "prefix": None,
                                 "cuda_aware": False}


def test_force_accepts_the_string_forms_of_true(matrix):
    assert stack(matrix, cuda_version="11.0", force="yes")["forced"] is True
    assert "cuda_version=11.0" in rejection(matrix, cuda_version="11.0", force="false")


# ------------------------------------------------------------ driver_satisfies


@pytest.mark.parametrize("installed, minimum, expected", [
    ("410.48", "410.48", True),
    ("410.104", "410.48", True),   # numeric per component, not string order
    ("410.47", "410.48", False),
    ("384.111", "384.81", True),
    ("535.104.05", "410.48", True),
    ("390", "384.81", True),
    ("384", "384.81", False),
    (418.87, "410.48", True),
])
def test_driver_satisfies(installed, minimum, expected):
    assert vm.driver_satisfies(installed, minimum) is expected


def test_driver_satisfies_rejects_garbage():
    with pytest.raises(AnsibleFilterError):
        vm.driver_satisfies("410.48-1ubuntu", "410.48")
    with pytest.raises(AnsibleFilterError):
        vm.driver_satisfies(None, "410.48")


# ------------------------------------------------------------ artifacts


def test_artifacts_cover_wheel_openmpi_and_mpi4py(matrix):
    result = stack(matrix, cntk_version="2.7", device="gpu", python_version="3.5", os=UBUNTU_1604)
    items = vm.cntk_artifacts(matrix, result)
    names = [item["name"] for item in items]
    assert names == ["cntk-gpu", "numpy", "scipy", "openmpi", "mpi4py", "wheel"]  # 3.5 is packaged: no CPython source
    wheel = items[0]
    assert wheel["dest"] == "cntk_gpu-2.7.post2-cp35-cp35m-manylinux1_x86_64.whl"
    assert wheel["sha256"] == matrix["cntk"]["2.7"]["wheels"]["gpu"]["3.5"]["sha256"]
    assert items[1]["dest"] == "numpy-1.18.5-cp35-cp35m-manylinux1_x86_64.whl"
    assert items[3]["dest"] == "openmpi-1.10.7.tar.bz2"
    for item in items:
        assert HEX64.match(item["sha256"]) and item["sha256_source"] and item["url"].startswith("https://")


def test_artifacts_include_cpython_and_openssl_when_python_must_be_built(matrix):
    result = stack(matrix, cntk_version="2.7", device="cpu", os=DEBIAN_12)
    dests = [item["dest"] for item in vm.cntk_artifacts(matrix, [result])]
    assert dests == ["cntk-2.7.post2-cp36-cp36m-manylinux1_x86_64.whl",
                     "numpy-1.19.5-cp36-cp36m-manylinux1_x86_64.whl", "scipy-1.5.4-cp36-cp36m-manylinux1_x86_64.whl",
                     "openmpi-1.10.7.tar.bz2", "Python-3.6.15.tgz", "openssl-1.1.1w.tar.gz", "mpi4py-3.1.5.tar.gz",
                     "wheel-0.37.1-py2.py3-none-any.whl"]


def test_artifacts_are_deduplicated_across_stacks(matrix):
    stacks = [stack(matrix, cntk_version="2.7", device=device, os=os_)
              for device in ("gpu", "cpu") for os_ in (UBUNTU_1604, DEBIAN_12, UBUNTU_1604)]
    stacks.append(stack(matrix, cntk_version="2.6", device="gpu", os=UBUNTU_1604))
    items = vm.cntk_artifacts(matrix, stacks)
    dests = [item["dest"] for item in items]
    assert len(dests) == len(set(dests))
    assert dests.count("openmpi-1.10.7.tar.bz2") == 1
    assert {"cntk_gpu-2.7.post2-cp36-cp36m-manylinux1_x86_64.whl",
            "cntk-2.7.post2-cp36-cp36m-manylinux1_x86_64.whl",
            "cntk_gpu-2.6-cp36-cp36m-manylinux1_x86_64.whl",
            "Python-3.6.15.tgz", "openssl-1.1.1w.tar.gz"} <= set(dests)
    assert len(items) == 10  # 3 cntk wheels, numpy, scipy, Open MPI, Python, OpenSSL, mpi4py, wheel


def test_artifacts_with_nvidia_and_msmpi(matrix):
    result = stack(matrix, cntk_version="2.7", device="gpu", os=UBUNTU_1604)
    items = {item["dest"]: item for item in vm.cntk_artifacts(matrix, result, nvidia=True, msmpi=True)}
    assert items["cuda_10.0.130_410.48_linux.run"]["sha256"] == matrix["cuda"]["10.0"]["runfile"]["sha256"]
    assert items["libcudnn7_7.3.1.20-1+cuda10.0_amd64.deb"]["sha256"] is None  # no published value
    assert "libnccl2_2.3.5-2+cuda10.0_amd64.deb" in items
    assert items["MSMpiSetup70.exe"]["file"] == "MSMpiSetup.exe"
    assert HEX64.match(items["msmpisdk70.msi"]["sha256"])
    cpu = stack(matrix, cntk_version="2.7", device="cpu", os=UBUNTU_1604)
    assert not any(i["name"] == "cuda" for i in vm.cntk_artifacts(matrix, cpu, nvidia=True))


def test_forced_unpinned_parts_are_not_downloaded(matrix):
    result = stack(matrix, openmpi_version="4.1.4", force=True, os=UBUNTU_1604)
    assert "openmpi" not in [item["name"] for item in vm.cntk_artifacts(matrix, result)]


def test_two_files_for_one_dest_are_an_error(matrix):
    first = stack(matrix, os=UBUNTU_1604)
    second = stack(matrix, os=UBUNTU_1604)
    second["openmpi"]["url"] = "https://example.invalid/openmpi-1.10.7.tar.bz2"
    with pytest.raises(AnsibleFilterError, match="openmpi-1.10.7.tar.bz2 would be two different files"):
        vm.cntk_artifacts(matrix, [first, second])


def test_the_2_4_gpu_wheel_does_not_collide_with_the_cpu_one(matrix):
    stacks = [stack(matrix, cntk_version="2.4", device=device, os=UBUNTU_1604, force=True)
              for device in ("cpu", "gpu")]
    dests = [item["dest"] for item in vm.cntk_artifacts(matrix, stacks) if item["name"] == "cntk"]
    assert dests == ["cntk-2.4-cp36-cp36m-linux_x86_64.whl", "GPU/cntk-2.4-cp36-cp36m-linux_x86_64.whl"]


# ------------------------------------------------------------ filters and README


def test_the_filters_are_registered():
    filters = vm.FilterModule().filters()
    assert {"cntk_stack", "cntk_artifacts", "driver_satisfies", "cntk_matrix_rows"} <= set(filters)


def _readme_table():
    lines = README_PATH.read_text().splitlines()
    start = lines.index("<!-- matrix-table:start -->")
    end = lines.index("<!-- matrix-table:end -->")
    rows = [line for line in lines[start + 1:end] if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert set(rows[1].replace("|", "").replace(" ", "")) <= {"-", ":"}
    return [dict(zip(header, (cell.strip() for cell in row.strip("|").split("|")))) for row in rows[2:]]


def test_the_readme_table_agrees_with_the_yaml(matrix):
    assert _readme_table() == vm.cntk_matrix_rows(matrix)


def test_the_readme_names_every_checksum_source_url(matrix):
    text = README_PATH.read_text()
    for needle in ("spack/spack-packages", "pyenv/pyenv", "chef/omnibus-software",
                   "Tools/devInstall/Windows/helper/Operations.ps1", "PyPI"):
        assert needle in text, needle


def test_stack_problem_is_empty_or_the_rejection(matrix):
    assert vm.cntk_stack_problem(matrix, {"cntk_version": "2.7", "device": "gpu"}) == ""
    assert "needs CUDA 10.0" in vm.cntk_stack_problem(matrix, {"cntk_version": "2.7", "cuda_version": "11.0"})


def test_the_filters_read_the_matrix_file_given_its_path(matrix):
    path = str(Path(__file__).resolve().parents[4] / "matrix" / "cntk.yml")
    request = {"cntk_version": "2.7", "device": "cpu"}
    assert vm.cntk_stack(path, request) == vm.cntk_stack(matrix, request)
    assert vm.cntk_stack_problem(path, {"cntk_version": "9.9"}) == vm.cntk_stack_problem(matrix, {"cntk_version": "9.9"})
    with pytest.raises(AnsibleFilterError, match="cannot read the version matrix /nonexistent"):
        vm.cntk_stack("/nonexistent", request)
