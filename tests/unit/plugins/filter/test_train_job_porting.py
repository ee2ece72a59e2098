"""plugins/filter/train_job.py: the job's script checked for walk-through lines before launch
(train_job_input_problems refuses the two that always fail; train_job_script_warnings names the rest)."""

from pathlib import Path

from ansible_collections.cntk.cluster.plugins.filter import train_job as tj

ROOT = Path(__file__).resolve().parents[4]

SCRIPT = """\
import numpy as np
import cntk as C

C.distributed.Communicator.init()
features = C.input_variable(64)
lr = C.learning_rate_schedule(0.1, C.UnitType.minibatch)
trainer = C.Trainer(model, (loss, metric), [learner], C.distributed.Communicator())
labels = C.one_hot(np.array([1, 2]), 10)
"""


def spec(source, **changes):
    document = {"source": str(source), "shared": False, "entry": "distributed_train.py", "args": [],
                "exclude": [".git", "__pycache__", "*.pyc"]}
    document.update(changes)
    return document


def job(tmp_path, text=SCRIPT):
    source = tmp_path / "job"
    (source / ".git").mkdir(parents=True)
    (source / "distributed_train.py").write_text(text)
    (source / ".git" / "copy.py").write_text(text)  # not sent, not checked
    return source


def test_lines_that_always_fail_are_refused_before_launch(tmp_path):
    found = tj.train_job_input_problems(spec(job(tmp_path)))
    assert len(found) == 2, found
    assert found[0].startswith("distributed_train.py:4: `C.distributed.Communicator.init()`")
    assert "delete the line" in found[0]
    assert found[1].startswith("distributed_train.py:7:") and "progress writers" in found[1]


def test_lines_that_run_are_warned_with_what_to_write(tmp_path):
    warned = tj.train_job_script_warnings(spec(job(tmp_path)))
    assert [text.split(":")[1] for text in warned] == ["6", "8"]
    assert "C.learning_parameter_schedule(0.1)" in warned[0]
    assert "np.eye(num_classes, dtype=np.float32)[labels]" in warned[1]


def test_a_corrected_script_and_the_demo_job_pass(tmp_path):
    corrected = SCRIPT.replace("C.distributed.Communicator.init()\n", "").replace(
        "C.distributed.Communicator()", "[C.logging.ProgressPrinter(freq=10)]").replace(
        "C.learning_rate_schedule(0.1, C.UnitType.minibatch)", "C.learning_parameter_schedule(0.1)").replace(
        "C.one_hot(np.array([1, 2]), 10)", "np.eye(10, dtype=np.float32)[np.array([1, 2])]")
    source = job(tmp_path, corrected)
    assert tj.train_job_input_problems(spec(source)) == []
    assert tj.train_job_script_warnings(spec(source)) == []
    demo = spec(ROOT / "training", entry="train.py")
    assert tj.train_job_input_problems(demo) == [] and tj.train_job_script_warnings(demo) == []


def test_unparsable_or_shared_scripts_are_not_refused(tmp_path):
    source = job(tmp_path, "import cntk as C\nprint 'python 2'\nC.Communicator.init()\n")
    assert tj.train_job_input_problems(spec(source)) == []
    assert "not checked" in tj.train_job_script_warnings(spec(source))[0]
    shared = spec("/mnt/shared/job", shared=True)
    assert tj.train_job_input_problems(shared) == []
    assert "not checked" in tj.train_job_script_warnings(shared)[0]
