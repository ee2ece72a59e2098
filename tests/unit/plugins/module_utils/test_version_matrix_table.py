"""The version matrix itself (matrix/cntk.yml: its sections, every artifact's version, sha256 and
source, the references between sections) and the version arithmetic of
plugins/module_utils/version_matrix_table.py (driver_satisfies)."""

import re

import pytest

from ansible.errors import AnsibleFilterError

from ansible.plugins.test.core import version_compare
from ansible_collections.cntk.cluster.plugins.module_utils.version_matrix_table import driver_satisfies
from version_matrix_helpers import HEX64, load_matrix


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


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
    assert driver_satisfies(installed, minimum) is expected
    # The roles compare with Ansible's own `version` test (`driver is version(minimum, '>=')`): it agrees.
    assert version_compare(str(installed), minimum, ">=") is expected


def test_driver_satisfies_rejects_garbage():
    with pytest.raises(AnsibleFilterError):
        driver_satisfies("410.48-1ubuntu", "410.48")
    with pytest.raises(AnsibleFilterError):
        driver_satisfies(None, "410.48")
