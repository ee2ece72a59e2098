"""Every filter the collection registers is used by its YAML or templates (issue 45: nine were used by none).
A function the tests or other Python want stays a function; only what YAML calls is a filter."""

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
SOURCES = [path for pattern in ("site.yml", "playbooks/*.yml", "roles/**/*.yml", "roles/**/*.j2", "molecule/**/*.yml",
                                "inventory/**/*.yml")
           for path in ROOT.glob(pattern)]


def registered():
    names = {}
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.cntk.cluster.plugins.filter.{path.stem}")
        for name in module.FilterModule().filters():
            names[name] = path.name
    return names


def test_every_registered_filter_is_used_by_the_yaml():
    text = "\n".join(path.read_text() for path in SOURCES)
    used = set(re.findall(r"cntk\.cluster\.([a-z_0-9]+)", text)) | set(re.findall(r"\|\s*([a-z_0-9]+)", text))
    unused = {name: where for name, where in registered().items() if name not in used}
    assert not unused, f"filters no YAML uses (unregister them): {unused}"
