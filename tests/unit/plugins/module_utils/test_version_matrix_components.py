"""Each part of a stack (plugins/module_utils/version_matrix_components.py, through cntk_stack):
Python packaged or built and against which OpenSSL, the OS and what an undocumented one changes,
the GPU libraries and the driver, Open MPI; each override's rejection and its message."""

import pytest

from version_matrix_helpers import DEBIAN_12, UBUNTU_1604, load_matrix, rejection, stack


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


# ------------------------------------------------------------ Python


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


def test_python_3_7_is_rejected(matrix):
    message = rejection(matrix, cntk_version="2.7", python_version="3.7")
    assert message == ("python_version=3.7: CNTK 2.7 has wheels for 2.7, 3.5, 3.6 only: "
                       "remove python_version (3.6 is the default) or set one of those")



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



# ------------------------------------------------------------ the GPU libraries and the driver


def test_cuda_11_with_2_7_is_rejected(matrix):
    message = rejection(matrix, cntk_version="2.7", device="gpu", cuda_version="11.0")
    assert message == ("cuda_version=11.0 does not match CNTK 2.7, which needs CUDA 10.0 (cuDNN 7.3.1): "
                       "remove cuda_version or set cntk_version to a release built for CUDA 11.0 "
                       "(none is: 2.7 is the last CNTK release)")


def test_cuda_9_with_2_7_names_the_releases_built_for_it(matrix):
    message = rejection(matrix, cntk_version="2.7", device="gpu", cuda_version="9.0")
    assert message.endswith("set cntk_version to a release built for CUDA 9.0: 2.6, 2.5.1, 2.5, 2.4")


def test_a_mismatched_cudnn_is_rejected(matrix):
    message = rejection(matrix, cntk_version="2.7", cudnn_version="7.6.5")
    assert message == ("cudnn_version=7.6.5 does not match CNTK 2.7, which needs cuDNN 7.3.1 for CUDA 10.0 "
                       "(the cntk-gpu wheel bundles it as libcudnn.so.7): remove cudnn_version")


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


def test_an_old_gpu_is_rejected(matrix):
    message = rejection(matrix, compute_capability="2.1")
    assert message.startswith("compute_capability=2.1 is below 3.0, the minimum for CNTK 2.7's GPU kernels")



# ------------------------------------------------------------ Open MPI


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
