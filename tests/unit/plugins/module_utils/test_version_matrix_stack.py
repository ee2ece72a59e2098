"""The resolver, cntk_stack (plugins/module_utils/version_matrix.py; named _stack here because
tests/unit/plugins/filter/test_version_matrix.py tests the filters): every release resolves to its
documented stack, the defaults, overrides that match, the rejections of the release and the
device themselves, and force. Each part's own overrides and rejections (Python, the OS, the GPU
libraries and driver, Open MPI) are in test_version_matrix_components.py."""

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils.version_matrix import cntk_stack_problem
from version_matrix_helpers import HEX64, UBUNTU_1604, load_matrix, rejection, stack


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


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



# ------------------------------------------------------------ rejections


def test_an_unknown_cntk_version_lists_the_known_ones(matrix):
    message = rejection(matrix, cntk_version="2.8")
    assert message == ("cntk_version=2.8 is not in matrix/cntk.yml: known CNTK versions are "
                       "2.7, 2.6, 2.5.1, 2.5, 2.4 (2.7 is the last CNTK release); set cntk_version to one of them")


def test_an_unknown_cntk_version_is_an_error_even_when_forced(matrix):
    message = rejection(matrix, cntk_version="3.0", force=True)
    assert "known CNTK versions are 2.7, 2.6" in message


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


def test_stack_problem_is_empty_or_the_rejection(matrix):
    assert cntk_stack_problem(matrix, {"cntk_version": "2.7", "device": "gpu"}) == ""
    assert "needs CUDA 10.0" in cntk_stack_problem(matrix, {"cntk_version": "2.7", "cuda_version": "11.0"})



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
