"""The CNTK backend's use of the cntk API (training/cntk_backend.py and its modules,
training/cntk_*.py), shown by the REAL cntk 2.7 wheel.

tests/training/cntk_api_probe.py runs in the wheel's venv (CPython 3.6.15,
cntk 2.7.post2 CPU, as tests/training/cntk_env.py builds it), once for the
session: every name the backend's files read from cntk (and numpy, the stdlib,
common) is looked up on the real modules and every call of one is bound to
the real signature, including branches that the mpirun runs of
test_cntk_mpi.py never take (the mlp model, the GPU device kind, error
paths); the backend's untaken pieces (mlp, every distributed learner mode,
the communicator's barrier in the error path) run once on one process.
A snippet of known mistakes shows that the probe catches them.
Skips, with the reason, where pyenv's 3.6.15 or Open MPI's libraries are missing;
the first two tests need neither.
"""

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BACKEND = ROOT / "training" / "cntk_backend.py"
# The backend and its modules (cntk_model.py, cntk_ranks.py, ...): each takes cntk as C from cntk_backend.run.
BACKEND_FILES = sorted((ROOT / "training").glob("cntk_*.py"))
PROBE = HERE / "cntk_api_probe.py"

# Each line marked `# expect: TEXT` must draw a problem (or deprecation) on
# that line whose message holds TEXT; the rest must draw none.
MISTAKES = textwrap.dedent("""\
    import time
    import cntk as C
    features = C.input_variable(4)
    labels = C.input_variable(3)
    model = C.layers.Dense(3)(features)
    loss = C.cross_entropy_with_softmax(model, labels)
    err = C.classification_error(model, labels)
    learner = C.data_parallel_distributed_learner(C.sgd(model.parameters, lr=C.learning_parameter_schedule(0.1)))
    bm = C.block_momentum_distributed_learner(C.sgd(model.parameters, 0.1), block_size=1024)
    C.Trainer(model, (loss, err), [learner], [C.logging.ProgressPrinter(freq=10, num_epochs=2)])
    gpu = C.device.gpu(0)
    import cntk.distributed  # expect: No module named 'cntk.distributed'
    C.Communicator.init()  # expect: C.Communicator has no attribute 'init'
    C.train.distributed.Communicator.initialize()  # expect: has no attribute 'initialize'
    C.learner.sgd(model.parameters, 0.1)  # expect: C has no attribute 'learner'
    C.train.distributed.data_parallel_distributed_learner(learner, num_quantisation_bits=1)  # expect: 'num_quantisation_bits'
    C.data_parallel_distributed_learner(learner, 0, 1, False, True)  # expect: too many positional arguments
    C.block_momentum_distributed_learner(learner)  # expect: missing a required argument: 'block_size'
    C.Trainer(model, (loss, err))  # expect: missing a required argument: 'parameter_learners'
    C.Communicator.is_main()  # expect: missing a required argument: 'self'
    C.Communicator.rank(0)  # expect: too many positional arguments
    C.io.MinibatchSource(C.io.CTFDeserializer("f", C.io.StreamDefs()), randomise=False)  # expect: 'randomise'
    C.io.MinibatchSource(C.io.CTFDeserializer("f", C.io.StreamDefs()), epoch_size=10)  # expect: 'epoch_size'
    C.learning_rate_schedule(0.1, C.UnitType.minibatch)  # expect: C.learning_rate_schedule is deprecated
    C.sgd(model.parameters, 0.1, use_mean_gradient=True)  # expect: argument 'use_mean_gradient' is deprecated
    C.sgd(model.parameters, 0.1, 0, 0, 0, 1e9, True, True)  # expect: argument 'use_mean_gradient' is deprecated
    time.time_ns()  # expect: time has no attribute 'time_ns'
    """)


def test_backend_parses_as_python_3_6():
    # Where the wheel's CPython 3.6 is missing; with it, the probe imports the backend under 3.6.
    assert BACKEND in BACKEND_FILES and len(BACKEND_FILES) > 1
    for path in BACKEND_FILES:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 6))


def test_backend_imports_without_cntk():
    # cntk is imported inside run(): the modules themselves load on any Python 3.
    # Run from training/ as the nodes run it: `python -c` puts the working folder first on the import path.
    code = "; ".join("import " + path.stem for path in BACKEND_FILES) + "; print(cntk_backend.run.__name__)"
    result = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT / "training"), capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "run", result.stdout + result.stderr


@pytest.fixture(scope="module")
def probe(cntk_runtime, tmp_path_factory):
    python, mpi_dir = cntk_runtime
    mistakes = tmp_path_factory.mktemp("cntk-api") / "mistakes.py"
    mistakes.write_text(MISTAKES)
    # One process: MPI's singleton mode, on loopback as the mpirun tests are.
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo",
               OMPI_MCA_btl_vader_single_copy_mechanism="none",
               LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(mpi_dir), os.environ.get("LD_LIBRARY_PATH")])))
    command = [str(python), str(PROBE), "--root=C=cntk"] + [str(path) for path in BACKEND_FILES] + [str(mistakes)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, cwd=str(ROOT))
    lines = [line for line in result.stdout.splitlines() if line.startswith("PROBE ")]
    assert result.returncode == 0 and lines, result.stdout + result.stderr[-4000:]
    facts = json.loads(lines[-1][len("PROBE "):])
    assert "error" not in facts["backend"], facts["backend"].get("error")
    return facts, _merged([facts["files"][str(path)] for path in BACKEND_FILES], BACKEND_FILES), \
        facts["files"][str(mistakes)]


def _merged(reports, paths):
    """The backend's files' reports as one: names, calls and roots together, each problem named by its file."""
    merged = {"roots": {}, "unimported": [], "names": [], "calls": [], "unbound": [], "problems": [], "deprecated": []}
    for report, path in zip(reports, paths):
        merged["roots"].update(report["roots"])
        for key in ("unimported", "names", "calls", "unbound"):
            merged[key] = sorted(set(merged[key]) | set(report[key]))
        for key in ("problems", "deprecated"):
            merged[key] += ["{}: {}".format(path.name, message) for message in report[key]]
    return merged


def test_it_is_the_real_wheel_under_python_3_6(probe, cntk_runtime):
    facts, _, _ = probe
    python, _ = cntk_runtime
    assert facts["python"] == "3.6.15"
    assert facts["backend"]["version"] == "2.7"
    assert Path(facts["backend"]["module"]).is_relative_to(Path(python).parents[1])


def test_every_name_the_backend_reads_exists_in_the_real_modules(probe):
    _, backend, _ = probe
    assert backend["problems"] == [] and backend["unimported"] == []
    assert backend["roots"]["C"] == "cntk" and backend["roots"]["np"] == "numpy"
    # Read on paths the CPU runs under mpirun never take, or only in passing:
    for name in ("C.relu", "C.layers.Dense", "C.glorot_uniform", "C.device.DeviceKind.GPU",
                 "C.train.distributed.block_momentum_distributed_learner",
                 "C.train.distributed.data_parallel_distributed_learner", "C.NDArrayView.from_dense",
                 "C.Communicator.rank", "C.Communicator.num_workers", "C.Communicator.finalize",
                 "C.io.MinibatchSource", "C.io.CTFDeserializer", "C.io.StreamDef", "C.io.StreamDefs",
                 "C.learning_parameter_schedule", "C.logging.ProgressPrinter", "C.Trainer", "C.sgd",
                 "C.cross_entropy_with_softmax", "C.classification_error", "C.input_variable"):
        assert name in backend["names"], name


def test_every_call_binds_to_the_real_signature(probe):
    _, backend, _ = probe
    # Bound: every cntk call (those without a Python signature are numpy's and the stdlib's builtins).
    cntk_calls = [name for name in backend["calls"] if name.startswith("C.")]
    assert len(cntk_calls) >= 20, cntk_calls
    assert [name for name in backend["unbound"] if name.startswith("C.") and name != "C.__version__.strip"] == []
    assert backend["problems"] == []


def test_the_backend_uses_nothing_deprecated(probe):
    facts, backend, _ = probe
    assert backend["deprecated"] == []
    # The same reading of the wheel's docstrings flags what is deprecated.
    assert facts["backend"]["detectors"] == {"learning_rate_schedule deprecated": True,
                                             "learning_parameter_schedule deprecated": False,
                                             "sgd deprecated params": ["use_mean_gradient"]}


def test_the_probe_catches_the_classic_mistakes(probe):
    _, _, mistakes = probe
    found = mistakes["problems"] + mistakes["deprecated"]
    expected = {}
    for number, line in enumerate(MISTAKES.splitlines(), 1):
        if "# expect: " in line:
            expected[number] = line.split("# expect: ", 1)[1]
    for number, text in expected.items():
        at_line = [message for message in found if message.startswith("line {}: ".format(number))]
        assert any(text in message for message in at_line), (number, text, found)
    unexpected = [message for message in found if int(message.split(":")[0].split()[1]) not in expected]
    assert unexpected == [], unexpected


def test_communicator_methods_as_the_wheel_has_them(probe):
    communicator = probe[0]["backend"]["communicator"]
    # rank(), num_workers(), finalize() on the class; is_main(), barrier(), workers(),
    # aggregate_in_place() on the instance the distributed learner gives; no init().
    assert communicator["kinds"] == {
        "rank": "staticmethod", "num_workers": "staticmethod", "finalize": "staticmethod",
        "is_main": "function", "barrier": "function", "workers": "function", "aggregate_in_place": "function",
        "init": None, "initialize": None}
    assert communicator["instance_type"] == "Communicator"
    assert (communicator["rank"], communicator["num_workers"], communicator["is_main"]) == (0, 1, True)
    # The error path calls barrier() inside `except Exception: pass`; here it must return.
    assert communicator["barrier"] == "returned"
    # cntk.distributed is an attribute (cntk.train.distributed), not a module of its own.
    assert probe[0]["backend"]["cntk.distributed"] == {"is cntk.train.distributed": True,
                                                       "importable as a module": False}


def test_trainer_takes_progress_writers_fourth(probe):
    facts = probe[0]["backend"]
    assert facts["trainer_parameters"] == ["self", "model", "criterion", "parameter_learners", "progress_writers"]
    assert set(facts["properties"].values()) == {"property"}
    assert facts["last_step_before_training"] == [0, 0.0, 0.0]


def test_both_models_build_on_the_real_wheel(probe):
    models = probe[0]["backend"]["models"]
    assert models["softmax"] == {"shape": [3], "parameters": [[3], [4, 3]]}
    assert models["mlp"] == {"shape": [3], "parameters": [[3], [4, 8], [8], [8, 3]]}


def test_every_distributed_learner_mode_and_its_refusals(probe):
    facts = probe[0]["backend"]
    assert facts["distributed_learners"] == {
        "absent": {"mode": "data_parallel", "type": "DistributedLearner"},  # CNTK-only options not given
        "32": {"mode": "data_parallel", "type": "DistributedLearner"},
        "1": {"mode": "data_parallel_1bit", "type": "DistributedLearner"},
        "block": {"mode": "block_momentum(block_size=640)", "type": "DistributedLearner"},
        "block 1": {"error": "block momentum and 1-bit SGD (quantization_bits < 32) exclude each other"},
        "0": {"error": "quantization_bits must be between 1 and 32, got 0"},
    }
    assert facts["gather"] == [[1.5, 2.0]]
    assert facts["gather_json"] == [{"host": "h", "problems": []}]
    assert facts["device"] == "cpu:0"


# The walk-through lines the train step checks a job's script for (plugins/module_utils/cntk_porting.py),
# and the lines it says to write instead, on the real wheel.
WALKTHROUGH_FACTS = textwrap.dedent("""\
    import json, numpy as np, cntk as C
    facts = {"init": hasattr(C.distributed.Communicator, "init") or hasattr(C.train.distributed.Communicator, "init")}
    try:
        C.distributed.Communicator()
        facts["construct"] = None
    except Exception as error:
        facts["construct"] = "{}: {}".format(type(error).__name__, error)
    hot = C.one_hot(np.array([[1], [2]], dtype=np.float32), 10)
    facts["one_hot"] = [type(hot).__name__, isinstance(hot, np.ndarray)]
    old, new = C.learning_rate_schedule(0.1, C.UnitType.minibatch, 100), C.learning_parameter_schedule(0.1, epoch_size=100)
    facts["schedule"] = [[old[i], old.minibatch_size] for i in (0, 99, 100)] == [[new[i], new.minibatch_size] for i in (0, 99, 100)]
    old, new = C.learning_rate_schedule(0.1, C.UnitType.sample), C.learning_parameter_schedule_per_sample(0.1)
    facts["per_sample"] = [old[0], old.minibatch_size] == [new[0], new.minibatch_size]
    facts["deprecated"] = "Deprecated:: 2.2" in C.learning_rate_schedule.__doc__
    print("FACTS " + json.dumps(facts))
    """)


def test_the_porting_check_agrees_with_the_wheel(cntk_runtime, tmp_path):
    from ansible_collections.cntk.cluster.plugins.module_utils import cntk_porting

    python, mpi_dir = cntk_runtime
    script = tmp_path / "facts.py"
    script.write_text(WALKTHROUGH_FACTS)
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1",
               LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(mpi_dir), os.environ.get("LD_LIBRARY_PATH")])))
    result = subprocess.run([str(python), str(script)], capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.startswith("FACTS ")]
    assert result.returncode == 0 and lines, result.stdout + result.stderr[-4000:]
    facts = json.loads(lines[-1][len("FACTS "):])
    # Refused: they fail on every run.
    assert facts["init"] is False
    assert facts["construct"] == "AttributeError: No constructor defined - class is abstract"
    # Warned: C.one_hot on numpy labels gives a graph op, not rows; the old schedule runs, deprecated, and the
    # replacement the check names is the same schedule.
    assert facts["one_hot"] == ["Function", False]
    assert facts["schedule"] and facts["per_sample"] and facts["deprecated"]
    found = cntk_porting.check_source(
        "import cntk as C\nC.distributed.Communicator.init()\nC.distributed.Communicator()\n"
        "C.one_hot(labels, 10)\nC.learning_rate_schedule(0.1, C.UnitType.minibatch, 100)\n")
    assert [(f.line, f.kind) for f in found] == [(2, "refuse"), (3, "refuse"), (4, "warn"), (5, "warn")]
    assert "no attribute 'init'" in found[0].why and facts["construct"].split(": ", 1)[1] in found[1].why
    assert found[3].instead.startswith("C.learning_parameter_schedule(0.1, epoch_size=100)")
