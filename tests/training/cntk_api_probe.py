"""What the REAL cntk 2.7 wheel says of a script's use of its API.

Run with the wheel's own interpreter (the CPython 3.6.15 venv of
tests/training/cntk_env.py) by tests/training/test_cntk_api.py:

    python cntk_api_probe.py [--root=NAME=MODULE]... FILE...

prints one JSON document. For each FILE, read with ast (nothing of it runs):

- names: every dotted name read from a module the file imports (cntk, which
  the backend calls C, numpy, the stdlib, the project's common) is looked up
  with getattr on the real, imported module, so branches the training runs
  never take (the mlp model, a GPU device, error paths) are covered too;
- calls: every call of such a name is bound with inspect.signature of the
  real callable (positional count, keyword names, required arguments, an
  instance method called on its class);
- deprecated: callables and keyword arguments that the wheel's own
  docstrings mark deprecated.

--root=C=cntk names a module that a file receives as a parameter instead of
importing it: the backend's modules (training/cntk_model.py, ...) take cntk
as C from cntk_backend.run.

Then ("backend") it imports training/cntk_backend.py and its modules under
this interpreter and runs, on one process (MPI's singleton mode), the pieces
that the mpirun tests do not reach or cannot see: the mlp model, every
distributed learner mode and its refusals, the communicator's kinds of
methods and a barrier (the error path calls it and swallows any error), and
what the wheel is.
"""

import argparse
import ast
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback

TRAINING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "training")


# -- the wheel's docstrings ----------------------------------------------------


def deprecated(obj):
    """The docstring starts by saying deprecated (CNTK: 'Deprecated:: 2.2')."""
    doc = (inspect.getdoc(obj) or "").strip()
    return bool(doc) and "deprecat" in doc.splitlines()[0].lower()


_PARAM = re.compile(r"^(\s*)\**(\w+)\s*(\([^)]*\))?\s*:")


def deprecated_params(obj):
    """Parameters whose entry in the docstring's Args section says deprecated."""
    blocks, current, indent, in_args = {}, None, None, False
    for line in (inspect.getdoc(obj) or "").splitlines():
        stripped = line.strip()
        if not in_args:
            in_args = stripped in ("Args:", "Arguments:", "Parameters:")
            continue
        if not stripped:
            continue
        width = len(line) - len(line.lstrip())
        if indent is not None and width < indent:
            break
        match = _PARAM.match(line)
        if match and (indent is None or width == indent):
            indent, current = width, match.group(2)
            blocks[current] = [stripped]
        elif current is not None:
            blocks[current].append(stripped)
    return sorted(name for name, text in blocks.items() if "deprecat" in " ".join(text).lower())


# -- a file's names and calls --------------------------------------------------


def dotted(node):
    """['C', 'io', 'StreamDef'] for C.io.StreamDef, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def imported_roots(tree):
    """Name -> (module, line) for every `import x [as y]` in the file (any scope)."""
    roots = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    roots[alias.asname] = (alias.name, node.lineno)
                else:
                    roots[alias.name.split(".")[0]] = (alias.name.split(".")[0], node.lineno)
                    if "." in alias.name:  # import a.b binds a, and must find a.b
                        roots.setdefault("." + alias.name, (alias.name, node.lineno))
    return roots


def check_file(path, assumed=None):
    """assumed: name -> module for names the file uses without importing them."""
    source = open(path).read()
    tree = ast.parse(source, filename=path)
    # The file's own modules (training/common.py for the backend) import as its imports do.
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    roots, problems, unimported = {}, [], []
    found_roots = dict((name, (module, 0)) for name, module in (assumed or {}).items())
    found_roots.update(imported_roots(tree))
    for name, (module, line) in sorted(found_roots.items()):
        try:
            imported = importlib.import_module(module)
        except ImportError as error:
            unimported.append(module)
            problems.append("line {}: import {}: {}".format(line, module, error))
            continue
        if not name.startswith("."):
            roots[name] = imported
    names, calls, unbound, deprecations = set(), set(), set(), []

    def resolve(node, parts, report=True):
        obj = roots[parts[0]]
        for index, attr in enumerate(parts[1:], 1):
            if not hasattr(obj, attr):
                if report:
                    problems.append("line {}: {} has no attribute {!r} (it is {!r})".format(
                        node.lineno, ".".join(parts[:index]), attr, obj))
                return None, False
            obj = getattr(obj, attr)
        return obj, True

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            parts = dotted(node)
            if parts and parts[0] in roots:
                name = ".".join(parts)
                obj, found = resolve(node, parts)
                if found:
                    names.add(name)
                    if roots[parts[0]].__name__.split(".")[0] == "cntk" and deprecated(obj):
                        deprecations.append("line {}: {} is deprecated: {}".format(
                            node.lineno, name, inspect.getdoc(obj).strip().splitlines()[0]))
        elif isinstance(node, ast.Call):
            parts = dotted(node.func)
            if not parts or parts[0] not in roots or len(parts) < 2:
                continue
            name = ".".join(parts)
            obj, found = resolve(node, parts, report=False)  # node.func's own visit reports it
            if not found:
                continue
            calls.add(name)
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                unbound.add(name + " (*args or **kwargs at the call)")
                continue
            try:
                signature = inspect.signature(obj)
            except (TypeError, ValueError):
                unbound.add(name)  # builtins without a signature (np.zeros, time.time)
                continue
            try:
                given = signature.bind(*range(len(node.args)), **{k.arg: None for k in node.keywords}).arguments
            except TypeError as error:
                problems.append("line {}: {}(...): {}; the real signature is {}{}".format(
                    node.lineno, name, error, name, signature))
                continue
            module = getattr(inspect.getmodule(obj), "__name__", "") or ""
            if module.split(".")[0] == "cntk":
                target = obj.__init__ if inspect.isclass(obj) else obj
                for param in sorted(set(deprecated_params(obj)) | set(deprecated_params(target))):
                    if param in given:
                        deprecations.append("line {}: {}(...): argument {!r} is deprecated".format(
                            node.lineno, name, param))

    def by_line(messages):
        return sorted(set(messages), key=lambda message: (int(message.split(":")[0].split()[1]), message))
    return {"roots": {name: getattr(module, "__name__", "?") for name, module in roots.items()},
            "unimported": unimported, "names": sorted(names), "calls": sorted(calls),
            "unbound": sorted(unbound), "problems": by_line(problems), "deprecated": by_line(deprecations)}


# -- the backend on the real wheel, one process ------------------------------------


def exercise_backend():
    import numpy as np
    import cntk as C
    sys.path.insert(0, TRAINING)
    # Compiled by this CPython 3.6: their syntax is 3.6.
    import cntk_backend  # noqa: F401 (its imports: every module of the backend)
    import cntk_model
    import cntk_ranks

    facts = {"version": C.__version__.strip(), "module": os.path.dirname(C.__file__)}

    def namespace(**options):
        values = dict(model="softmax", hidden=8, features=4, classes=3, seed=1)
        values.update(options)
        return argparse.Namespace(**values)

    features = C.input_variable(4, dtype=np.float32, name="features")
    labels = C.input_variable(3, dtype=np.float32, name="labels")
    models = {}
    for kind in ("softmax", "mlp"):
        model = cntk_model.build_model(C, namespace(model=kind), features)
        models[kind] = {"shape": list(model.shape),
                        "parameters": sorted(list(p.shape) for p in model.parameters)}
    facts["models"] = models
    model = cntk_model.build_model(C, namespace(model="mlp"), features)
    loss = C.cross_entropy_with_softmax(model, labels)
    metric = C.classification_error(model, labels)

    def local():
        return C.sgd(model.parameters, lr=C.learning_parameter_schedule(0.1))

    modes = {}
    for label, options in (("absent", {}), ("32", {"quantization_bits": 32}), ("1", {"quantization_bits": 1}),
                           ("block", {"block_momentum": True}), ("block 1", {"block_momentum": True,
                                                                             "quantization_bits": 1}),
                           ("0", {"quantization_bits": 0})):
        try:
            learner, mode = cntk_model.distributed_learner(C, argparse.Namespace(**options), local(), 64)
            modes[label] = {"mode": mode, "type": type(learner).__name__}
        except ValueError as error:
            modes[label] = {"error": str(error)}
    facts["distributed_learners"] = modes

    learner, _ = cntk_model.distributed_learner(C, argparse.Namespace(), local(), 64)
    communicator = learner.communicator()
    kinds = {}
    for name in ("rank", "num_workers", "finalize", "is_main", "barrier", "workers", "aggregate_in_place",
                 "init", "initialize"):
        member = inspect.getattr_static(C.Communicator, name, None)
        kinds[name] = None if member is None else type(member).__name__
    facts["communicator"] = {
        "kinds": kinds,
        "instance_type": type(communicator).__name__,
        "is_main": communicator.is_main(),
        "rank": C.Communicator.rank(),
        "num_workers": C.Communicator.num_workers(),
    }
    communicator.barrier()
    facts["communicator"]["barrier"] = "returned"
    facts["gather"] = cntk_ranks.gather(C, communicator, 0, 1, [1.5, 2.0])
    facts["gather_json"] = cntk_ranks.gather_json(C, communicator, 0, 1, {"host": "h", "problems": []})

    trainer_init = inspect.signature(C.Trainer.__init__)
    facts["trainer_parameters"] = list(trainer_init.parameters)
    writer = C.logging.ProgressPrinter(freq=1, tag="Training", num_epochs=1)
    trainer = C.Trainer(model, (loss, metric), [learner], [writer])
    facts["last_step_before_training"] = list(cntk_model.last_step(trainer))
    facts["properties"] = {name: type(inspect.getattr_static(C.Trainer, name, None)).__name__
                           for name in ("previous_minibatch_sample_count", "previous_minibatch_loss_average",
                                        "previous_minibatch_evaluation_average")}
    facts["device"] = cntk_model.device_name(C)
    facts["cntk.distributed"] = {
        "is cntk.train.distributed": C.distributed is C.train.distributed,
        "importable as a module": importlib.util.find_spec("cntk.distributed") is not None,
    }
    # The detectors above, shown to work on the real wheel: what they must flag.
    facts["detectors"] = {
        "learning_rate_schedule deprecated": deprecated(C.learning_rate_schedule),
        "learning_parameter_schedule deprecated": deprecated(C.learning_parameter_schedule),
        "sgd deprecated params": deprecated_params(C.sgd),
    }
    C.Communicator.finalize()
    return facts


def main(argv):
    result = {"python": sys.version.split()[0], "files": {}}
    assumed = {}
    for arg in argv:
        if arg.startswith("--root="):
            name, module = arg[len("--root="):].split("=", 1)
            assumed[name] = module
    for path in argv:
        if not path.startswith("--root="):
            result["files"][path] = check_file(path, assumed)
    try:
        result["backend"] = exercise_backend()
    except Exception:
        result["backend"] = {"error": traceback.format_exc()}
    sys.stdout.write("PROBE " + json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
