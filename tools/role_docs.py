#!/usr/bin/env python3
"""Each role's variable tables, rendered from its meta/argument_specs.yml.

    python3 tools/role_docs.py            # rewrite every roles/<role>/README.md's generated block
    python3 tools/role_docs.py --check    # exit 1 naming each README whose block is stale

The argument spec is the one written copy of a role's variables (name, type,
default, description, for every entry point); the README's table between the
markers below is made from it, as dev-sec's hardening collection makes its
role docs. Edit the spec, never the table.
"""

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- BEGIN generated: role variables (tools/role_docs.py, from meta/argument_specs.yml) -->"
END = "<!-- END generated: role variables -->"


def load_specs(role_dir):
    """entry point -> its spec, main first."""
    specs = yaml.safe_load((role_dir / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return dict(sorted(specs.items(), key=lambda item: (item[0] != "main", item[0])))


def options(role_dir):
    """option name -> its specs, one per entry point that has it."""
    merged = {}
    for entry in load_specs(role_dir).values():
        for name, spec in (entry.get("options") or {}).items():
            merged.setdefault(name, []).append(spec or {})
    return merged


def _cell(text):
    """One table cell: a single line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text):
    return f"`{_cell(text)}`"


def render_type(spec):
    kind = spec.get("type", "str")
    if spec.get("elements"):
        kind += f" of {spec['elements']}"
    if spec.get("choices"):
        kind += ": " + ", ".join(_code(choice) for choice in spec["choices"])
    return _cell(kind)


def render_default(spec):
    if spec.get("required"):
        return "required"
    if "default" not in spec:
        return "-"
    value = spec["default"]
    if isinstance(value, bool):
        return _code("true" if value else "false")
    if isinstance(value, str):
        return _code(value) if value else '`""`'
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False)
    return _code(text.removesuffix("\n").removesuffix("\n...").strip())


def render_description(spec):
    description = spec.get("description", "")
    if isinstance(description, list):
        description = " ".join(description)
    return _cell(description)


def render(role_dir):
    """The generated block for one role, markers included."""
    specs = load_specs(role_dir)
    lines = [BEGIN]
    for entry_point, entry in specs.items():
        if len(specs) > 1 or entry_point != "main":
            tasks = "tasks/main.yml" if entry_point == "main" else f"tasks_from: {entry_point}"
            lines += ["", f"### Entry point `{entry_point}` ({tasks})"]
        if entry.get("short_description"):
            lines += ["", _cell(entry["short_description"])]
        lines += ["", "| variable | type | default | description |", "| --- | --- | --- | --- |"]
        for name, spec in (entry.get("options") or {}).items():
            spec = spec or {}
            lines.append(f"| `{name}` | {render_type(spec)} | {render_default(spec)} | {render_description(spec)} |")
    lines += ["", END]
    return "\n".join(lines)


def rewrite(text, block, readme):
    """The README with its generated block replaced by this one."""
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{readme}: no generated block; add the two marker lines:\n{BEGIN}\n{END}")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + block + tail


def roles(root=None):
    return sorted(path for path in ((root or ROOT) / "roles").iterdir() if (path / "meta" / "argument_specs.yml").is_file())


def stale_readmes(root=None):
    """READMEs whose generated block differs from what their spec renders."""
    stale = []
    for role_dir in roles(root):
        readme = role_dir / "README.md"
        text = readme.read_text()
        if rewrite(text, render(role_dir), readme) != text:
            stale.append(readme)
    return stale


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming each stale README")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_readmes()
        for readme in stale:
            print(f"{readme.relative_to(ROOT)}: variable tables are stale; run tools/role_docs.py", file=sys.stderr)
        return 1 if stale else 0
    for role_dir in roles():
        readme = role_dir / "README.md"
        text = readme.read_text()
        new = rewrite(text, render(role_dir), readme)
        if new != text:
            readme.write_text(new)
            print(f"wrote {readme.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
