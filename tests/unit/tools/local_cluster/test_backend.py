"""--backend: cntk when CPython 3.6 can be had, numpy otherwise."""

import pytest
import yaml

from local_cluster import ClusterError, backend, inventory, layout


def test_backend_cntk_ships_the_controllers_python_with_the_labelled_stand_in(tmp_path):
    settings, line = backend.backend_settings("auto", cache_dir=tmp_path, python_prefix=tmp_path / "3.6.15")
    assert settings == {"cluster_backend": "cntk", "cluster_device": "cpu", "cluster_openmpi_standin": True,
                        "cpython_prebuilt_prefix": str(tmp_path / "3.6.15")}
    assert line.startswith("backend cntk") and "stand-in" in line
    text = inventory.render_inventory(layout.nodes_for(1), 22, tmp_path / "key", tmp_path / "known", tmp_path / "s",
                               backend=settings)
    assert yaml.safe_load(text)["all"]["vars"]["cpython_prebuilt_prefix"] == str(tmp_path / "3.6.15")


def test_backend_cntk_from_cached_sources_without_a_prebuilt(tmp_path):
    assert not backend.cached_python_sources(tmp_path)
    for name in ("Python-3.6.15.tgz", "openssl-1.1.1w.tar.gz"):
        (tmp_path / name).write_bytes(b"")
    settings, _ = backend.backend_settings("cntk", cache_dir=tmp_path, python_prefix=None)
    assert settings["cluster_backend"] == "cntk" and "cpython_prebuilt_prefix" not in settings


def test_backend_cntk_that_cannot_be_had_is_one_line_or_numpy(tmp_path):
    with pytest.raises(ClusterError, match=r"^--backend cntk: no CPython 3\.6\.15 here .*nothing was changed"):
        backend.backend_settings("cntk", cache_dir=tmp_path, python_prefix=None)
    settings, line = backend.backend_settings("auto", cache_dir=tmp_path, python_prefix=None)
    assert settings == {"cluster_backend": "numpy"} and line.startswith("backend numpy, not cntk: no CPython")
    with pytest.raises(ClusterError, match="choose cntk, numpy or auto"):
        backend.backend_settings("torch")
