"""Filters for the cpython role."""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def cpython_artifact(pin, name):
    """An artifact item (name, version, file, dest, url, sha256) from a matrix pin; {} for no pin."""
    if not pin:
        return {}
    if not isinstance(pin, Mapping):
        raise AnsibleFilterError(f"cpython: the {name} pin must be a mapping, got {pin!r}")
    missing = [key for key in ("version", "file", "url", "sha256") if not pin.get(key)]
    if missing:
        raise AnsibleFilterError(f"cpython: the {name} pin lacks {', '.join(missing)}: {dict(pin)!r}")
    return {
        "name": name,
        "version": str(pin["version"]),
        "file": pin["file"],
        "dest": pin.get("dest") or pin["file"],
        "url": pin["url"],
        "sha256": pin["sha256"],
    }


class FilterModule:
    def filters(self):
        return {"cpython_artifact": cpython_artifact}
