#!/usr/bin/env python3
"""Check a script's use of the CNTK API against the real cntk 2.7 wheel.

CNTK 2.7 needs CPython 3.6 and Open MPI 1.10 (libmpi.so.12) just to be
imported, so it cannot run on the controller or in CI. Its wheel can still be
downloaded, and its Python layer is plain source. This tool parses that source
with ``ast`` (nothing is imported or executed) and checks every ``cntk`` name
and call the given file uses:

* each attribute path (``C.train.distributed.Communicator.rank``) resolves to
  a def, class, import or assignment in the wheel, following ``from .x import
  *`` (with ``__all__`` where a module has one), ``from ..x import y``,
  aliases such as ``StreamDefs = Record``, submodules bound by a package's own
  imports (so ``cntk.distributed`` is ``cntk.train.distributed``), class bases
  (including the SWIG proxies in ``cntk_py.py``) and ``self.x`` attributes;
* each call fits the signature found: positional count, keyword names
  (``**kwargs`` and ``*args`` honoured), missing required arguments,
  static methods versus instance methods called on the class, properties
  that are called, classes that cannot be constructed (SWIG abstract);
* deprecated functions and parameters (per the wheel's own docstrings);
* known misuses: ``cntk.one_hot`` on numpy data (it is a graph op), and a
  communicator passed as ``Trainer``'s ``progress_writers``;
* optionally, that the file is valid Python 3.6 (the CNTK interpreter).

Types are followed through assignments, tuple unpacking, calls of the file's
own functions (parameters take the type their call sites agree on, results
the type their returns agree on), and a small table of return types of CNTK
factories (``RETURN_HINTS``, itself checked against the wheel). What cannot be
followed is left unchecked, never guessed; ``--verbose`` lists it.

    scripts/cntk_api_check.py                      # checks training/cntk_backend.py
    scripts/cntk_api_check.py other.py --wheel cntk-2.7.post2-...whl --json

Without ``--wheel`` the pinned wheel is taken from ``.cache/cntk-wheel/``
under the repository root, downloaded there with pip first if absent, and
its sha256 verified. Exit status: 0 clean, 1 problems found, 2 the wheel
could not be obtained or a file could not be read.
"""

import argparse
import ast
import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TARGET = ROOT / "training" / "cntk_backend.py"
DEFAULT_CACHE = ROOT / ".cache" / "cntk-wheel"

# The wheels this check is pinned to. Both are the CPU build for CPython 3.6;
# their Python sources are identical (2.7.post2 only republished metadata),
# and cntk-gpu 2.7 ships the same Python layer. The first entry is the one
# downloaded when none is cached.
PINNED_WHEELS = (
    {
        "requirement": "cntk==2.7.post2",
        "filename": "cntk-2.7.post2-cp36-cp36m-manylinux1_x86_64.whl",
        "size": 75092388,
        "sha256": "71133245e10cdc1eca0b44b5fe241b2c97d0c16b8e12425896541a94ab1b5589",
    },
    {
        "requirement": "cntk==2.7",
        "filename": "cntk-2.7-cp36-cp36m-manylinux1_x86_64.whl",
        "size": 75092356,
        "sha256": "9873ecfb48f3c52dac03fa38c57ae0f8d4c5755c9d409d37ae234edcf756e978",
    },
)
PIP_PLATFORM = ("--python-version", "3.6", "--only-binary=:all:", "--platform", "manylinux1_x86_64")

# Return types of CNTK factories, by the qualified name of the def in the
# wheel. Most CNTK functions return SWIG objects upcast by @typemap, which no
# static reading can see; these few let the check follow the objects a
# training script keeps and calls methods on. Every entry must resolve in the
# wheel (check_hints), so a stale hint is an error, not a silent pass.
RETURN_HINTS = {
    "cntk.train.distributed.data_parallel_distributed_learner": "cntk.train.distributed.DistributedLearner",
    "cntk.train.distributed.block_momentum_distributed_learner": "cntk.train.distributed.DistributedLearner",
    "cntk.train.distributed.DistributedLearner.communicator": "cntk.train.distributed.Communicator",
    "cntk.train.training_session.training_session": "cntk.train.training_session.TrainingSession",
    "cntk.layers.layers.Dense": "cntk.ops.functions.Function",
    "cntk.layers.higher_order_layers.Sequential": "cntk.ops.functions.Function",
    "cntk.ops.functions.Function.__call__": "cntk.ops.functions.Function",
    "cntk.ops.functions.load_model": "cntk.ops.functions.Function",
    "cntk.ops.functions.Function.load": "cntk.ops.functions.Function",
    "cntk.ops.input_variable": "cntk.variables.Variable",
    "cntk.ops.relu": "cntk.ops.functions.Function",
    "cntk.ops.softmax": "cntk.ops.functions.Function",
    "cntk.ops.combine": "cntk.ops.functions.Function",
    "cntk.losses.cross_entropy_with_softmax": "cntk.ops.functions.Function",
    "cntk.metrics.classification_error": "cntk.ops.functions.Function",
    "cntk.learners.sgd": "cntk.learners.Learner",
    "cntk.learners.momentum_sgd": "cntk.learners.Learner",
    "cntk.learners.adam": "cntk.learners.Learner",
    "cntk.device.use_default_device": "cntk.device.DeviceDescriptor",
    "cntk.device.cpu": "cntk.device.DeviceDescriptor",
    "cntk.device.gpu": "cntk.device.DeviceDescriptor",
}

# Arguments that must not be of these CNTK types: (callable, parameter) -> types.
FORBIDDEN_ARG_TYPES = {
    ("cntk.train.trainer.Trainer.__init__", "progress_writers"): (
        "cntk.train.distributed.Communicator", "cntk.train.distributed.DistributedLearner"),
    ("cntk.train.trainer.Trainer.__init__", "parameter_learners"): (
        "cntk.train.distributed.Communicator",),
}

# Calls whose first argument must not be numpy data.
GRAPH_OPS_NOT_FOR_NUMPY = {
    "cntk.ops.one_hot": "cntk.one_hot is a graph op, not a numpy helper: for numpy labels use "
                        "np.eye(n, dtype=np.float32)[labels]",
}

SIGNATURE_PRESERVING = {"typemap", "wraps", "abstractmethod", "unique", "lru_cache"}
OPEN_BUILTIN_BASES = {"dict", "list", "tuple", "set", "str", "int", "float", "Exception", "BaseException",
                      "ValueError", "RuntimeError", "TypeError", "KeyError"}

NETWORK_ERRORS = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
                  "Name or service not known", "Network is unreachable", "Connection refused",
                  "ConnectTimeout", "ReadTimeout", "ProxyError", "Could not fetch URL",
                  "connection broken", "SSLError",
                  # no index answered with any version at all: offline, or a mirror without PyPI
                  "(from versions: none)")


# ---------------------------------------------------------------------------
# Getting the wheel


class WheelUnavailable(Exception):
    """The wheel is neither cached nor downloadable; network tells why."""

    def __init__(self, message, network=False):
        super().__init__(message)
        self.network = network


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pinned_entry(filename):
    for entry in PINNED_WHEELS:
        if entry["filename"] == filename:
            return entry
    return None


def ensure_wheel(cache_dir=None, requirement=None, pip=None):
    """Return the path of a pinned cntk wheel, downloading it if needed.

    Looks in cache_dir (default .cache/cntk-wheel/) for any pinned wheel whose
    sha256 matches; otherwise runs pip download for `requirement` (default the
    first pinned entry) into a temporary folder there, verifies the sha256 and
    moves it into place. Raises WheelUnavailable.
    """
    cache_dir = Path(cache_dir or DEFAULT_CACHE)
    entries = PINNED_WHEELS
    if requirement:
        entries = [e for e in PINNED_WHEELS if e["requirement"] == requirement]
        if not entries:
            raise WheelUnavailable("{} is not a pinned requirement; pinned: {}".format(
                requirement, ", ".join(e["requirement"] for e in PINNED_WHEELS)))
    for entry in entries:
        path = cache_dir / entry["filename"]
        if path.is_file() and path.stat().st_size == entry["size"] and sha256_of(path) == entry["sha256"]:
            return path
    entry = entries[0]
    cache_dir.mkdir(parents=True, exist_ok=True)
    pip = list(pip or [sys.executable, "-m", "pip"])
    with tempfile.TemporaryDirectory(prefix="download-", dir=str(cache_dir)) as tmp:
        command = pip + ["download", entry["requirement"], "--no-deps", "--no-input",
                         "--disable-pip-version-check", "-d", tmp] + list(PIP_PLATFORM)
        try:
            proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  universal_newlines=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise WheelUnavailable("pip download failed to run: {}".format(error), network=isinstance(
                error, subprocess.TimeoutExpired))
        if proc.returncode != 0:
            network = any(marker in proc.stdout for marker in NETWORK_ERRORS)
            lines = [l.strip() for l in proc.stdout.splitlines() if l.strip()]
            errors = [l for l in lines if l.startswith("ERROR")] or lines[-1:]
            raise WheelUnavailable("pip download {} failed (exit {}): {}\n{}".format(
                entry["requirement"], proc.returncode, errors[0] if errors else "no output",
                proc.stdout[-3000:]), network=network)
        downloaded = Path(tmp) / entry["filename"]
        if not downloaded.is_file():
            raise WheelUnavailable("pip download did not produce {}; got {}".format(
                entry["filename"], sorted(os.listdir(tmp))))
        digest = sha256_of(downloaded)
        if digest != entry["sha256"]:
            raise WheelUnavailable("{} has sha256 {}, pinned {}".format(entry["filename"], digest, entry["sha256"]))
        target = cache_dir / entry["filename"]
        os.replace(str(downloaded), str(target))
    return target


# ---------------------------------------------------------------------------
# The wheel's Python API, read statically


class Missing(object):
    """A name that does not exist; `where` says what was searched."""

    def __init__(self, where, name, candidates=()):
        self.where = where
        self.name = name
        self.candidates = candidates

    def message(self):
        text = "{} has no attribute {!r}".format(self.where, self.name)
        candidates = [c for c in self.candidates if self.name.startswith("_") or not c.startswith("_")]
        close = difflib.get_close_matches(self.name, candidates, n=3)
        if close:
            text += " (did you mean {}?)".format(", ".join(close))
        return text


class Unknown(object):
    """Something the check cannot follow (file-local values, numpy, ...)."""

    def __init__(self, why=""):
        self.why = why


UNKNOWN = Unknown()


class Opaque(object):
    """Exists in or through the wheel, but nothing more is known (constants,
    SWIG extension functions, external bases). Attributes are not checked."""

    def __init__(self, desc):
        self.desc = desc


class ModuleObj(object):
    def __init__(self, name):
        self.name = name

    def key(self):
        return ("module", self.name)


class ClassObj(object):
    def __init__(self, api, module, node, qualname):
        self.api = api
        self.module = module
        self.node = node
        self.qualname = qualname

    def key(self):
        return ("class", self.qualname)


class FuncObj(object):
    """A def (or a callable of unknown signature when node is None).

    kind: function | method | staticmethod | classmethod | property.
    """

    def __init__(self, module, node, qualname, kind, sig_known, owner=None):
        self.module = module
        self.node = node
        self.qualname = qualname
        self.kind = kind
        self.sig_known = sig_known
        self.owner = owner

    def key(self):
        return ("func", self.qualname, self.kind)


class BoundFunc(object):
    """A function as reached through an instance or a class."""

    def __init__(self, func, via):
        self.func = func
        self.via = via  # "instance", "class" or "module"

    def key(self):
        return ("bound", self.func.qualname, self.via)


class InstanceObj(object):
    def __init__(self, cls):
        self.cls = cls

    def key(self):
        return ("instance", self.cls.qualname)


class TupleObj(object):
    def __init__(self, items):
        self.items = tuple(items)

    def key(self):
        return ("tuple",) + tuple(obj_key(i) for i in self.items)


class ListObj(object):
    def __init__(self, items):
        self.items = tuple(items)

    def key(self):
        return ("list",) + tuple(obj_key(i) for i in self.items)


def obj_key(obj):
    if hasattr(obj, "key"):
        return obj.key()
    return ("unknown", id(obj)) if isinstance(obj, Opaque) else ("unknown",)


def is_cntk_obj(obj):
    return isinstance(obj, (ModuleObj, ClassObj, FuncObj, BoundFunc, InstanceObj))


def _decorator_names(node):
    names = []
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, ast.Attribute):
            names.append(target.attr)
        else:
            names.append("?")
    return names


def _walk_body(stmts):
    """Statements of a module or class body, descending into if/try/with/for
    blocks but not into defs or classes."""
    for stmt in stmts:
        yield stmt
        for field in ("body", "orelse", "finalbody"):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                break
            block = getattr(stmt, field, None)
            if isinstance(block, list):
                for sub in _walk_body(block):
                    yield sub
        if isinstance(stmt, ast.Try):
            for handler in stmt.handlers:
                for sub in _walk_body(handler.body):
                    yield sub


def _target_names(target):
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        names = []
        for elt in target.elts:
            names.extend(_target_names(elt))
        return names
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _events(stmts, module_name, is_package):
    """Binding events of a module or class body, in source order:
    (name, kind, payload, lineno); kind is def, class, import, from, star,
    assign or value."""
    events = []
    for stmt in _walk_body(stmts):
        line = getattr(stmt, "lineno", 0)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            events.append((stmt.name, "def", stmt, line))
        elif isinstance(stmt, ast.ClassDef):
            events.append((stmt.name, "class", stmt, line))
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    events.append((alias.asname, "import", alias.name, line))
                else:
                    top = alias.name.split(".")[0]
                    events.append((top, "import", top, line))
        elif isinstance(stmt, ast.ImportFrom):
            source = _absolute(module_name, is_package, stmt.module, stmt.level)
            for alias in stmt.names:
                if alias.name == "*":
                    events.append(("*", "star", source, line))
                else:
                    events.append((alias.asname or alias.name, "from", (source, alias.name), line))
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    events.append((target.id, "assign", stmt.value, line))
                elif isinstance(target, ast.Subscript) and _swig_table_key(target):
                    events.append((_swig_table_key(target), "value", None, line))
                else:
                    for name in _target_names(target):
                        events.append((name, "value", None, line))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            events.append((stmt.target.id, "assign" if stmt.value is not None else "value", stmt.value, line))
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            for name in _target_names(stmt.target):
                events.append((name, "value", None, line))
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None:
                    for name in _target_names(item.optional_vars):
                        events.append((name, "value", None, line))
    return events


def _swig_table_key(target):
    """`__swig_getmethods__["name"] = ...` makes `name` an attribute."""
    if (isinstance(target.value, ast.Name) and target.value.id in ("__swig_getmethods__", "__swig_setmethods__")
            and isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str)):
        return target.slice.value
    return None


def _absolute(module_name, is_package, name, level):
    if not level:
        return name or ""
    parts = module_name.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[:len(parts) - (level - 1)]
    base = ".".join(parts)
    return base + "." + name if name else base


def _docstring_deprecated(node):
    doc = ast.get_docstring(node) or ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    return "deprecat" in first.lower()


def _calls_warn_deprecated(node):
    for stmt in node.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name == "_warn_deprecated":
                return True
    return False


_PARAM_LINE = re.compile(r"^(\s*)(\*{0,2}\w+)\s*(\([^)]*\))?\s*:")


def deprecated_params(node):
    """Parameters whose entry in the docstring's Args section says deprecated."""
    blocks = {}
    current = indent = None
    in_args = False
    for line in (ast.get_docstring(node) or "").splitlines():
        stripped = line.strip()
        if not in_args:
            in_args = stripped in ("Args:", "Arguments:", "Parameters:")
            continue
        if not stripped:
            continue
        width = len(line) - len(line.lstrip())
        if indent is not None and width < indent:
            break  # dedented: the Args section is over
        match = _PARAM_LINE.match(line)
        if match and (indent is None or width == indent):
            indent = width
            current = match.group(2).lstrip("*")
            blocks[current] = [stripped]
        elif current is not None:
            blocks[current].append(stripped)
    return set(name for name, text in blocks.items() if "deprecat" in " ".join(text).lower())


class WheelAPI(object):
    """The Python sources of a cntk wheel (or an unpacked tree), parsed lazily."""

    def __init__(self, sources, label, version=None, sha256=None):
        self.sources = sources  # module name -> (path, text, is_package)
        self.label = label
        self.version = version
        self.sha256 = sha256
        self._trees = {}
        self._events = {}
        self._cache = {}
        self._classes = {}
        self._funcs = {}
        self._active = set()
        self.unparsable = set()  # modules this Python cannot parse: their names are not checked

    @classmethod
    def from_wheel(cls, path):
        path = Path(path)
        sources = {}
        version = None
        with zipfile.ZipFile(str(path)) as wheel:
            for name in wheel.namelist():
                if name.endswith(".dist-info/METADATA"):
                    for line in wheel.read(name).decode("utf-8", "replace").splitlines():
                        if line.startswith("Version:"):
                            version = line.split(":", 1)[1].strip()
                if not name.endswith(".py") or not name.startswith("cntk/"):
                    continue
                sources.update(cls._entry(name, wheel.read(name).decode("utf-8-sig", "replace")))
        if not sources:
            raise ValueError("{} holds no cntk/*.py sources".format(path))
        return cls(sources, path.name, version, sha256_of(path))

    @classmethod
    def from_tree(cls, root):
        root = Path(root)
        sources = {}
        for file in sorted((root / "cntk").rglob("*.py")):
            rel = file.relative_to(root).as_posix()
            sources.update(cls._entry(rel, file.read_text(encoding="utf-8-sig", errors="replace")))
        return cls(sources, str(root))

    @staticmethod
    def _entry(relpath, text):
        parts = relpath[:-3].split("/")
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        return {".".join(parts): (relpath, text, is_package)}

    # -- modules

    def has_module(self, name):
        return name in self.sources

    def is_package(self, name):
        return self.sources[name][2]

    def tree(self, name):
        if name not in self._trees:
            path, text, _ = self.sources[name]
            try:
                self._trees[name] = ast.parse(text, filename=path)
            except SyntaxError:
                self._trees[name] = ast.parse("")
                self.unparsable.add(name)
        return self._trees[name]

    def events(self, name):
        if name not in self._events:
            self._events[name] = _events(self.tree(name).body, name, self.is_package(name))
        return self._events[name]

    def module_all(self, name):
        """The literal __all__ of a module, or None."""
        names = None
        for stmt in _walk_body(self.tree(name).body):
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                    for t in stmt.targets):
                names = list(_literal_strings(stmt.value) or [])
            elif (isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name)
                  and stmt.target.id == "__all__"):
                names = (names or []) + list(_literal_strings(stmt.value) or [])
        return names

    def imported_submodules(self, name):
        """Submodules of package `name` that its own __init__ imports (which
        binds them as attributes of the package)."""
        found = set()
        prefix = name + "."
        for stmt in ast.walk(self.tree(name)):
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.name.startswith(prefix):
                        found.add(alias.name[len(prefix):].split(".")[0])
            elif isinstance(stmt, ast.ImportFrom):
                source = _absolute(name, True, stmt.module, stmt.level)
                if source.startswith(prefix):
                    found.add(source[len(prefix):].split(".")[0])
                elif source == name:
                    found.update(a.name for a in stmt.names if self.has_module(prefix + a.name))
        return found

    def module_names(self, name, seen=None):
        """Names a module binds, for "did you mean" suggestions."""
        seen = set() if seen is None else seen
        seen.add(name)
        names = set(e[0] for e in self.events(name) if e[0] != "*")
        for event in self.events(name):
            if event[1] == "star" and self.has_module(event[2]) and event[2] not in seen:
                names.update(n for n in self.module_names(event[2], seen) if not n.startswith("_"))
        if self.is_package(name):
            names.update(m[len(name) + 1:].split(".")[0] for m in self.sources if m.startswith(name + "."))
        return names

    def module_attr(self, name, attr):
        """Resolve `attr` in module `name`: an object, Missing or Opaque."""
        key = ("m", name, attr)
        if key in self._cache:
            return self._cache[key]
        if key in self._active:
            return Missing("module " + name, attr)
        self._active.add(key)
        try:
            result = self._module_attr(name, attr)
        finally:
            self._active.discard(key)
        self._cache[key] = result
        return result

    def _module_attr(self, name, attr):
        events = self.events(name)
        if name in self.unparsable:
            return Opaque("name in unparsable module " + name)
        for event_name, kind, payload, _ in reversed(events):
            if kind == "star":
                # a star import from outside the wheel cannot be followed: keep looking
                if self.has_module(payload) and self.star_exports(payload, attr):
                    return self.module_attr(payload, attr)
                continue
            if event_name != attr:
                continue
            return self._bind(name, kind, payload, name=attr)
        sub = name + "." + attr
        if self.has_module(sub) and attr in self.imported_submodules(name):
            return ModuleObj(sub)
        if attr in ("__name__", "__file__", "__doc__", "__path__", "__package__", "__spec__", "__loader__",
                    "__dict__"):
            return Opaque(name + "." + attr)
        if self.has_module(sub):
            return Opaque("submodule {} (not imported by {}; import it explicitly)".format(sub, name))
        return Missing("module " + name, attr, self.module_names(name))

    def star_exports(self, name, attr):
        exported = self.module_all(name)
        if exported is not None:
            return attr in exported
        if attr.startswith("_"):
            return False
        result = self.module_attr(name, attr)
        return not isinstance(result, Missing) and not (isinstance(result, Opaque)
                                                        and result.desc.startswith("submodule "))

    def _bind(self, module, kind, payload, owner=None, name="?"):
        if kind == "def":
            return self.func(module, payload, owner)
        if kind == "class":
            return self.klass(module, payload, owner)
        if kind == "import":
            return ModuleObj(payload) if self.has_module(payload) else Opaque("module " + payload)
        if kind == "from":
            source, attr = payload
            if not self.has_module(source):
                return Opaque("{}.{}".format(source, attr))
            result = self.module_attr(source, attr)
            if isinstance(result, Missing) and self.has_module(source + "." + attr):
                return ModuleObj(source + "." + attr)
            return result
        if kind == "assign":
            return self.static_value(module, payload, owner, name)
        return Opaque("value")

    def static_value(self, module, node, owner=None, name="?"):
        """Evaluate the right-hand side of a module or class level assignment."""
        key = ("sv", id(node))
        if key in self._active:
            return Opaque("value")  # x = x and other cycles
        self._active.add(key)
        try:
            return self._static_value(module, node, owner, name)
        finally:
            self._active.discard(key)

    def _static_value(self, module, node, owner, name):
        if isinstance(node, ast.Name):
            if owner is not None:
                found = self._class_body_attr(owner, node.id)
                if found is not None:
                    return found
            if node.id == "object":
                return Opaque("object")
            result = self.module_attr(module, node.id)
            if isinstance(result, Missing):
                return Opaque("builtin " + node.id)
            return result
        if isinstance(node, ast.Attribute):
            base = self.static_value(module, node.value, owner)
            return self.attr(base, node.attr) if is_cntk_obj(base) else Opaque("attribute")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("staticmethod", "classmethod") and node.args:
                inner = self.static_value(module, node.args[0], owner)
                if isinstance(inner, FuncObj) and inner.sig_known:
                    return FuncObj(inner.module, inner.node, inner.qualname, func.id, True, owner)
                return FuncObj(module, None, "{}.{}".format(owner.qualname if owner else module, name),
                               func.id, False, owner)
            if isinstance(func, ast.Name) and func.id in ("property", "_swig_property"):
                return FuncObj(module, None, "{}.{}".format(owner.qualname if owner else module, name),
                               "property", False, owner)
            callee = self.static_value(module, func, owner)
            if isinstance(callee, ClassObj):
                return InstanceObj(callee)
            return Opaque("value")
        if isinstance(node, ast.Lambda):
            return FuncObj(module, None, "{}.{}".format(owner.qualname if owner else module, name),
                           "method" if owner else "function", False, owner)
        return Opaque("value")

    def func(self, module, node, owner=None):
        key = id(node)
        if key not in self._funcs:
            decorators = _decorator_names(node)
            kind = "method" if owner is not None else "function"
            sig_known = True
            for name in decorators:
                if name == "staticmethod":
                    kind = "staticmethod"
                elif name == "classmethod":
                    kind = "classmethod"
                elif name in ("property", "setter", "getter", "deleter"):
                    kind = "property"
                elif name not in SIGNATURE_PRESERVING:
                    sig_known = False
            qualname = "{}.{}".format(owner.qualname if owner else module, node.name)
            self._funcs[key] = FuncObj(module, node, qualname, kind, sig_known, owner)
        return self._funcs[key]

    def klass(self, module, node, owner=None):
        key = id(node)
        if key not in self._classes:
            qualname = "{}.{}".format(owner.qualname if owner else module, node.name)
            self._classes[key] = ClassObj(self, module, node, qualname)
        return self._classes[key]

    def lookup(self, qualname):
        """Resolve a dotted name such as cntk.train.distributed.Communicator."""
        parts = qualname.split(".")
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            if self.has_module(module):
                obj = ModuleObj(module)
                for part in parts[cut:]:
                    obj = self.attr(obj, part)
                    if not is_cntk_obj(obj):
                        return obj
                return obj
        return Missing("the wheel", qualname)

    # -- classes

    def _class_events(self, cls):
        key = ("ce", cls.qualname, id(cls.node))
        if key not in self._cache:
            self._cache[key] = _events(cls.node.body, cls.module, False)
        return self._cache[key]

    def _class_body_attr(self, cls, attr):
        for name, kind, payload, _ in reversed(self._class_events(cls)):
            if _mangle(cls.node.name, name) == attr:
                return self._bind(cls.module, kind, payload, owner=cls, name=name)
        return None

    def _instance_attrs(self, cls):
        """Names assigned as self.X (or self.X, y = ...) in the class's methods."""
        key = ("ia", cls.qualname, id(cls.node))
        if key not in self._cache:
            names = set()

            def collect(target):
                if isinstance(target, (ast.Tuple, ast.List)):
                    for elt in target.elts:
                        collect(elt)
                elif isinstance(target, ast.Starred):
                    collect(target.value)
                elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                        and target.value.id == "self"):
                    names.add(_mangle(cls.node.name, target.attr))
            for node in ast.walk(cls.node):
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                        collect(target)
                elif isinstance(node, (ast.For, ast.AsyncFor)):
                    collect(node.target)
            self._cache[key] = names
        return self._cache[key]

    def _static_members(self, cls):
        """Names set as `Class.X = ...` at module level (SWIG's static members)."""
        key = ("sm", cls.qualname, id(cls.node))
        if key not in self._cache:
            names = set()
            if cls.qualname.count(".") == cls.module.count(".") + 1:  # a module-level class
                for stmt in _walk_body(self.tree(cls.module).body):
                    if isinstance(stmt, ast.Assign):
                        for target in stmt.targets:
                            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                                    and target.value.id == cls.node.name):
                                names.add(target.attr)
            self._cache[key] = names
        return self._cache[key]

    def bases(self, cls):
        key = ("b", cls.qualname, id(cls.node))
        if key not in self._cache:
            result = []
            for base in cls.node.bases:
                if isinstance(base, ast.Name) and base.id == "object":
                    continue
                value = self.static_value(cls.module, base)
                if isinstance(value, Opaque) and value.desc in ("object", "builtin object"):
                    continue
                result.append(value)
            self._cache[key] = result
        return self._cache[key]

    def mro(self, cls):
        order, open_bases, seen = [], [], set()

        def visit(klass):
            if klass.qualname in seen:
                return
            seen.add(klass.qualname)
            order.append(klass)
            for base in self.bases(klass):
                if isinstance(base, ClassObj):
                    visit(base)
                else:
                    open_bases.append(base)
        visit(cls)
        return order, open_bases

    def class_attr(self, cls, attr, via_instance):
        """Find `attr` on a class (or an instance of it): the object, or
        Missing, or Opaque when the class is open (external bases,
        __getattr__)."""
        order, open_bases = self.mro(cls)
        for klass in order:
            found = self._class_body_attr(klass, attr)
            if found is not None:
                return found
            if attr in self._static_members(klass):
                return Opaque("static member {}.{}".format(klass.qualname, attr))
        if via_instance:
            for klass in order:
                if attr in self._instance_attrs(klass):
                    return Opaque("instance attribute {}.{}".format(klass.qualname, attr))
        if attr.startswith("__") and attr.endswith("__"):
            return Opaque("special attribute " + attr)
        for klass in order:
            getattr_def = self._class_body_attr(klass, "__getattr__")
            if getattr_def is not None and not self._is_swig_getattr(klass):
                return Opaque("dynamic attribute via {}.__getattr__".format(klass.qualname))
        open_bases = [b for b in open_bases if not (isinstance(b, Opaque) and b.desc == "builtin _object")]
        if open_bases:
            return Opaque("attribute of an external base of " + cls.qualname)
        names = set()
        for klass in order:
            names.update(_mangle(klass.node.name, e[0]) for e in self._class_events(klass))
            names.update(self._static_members(klass))
            if via_instance:
                names.update(self._instance_attrs(klass))
        return Missing(("instance of " if via_instance else "class ") + cls.qualname, attr, names)

    def _is_swig_getattr(self, cls):
        for name, kind, payload, _ in self._class_events(cls):
            if name == "__getattr__" and kind == "assign" and isinstance(payload, ast.Lambda):
                body = payload.body
                if isinstance(body, ast.Call) and isinstance(body.func, ast.Name) and body.func.id == "_swig_getattr":
                    return True
        return False

    def constructor(self, cls):
        """(FuncObj or None, reason): the __init__ that a call of cls runs."""
        order, open_bases = self.mro(cls)
        for klass in order:
            found = self._class_body_attr(klass, "__init__")
            if found is not None:
                return found, None
        if open_bases:
            return None, "constructor of an external base"
        return None, "object"

    # -- attribute access on any object

    def attr(self, obj, name):
        if isinstance(obj, ModuleObj):
            return self.module_attr(obj.name, name)
        if isinstance(obj, ClassObj):
            found = self.class_attr(obj, name, via_instance=False)
            return BoundFunc(found, "class") if isinstance(found, FuncObj) else found
        if isinstance(obj, InstanceObj):
            found = self.class_attr(obj.cls, name, via_instance=True)
            if isinstance(found, FuncObj) and found.kind == "property":
                return Opaque("property " + found.qualname)
            return BoundFunc(found, "instance") if isinstance(found, FuncObj) else found
        func = obj.func if isinstance(obj, BoundFunc) else obj
        if isinstance(func, FuncObj) and func.node is not None and func.sig_known and func.kind != "property":
            # a plain def has no attributes of its own, unless assigned as f.x = ...
            if name.startswith("__") and name.endswith("__"):
                return Opaque("special attribute " + name)
            if func.owner is None and name in self._function_attrs(func):
                return Opaque("attribute {}.{}".format(func.qualname, name))
            return Missing("function " + func.qualname, name)
        return Opaque("attribute")

    def _function_attrs(self, func):
        names = set()
        for stmt in ast.walk(self.tree(func.module)):
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == func.node.name):
                        names.add(target.attr)
        return names


def _mangle(class_name, name):
    """Python's private name mangling: __x in class C is _C__x."""
    if name.startswith("__") and not name.endswith("__"):
        return "_{}{}".format(class_name.lstrip("_"), name)
    return name


def _literal_strings(node):
    if isinstance(node, (ast.List, ast.Tuple)):
        values = []
        for elt in node.elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                values.append(elt.value)
        return values
    return None


# ---------------------------------------------------------------------------
# Signatures


def is_abstract_swig_init(func):
    """SWIG's `def __init__(self, *args, **kwargs): raise AttributeError(
    "No constructor defined ...")`: the class cannot be constructed."""
    if func.node is None:
        return False
    body = [s for s in func.node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def bind_arguments(func, call, skip_first):
    """Match a call to a def's parameters.

    Returns (problems, mapping) where mapping is parameter name -> argument
    node for what could be matched.
    """
    args = func.node.args
    positional = list(getattr(args, "posonlyargs", [])) + list(args.args)
    defaults = list(args.defaults)
    required = set(p.arg for p in positional[:len(positional) - len(defaults)])
    required.update(p.arg for p, d in zip(args.kwonlyargs, args.kw_defaults) if d is None)
    if skip_first:
        if positional:
            required.discard(positional[0].arg)
            positional = positional[1:]
        elif args.vararg is None:
            return ["{} takes no arguments at all, not even self".format(func.qualname)], {}
    names = [p.arg for p in positional]
    kwonly = [p.arg for p in args.kwonlyargs]
    problems = []
    mapping = {}
    starred = any(isinstance(a, ast.Starred) for a in call.args)
    double_starred = any(k.arg is None for k in call.keywords)
    plain = [a for a in call.args if not isinstance(a, ast.Starred)]
    if not starred and len(plain) > len(names) and args.vararg is None:
        problems.append("{}() takes at most {} positional argument{} ({}), {} given".format(
            func.qualname, len(names), "" if len(names) == 1 else "s", ", ".join(names) or "none", len(plain)))
    leading = []  # positional arguments before any *args: their parameters are known
    for value in call.args:
        if isinstance(value, ast.Starred):
            break
        leading.append(value)
    for name, value in zip(names, leading):
        mapping[name] = value
    for keyword in call.keywords:
        if keyword.arg is None:
            continue
        if keyword.arg in mapping:
            problems.append("{}() got multiple values for argument {!r}".format(func.qualname, keyword.arg))
        elif keyword.arg in names or keyword.arg in kwonly:
            mapping[keyword.arg] = keyword.value
        elif args.kwarg is None:
            close = difflib.get_close_matches(keyword.arg, names + kwonly, n=1)
            problems.append("{}() got an unexpected keyword argument {!r}{}; it takes ({})".format(
                func.qualname, keyword.arg, " (did you mean {!r}?)".format(close[0]) if close else "",
                ", ".join(names + kwonly)))
    if not starred and not double_starred:
        missing = [n for n in names + kwonly if n in required and n not in mapping]
        if missing:
            problems.append("{}() missing required argument{}: {}".format(
                func.qualname, "" if len(missing) == 1 else "s", ", ".join(missing)))
    return problems, mapping


# ---------------------------------------------------------------------------
# The file being checked


class Problem(object):
    def __init__(self, kind, node, message, path):
        self.kind = kind
        self.line = getattr(node, "lineno", 0)
        self.col = getattr(node, "col_offset", 0)
        self.message = message
        self.path = path

    def as_dict(self):
        return {"kind": self.kind, "file": str(self.path), "line": self.line, "col": self.col,
                "message": self.message}

    def __str__(self):
        return "{}:{}:{}: {}: {}".format(self.path, self.line, self.col + 1, self.kind, self.message)


class Reference(object):
    def __init__(self, node, text, target, status, note=""):
        self.line = getattr(node, "lineno", 0)
        self.text = text
        self.target = target
        self.status = status
        self.note = note

    def as_dict(self):
        return {"line": self.line, "expr": self.text, "target": self.target, "status": self.status,
                "note": self.note}


class Scope(object):
    def __init__(self, node, parent):
        self.node = node
        self.parent = parent
        self.bindings = {}  # name -> list of (kind, payload)
        self.globals = set()

    def bind(self, name, kind, payload=None):
        self.bindings.setdefault(name, []).append((kind, payload))


def _describe(obj):
    if isinstance(obj, ModuleObj):
        return obj.name
    if isinstance(obj, ClassObj):
        return obj.qualname
    if isinstance(obj, BoundFunc):
        return "{} [{}]".format(obj.func.qualname, obj.func.kind)
    if isinstance(obj, FuncObj):
        return "{} [{}]".format(obj.qualname, obj.kind)
    if isinstance(obj, InstanceObj):
        return "instance of " + obj.cls.qualname
    if isinstance(obj, Opaque):
        return obj.desc
    return "?"


def _unparse(node):
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - ast.unparse exists from 3.9
        text = node.__class__.__name__
    return text if len(text) <= 90 else text[:87] + "..."


class FileChecker(object):
    def __init__(self, api, path, source, allow_deprecated=False):
        self.api = api
        self.path = path
        self.tree = ast.parse(source, filename=str(path))
        self.allow_deprecated = allow_deprecated
        self.problems = []
        self.references = []
        self.scope_of = {}
        self.module_scope = None
        self.function_defs = {}  # name -> [def nodes] (module level and nested functions)
        self.method_defs = {}  # name -> [def nodes] (methods of the file's classes)
        self._values = {}
        self._active = set()
        self._reported = set()
        self.numpy_names = set()
        self.cntk_calls = []

    # -- scopes

    def build_scopes(self):
        self.assigned_attrs = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                self.assigned_attrs.add(node.attr)
        self.module_scope = Scope(self.tree, None)
        for stmt in self.tree.body:
            self._collect_node(stmt, self.module_scope)

    def _collect_node(self, node, scope):
        self.scope_of[id(node)] = scope
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for deco in getattr(node, "decorator_list", []):
                self._collect_node(deco, scope)
            for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                self._collect_node(default, scope)
            parent = scope
            while isinstance(parent.node, ast.ClassDef):
                parent = parent.parent
            inner = Scope(node, parent)
            all_args = (list(getattr(node.args, "posonlyargs", [])) + node.args.args + node.args.kwonlyargs
                        + [a for a in (node.args.vararg, node.args.kwarg) if a is not None])
            for arg in all_args:
                inner.bind(arg.arg, "param", (node, arg.arg))
            if isinstance(node, ast.Lambda):
                self._collect_node(node.body, inner)
            else:
                scope.bind(node.name, "def", node)
                defs = self.method_defs if isinstance(scope.node, ast.ClassDef) else self.function_defs
                defs.setdefault(node.name, []).append(node)
                for stmt in node.body:
                    self._collect_node(stmt, inner)
            return
        if isinstance(node, ast.ClassDef):
            for deco in node.decorator_list:
                self._collect_node(deco, scope)
            for base in node.bases:
                self._collect_node(base, scope)
            scope.bind(node.name, "unknown")
            inner = Scope(node, scope)
            for stmt in node.body:
                self._collect_node(stmt, inner)
            return
        if isinstance(node, ast.Global):
            scope.globals.update(node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    scope.bind(alias.asname, "import", (node, alias.name))
                else:
                    top = alias.name.split(".")[0]
                    scope.bind(top, "import", (node, top))
                if alias.name.split(".")[0] == "numpy":
                    self.numpy_names.add(alias.asname or "numpy")
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name != "*":
                    scope.bind(alias.asname or alias.name, "from", (node, node.module or "", alias.name))
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(node, ast.AugAssign) or node.value is None:
                    for name in _target_names(target):
                        scope.bind(name, "unknown")
                else:
                    self._bind_target(target, node.value, scope, ())
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            for name in _target_names(node.target):
                scope.bind(name, "unknown")
        elif isinstance(node, ast.withitem):
            if node.optional_vars is not None:
                for name in _target_names(node.optional_vars):
                    scope.bind(name, "unknown")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            scope.bind(node.name, "unknown")
        elif isinstance(node, ast.NamedExpr):  # pragma: no cover - not valid in 3.6 anyway
            scope.bind(node.target.id, "expr", (node.value, ()))
        for child in ast.iter_child_nodes(node):
            self._collect_node(child, scope)

    def _bind_target(self, target, value, scope, path):
        if isinstance(target, ast.Name):
            scope.bind(target.id, "expr", (value, path))
        elif isinstance(target, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in target.elts):
                for name in _target_names(target):
                    scope.bind(name, "unknown")
                return
            for index, elt in enumerate(target.elts):
                self._bind_target(elt, value, scope, path + (index,))

    # -- evaluation

    def scope_for(self, node):
        return self.scope_of.get(id(node), self.module_scope)

    def lookup_name(self, name, scope):
        if name in scope.globals:
            scope = self.module_scope
        current = scope
        while current is not None:
            if name in current.bindings:
                return self._combine(self._binding_value(b, current) for b in current.bindings[name])
            current = current.parent
        return UNKNOWN

    def _combine(self, values):
        values = list(values)
        if not values:
            return UNKNOWN
        first = values[0]
        if isinstance(first, (Unknown, Missing)):
            return UNKNOWN
        key = obj_key(first)
        for value in values[1:]:
            if isinstance(value, (Unknown, Missing)) or obj_key(value) != key:
                return UNKNOWN
        return first

    def _binding_value(self, binding, scope):
        kind, payload = binding
        if kind == "import":
            node, name = payload
            return self.import_value(node, name)
        if kind == "from":
            node, module, name = payload
            level = node.level
            if level:
                return UNKNOWN
            if module.split(".")[0] != "cntk":
                return UNKNOWN
            if not self.api.has_module(module):
                return UNKNOWN  # reported by import_value during the walk
            obj = self.api.module_attr(module, name)
            if isinstance(obj, Missing) and self.api.has_module(module + "." + name):
                return ModuleObj(module + "." + name)
            return obj if not isinstance(obj, Missing) else UNKNOWN
        if kind == "expr":
            value, path = payload
            obj = self.value(value)
            for index in path:
                if isinstance(obj, (TupleObj, ListObj)) and index < len(obj.items):
                    obj = obj.items[index]
                else:
                    return UNKNOWN
            return obj
        if kind == "param":
            func, name = payload
            return self.param_value(func, name)
        return UNKNOWN

    def import_value(self, node, name):
        if name.split(".")[0] != "cntk":
            return UNKNOWN
        if self.api.has_module(name):
            return ModuleObj(name)
        return UNKNOWN

    def param_value(self, func, name):
        """A parameter of one of the file's functions takes the value its
        call sites agree on."""
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return UNKNOWN
        key = ("param", id(func), name)
        if key in self._active:
            return UNKNOWN
        self._active.add(key)
        try:
            positional = [a.arg for a in list(getattr(func.args, "posonlyargs", [])) + func.args.args]
            defaults = dict(zip(positional[len(positional) - len(func.args.defaults):], func.args.defaults))
            if isinstance(self.scope_for(func).node, ast.ClassDef):
                # a method: its call sites are obj.name(...), self not among the arguments
                if "staticmethod" not in _decorator_names(func):
                    if positional and positional[0] == name:
                        return UNKNOWN
                    positional = positional[1:]
            values = []
            calls = [c for c in self._calls_to(func)]
            if not calls:
                return UNKNOWN
            for call in calls:
                given = None
                if name in positional:
                    index = positional.index(name)
                    plain = call.args
                    if any(isinstance(a, ast.Starred) for a in plain[:index + 1]):
                        return UNKNOWN
                    if index < len(plain):
                        given = plain[index]
                for keyword in call.keywords:
                    if keyword.arg == name:
                        given = keyword.value
                    elif keyword.arg is None:
                        return UNKNOWN
                if given is None:
                    given = defaults.get(name)
                if given is None:
                    return UNKNOWN
                values.append(self.value(given))
            return self._combine(values)
        finally:
            self._active.discard(key)

    def _calls_to(self, func):
        """Call sites of one of the file's functions, or of a method whose
        name is defined once in the file (called as anything.name(...))."""
        defined = self.function_defs.get(func.name, []) + self.method_defs.get(func.name, [])
        if len(defined) != 1:
            return []
        if func in self.method_defs.get(func.name, []):
            return [node for node in ast.walk(self.tree) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute) and node.func.attr == func.name]
        return [node for node in ast.walk(self.tree) if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name) and node.func.id == func.name]

    def return_value(self, func):
        key = ("return", id(func))
        if key in self._active:
            return UNKNOWN
        self._active.add(key)
        try:
            values = []
            for node in self._own_nodes(func):
                if isinstance(node, ast.Return):
                    values.append(self.value(node.value) if node.value is not None else UNKNOWN)
            if not values:
                return UNKNOWN
            if all(isinstance(v, TupleObj) for v in values) and len(set(len(v.items) for v in values)) == 1:
                return TupleObj(self._combine(items) for items in zip(*[v.items for v in values]))
            return self._combine(values)
        finally:
            self._active.discard(key)

    def _own_nodes(self, func):
        stack = list(func.body)
        while stack:
            node = stack.pop()
            yield node
            for child in ast.iter_child_nodes(node):
                if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                    stack.append(child)

    def value(self, node):
        """Evaluate an expression of the checked file to a wheel object."""
        key = id(node)
        if key in self._values:
            return self._values[key]
        if key in self._active:
            return UNKNOWN
        self._active.add(key)
        try:
            result = self._value(node)
        finally:
            self._active.discard(key)
        self._values[key] = result
        return result

    def _value(self, node):
        if isinstance(node, ast.Name):
            return self.lookup_name(node.id, self.scope_for(node))
        if isinstance(node, ast.Attribute):
            base = self.value(node.value)
            if not is_cntk_obj(base):
                return UNKNOWN
            if node.attr in self.assigned_attrs and not isinstance(base, ModuleObj):
                return UNKNOWN  # the file sets it itself (obj.x = ..., e.g. a mock)
            result = self.api.attr(base, node.attr)
            if isinstance(result, Missing):
                self.report("missing", node, result.message())
                self.add_reference(node, None, "ERROR")
                return UNKNOWN
            self.add_reference(node, result, "ok")
            if isinstance(result, ClassObj) and _docstring_deprecated(result.node):
                self.report_deprecated(node, "class {} is deprecated (per its docstring)".format(result.qualname))
            return result
        if isinstance(node, ast.Call):
            return self.call_value(node)
        if isinstance(node, ast.Tuple):
            return TupleObj(self.value(e) for e in node.elts)
        if isinstance(node, ast.List):
            return ListObj(self.value(e) for e in node.elts)
        if isinstance(node, ast.IfExp):
            return self._combine([self.value(node.body), self.value(node.orelse)])
        return UNKNOWN

    def call_value(self, call):
        callee = self.value(call.func)
        if isinstance(callee, ClassObj):
            return InstanceObj(callee)
        func = callee.func if isinstance(callee, BoundFunc) else callee
        if isinstance(func, FuncObj):
            hint = RETURN_HINTS.get(func.qualname)
            if hint:
                target = self.api.lookup(hint)
                if isinstance(target, ClassObj):
                    return InstanceObj(target)
            return UNKNOWN
        if isinstance(callee, InstanceObj):
            call_method = self.api.class_attr(callee.cls, "__call__", via_instance=True)
            if isinstance(call_method, FuncObj):
                hint = RETURN_HINTS.get(call_method.qualname)
                target = self.api.lookup(hint) if hint else None
                if isinstance(target, ClassObj):
                    return InstanceObj(target)
            return UNKNOWN
        if isinstance(call.func, ast.Name):
            defs = self.function_defs.get(call.func.id, [])
            if len(defs) == 1 and isinstance(self.lookup_name(call.func.id, self.scope_for(call)), Unknown):
                return self.return_value(defs[0])
        return UNKNOWN

    # -- checks

    def report(self, kind, node, message):
        key = (kind, getattr(node, "lineno", 0), getattr(node, "col_offset", 0), message)
        if key not in self._reported:
            self._reported.add(key)
            self.problems.append(Problem(kind, node, message, self.path))

    def add_reference(self, node, obj, status, note=""):
        self.references.append(Reference(node, _unparse(node), _describe(obj) if obj is not None else "-",
                                         status, note))

    def check(self):
        self.build_scopes()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "cntk" and not self.api.has_module(alias.name):
                        self.report("missing", node, "no module {} in the wheel".format(alias.name))
            elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "cntk":
                if not self.api.has_module(node.module):
                    self.report("missing", node, "no module {} in the wheel".format(node.module))
                    continue
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    obj = self.api.module_attr(node.module, alias.name)
                    if isinstance(obj, Missing) and not self.api.has_module(node.module + "." + alias.name):
                        self.report("missing", node, obj.message())
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                self.value(node)
            elif isinstance(node, ast.Call):
                self.check_call(node)
        return self

    def check_call(self, call):
        callee = self.value(call.func)
        if isinstance(callee, ClassObj):
            self.check_class_call(call, callee)
        elif isinstance(callee, BoundFunc):
            self.check_func_call(call, callee.func, callee.via)
        elif isinstance(callee, FuncObj):
            self.check_func_call(call, callee, "module")
        elif isinstance(callee, Opaque) and callee.desc.startswith("property "):
            self.report("not-callable", call, "{} is a property, not a method: use it without ()".format(
                callee.desc[len("property "):]))
        elif isinstance(callee, ModuleObj):
            self.report("not-callable", call, "module {} is not callable".format(callee.name))

    def check_class_call(self, call, cls):
        self.cntk_calls.append((call, cls.qualname))
        if _docstring_deprecated(cls.node):
            self.report_deprecated(call, "class {} is deprecated (per its docstring)".format(cls.qualname))
        init, reason = self.api.constructor(cls)
        if init is None:
            if reason == "object" and (call.args or call.keywords):
                self.report("signature", call, "{}() takes no arguments".format(cls.qualname))
            return
        if not isinstance(init, FuncObj) or init.node is None or not init.sig_known:
            return
        if is_abstract_swig_init(init):
            self.report("abstract", call, "{} cannot be constructed (its __init__ {} only raises); "
                                          "get an instance from the API instead".format(cls.qualname, init.qualname))
            return
        problems, mapping = bind_arguments(init, call, skip_first=True)
        for message in problems:
            self.report("signature", call, message.replace(init.qualname + "()", cls.qualname + "()"))
        self.check_arg_rules(call, init, mapping)
        self.check_deprecated_params(call, init, mapping)

    def check_func_call(self, call, func, via):
        self.cntk_calls.append((call, func.qualname))
        if func.kind == "property":
            self.report("not-callable", call, "{} is a property, not a method: use it without ()".format(
                func.qualname))
            return
        if func.node is not None and (_docstring_deprecated(func.node) or _calls_warn_deprecated(func.node)):
            self.report_deprecated(call, "{} is deprecated (per its docstring)".format(func.qualname))
        if func.node is None or not func.sig_known:
            self.add_reference(call, func, "ok", "signature not checked")
            return
        skip_first = (func.kind == "method" and via == "instance") or (
            func.kind == "classmethod" and via in ("instance", "class"))
        problems, mapping = bind_arguments(func, call, skip_first)
        if func.kind == "method" and via == "class" and problems:
            problems = ["{} is an instance method, called here on the class {} without an instance; {}".format(
                func.qualname, func.owner.qualname if func.owner else "?", problems[0])] + problems[1:]
        for message in problems:
            self.report("signature", call, message)
        self.check_arg_rules(call, func, mapping)
        self.check_deprecated_params(call, func, mapping)
        self.check_numpy_misuse(call, func, mapping)

    def report_deprecated(self, node, message):
        if not self.allow_deprecated:
            self.report("deprecated", node, message)

    def check_deprecated_params(self, call, func, mapping):
        if func.node is None:
            return
        for name in sorted(deprecated_params(func.node) & set(mapping)):
            self.report_deprecated(call, "{}(): parameter {!r} is deprecated (per its docstring)".format(
                func.qualname, name))

    def check_arg_rules(self, call, func, mapping):
        for (qualname, param), forbidden in FORBIDDEN_ARG_TYPES.items():
            if func.qualname != qualname or param not in mapping:
                continue
            value = self.value(mapping[param])
            items = value.items if isinstance(value, (ListObj, TupleObj)) else (value,)
            for item in items:
                name = item.cls.qualname if isinstance(item, InstanceObj) else (
                    item.qualname if isinstance(item, ClassObj) else None)
                if name in forbidden:
                    self.report("misuse", call, "{}(): {} is given {} ({}); it expects {}".format(
                        qualname.rsplit(".", 1)[0] if qualname.endswith("__init__") else qualname, param,
                        "a " + name.rsplit(".", 1)[1], name,
                        "progress writers (e.g. ProgressPrinter)" if param == "progress_writers" else
                        "learners"))

    def check_numpy_misuse(self, call, func, mapping):
        message = GRAPH_OPS_NOT_FOR_NUMPY.get(func.qualname)
        if message is None:
            return
        first = func.node.args.args[0].arg if func.node.args.args else None
        arg = mapping.get(first)
        if arg is not None and self.is_numpy(arg):
            self.report("misuse", call, message)

    def is_numpy(self, node, depth=0):
        """Does the expression hold numpy (or plain Python) data?"""
        if depth > 8:
            return False
        if isinstance(node, (ast.List, ast.Tuple, ast.ListComp, ast.Constant)):
            return True
        root = node
        while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if isinstance(root, ast.Name):
            if root.id in self.numpy_names:
                return True
            scope = self.scope_for(root)
            while scope is not None and root.id not in scope.bindings:
                scope = scope.parent
            if scope is not None:
                for kind, payload in scope.bindings[root.id]:
                    if kind == "expr" and not payload[1] and self.is_numpy(payload[0], depth + 1):
                        return True
        return False


def check_hints(api):
    """Every RETURN_HINTS and FORBIDDEN_ARG_TYPES name must exist in the wheel."""
    problems = []
    names = set(RETURN_HINTS) | set(RETURN_HINTS.values()) | set(GRAPH_OPS_NOT_FOR_NUMPY)
    for (callable_name, _), types in FORBIDDEN_ARG_TYPES.items():
        names.add(callable_name)
        names.update(types)
    for name in sorted(names):
        obj = api.lookup(name)
        if isinstance(obj, BoundFunc):
            obj = obj.func
        if not isinstance(obj, (ClassObj, FuncObj)) or (getattr(obj, "qualname", name) != name):
            problems.append("hint {} does not resolve in the wheel (got {})".format(name, _describe(obj)))
    return problems


# ---------------------------------------------------------------------------
# Python 3.6, the CNTK interpreter

NEW_MODULES = {"dataclasses": "3.7", "contextvars": "3.7", "importlib.resources": "3.7",
               "importlib.metadata": "3.8", "zoneinfo": "3.9", "graphlib": "3.9", "tomllib": "3.11"}
NEW_FUNCTIONS = {("math", "prod"): "3.8", ("math", "isqrt"): "3.8", ("math", "dist"): "3.8",
                 ("math", "comb"): "3.8", ("math", "perm"): "3.8", ("functools", "cache"): "3.9",
                 ("functools", "cached_property"): "3.8", ("asyncio", "run"): "3.7",
                 ("time", "time_ns"): "3.7", ("time", "perf_counter_ns"): "3.7",
                 ("os", "waitstatus_to_exitcode"): "3.9", ("shlex", "join"): "3.8"}
NEW_METHODS = {"removeprefix": "3.9", "removesuffix": "3.9", "is_relative_to": "3.9",
               "with_stem": "3.9", "isascii": "3.7", "unlink_missing_ok": "3.8"}
NEW_KEYWORDS = {("subprocess", "run", "capture_output"): "3.7", ("subprocess", "run", "text"): "3.7",
                ("subprocess", "check_output", "text"): "3.7", ("Path", "unlink", "missing_ok"): "3.8"}
GENERIC_BUILTINS = {"list", "dict", "tuple", "set", "frozenset", "type"}


def python36_problems(source, path):
    """Syntax and stdlib features the CNTK interpreter (CPython 3.6) lacks."""
    problems = []
    try:
        tree = ast.parse(source, filename=str(path), feature_version=(3, 6))
    except SyntaxError as error:
        node = ast.Module(body=[], type_ignores=[])
        node.lineno, node.col_offset = error.lineno or 0, (error.offset or 1) - 1
        return [Problem("python3.6", node, "not valid Python 3.6: {}".format(error.msg), path)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in GENERIC_BUILTINS:
            problems.append(Problem("python3.6", node, "{}[...] is not subscriptable before Python 3.9".format(
                node.value.id), path))
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
            if any(a.name == "annotations" for a in node.names):
                problems.append(Problem("python3.6", node, "from __future__ import annotations needs 3.7", path))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom):
                names += ["{}.{}".format(node.module, a.name) for a in node.names]
            for name in names:
                if name in NEW_MODULES:
                    problems.append(Problem("python3.6", node, "module {} needs Python {}".format(
                        name, NEW_MODULES[name]), path))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            need = NEW_FUNCTIONS.get((node.value.id, node.attr))
            if need:
                problems.append(Problem("python3.6", node, "{}.{} needs Python {}".format(
                    node.value.id, node.attr, need), path))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in NEW_METHODS:
                problems.append(Problem("python3.6", node, ".{}() needs Python {}".format(
                    node.func.attr, NEW_METHODS[node.func.attr]), path))
            owner = node.func.value.id if isinstance(node.func.value, ast.Name) else None
            for keyword in node.keywords:
                need = NEW_KEYWORDS.get((owner, node.func.attr, keyword.arg))
                if need:
                    problems.append(Problem("python3.6", node, "{}.{}({}=...) needs Python {}".format(
                        owner, node.func.attr, keyword.arg, need), path))
    return problems


# ---------------------------------------------------------------------------
# Entry points


class Report(object):
    def __init__(self, path, api):
        self.path = path
        self.api = api
        self.problems = []
        self.references = []
        self.calls = []

    @property
    def ok(self):
        return not self.problems

    def called(self, qualname):
        """Was the wheel callable `qualname` called in the file?"""
        return any(name == qualname for _, name in self.calls)

    def as_dict(self):
        return {
            "file": str(self.path),
            "wheel": {"file": self.api.label, "version": self.api.version, "sha256": self.api.sha256},
            "ok": self.ok,
            "problems": [p.as_dict() for p in self.problems],
            "references": [r.as_dict() for r in self.references],
            "calls": sorted(set(name for _, name in self.calls)),
        }


def check_source(source, path, api, python_version=(3, 6), allow_deprecated=False):
    report = Report(path, api)
    if python_version == (3, 6):
        report.problems.extend(python36_problems(source, path))
    try:
        checker = FileChecker(api, path, source, allow_deprecated=allow_deprecated).check()
    except SyntaxError as error:
        node = ast.Module(body=[], type_ignores=[])
        node.lineno, node.col_offset = error.lineno or 0, 0
        report.problems.append(Problem("syntax", node, str(error), path))
        return report
    report.problems.extend(checker.problems)
    report.problems.sort(key=lambda p: (p.line, p.col, p.kind))
    report.references = checker.references
    report.calls = checker.cntk_calls
    return report


def check_file(path, api, python_version=(3, 6), allow_deprecated=False):
    path = Path(path)
    return check_source(path.read_text(encoding="utf-8-sig"), path, api, python_version, allow_deprecated)


def load_api(wheel=None, cache_dir=None, requirement=None):
    if wheel:
        wheel = Path(wheel)
        return WheelAPI.from_tree(wheel) if wheel.is_dir() else WheelAPI.from_wheel(wheel)
    return WheelAPI.from_wheel(ensure_wheel(cache_dir, requirement))


def format_report(report, verbose=False):
    api = report.api
    pinned = pinned_entry(api.label)
    lines = ["cntk API check of {} against {} (cntk {}, sha256 {}{})".format(
        report.path, api.label, api.version or "?", api.sha256 or "-",
        ", pinned" if pinned and pinned["sha256"] == api.sha256 else ", NOT a pinned wheel")]
    if verbose:
        for ref in sorted(report.references, key=lambda r: r.line):
            lines.append("  {:5} {:4} {:<60} -> {}{}".format(ref.status, ref.line, ref.text, ref.target,
                                                              " ({})".format(ref.note) if ref.note else ""))
    for problem in report.problems:
        lines.append("  " + str(problem))
    names = sorted(set(name for _, name in report.calls))
    lines.append("{}: {} cntk references, {} distinct cntk callables called, {} problem{}".format(
        "OK" if report.ok else "FAIL", len(report.references), len(names), len(report.problems),
        "" if len(report.problems) == 1 else "s"))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="Python files to check (default: training/cntk_backend.py)")
    parser.add_argument("--wheel", help="a cntk wheel (.whl) or an unpacked tree holding cntk/; "
                                        "default: the pinned wheel, cached in .cache/cntk-wheel/")
    parser.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="where the pinned wheel is cached")
    parser.add_argument("--requirement", help="which pinned wheel to fetch (default {})".format(
        PINNED_WHEELS[0]["requirement"]))
    parser.add_argument("--python-version", default="3.6", choices=("3.6", "none"),
                        help="also check the files are valid for this interpreter (default 3.6)")
    parser.add_argument("--allow-deprecated", action="store_true", help="do not fail on deprecated API")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every cntk reference resolved")
    options = parser.parse_args(argv)

    try:
        api = load_api(options.wheel, options.cache_dir, options.requirement)
    except (WheelUnavailable, OSError, ValueError, zipfile.BadZipFile) as error:
        print("cntk_api_check: cannot get the cntk wheel: {}".format(error), file=sys.stderr)
        return 2
    hint_problems = check_hints(api)
    files = options.files or [str(DEFAULT_TARGET)]
    version = (3, 6) if options.python_version == "3.6" else None
    reports = []
    for name in files:
        try:
            reports.append(check_file(name, api, version, options.allow_deprecated))
        except OSError as error:
            print("cntk_api_check: {}".format(error), file=sys.stderr)
            return 2
    if options.json:
        print(json.dumps({"hint_problems": hint_problems, "reports": [r.as_dict() for r in reports]}, indent=2))
    else:
        for problem in hint_problems:
            print("tool: " + problem)
        for report in reports:
            print(format_report(report, options.verbose))
    return 0 if all(r.ok for r in reports) and not hint_problems else 1


if __name__ == "__main__":
    sys.exit(main())
