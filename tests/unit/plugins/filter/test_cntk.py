"""Filters of the cntk role: pip pins, and which built mpi4py wheel on the controller may be used."""

import hashlib
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.filter.cntk import cntk_intact_wheel, cntk_pip_pins

WHEEL = "mpi4py-3.1.5-cp36-cp36m-linux_x86_64.whl"


def keep(folder, name, data, record=None):
    (folder / name).write_bytes(data)
    if record is not False:
        (folder / (name + ".sha256")).write_text(f"{record or hashlib.sha256(data).hexdigest()}  {name}\n")


def test_pins_need_a_name_and_a_version():
    assert cntk_pip_pins([{"name": "numpy", "version": "1.19.5"}]) == ["numpy==1.19.5"]
    with pytest.raises(AnsibleFilterError, match="needs a name and a version"):
        cntk_pip_pins([{"name": "numpy"}])


def test_a_wheel_whose_sha256_matches_its_record_is_used(tmp_path):
    keep(tmp_path, WHEEL, b"wheel bytes")
    assert cntk_intact_wheel(str(tmp_path)) == WHEEL


def test_no_folder_or_no_wheel_means_build_it(tmp_path):
    assert cntk_intact_wheel(str(tmp_path / "missing")) == ""
    assert cntk_intact_wheel(str(tmp_path)) == ""


def test_a_fetch_cut_short_is_not_used(tmp_path):
    # The sha256 is written after the fetch: no record, no wheel.
    keep(tmp_path, WHEEL, b"half a wheel", record=False)
    assert cntk_intact_wheel(str(tmp_path)) == ""


def test_a_damaged_wheel_is_not_used(tmp_path):
    keep(tmp_path, WHEEL, b"wheel bytes", record=hashlib.sha256(b"other bytes").hexdigest())
    assert cntk_intact_wheel(str(tmp_path)) == ""


def test_a_symlinked_wheel_is_not_used(tmp_path):
    keep(tmp_path, "elsewhere.bin", b"wheel bytes", record=False)
    (tmp_path / WHEEL).symlink_to(tmp_path / "elsewhere.bin")
    (tmp_path / (WHEEL + ".sha256")).write_text(hashlib.sha256(b"wheel bytes").hexdigest() + "\n")
    assert cntk_intact_wheel(str(tmp_path)) == ""


def test_two_intact_wheels_are_refused_with_the_fix(tmp_path):
    keep(tmp_path, WHEEL, b"one")
    keep(tmp_path, WHEEL.replace("3.1.5", "3.1.6"), b"two")
    with pytest.raises(AnsibleFilterError, match="remove the folder"):
        cntk_intact_wheel(str(tmp_path))
