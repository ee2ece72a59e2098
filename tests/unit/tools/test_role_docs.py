"""Every role's docs against its code: the README's variable tables are the
ones tools/role_docs.py renders from meta/argument_specs.yml (every entry
point), every option has a description, every variable of defaults/main.yml
is an option whose spec default is the defaults file's value, and the
repository paths a README cites exist."""

import re

import pytest
import role_docs
import yaml

ROOT = role_docs.ROOT
ROLES = [path.name for path in role_docs.roles()]

BACKTICKED = re.compile(r"`([^`]+)`")
# Repository paths a README may cite, in backticks or in prose.
REPO_PATH = re.compile(
    r"(?<![\w./<>-])((?:tests|scripts|tools|roles|playbooks|plugins|docs|matrix|molecule|training|inventory|bench|examples)"
    r"/[\w./-]*)"
)
# Paths inside the role itself (`tasks/main.yml`, `files/run_rank.py`).
ROLE_PATH = re.compile(
    r"^(?:tasks|vars|defaults|meta|handlers|templates|files|library|filter_plugins|action_plugins)/[\w./-]+$"
)


def _defaults(role):
    path = ROOT / "roles" / role / "defaults" / "main.yml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def _prose(text):
    """The README without its fenced code blocks (examples, sample output)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def test_every_role_has_docs_and_spec():
    for path in sorted((ROOT / "roles").iterdir()):
        if path.is_dir():
            assert (path / "README.md").is_file(), f"{path.name}: no README.md"
            assert (path / "meta" / "argument_specs.yml").is_file(), f"{path.name}: no meta/argument_specs.yml"


def test_generated_tables_are_current():
    stale = [str(readme.relative_to(ROOT)) for readme in role_docs.stale_readmes()]
    assert not stale, f"variable tables out of date (run tools/role_docs.py): {stale}"


def test_check_names_a_stale_readme(tmp_path, capsys, monkeypatch):
    role = tmp_path / "roles" / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      demo_x:\n        type: int\n        default: 3\n"
        "        description: A number.\n"
    )
    (role / "README.md").write_text(f"# demo\n\n{role_docs.BEGIN}\n{role_docs.END}\n")
    monkeypatch.setattr(role_docs, "ROOT", tmp_path)
    assert role_docs.main(["--check"]) == 1
    assert "roles/demo/README.md" in capsys.readouterr().err
    assert role_docs.main([]) == 0
    assert "| `demo_x` | int | `3` | A number. |" in (role / "README.md").read_text()
    assert role_docs.main(["--check"]) == 0


def test_render_default_forms():
    assert role_docs.render_default({"required": True, "default": "x"}) == "required"
    assert role_docs.render_default({}) == "-"
    assert role_docs.render_default({"default": False}) == "`false`"
    assert role_docs.render_default({"default": ""}) == '`""`'
    assert role_docs.render_default({"default": 86400}) == "`86400`"
    assert role_docs.render_default({"default": ["a", "b"]}) == "`[a, b]`"
    assert role_docs.render_default({"default": "{{ x | bool }}"}) == "`{{ x \\| bool }}`"


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_a_description(role):
    undescribed = []
    for name, specs in role_docs.options(ROOT / "roles" / role).items():
        for spec in specs:
            description = spec.get("description")
            lines = description if isinstance(description, list) else [description]
            if not all(isinstance(line, str) and line.strip() for line in lines):
                undescribed.append(name)
    assert not undescribed, f"{role}: options without a description: {sorted(set(undescribed))}"


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_an_option(role):
    unspecified = sorted(set(_defaults(role)) - set(role_docs.options(ROOT / "roles" / role)))
    assert not unspecified, (
        f"{role}: defaults/main.yml variables missing from meta/argument_specs.yml: {unspecified} "
        "(internal constants belong in vars/main.yml)"
    )


@pytest.mark.parametrize("role", ROLES)
def test_spec_defaults_are_the_defaults_file(role):
    """An optional option's spec default is defaults/main.yml's value (templated ones too: the spec is what
    the README shows). A required option shows "required" and may leave its default to the defaults file."""
    defaults = _defaults(role)
    wrong = []
    for name, specs in role_docs.options(ROOT / "roles" / role).items():
        for spec in specs:
            if name not in defaults or spec.get("required"):
                continue
            if spec.get("default", "<none>") != defaults[name]:
                wrong.append(f"{name}: spec {spec.get('default', '<none>')!r}, defaults/main.yml {defaults[name]!r}")
    assert not wrong, f"{role}: meta/argument_specs.yml defaults differ from defaults/main.yml: {wrong}"


@pytest.mark.parametrize("role", ROLES)
def test_cited_paths_exist(role):
    text = _prose((ROOT / "roles" / role / "README.md").read_text())
    missing = []
    for match in REPO_PATH.finditer(text):
        cited = match.group(1).rstrip(".,:;")
        if not (ROOT / cited).exists():
            missing.append(cited)
    for cited in BACKTICKED.findall(text):
        if ROLE_PATH.match(cited) and not (ROOT / "roles" / role / cited).exists():
            missing.append(f"roles/{role}/{cited}")
    assert not missing, f"{role}: README.md cites paths that do not exist: {sorted(set(missing))}"
