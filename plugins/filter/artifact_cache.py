"""Filters for the artifact_cache role: which artifacts can be verified, which need fetching."""

import copy
import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

SHA256 = re.compile(r"^[0-9a-f]{64}$")


def artifact_cache_with_sha256(items, overrides=None):
    """Items with sha256 filled from overrides (dest -> sha256) where the matrix has none.

    An override never replaces a pinned sha256 that differs from it: that is an error,
    because it would silently trust a different file than the matrix names."""
    overrides = overrides or {}
    if not isinstance(overrides, Mapping):
        raise AnsibleFilterError("cluster_artifact_sha256 must map a file name to its sha256")
    result = []
    for item in items or []:
        if not isinstance(item, Mapping) or not (item.get("dest") or item.get("file")) or "url" not in item:
            raise AnsibleFilterError(f"artifact_cache: each item needs file (or dest) and url (None: no public "
                                     f"URL), got {item!r}")
        item = copy.deepcopy(dict(item))
        item["dest"] = item.get("dest") or item["file"]  # a matrix pin's name in the folder is its file name
        given = overrides.get(item["dest"])
        if given is not None:
            given = str(given).strip().lower()
            if not SHA256.match(given):
                raise AnsibleFilterError(
                    f"cluster_artifact_sha256['{item['dest']}']={given!r} is not a sha256 (64 hex digits): "
                    f"set it to the output of sha256sum for that file")
            if item.get("sha256") and item["sha256"] != given:
                raise AnsibleFilterError(
                    f"cluster_artifact_sha256['{item['dest']}'] is {given} but matrix/cntk.yml pins "
                    f"{item['sha256']}: remove the override (the pinned file is the one verified)")
            item["sha256"] = given
        result.append(item)
    return result


def artifact_cache_unmatched(stat_results):
    """The loop results of a stat (checksum_algorithm sha256) whose file is missing or differs from item.sha256."""
    bad = []
    for result in stat_results or []:
        stat = result.get("stat") or {}
        wanted = (result.get("item") or {}).get("sha256")
        if not stat.get("exists") or stat.get("checksum") != wanted:
            bad.append(result)
    return bad


def artifact_cache_describe(item):
    """One line for a user: where a file comes from and what it must hash to."""
    return f"{item.get('dest')} <- {item.get('url') or '(no public URL: put it in the folder yourself)'} " \
           f"sha256 {item.get('sha256') or '(none pinned)'}"


class FilterModule:
    def filters(self):
        return {
            "artifact_cache_with_sha256": artifact_cache_with_sha256,
            "artifact_cache_unmatched": artifact_cache_unmatched,
            "artifact_cache_describe": artifact_cache_describe,
        }
