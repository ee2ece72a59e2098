"""Inventory variables that look like the project's but that no role knows: typos.

Ansible ignores a variable nobody reads, so `cluster_slot: 4` (for
cluster_slots) would silently leave the default in place. Preflight refuses
such names instead, naming the nearest known one (as kubespray's
validate_inventory and stackhpc openhpc's validate.yml do).

A name looks like the project's when it starts with `cluster_` or with
`<role>_` for any directory under roles/, or when its head is one letter or so
off one of those (`train_jobs_args`) and a known name is close to it. Names
starting with `ansible_`, and every other name, are left alone.

Known names are every option of every entry point in
roles/*/meta/argument_specs.yml plus the top-level keys of
roles/*/defaults/main.yml, read from the project at run time. Names the
project's own tasks set (set_fact, register: the cluster dependency runs
before preflight) also pass, but are never offered as the nearest name.

Filter:

    names | unknown_project_vars(project_root, inventory_dir)
        -> [{'name': ..., 'suggestion': nearest known name or None, 'where': [files that set it],
             'message': 'cluster_slot is not a variable of this project (did you mean cluster_slots?);
                         fix the inventory (inventory/local/group_vars/all.yml)'}]

`where` lists the files under inventory_dir (hosts files, group_vars/,
host_vars/) that set the name, relative to the project root when inside it;
empty when it came from the extra vars (or inventory_dir is not given).

Pure Python, unit-tested in tests/unit/plugins/filter/test_inventory_names.py.
"""

import difflib
import functools
import re
from pathlib import Path

import yaml

# The project root, when the caller does not name one: plugins/filter/ is two levels down.
DEFAULT_ROOT = Path(__file__).resolve().parents[2]
PROJECT_STEM = "cluster"
IGNORED_PREFIX = "ansible_"
# How close a name's head must be to a role's name to count as a typo of it (train_jobs ~ train_job).
PREFIX_CUTOFF = 0.85
SET_FACT = ("set_fact", "ansible.builtin.set_fact", "ansible.legacy.set_fact")
INCLUDE_VARS = ("include_vars", "ansible.builtin.include_vars", "ansible.legacy.include_vars")


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """safe_load (libyaml's when there: several times faster) that reads Ansible's tags (!vault, !unsafe)
    as plain nodes: only the names matter here."""


def _any_tag(loader, _suffix, node):
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


_Loader.add_multi_constructor("!", _any_tag)


def _load(path):
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # a SafeLoader: safe
    except (OSError, yaml.YAMLError):
        return None


def _mapping(path):
    data = _load(path)
    return data if isinstance(data, dict) else {}


def _set_by_tasks(node, found):
    """Names that set_fact, register and include_vars (name:) set anywhere in a task file or play."""
    if isinstance(node, list):
        for item in node:
            _set_by_tasks(item, found)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in SET_FACT and isinstance(value, dict):
                found.update(str(name) for name in value if name != "cacheable")
            elif key in INCLUDE_VARS and isinstance(value, dict) and isinstance(value.get("name"), str):
                found.add(value["name"])
            elif key == "register" and isinstance(value, str):
                found.add(value)
            else:
                _set_by_tasks(value, found)
    return found


@functools.lru_cache(maxsize=None)
def _project_names(root):
    """(stems, spec names, names tasks set) of the project at root.

    Parsed once per process: the filter runs per host.
    """
    root = Path(root)
    roles = sorted(p for p in (root / "roles").glob("*") if p.is_dir())
    # roles/cluster gives `cluster` a second time; keep each stem once.
    stems = tuple(dict.fromkeys((PROJECT_STEM, *(role.name for role in roles))))
    known = set()
    for role in roles:
        for entry in (_mapping(role / "meta" / "argument_specs.yml").get("argument_specs") or {}).values():
            if isinstance(entry, dict):
                known.update(str(name) for name in (entry.get("options") or {}))
        known.update(str(name) for name in _mapping(role / "defaults" / "main.yml"))
    task_files = [p for role in roles for sub in ("tasks", "handlers") for p in (role / sub).rglob("*.y*ml")]
    task_files += list((root / "playbooks").rglob("*.y*ml")) + list(root.glob("*.y*ml"))
    set_by_tasks = set()
    for path in task_files:
        _set_by_tasks(_load(path), set_by_tasks)
    # What include_vars loads from a role's vars/ (vars/Debian.yml): a later playbook of the same run sees it.
    for path in (p for role in roles for p in (role / "vars").glob("*.y*ml")):
        set_by_tasks.update(str(name) for name in _mapping(path))
    return stems, frozenset(known), frozenset(set_by_tasks - known)


def _prefixed(name, stems):
    return name.startswith(tuple(f"{stem}_" for stem in stems))


def _near_prefixed(name, stems):
    """Whether a head of the name (up to an underscore) is a near miss of a stem: train_jobs_args, clustr_slots."""
    parts = name.split("_")
    heads = ("_".join(parts[:i]) for i in range(1, len(parts)))
    return any(head and difflib.get_close_matches(head, stems, n=1, cutoff=PREFIX_CUTOFF) for head in heads)


def _inventory_files(inventory_dir):
    top = Path(inventory_dir)
    files = [p for p in top.iterdir() if p.is_file()] if top.is_dir() else []
    for sub in ("group_vars", "host_vars"):
        files += [p for p in (top / sub).rglob("*") if p.is_file()]
    return sorted(files)


def _shown(path, root):
    """A path relative to the project root when inside it, else absolute."""
    full = Path(path).resolve()
    return str(full.relative_to(root)) if full.is_relative_to(root) else str(full)


def _where(name, files, root):
    """Files that set name: a YAML key (`name:`) or an INI assignment (`name=`), comments aside.

    Plain text search, so a vaulted file never shows.
    """
    pattern = re.compile(rf"""(^|[\s{{,'"]){re.escape(name)}['"]?\s*[:=]""")
    found = []
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        if any(pattern.search(line) for line in lines if not line.lstrip().startswith(("#", ";"))):
            found.append(_shown(path, root))
    return found


def _message(name, suggestion, where, inventory):
    hint = f"did you mean {suggestion}?" if suggestion else "no close match"
    if where:
        fix = f"the inventory ({', '.join(where)})"
    else:
        fix = f"the extra vars (-e) or the inventory ({inventory})" if inventory else "the extra vars or the inventory"
    return f"{name} is not a variable of this project ({hint}); fix {fix}"


def unknown_project_vars(names, project_root=None, inventory_dir=None):
    """The names (variable names, or a mapping's keys) that look like the project's but no role knows.

    Each comes with the nearest known name (None when nothing is close) and the inventory files that set it.
    """
    root = Path(project_root).resolve() if project_root else DEFAULT_ROOT
    stems, known, set_by_tasks = _project_names(str(root))
    candidates = sorted(known)
    files = None
    unknown = []
    for name in sorted({str(n) for n in names}):
        if name.startswith(IGNORED_PREFIX) or name in known or name in set_by_tasks:
            continue
        prefixed = _prefixed(name, stems)
        if not prefixed and not _near_prefixed(name, stems):
            continue
        close = difflib.get_close_matches(name, candidates, n=1)
        if not prefixed and not close:
            continue  # a foreign name that merely starts like a role's
        if files is None:
            files = _inventory_files(inventory_dir) if inventory_dir else []
        suggestion = close[0] if close else None
        where = _where(name, files, root)
        unknown.append({"name": name, "suggestion": suggestion, "where": where,
                        "message": _message(name, suggestion, where, inventory_dir and _shown(inventory_dir, root))})
    return unknown


class FilterModule:
    def filters(self):
        return {"unknown_project_vars": unknown_project_vars}
