"""Filters of the artifact_cache role."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.filter.artifact_cache import artifact_cache_unmatched, artifact_cache_with_sha256

SHA = "a" * 64


def test_override_fills_a_missing_sha256():
    items = artifact_cache_with_sha256([{"dest": "x.deb", "url": "u", "sha256": None}], {"x.deb": SHA.upper()})
    assert items[0]["sha256"] == SHA


def test_override_cannot_replace_a_pinned_sha256():
    with pytest.raises(AnsibleFilterError, match="matrix/cntk.yml pins"):
        artifact_cache_with_sha256([{"dest": "x.deb", "url": "u", "sha256": "b" * 64}], {"x.deb": SHA})


def test_override_must_look_like_a_sha256():
    with pytest.raises(AnsibleFilterError, match="is not a sha256"):
        artifact_cache_with_sha256([{"dest": "x.deb", "url": "u", "sha256": None}], {"x.deb": "abc"})


def test_item_without_url_is_an_error():
    with pytest.raises(AnsibleFilterError, match=r"needs file \(or dest\) and url"):
        artifact_cache_with_sha256([{"dest": "x.deb"}])


def test_item_with_no_public_url_is_accepted():
    assert artifact_cache_with_sha256([{"dest": "x.zip", "url": None, "sha256": SHA}])[0]["url"] is None


def test_unmatched_lists_missing_and_different_files():
    results = [
        {"item": {"dest": "ok", "sha256": SHA}, "stat": {"exists": True, "checksum": SHA}},
        {"item": {"dest": "gone", "sha256": SHA}, "stat": {"exists": False}},
        {"item": {"dest": "bad", "sha256": SHA}, "stat": {"exists": True, "checksum": "b" * 64}},
    ]
    assert [r["item"]["dest"] for r in artifact_cache_unmatched(results)] == ["gone", "bad"]


def test_a_matrix_pin_without_dest_is_kept_under_its_file_name():
    assert artifact_cache_with_sha256([{"file": "a.tar.gz", "url": "u", "sha256": SHA}])[0]["dest"] == "a.tar.gz"
