"""The version matrix (matrix/cntk.yml) as data: reading it, its sections and
pins, and the version arithmetic its entries need.

What the resolver (version_matrix.py, version_matrix_components.py) and the
listings (version_matrix_listings.py) share. A matrix is the data loaded
from matrix/cntk.yml, or the path of that file: load_matrix then reads it
itself, once per process (per modification time), so that the whole matrix
never passes through Ansible's templating, which costs seconds per host.
"""

import copy
import functools
import os
import re
from collections.abc import Mapping

import yaml

from ansible.errors import AnsibleFilterError

DEVICES = ("gpu", "cpu")
MATRIX_FILE = "matrix/cntk.yml"


# ---------------------------------------------------------------- versions


def version_tuple(value, what="version"):
    """'410.48' -> (410, 48). Raises AnsibleFilterError for anything else."""
    text = str(value).strip() if value is not None else ""
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        raise AnsibleFilterError(f"{what}={value!r} is not a dotted numeric version (like 410.48)")
    return tuple(int(part) for part in text.split("."))


def matches(requested, pinned):
    """True when `requested` names `pinned` at its own precision:
    '10', '10.0' and '10.0.130' all name 10.0.130; '1.1' does not name 1.10.7."""
    req = str(requested).strip().split(".")
    pin_parts = str(pinned).strip().split(".")
    return len(req) <= len(pin_parts) and pin_parts[: len(req)] == req


def sort_versions(versions, reverse=True):
    def key(text):
        return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]", str(text)))

    return sorted(versions, key=key, reverse=reverse)


def driver_satisfies(installed, minimum):
    """Whether an installed NVIDIA driver version is at least `minimum`.

    Compared numerically per component, as NVIDIA numbers its drivers:
    410.104 is newer than 410.48, 535.104.05 newer than 535.54.03."""
    have = version_tuple(installed, "driver_version")
    need = version_tuple(minimum, "driver minimum")
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


def as_bool(value):
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("", "0", "false", "no", "off"):
        return False
    raise AnsibleFilterError(f"force={value!r} is not a boolean")


def major_minor(value):
    parts = str(value).strip().split(".")
    return ".".join(parts[:2])



# ---------------------------------------------------------------- lookups


# libyaml's safe loader when there: ten times faster here, and every worker Ansible forks reads the matrix anew.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=8)
def _read_matrix(path, mtime_ns):
    with open(path, encoding="utf-8") as source:
        return yaml.load(source, Loader=_SAFE_LOADER)  # a SafeLoader: safe


def load_matrix(matrix):
    """The matrix itself, read from its file when given a path."""
    if isinstance(matrix, str):
        try:
            return copy.deepcopy(_read_matrix(matrix, os.stat(matrix).st_mtime_ns))
        except (OSError, yaml.YAMLError) as error:
            raise AnsibleFilterError(f"cannot read the version matrix {matrix}: {error}")
    return matrix


def section(matrix, name):
    if not isinstance(matrix, Mapping) or name not in matrix:
        raise AnsibleFilterError(f"{MATRIX_FILE} has no '{name}' section: is this the version matrix?")
    return matrix[name]


def find_os(os_table, distribution, version):
    """('Debian 12', entry) for Debian 12.5; (name, None) when not in the table."""
    distribution = str(distribution or "").strip()
    version = str(version or "").strip()
    parts = version.split(".")
    for count in range(len(parts), 0, -1):
        name = f"{distribution} {'.'.join(parts[:count])}"
        if name in os_table:
            return name, os_table[name]
    return f"{distribution} {version}".strip(), None


def pin(entry, **extra):
    """A copy of an artifact pin from the matrix, marked pinned."""
    result = copy.deepcopy(dict(entry))
    result.update(extra)
    result.setdefault("pinned", True)
    return result


def unpinned(version, **extra):
    result = {"version": str(version), "file": None, "url": None, "sha256": None,
              "sha256_source": None, "pinned": False}
    result.update(extra)
    return result



# ---------------------------------------------------------------- releases


def installable(releases):
    """Releases whose wheels are all pinned and self-contained, newest first."""
    return [v for v in sort_versions(releases)
            if not releases[v].get("superseded_by") and not _has_unverified_wheels(releases[v])]


def _has_unverified_wheels(release):
    for device in DEVICES:
        for key, wheel in release["wheels"][device].items():
            if key != "package" and wheel.get("sha256") is None:
                return True
    return False

