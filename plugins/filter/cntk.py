"""Filters for the cntk role."""

import hashlib
from pathlib import Path

from ansible.errors import AnsibleFilterError


def cntk_pip_pins(items):
    """Artifact items -> pip requirements pinned to their versions: ['numpy==1.19.5', ...]."""
    pins = []
    for item in items or []:
        if not item.get("name") or not item.get("version"):
            raise AnsibleFilterError(f"cntk: {item!r} needs a name and a version to be pinned for pip")
        pins.append(f"{item['name']}=={item['version']}")
    return pins


def cntk_intact_wheel(folder):
    """The name of the one wheel in `folder` (on the controller) whose sha256 matches the
    `<wheel>.sha256` beside it, or "" when there is none: a fetch cut short leaves a wheel
    without its .sha256, and the next run builds it again."""
    intact = []
    for wheel in sorted(Path(folder).glob("*.whl")):
        record = wheel.with_name(wheel.name + ".sha256")
        if not record.is_file() or wheel.is_symlink():
            continue
        wanted = (record.read_text().split() or [""])[0]
        digest = hashlib.sha256()
        with wheel.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() == wanted:
            intact.append(wheel.name)
    if len(intact) > 1:
        raise AnsibleFilterError(f"cntk: {folder} holds more than one intact wheel ({', '.join(intact)}): "
                                 "remove the folder, and the next run builds the wheel again")
    return intact[0] if intact else ""


class FilterModule:
    def filters(self):
        return {"cntk_pip_pins": cntk_pip_pins, "cntk_intact_wheel": cntk_intact_wheel}
