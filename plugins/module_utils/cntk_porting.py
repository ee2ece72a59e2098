"""Lines of a job's script copied from CNTK walk-throughs that CNTK 2.7 does not run as written.

Scripts written from common walk-throughs (and older CNTK samples) do four
things that fail or mislead on CNTK 2.7 (/work/shared/cntk.md; the real
wheel's API is read by tests/training/test_cntk_api.py):

- ``C.distributed.Communicator.init()``: there is no init(); MPI starts on
  first use. AttributeError on every rank, after the launch. REFUSED.
- ``C.distributed.Communicator()``: the class cannot be constructed
  (AttributeError: "No constructor defined - class is abstract"), typically passed as the
  Trainer's fourth argument, which is progress writers. REFUSED.
- ``C.one_hot(labels, n)`` on numpy labels: a graph op, not a numpy
  helper; it returns a Function, not one-hot rows. Warned.
- ``learning_rate_schedule(lr, UnitType.minibatch)``: deprecated since 2.2,
  still runs. Warned, with the same schedule in today's words.

Only the first two are refused: they fail on every run, whatever the data.
A call guarded by try/except (AttributeError, Exception or bare) or by
``hasattr(..., 'init')`` is a script written for several CNTK versions: it
is warned about, not refused.

check_source() parses one file with the standard library's ast (one parse
and one walk: linear in the file's size) and resolves names through the
file's imports and plain assignments (``import cntk as C``, ``from
cntk.distributed import Communicator``, ``Comm = C.distributed.Communicator``).
A file it cannot parse is not refused: it says so in a note.
"""

import ast
import os

REFUSE = "refuse"
WARN = "warn"
NOTE = "note"

# A file larger than this is not parsed (a note says so): a job's script is far smaller.
MAX_BYTES = 4 * 1024 * 1024
CATCH_ALL = {"AttributeError", "Exception", "BaseException"}


class Finding(object):
    """One line to change: path, line, kind (refuse, warn, note), the code as written, why, what to write."""

    def __init__(self, path, line, kind, code, why, instead):
        self.path, self.line, self.kind, self.code, self.why, self.instead = path, line, kind, code, why, instead

    def text(self):
        where = "{}:{}".format(self.path, self.line) if self.line else self.path
        code = " `{}`".format(self.code) if self.code else ""
        return "{}:{} {}{}".format(where, code, self.why, "; write instead: " + self.instead if self.instead else "")

    def __repr__(self):
        return "Finding({!r})".format(self.text())


def _dotted(node, aliases):
    """The expression's dotted name with import aliases resolved ('cntk.distributed.Communicator'), or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    head = aliases.get(node.id, node.id)
    return ".".join([head] + parts[::-1])


def _is_cntk(name):
    return name is not None and (name == "cntk" or name.startswith("cntk."))


STAR_NAMES = ("Communicator", "one_hot", "learning_rate_schedule", "UnitType", "distributed")


def _aliases(nodes):
    """Local name -> dotted cntk name, from imports and plain assignments anywhere in the file."""
    aliases = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_cntk(alias.name):
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        aliases["cntk"] = "cntk"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_cntk(node.module):
            for alias in node.names:
                if alias.name == "*":
                    for name in STAR_NAMES:
                        aliases.setdefault(name, "{}.{}".format(node.module, name))
                else:
                    aliases[alias.asname or alias.name] = "{}.{}".format(node.module, alias.name)
    # Assignments like Communicator = C.train.distributed.Communicator (twice, for chains of them).
    assignments = [node for node in nodes
                   if isinstance(node, ast.Assign) and len(node.targets) == 1
                   and isinstance(node.targets[0], ast.Name) and isinstance(node.value, (ast.Attribute, ast.Name))]
    for _ in range(2):
        for node in assignments:
            target = _dotted(node.value, aliases)
            if _is_cntk(target) and node.targets[0].id != target:
                aliases[node.targets[0].id] = target
    return aliases


def _graph_names(nodes, aliases):
    """Names bound anywhere in the file to what a cntk call returned (input_variable, a layer's output...):
    one_hot on them is graph use, not the walk-through mistake."""
    names = set()
    for node in nodes:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and _is_cntk(_dotted(node.value.func, aliases)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
    return names


def _walk(tree):
    """Every node once, and each node's parent: the one walk over the tree."""
    nodes, parents, stack = [], {}, [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        for child in ast.iter_child_nodes(node):
            parents[child] = node
            stack.append(child)
    return nodes, parents


def _guarded(node, parents):
    """Whether the call sits in a try whose handler catches a missing attribute, or under if hasattr(...)."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.Try) and child in parent.body:
            for handler in parent.handlers:
                caught = handler.type
                names = []
                if caught is None:
                    return True
                for item in (caught.elts if isinstance(caught, ast.Tuple) else [caught]):
                    if isinstance(item, ast.Name):
                        names.append(item.id)
                    elif isinstance(item, ast.Attribute):
                        names.append(item.attr)
                if CATCH_ALL & set(names):
                    return True
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            for test in ast.walk(parent.test):
                if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr":
                    return True
        child, parent = parent, parents.get(parent)
    return False


def _code(lines, node):
    line = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
    return line if len(line) <= 120 else line[:117] + "..."


def _unit_keyword(call, aliases):
    """'minibatch', 'sample' or None: the UnitType a learning_rate_schedule call passes."""
    candidates = list(call.args[1:2]) + [k.value for k in call.keywords if k.arg == "unit"]
    for value in candidates:
        name = _dotted(value, aliases) or ""
        if name.endswith("UnitType.minibatch"):
            return "minibatch"
        if name.endswith("UnitType.sample"):
            return "sample"
    return None


def _schedule_instead(call, aliases):
    unit = _unit_keyword(call, aliases)
    rate = ast.unparse(call.args[0]) if call.args else "lr"
    epoch = [k for k in call.keywords if k.arg == "epoch_size"] or call.args[2:3]
    epoch_text = ""
    if epoch:
        value = epoch[0].value if isinstance(epoch[0], ast.keyword) else epoch[0]
        epoch_text = ", epoch_size={}".format(ast.unparse(value))
    if unit == "sample":
        return "C.learning_parameter_schedule_per_sample({}{}) (the same per-sample rate)".format(rate, epoch_text)
    return ("C.learning_parameter_schedule({}{}) (the same rate, applied to the minibatch's mean gradient; "
            "add minibatch_size=N to keep it right when the minibatch size changes)".format(rate, epoch_text))


def check_source(text, path="train.py"):
    """[Finding] for one file's text; [] when it has none of the walk-through lines (or does not use cntk)."""
    if "cntk" not in text:
        return []
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None)
        return [Finding(path, line, NOTE, None,
                        "not checked for walk-through lines that fail on CNTK 2.7: Python cannot parse it here "
                        "({})".format(getattr(error, "msg", None) or error), None)]
    nodes, parents = _walk(tree)
    aliases = _aliases(nodes)
    if not any(_is_cntk(value) for value in aliases.values()):
        return []
    lines = text.splitlines()
    graph_names = _graph_names(nodes, aliases)
    findings = []
    trainer_args = {}
    calls = [node for node in nodes if isinstance(node, ast.Call)]
    for node in calls:
        name = _dotted(node.func, aliases)
        if _is_cntk(name) and name.split(".")[-1] == "Trainer":
            if len(node.args) >= 4:
                trainer_args[node.args[3]] = node
            for keyword in node.keywords:
                if keyword.arg == "progress_writers":
                    trainer_args[keyword.value] = node
    for node in calls:
        name = _dotted(node.func, aliases)
        if not _is_cntk(name):
            continue
        last = name.split(".")
        if last[-2:] == ["Communicator", "init"]:
            guarded = _guarded(node, parents)
            findings.append(Finding(
                path, node.lineno, WARN if guarded else REFUSE, _code(lines, node),
                "CNTK 2.7 has no Communicator.init(): {}MPI starts on first use".format(
                    "guarded here, so it runs, but " if guarded else
                    "every rank fails with AttributeError: type object 'Communicator' has no attribute 'init'; "),
                "nothing: delete the line (C.Communicator.rank() and C.Communicator.num_workers() work at once)"))
        elif last[-1] == "Communicator":
            as_writer = node in trainer_args
            guarded = _guarded(node, parents)
            findings.append(Finding(
                path, node.lineno, WARN if guarded else REFUSE, _code(lines, node),
                "CNTK 2.7's Communicator cannot be constructed (AttributeError: No constructor defined - class "
                "is abstract){}".format("; the Trainer's fourth argument is progress writers, not a communicator"
                                     if as_writer else ""),
                ("C.Trainer(model, (loss, metric), [distributed_learner], [C.logging.ProgressPrinter(...)] on "
                 "rank 0, [] elsewhere): the distributed learner carries the communicator"
                 if as_writer else
                 "the static C.Communicator.rank() / num_workers() / finalize(), or the instance "
                 "distributed_learner.communicator() for is_main(), barrier(), workers()")))
        elif last[-1] == "one_hot":
            first = node.args[0] if node.args else None
            if (isinstance(first, ast.Name) and first.id in graph_names) or \
                    (isinstance(first, ast.Call) and _is_cntk(_dotted(first.func, aliases))):
                continue
            findings.append(Finding(
                path, node.lineno, WARN, _code(lines, node),
                "C.one_hot is a graph op: on numpy labels it returns a CNTK Function, not one-hot rows",
                "np.eye(num_classes, dtype=np.float32)[labels] for numpy labels (keep C.one_hot for a graph "
                "input such as C.input_variable)"))
        elif last[-1] == "learning_rate_schedule":
            findings.append(Finding(
                path, node.lineno, WARN, _code(lines, node),
                "learning_rate_schedule(..., UnitType...) is deprecated since CNTK 2.2 (it still runs)",
                _schedule_instead(node, aliases)))
    return sorted(findings, key=lambda finding: (finding.line or 0, finding.kind))


def check_files(source, relatives):
    """[Finding] for the job's .py files (paths relative to source, as sent), file by file."""
    findings = []
    for relative in relatives:
        if not relative.endswith(".py"):
            continue
        path = os.path.join(source, relative)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            if os.path.getsize(path) > MAX_BYTES:
                findings.append(Finding(relative, None, NOTE, None, "not checked for walk-through lines: larger "
                                        "than {} MiB".format(MAX_BYTES // (1024 * 1024)), None))
                continue
            with open(path, "rb") as source_file:
                text = source_file.read().decode("utf-8", errors="replace")
        except OSError as error:
            findings.append(Finding(relative, None, NOTE, None, "not checked: {}".format(error.strerror), None))
            continue
        findings.extend(check_source(text, relative))
    return findings


def refusals(findings):
    return [finding.text() for finding in findings if finding.kind == REFUSE]


def warnings(findings):
    return [finding.text() for finding in findings if finding.kind != REFUSE]
