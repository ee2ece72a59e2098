"""Run one of the project's functions on hostile input in a child process, under a time bound the test sets: a
scan that backtracks (quadratic or worse) fails the test instead of hanging the suite."""

import json
import os
import subprocess
import sys

import pytest

CHILD = """
import importlib, json, sys
call = json.load(sys.stdin)
function = getattr(importlib.import_module(call["module"]), call["function"])
try:
    print(json.dumps({"result": function(*call["args"])}))
except ValueError as exc:
    print(json.dumps({"error": str(exc)}))
"""


def call_within(seconds, module, function, *args):
    """{'result': what module.function(*args) returned} or {'error': its ValueError's message}; the test fails
    when the call runs past `seconds` (the child's start included)."""
    try:
        done = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(
            {"module": module, "function": function, "args": list(args)}), capture_output=True, text=True,
            timeout=seconds, env=dict(os.environ), check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{module}.{function} on {sum(len(str(a)) for a in args)} characters ran past {seconds} s")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)
