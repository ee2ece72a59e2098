"""One owner for every cluster-wide name and path (roles/cluster).

- No role's defaults or vars read another role's variables: every name a
  template there uses is the role's own, the cluster role's (cluster_*), or
  Ansible's (facts, magic variables, lookups).
- Each cluster-wide path is spelled once, in roles/cluster/defaults/main.yml.
- Every role depends on the cluster role, so its values are there whatever
  play or include_role runs the role.
"""

import re
from pathlib import Path

import jinja2
import jinja2.meta
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
ROLES = sorted(path.name for path in (ROOT / "roles").iterdir() if (path / "meta" / "main.yml").is_file())

# What Ansible itself provides to a template.
ANSIBLE_NAMES = {"groups", "hostvars", "inventory_hostname", "inventory_dir", "play_hosts", "omit",
                 "lookup", "query", "q", "now", "item", "ansible_facts", "ansible_config_file",
                 "ansible_check_mode", "ansible_play_hosts", "ansible_play_hosts_all", "undef"}

# Paths the cluster role owns, as literals: found anywhere else in the roles'
# or playbooks' code, a role is repeating a formula.
OWNED_PATHS = ["/srv/cntk", "/opt/cntk", "/var/cache/cntk-cluster/artifacts", "/usr/local/mpi",
               ".cache/artifacts", "/artifacts\"", "/matrix/cntk.yml", "C:\\cntk",
               "C:\\ProgramData\\cntk-cluster", "C:\\Program Files\\Python36", "/cluster-hostfile"]

class _Anything(dict):
    """Ansible's filters and tests, as far as parsing needs them."""

    def __contains__(self, name):
        return True

    def __getitem__(self, name):
        return lambda *args, **kwargs: None

    def get(self, name, default=None):
        return self[name]


ENV = jinja2.Environment()
ENV.filters = _Anything()
ENV.tests = _Anything()


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _names_read(path):
    """Every variable name the templates in a YAML vars file read."""
    data = yaml.safe_load(path.read_text()) or {}
    names = set()
    for text in _strings(data):
        if "{{" in text or "{%" in text:
            names |= jinja2.meta.find_undeclared_variables(ENV.parse(text))
    return names - set(data)


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_vars_read_only_their_own_or_the_cluster_roles_variables(role):
    strangers = {}
    for part in ("defaults", "vars"):
        path = ROOT / "roles" / role / part / "main.yml"
        if path.is_file():
            for name in _names_read(path):
                if not (name.startswith(role + "_") or name.startswith("cluster_") or name in ANSIBLE_NAMES
                        or name.startswith("ansible_")):
                    strangers.setdefault(name, []).append(f"{part}/main.yml")
    assert not strangers, f"roles/{role} reads variables it does not own: {strangers}"


def test_the_walk_finds_a_foreign_variable():
    """The check above can fail: a formula that reads another role's variable is found."""
    names = jinja2.meta.find_undeclared_variables(ENV.parse("{{ dataset_node_dir }}/{{ cluster_jobs_dir }}"))
    assert names == {"dataset_node_dir", "cluster_jobs_dir"}


def _code_lines(path):
    """A file's lines without YAML/shell comments (comments may name paths)."""
    for line in path.read_text().splitlines():
        if not line.lstrip().startswith("#"):
            yield line


def test_each_cluster_wide_path_is_spelled_once():
    owner = ROOT / "roles" / "cluster" / "defaults" / "main.yml"
    files = [path for base in ("roles", "playbooks") for path in (ROOT / base).rglob("*")
             if path.is_file() and path.suffix in (".yml", ".j2", ".sh") and path != owner
             and path.parent.name != "meta"]
    spelled = {}
    for path in files:
        for line in _code_lines(path):
            for literal in OWNED_PATHS:
                if literal in line:
                    spelled.setdefault(literal, []).append(str(path.relative_to(ROOT)))
    owner_text = "\n".join(_code_lines(owner))
    assert all(literal in owner_text for literal in OWNED_PATHS if literal != "/artifacts\"")
    assert not spelled, f"paths the cluster role owns, spelled again: {spelled}"


@pytest.mark.parametrize("role", [role for role in ROLES if role != "cluster"])
def test_every_role_depends_on_the_cluster_role(role):
    meta = yaml.safe_load((ROOT / "roles" / role / "meta" / "main.yml").read_text())
    dependencies = [dep["role"] if isinstance(dep, dict) else dep for dep in meta.get("dependencies") or []]
    assert "cluster" in dependencies


def test_no_role_falls_back_on_a_default_for_a_cluster_value():
    """`cluster_x | default(...)` would hide a renamed or missing owner value."""
    defaults = yaml.safe_load((ROOT / "roles" / "cluster" / "defaults" / "main.yml").read_text())
    pattern = re.compile(r"\b(" + "|".join(sorted(defaults, key=len, reverse=True)) + r")\s*\|\s*default\b")
    found = [f"{path.relative_to(ROOT)}: {line.strip()}"
             for base in ("roles", "playbooks") for path in (ROOT / base).rglob("*.yml")
             for line in _code_lines(path) if pattern.search(line)]
    assert not found, found
