"""Load a project file that is not an importable package (training/*.py, run
on the nodes; tests/gpu/check.py, run on a GPU machine) under a name of its
own, so that it neither needs a sys.path edit nor shadows a real module."""

import importlib.util
import sys


def load(path, name):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
