"""The listings made from the matrix (plugins/module_utils/version_matrix_listings.py): the
offline download list of resolved stacks, and matrix/README.md's table against the YAML."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.module_utils.version_matrix_listings import (
    cntk_artifacts, cntk_matrix_rows)
from version_matrix_helpers import DEBIAN_12, HEX64, README_PATH, UBUNTU_1604, load_matrix, stack


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


# ------------------------------------------------------------ artifacts


def test_artifacts_cover_wheel_openmpi_and_mpi4py(matrix):
    result = stack(matrix, cntk_version="2.7", device="gpu", python_version="3.5", os=UBUNTU_1604)
    items = cntk_artifacts(matrix, result)
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
    dests = [item["dest"] for item in cntk_artifacts(matrix, [result])]
    assert dests == ["cntk-2.7.post2-cp36-cp36m-manylinux1_x86_64.whl",
                     "numpy-1.19.5-cp36-cp36m-manylinux1_x86_64.whl", "scipy-1.5.4-cp36-cp36m-manylinux1_x86_64.whl",
                     "openmpi-1.10.7.tar.bz2", "Python-3.6.15.tgz", "openssl-1.1.1w.tar.gz", "mpi4py-3.1.5.tar.gz",
                     "wheel-0.37.1-py2.py3-none-any.whl"]


def test_artifacts_are_deduplicated_across_stacks(matrix):
    stacks = [stack(matrix, cntk_version="2.7", device=device, os=os_)
              for device in ("gpu", "cpu") for os_ in (UBUNTU_1604, DEBIAN_12, UBUNTU_1604)]
    stacks.append(stack(matrix, cntk_version="2.6", device="gpu", os=UBUNTU_1604))
    items = cntk_artifacts(matrix, stacks)
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
    items = {item["dest"]: item for item in cntk_artifacts(matrix, result, nvidia=True, msmpi=True)}
    assert items["cuda_10.0.130_410.48_linux.run"]["sha256"] == matrix["cuda"]["10.0"]["runfile"]["sha256"]
    assert items["libcudnn7_7.3.1.20-1+cuda10.0_amd64.deb"]["sha256"] is None  # no published value
    assert "libnccl2_2.3.5-2+cuda10.0_amd64.deb" in items
    assert items["MSMpiSetup70.exe"]["file"] == "MSMpiSetup.exe"
    assert HEX64.match(items["msmpisdk70.msi"]["sha256"])
    cpu = stack(matrix, cntk_version="2.7", device="cpu", os=UBUNTU_1604)
    assert not any(i["name"] == "cuda" for i in cntk_artifacts(matrix, cpu, nvidia=True))


def test_forced_unpinned_parts_are_not_downloaded(matrix):
    result = stack(matrix, openmpi_version="4.1.4", force=True, os=UBUNTU_1604)
    assert "openmpi" not in [item["name"] for item in cntk_artifacts(matrix, result)]


def test_two_files_for_one_dest_are_an_error(matrix):
    first = stack(matrix, os=UBUNTU_1604)
    second = stack(matrix, os=UBUNTU_1604)
    second["openmpi"]["url"] = "https://example.invalid/openmpi-1.10.7.tar.bz2"
    with pytest.raises(AnsibleFilterError, match="openmpi-1.10.7.tar.bz2 would be two different files"):
        cntk_artifacts(matrix, [first, second])


def test_the_2_4_gpu_wheel_does_not_collide_with_the_cpu_one(matrix):
    stacks = [stack(matrix, cntk_version="2.4", device=device, os=UBUNTU_1604, force=True)
              for device in ("cpu", "gpu")]
    dests = [item["dest"] for item in cntk_artifacts(matrix, stacks) if item["name"] == "cntk"]
    assert dests == ["cntk-2.4-cp36-cp36m-linux_x86_64.whl", "GPU/cntk-2.4-cp36-cp36m-linux_x86_64.whl"]



# ------------------------------------------------------------ matrix/README.md


def _readme_table():
    lines = README_PATH.read_text().splitlines()
    start = lines.index("<!-- matrix-table:start -->")
    end = lines.index("<!-- matrix-table:end -->")
    rows = [line for line in lines[start + 1:end] if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert set(rows[1].replace("|", "").replace(" ", "")) <= {"-", ":"}
    return [dict(zip(header, (cell.strip() for cell in row.strip("|").split("|")))) for row in rows[2:]]


def test_the_readme_table_agrees_with_the_yaml(matrix):
    assert _readme_table() == cntk_matrix_rows(matrix)


def test_the_readme_names_every_checksum_source_url(matrix):
    text = README_PATH.read_text()
    for needle in ("spack/spack-packages", "pyenv/pyenv", "chef/omnibus-software",
                   "Tools/devInstall/Windows/helper/Operations.ps1", "PyPI"):
        assert needle in text, needle
