"""Filters for the cntk role."""

from ansible.errors import AnsibleFilterError


def cntk_pip_pins(items):
    """Artifact items -> pip requirements pinned to their versions: ['numpy==1.19.5', ...]."""
    pins = []
    for item in items or []:
        if not item.get("name") or not item.get("version"):
            raise AnsibleFilterError(f"cntk: {item!r} needs a name and a version to be pinned for pip")
        pins.append(f"{item['name']}=={item['version']}")
    return pins


class FilterModule:
    def filters(self):
        return {"cntk_pip_pins": cntk_pip_pins}
