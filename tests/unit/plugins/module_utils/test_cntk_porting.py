"""plugins/module_utils/cntk_porting.py: walk-through lines that CNTK 2.7 does not run as written."""

import time
from pathlib import Path

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import cntk_porting as cp

ROOT = Path(__file__).resolve().parents[4]

# As the common walk-throughs write a distributed CNTK script.
WALKTHROUGH = '''\
import numpy as np
import cntk as C
from cntk.learners import learning_rate_schedule, UnitType

C.distributed.Communicator.init()
rank = C.distributed.Communicator.rank()

features = C.input_variable(64)
labels = C.input_variable(10)
model = C.layers.Dense(10)(features)
loss = C.cross_entropy_with_softmax(model, labels)
lr = learning_rate_schedule(0.1, UnitType.minibatch)
learner = C.data_parallel_distributed_learner(C.sgd(model.parameters, lr))
trainer = C.Trainer(model, (loss, loss), [learner], C.distributed.Communicator())

raw = np.loadtxt("labels.txt").astype(int)
y = C.one_hot(raw, 10)
graph_labels = C.one_hot(labels, 10)
C.distributed.Communicator.finalize()
'''


def kinds(findings):
    return [(finding.line, finding.kind) for finding in findings]


def test_the_walkthrough_script():
    findings = cp.check_source(WALKTHROUGH, "train.py")
    assert kinds(findings) == [(5, "refuse"), (12, "warn"), (14, "refuse"), (17, "warn")]
    init, schedule, writer, one_hot = findings
    assert init.text().startswith("train.py:5: `C.distributed.Communicator.init()` CNTK 2.7 has no "
                                  "Communicator.init()")
    assert "has no attribute 'init'" in init.text() and "delete the line" in init.instead
    assert schedule.instead.startswith("C.learning_parameter_schedule(0.1)")
    assert "fourth argument is progress writers" in writer.why
    assert "C.logging.ProgressPrinter" in writer.instead and "[distributed_learner]" in writer.instead
    assert "np.eye(num_classes, dtype=np.float32)[labels]" in one_hot.instead
    assert cp.refusals(findings) == [init.text(), writer.text()]
    assert cp.warnings(findings) == [schedule.text(), one_hot.text()]


def test_other_ways_to_name_the_same_things():
    script = '''\
from cntk import *
from cntk.train.distributed import Communicator as Comm
import cntk.learners as L
import cntk

Communicator.init()
Comm()
lr = L.learning_rate_schedule([0.1, 0.01], unit=L.UnitType.sample, epoch_size=1000)
labels = one_hot([1, 2, 3], 10)
Alias = cntk.train.distributed.Communicator
Alias.init()
'''
    findings = cp.check_source(script, "job/run.py")
    assert kinds(findings) == [(6, "refuse"), (7, "refuse"), (8, "warn"), (9, "warn"), (11, "refuse")]
    assert "C.learning_parameter_schedule_per_sample([0.1, 0.01], epoch_size=1000)" in findings[2].instead
    assert "static C.Communicator.rank()" in findings[1].instead


def test_guarded_calls_are_warned_not_refused():
    script = '''\
import cntk as C
try:
    C.distributed.Communicator.init()
except AttributeError:
    pass
if hasattr(C.Communicator, "init"):
    C.Communicator.init()
try:
    C.Communicator.init()
except ValueError:
    pass
'''
    assert kinds(cp.check_source(script)) == [(3, "warn"), (7, "warn"), (9, "refuse")]


def test_correct_scripts_and_other_code_pass():
    correct = '''\
import numpy as np
import cntk as C
rank = C.Communicator.rank()
learner = C.data_parallel_distributed_learner(C.sgd([], lr=C.learning_parameter_schedule(0.1)))
communicator = learner.communicator()
trainer = C.Trainer(None, (None, None), [learner], [C.logging.ProgressPrinter(rank=rank)] if rank == 0 else [])
y = np.eye(10, dtype=np.float32)[np.array([1, 2])]
onehot = C.one_hot(C.input_variable(1), 10)
C.Communicator.finalize()
'''
    assert cp.check_source(correct) == []
    # Names like these outside cntk are not CNTK's.
    other = "from mylib import Communicator, one_hot\nCommunicator.init()\nCommunicator()\none_hot(1, 2)\n"
    assert cp.check_source(other + "# cntk\n") == []
    assert cp.check_source("import os\nos.getcwd()\n") == []


def test_the_projects_own_jobs_pass():
    for folder in ("training", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found = cp.check_source(path.read_text(), str(path.relative_to(ROOT)))
            assert found == [], found


def test_a_script_that_does_not_parse_is_noted_not_refused():
    findings = cp.check_source("import cntk as C\nprint 'hello'\nC.Communicator.init()\n", "old.py")
    assert kinds(findings) == [(2, "note")]
    assert "not checked" in findings[0].text() and cp.refusals(findings) == []


def test_check_files_reads_the_py_files_as_sent(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "main.py").write_text("import cntk as C\nC.Communicator.init()\n")
    (tmp_path / "pkg" / "helper.py").write_text("import cntk\nx = cntk.one_hot([0], 2)\n")
    (tmp_path / "notes.txt").write_text("C.Communicator.init()\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "main.py")
    findings = cp.check_files(str(tmp_path), ["link.py", "main.py", "notes.txt", "pkg/helper.py", "gone.py"])
    assert [(f.path, f.line, f.kind) for f in findings] == [("main.py", 2, "refuse"), ("pkg/helper.py", 2, "warn")]


def test_linear_in_the_scripts_size():
    def seconds(repeats):
        body = "import cntk as C\n" + "x = C.one_hot(raw, 10)\nC.Communicator.rank()\n" * repeats
        best = None
        for _ in range(3):  # the best of three: the machine may be busy
            started = time.perf_counter()
            assert len(cp.check_source(body)) == repeats
            elapsed = time.perf_counter() - started
            best = elapsed if best is None else min(best, elapsed)
        return best
    # Four times the lines: about four times the time (a quadratic check would take sixteen).
    assert seconds(4000) < 9 * seconds(1000)


@pytest.mark.parametrize("text", ["", "cntk", "import cntk\n", "\x00cntk"])
def test_odd_input_never_raises(text):
    assert all(isinstance(f, cp.Finding) for f in cp.check_source(text))
