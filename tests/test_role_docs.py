"""Every role's README against its code: the variable table(s) list exactly
the options of meta/argument_specs.yml (every entry point), every option has
a description, every variable of defaults/main.yml is an option, a default
the README spells out literally is the one defaults/main.yml has, and the
repository paths a README cites exist."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ROLES = sorted(path.name for path in (ROOT / "roles").iterdir() if (path / "meta" / "argument_specs.yml").is_file())

BACKTICKED = re.compile(r"`([^`]+)`")
# Repository paths a README may cite, in backticks or in prose.
REPO_PATH = re.compile(
    r"(?<![\w./<>-])((?:tests|scripts|roles|playbooks|plugins|docs|matrix|molecule|training|inventory|bench)"
    r"/[\w./-]*)"
)
# Paths inside the role itself (`tasks/main.yml`, `library/cpython_prebuilt.py`).
ROLE_PATH = re.compile(
    r"^(?:tasks|vars|defaults|meta|handlers|templates|files|library|filter_plugins|action_plugins)/[\w./-]+$"
)


def _load(path):
    with path.open() as handle:
        return yaml.safe_load(handle) or {}


def _options(role):
    """option name -> spec, merged over every entry point (main, tasks_from)."""
    specs = _load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]
    options = {}
    for entry in specs.values():
        for name, spec in (entry.get("options") or {}).items():
            options.setdefault(name, []).append(spec or {})
    return options


def _defaults(role):
    path = ROOT / "roles" / role / "defaults" / "main.yml"
    return _load(path) if path.is_file() else {}


def _readme(role):
    return (ROOT / "roles" / role / "README.md").read_text()


def _prose(text):
    """The README without its fenced code blocks (examples, sample output)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _tables(text):
    """Markdown tables as lists of rows (lists of cells), header and rule dropped."""
    tables, current = [], []
    for line in _prose(text).splitlines() + [""]:
        if line.lstrip().startswith("|"):
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            continue
        if len(current) > 2 and set("".join(current[1])) <= set("-: "):
            tables.append(current[2:])
        current = []
    return tables


def _variable_rows(role):
    """(names, default cell) for every row of the README's variable tables:
    tables whose first column names the role's variables in backticks."""
    prefix = role + "_"
    rows = []
    for table in _tables(_readme(role)):
        table_rows = []
        for row in table:
            names = [name for name in BACKTICKED.findall(row[0]) if re.fullmatch(r"[a-z][a-z0-9_]*", name)]
            table_rows.append(([name for name in names if name.startswith(prefix)], row[1] if len(row) > 2 else None))
        if any(names for names, _ in table_rows):
            rows.extend(row for row in table_rows if row[0])
    return rows


def _literal(value):
    """How a plain default reads in a README cell, or None when it is templated or structured."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return None if "{{" in value or "{%" in value else value
    if value in ([], {}):
        return "[]" if value == [] else "{}"
    if isinstance(value, list) and all(isinstance(item, str) and "{{" not in item for item in value):
        return ", ".join(value)
    return None


def _cell(text):
    text = text.strip()
    if text.startswith("`") and text.endswith("`") and text.count("`") == 2:
        text = text[1:-1]
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    if text.startswith("[") and text.endswith("]") and text != "[]":
        text = ", ".join(item.strip() for item in text[1:-1].split(","))
    return text


def test_every_role_has_docs_and_spec():
    for path in sorted((ROOT / "roles").iterdir()):
        if path.is_dir():
            assert (path / "README.md").is_file(), f"{path.name}: no README.md"
            assert (path / "meta" / "argument_specs.yml").is_file(), f"{path.name}: no meta/argument_specs.yml"


@pytest.mark.parametrize("role", ROLES)
def test_readme_variables_match_argument_spec(role):
    documented = {name for names, _ in _variable_rows(role) for name in names}
    options = set(_options(role))
    assert documented, f"{role}: README.md has no variable table (| variable | default | meaning |)"
    missing_in_readme = sorted(options - documented)
    missing_in_spec = sorted(documented - options)
    assert not missing_in_readme, f"{role}: options of meta/argument_specs.yml not in README.md: {missing_in_readme}"
    assert not missing_in_spec, f"{role}: README.md variables not in meta/argument_specs.yml: {missing_in_spec}"


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_a_description(role):
    undescribed = []
    for name, specs in _options(role).items():
        for spec in specs:
            description = spec.get("description")
            lines = description if isinstance(description, list) else [description]
            if not all(isinstance(line, str) and line.strip() for line in lines):
                undescribed.append(name)
    assert not undescribed, f"{role}: options without a description: {sorted(set(undescribed))}"


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_an_option(role):
    unspecified = sorted(set(_defaults(role)) - set(_options(role)))
    assert not unspecified, (
        f"{role}: defaults/main.yml variables missing from meta/argument_specs.yml: {unspecified} "
        "(internal constants belong in vars/main.yml)"
    )


@pytest.mark.parametrize("role", ROLES)
def test_literal_readme_defaults_match_defaults_file(role):
    defaults = _defaults(role)
    options = _options(role)
    wrong = []
    for names, cell in _variable_rows(role):
        if cell is None:
            continue
        parts = [cell] if len(names) == 1 else [part for part in cell.split(", ")]
        if len(parts) != len(names):
            continue
        for name, part in zip(names, parts):
            if name not in defaults:
                continue
            expected = _literal(defaults[name])
            if expected is None:
                continue
            shown = _cell(part)
            required = any(spec.get("required") for spec in options.get(name, []))
            if required and shown.strip("()") == "required":
                continue
            if shown != expected:
                wrong.append(f"{name}: README {part!r}, defaults/main.yml {expected!r}")
    assert not wrong, f"{role}: README defaults differ from defaults/main.yml: {wrong}"


@pytest.mark.parametrize("role", ROLES)
def test_cited_paths_exist(role):
    text = _prose(_readme(role))
    missing = []
    for match in REPO_PATH.finditer(text):
        cited = match.group(1).rstrip(".,:;")
        if not (ROOT / cited).exists():
            missing.append(cited)
    for cited in BACKTICKED.findall(text):
        if ROLE_PATH.match(cited) and not (ROOT / "roles" / role / cited).exists():
            missing.append(f"roles/{role}/{cited}")
    assert not missing, f"{role}: README.md cites paths that do not exist: {sorted(set(missing))}"
