"""The CNTK backend against the real cntk 2.7 wheel's Python API.

CNTK 2.7 cannot be imported here (CPython 3.6 + Open MPI 1.10), so
scripts/cntk_api_check.py reads the wheel's sources with ast. These tests
fetch the pinned wheel once (cached in .cache/cntk-wheel/, sha256 verified),
check training/cntk_backend.py against it, and show that the check catches
the classic mistakes on small snippets. They skip only when pip cannot reach
PyPI and nothing is cached.
"""

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cntk_api_check as check

ROOT = Path(__file__).resolve().parents[2]
BACKEND = ROOT / "training" / "cntk_backend.py"
TOOL = ROOT / "scripts" / "cntk_api_check.py"


@pytest.fixture(scope="session")
def wheel():
    try:
        return check.ensure_wheel()
    except check.WheelUnavailable as error:
        if error.network:
            pytest.skip("pip cannot reach PyPI to fetch the pinned cntk 2.7 wheel and none is cached "
                        "in .cache/cntk-wheel/: {}".format(str(error).splitlines()[0]))
        raise


@pytest.fixture(scope="session")
def api(wheel):
    return check.WheelAPI.from_wheel(wheel)


@pytest.fixture(scope="session")
def backend_report(api):
    return check.check_file(BACKEND, api)


def check_snippet(api, tmp_path, source, name="snippet.py", **options):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return check.check_file(path, api, **options)


# -- the backend ------------------------------------------------------------


def test_backend_is_valid_python_3_6():
    source = BACKEND.read_text()
    ast.parse(source, filename=str(BACKEND), feature_version=(3, 6))
    assert [str(p) for p in check.python36_problems(source, BACKEND)] == []


def test_backend_imports_without_cntk():
    # The module must import on machines without CNTK (cntk is imported in run()).
    code = "import sys; sys.path.insert(0, 'training'); import cntk_backend; print(cntk_backend.run.__name__)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)
    assert proc.returncode == 0, proc.stdout


def test_wheel_is_the_pinned_one(wheel, api):
    entry = check.pinned_entry(wheel.name)
    assert entry is not None
    assert api.sha256 == entry["sha256"]
    assert api.version.startswith("2.7")


def test_return_hints_resolve_in_the_wheel(api):
    assert check.check_hints(api) == []


def test_backend_passes_the_api_check(backend_report):
    assert backend_report.ok, check.format_report(backend_report)


def test_backend_uses_the_distributed_api(backend_report):
    expected = [
        "cntk.train.distributed.Communicator.rank",
        "cntk.train.distributed.Communicator.num_workers",
        "cntk.train.distributed.Communicator.finalize",
        "cntk.train.distributed.Communicator.is_main",
        "cntk.train.distributed.DistributedLearner.communicator",
        "cntk.train.distributed.data_parallel_distributed_learner",
        "cntk.train.distributed.block_momentum_distributed_learner",
        "cntk.train.trainer.Trainer",
        "cntk.train.trainer.Trainer.train_minibatch",
        "cntk.train.trainer.Trainer.test_minibatch",
        "cntk.train.trainer.Trainer.save_checkpoint",
        "cntk.train.trainer.Trainer.restore_from_checkpoint",
        "cntk.logging.progress_print.ProgressPrinter",
        "cntk.io.MinibatchSource",
        "cntk.io.CTFDeserializer",
        "cntk.io.StreamDef",
        "cntk.learners.sgd",
        "cntk.learners.learning_parameter_schedule",
        "cntk.losses.cross_entropy_with_softmax",
        "cntk.metrics.classification_error",
        "cntk.ops.functions.Function.save",
    ]
    missing = [name for name in expected if not backend_report.called(name)]
    assert missing == [], "not called (or not followed by the check): {}".format(missing)


def test_backend_avoids_deprecated_and_misused_api(backend_report):
    for name in ("cntk.ops.one_hot", "cntk.learners.learning_rate_schedule",
                 "cntk.learners.training_parameter_schedule", "cntk.train.training_session.training_session"):
        assert not backend_report.called(name), name
    tree = ast.parse(BACKEND.read_text())
    names = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    names += [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)]
    assert "one_hot" not in names
    assert "init" not in names  # no Communicator.init(): it does not exist


def test_trainer_gets_progress_writers_not_a_communicator(api):
    """Read off the wheel: Trainer(model, criterion, parameter_learners, progress_writers)."""
    trainer = api.lookup("cntk.train.trainer.Trainer")
    init, _ = api.constructor(trainer)
    assert [a.arg for a in init.node.args.args] == [
        "self", "model", "criterion", "parameter_learners", "progress_writers"]


def test_communicator_api_as_the_wheel_has_it(api):
    communicator = api.lookup("cntk.train.distributed.Communicator")
    kinds = {}
    for name in ("rank", "num_workers", "finalize", "is_main", "barrier", "workers", "current_worker"):
        kinds[name] = api.class_attr(communicator, name, via_instance=False).kind
    assert kinds == {"rank": "staticmethod", "num_workers": "staticmethod", "finalize": "staticmethod",
                     "is_main": "method", "barrier": "method", "workers": "method", "current_worker": "method"}
    assert isinstance(api.class_attr(communicator, "init", via_instance=False), check.Missing)
    # cntk.distributed is the attribute cntk.train.distributed (bound by `from .train import *`),
    # not an importable module of its own.
    assert api.lookup("cntk.distributed").name == "cntk.train.distributed"
    assert not api.has_module("cntk.distributed")


# -- the check catches the classic mistakes ---------------------------------

PRELUDE = """\
import numpy as np
import cntk as C

features = C.input_variable(4)
labels = C.input_variable(3)
model = C.layers.Dense(3)(features)
loss = C.cross_entropy_with_softmax(model, labels)
err = C.classification_error(model, labels)
learner = C.data_parallel_distributed_learner(
    C.sgd(model.parameters, lr=C.learning_parameter_schedule(0.1)))
"""

BAD = [
    ("communicator_init", "C.Communicator.init()\n", "missing",
     "class cntk.train.distributed.Communicator has no attribute 'init'"),
    ("communicator_initialize", "C.train.distributed.Communicator.initialize()\n", "missing",
     "has no attribute 'initialize'"),
    ("instance_init", "learner.communicator().init()\n", "missing",
     "instance of cntk.train.distributed.Communicator has no attribute 'init'"),
    ("keyword_typo", "C.train.distributed.data_parallel_distributed_learner(learner, num_quantisation_bits=1)\n",
     "signature", "unexpected keyword argument 'num_quantisation_bits' (did you mean 'num_quantization_bits'?)"),
    ("too_many_positional", "C.data_parallel_distributed_learner(learner, 0, 1, False, True)\n", "signature",
     "takes at most 4 positional arguments"),
    ("block_momentum_missing_block_size", "C.block_momentum_distributed_learner(learner)\n", "signature",
     "missing required argument: block_size"),
    ("trainer_missing_learners", "C.Trainer(model, (loss, err))\n", "signature",
     "missing required argument: parameter_learners"),
    ("one_hot_numpy_call", "y = C.one_hot(np.array([0, 2, 1]), 3)\n", "misuse", "graph op"),
    ("one_hot_numpy_name", "ids = np.array([0, 2, 1])\ny = C.one_hot(ids, num_classes=3)\n", "misuse", "np.eye"),
    ("one_hot_list", "y = C.one_hot([0, 2, 1], 3)\n", "misuse", "graph op"),
    ("communicator_as_progress_writer", "C.Trainer(model, (loss, err), [learner], learner.communicator())\n",
     "misuse", "progress_writers is given a Communicator"),
    ("is_main_on_class", "C.Communicator.is_main()\n", "signature", "is an instance method"),
    ("communicator_constructed", "comm = C.Communicator()\n", "abstract", "cannot be constructed"),
    ("rank_with_argument", "C.Communicator.rank(0)\n", "signature", "takes at most 0 positional"),
    ("property_called", "t = C.Trainer(model, (loss, err), [learner])\nt.previous_minibatch_loss_average()\n",
     "not-callable", "is a property"),
    ("parameters_called", "C.sgd(model.parameters(), 0.1)\n", "not-callable", "Function.parameters is a property"),
    ("deprecated_schedule", "C.learning_rate_schedule(0.1, C.UnitType.minibatch)\n", "deprecated",
     "learning_rate_schedule is deprecated"),
    ("deprecated_parameter", "C.sgd(model.parameters, 0.1, use_mean_gradient=True)\n", "deprecated",
     "parameter 'use_mean_gradient' is deprecated"),
    ("no_such_module", "import cntk.distributed\n", "missing", "no module cntk.distributed"),
    ("no_such_import", "from cntk.train.distributed import init\n", "missing", "has no attribute 'init'"),
    ("reader_keyword_typo", "C.io.MinibatchSource(C.io.CTFDeserializer('f', C.io.StreamDefs()), randomise=False)\n",
     "signature", "did you mean 'randomize'?"),
    ("old_reader_keyword", "C.io.MinibatchSource(C.io.CTFDeserializer('f', C.io.StreamDefs()), epoch_size=10)\n",
     "signature", "unexpected keyword argument 'epoch_size'"),
    ("old_module", "C.learner.sgd(model.parameters, 0.1)\n", "missing", "module cntk has no attribute 'learner'"),
    ("walrus", "if (n := C.Communicator.rank()):\n    pass\n", "python3.6", "not valid Python 3.6"),
    ("fstring_debug", "print(f'{loss=}')\n", "python3.6", "not valid Python 3.6"),
    ("builtin_generic", "ranks: list[int] = [C.Communicator.rank()]\n", "python3.6", "list[...]"),
    ("dataclasses", "from dataclasses import dataclass\n", "python3.6", "dataclasses needs Python 3.7"),
]


@pytest.mark.parametrize("name,snippet,kind,text", BAD, ids=[b[0] for b in BAD])
def test_check_catches(api, tmp_path, name, snippet, kind, text):
    report = check_snippet(api, tmp_path, PRELUDE + snippet, name=name + ".py")
    assert not report.ok
    found = [p for p in report.problems if p.kind == kind and text in p.message]
    assert found, "expected a {} problem with {!r}; got:\n{}".format(kind, text, check.format_report(report))
    prelude_lines = PRELUDE.count("\n")
    assert all(p.line > prelude_lines for p in report.problems), check.format_report(report)


def test_correct_snippet_passes(api, tmp_path):
    """No false alarms on correct use of the same API, reached several ways."""
    report = check_snippet(api, tmp_path, PRELUDE + textwrap.dedent("""\
        from cntk.train.distributed import Communicator
        from cntk.io import MinibatchSource, CTFDeserializer, StreamDef, StreamDefs
        import cntk.train.distributed as dist

        def make_trainer(cntk_module, learner):
            printer = cntk_module.logging.ProgressPrinter(freq=10, rank=cntk_module.Communicator.rank())
            return cntk_module.Trainer(model, (loss, err), [learner], [printer])

        comm = learner.communicator()
        if comm.is_main():
            print(Communicator.rank(), C.distributed.Communicator.num_workers(), dist.Communicator.num_workers())
        trainer = make_trainer(C, learner)
        source = MinibatchSource(CTFDeserializer("shard.ctf", StreamDefs(
            features=StreamDef(field="features", shape=4), labels=StreamDef(field="labels", shape=3))),
            randomize=False, max_sweeps=1)
        mb = source.next_minibatch(16, input_map={features: source.streams.features, labels: source.streams.labels})
        trainer.train_minibatch(mb)
        print(trainer.previous_minibatch_loss_average, trainer.total_number_of_samples_seen)
        trainer.save_checkpoint("ckpt", {"step": 1})
        state = trainer.restore_from_checkpoint("ckpt")
        dense = C.Value.one_hot([[0], [2]], 3)
        bm = C.block_momentum_distributed_learner(C.sgd(model.parameters, 0.1), block_size=1024)
        q = C.data_parallel_distributed_learner(C.sgd(model.parameters, 0.1), num_quantization_bits=1)
        model.save("model.cntk")
        C.Communicator.finalize()
        """))
    assert report.ok, check.format_report(report)
    assert report.called("cntk.train.trainer.Trainer.train_minibatch")
    assert report.called("cntk.train.distributed.Communicator.is_main")


# -- the command line and the download step ----------------------------------


def test_cli_reports_and_exits_non_zero_on_mismatch(wheel, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import cntk as C\nC.Communicator.init()\n")
    proc = subprocess.run([sys.executable, str(TOOL), str(bad), "--wheel", str(wheel)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)
    assert proc.returncode == 1, proc.stdout
    assert "has no attribute 'init'" in proc.stdout
    assert "FAIL" in proc.stdout


def test_cli_default_target_is_the_backend(wheel):
    proc = subprocess.run([sys.executable, str(TOOL), "--wheel", str(wheel), "--json"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    (report,) = result["reports"]
    assert Path(report["file"]) == BACKEND
    assert report["ok"] and report["problems"] == []
    assert report["wheel"]["sha256"] == check.pinned_entry(wheel.name)["sha256"]


def test_download_failure_without_network_is_reported_as_such(tmp_path):
    fake_pip = [sys.executable, "-c", "print('ERROR: NewConnectionError: Network is unreachable'); raise SystemExit(1)"]
    with pytest.raises(check.WheelUnavailable) as caught:
        check.ensure_wheel(tmp_path, pip=fake_pip)
    assert caught.value.network


def test_download_failure_of_another_kind_is_not_a_network_problem(tmp_path):
    fake_pip = [sys.executable, "-c", "print('ERROR: Could not find a version that satisfies the requirement "
                "cntk==2.7.post2 (from versions: 2.0, 2.1)'); raise SystemExit(1)"]
    with pytest.raises(check.WheelUnavailable) as caught:
        check.ensure_wheel(tmp_path, pip=fake_pip)
    assert not caught.value.network


def test_download_with_a_wrong_checksum_is_refused(tmp_path):
    entry = check.PINNED_WHEELS[0]
    fake_pip = [sys.executable, "-c", (
        "import sys, pathlib; d = sys.argv[sys.argv.index('-d') + 1]; "
        "pathlib.Path(d, {!r}).write_bytes(b'not a wheel')").format(entry["filename"])]
    with pytest.raises(check.WheelUnavailable) as caught:
        check.ensure_wheel(tmp_path, pip=fake_pip)
    assert "sha256" in str(caught.value)
    assert not (tmp_path / entry["filename"]).exists()
