"""plugins/module_utils/job_files.py: the run directory's files, named once and parsed there
(roles/train_job/README.md, "The run directory")."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import source_modules

from ansible_collections.cntk.cluster.plugins.module_utils import job_files

ROOT = Path(__file__).resolve().parents[4]
ROLE = ROOT / "roles" / "train_job"
# training/common.py, the writer on the nodes
common = source_modules.load(ROOT / "training" / "common.py", "training_common")


@pytest.mark.parametrize("text, code", [("", None), (None, None), ("0\n", 0), (" 137 \n", 137)])
def test_exit_code(text, code):
    assert job_files.parse_exit_code(text) == code


@pytest.mark.parametrize("line, record", [
    ('{"step": 5, "loss": 0.5}', {"step": 5, "loss": 0.5}),
    ('{"step": 5, "loss": 0.', None),  # still being written, or cut by a crash
    ('[1, 2]', None),
    ('{"loss": 0.5}', None),
    ('{"step": true}', None),
    ("", None),
])
def test_metrics_line(line, record):
    assert job_files.parse_metrics_line(line) == record


def test_read_metrics_counts_what_is_not_a_record(tmp_path):
    path = tmp_path / job_files.METRICS
    assert job_files.read_metrics(str(path)) == ([], 0, "missing")
    path.write_text('{"step": 1}\n\n{"step": 2}\nnot json\n{"step": 3, "loss"')
    assert job_files.read_metrics(str(path)) == ([{"step": 1}, {"step": 2}], 2, None)
    path.write_text("garbage\n")
    assert job_files.read_metrics(str(path)) == ([], 1, "no readable record")


def test_read_json(tmp_path):
    path = tmp_path / job_files.JOB
    assert job_files.read_json(str(path)) == (None, "missing")
    path.write_text("[1]")
    assert job_files.read_json(str(path)) == (None, "not a JSON object")
    path.write_text(json.dumps({job_files.JOB_RC: 0}))
    assert job_files.read_json(str(path)) == ({"rc": 0}, None)


def test_the_training_code_writes_the_files_named_here():
    assert common.METRICS_FILE == job_files.METRICS
    assert common.SUMMARY_FILE == job_files.SUMMARY
    assert common.MODEL_FILE in job_files.MODELS
    assert re.search(r'^MODEL_NAME = "(.*)"$', (ROOT / "training" / "cntk_backend.py").read_text(),
                     re.M).group(1) in job_files.MODELS


def test_the_windows_rank_wrapper_writes_open_mpis_log_layout(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)\n")
    result = subprocess.run([sys.executable, str(ROLE / "files" / "rank_log.py"), str(script)], cwd=tmp_path,
                            env=dict(os.environ, PMI_RANK="2"), capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    rank_dir = tmp_path / job_files.LOGS_DIR / "1" / "rank.2"
    assert (rank_dir / "stdout").read_text() == "out\n" and (rank_dir / "stderr").read_text() == "err\n"


def test_the_roles_tasks_and_templates_spell_no_file_name_of_their_own():
    """They take every name from the filter train_job_run_files (train_job_files.<name>)."""
    names = [job_files.EXIT_CODE, job_files.HEARTBEAT, job_files.STOP_REASON, job_files.MPIRUN_PID,
             job_files.METRICS, job_files.SUMMARY, job_files.REPORT] + list(job_files.LAUNCHER_LOG.values())
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(name) for name in names) + r")(?![\w.])")
    spelled = [f"{path.relative_to(ROOT)}: {line.strip()}"
               for path in sorted((ROLE / "tasks").glob("*.yml")) + sorted((ROLE / "templates").glob("*.j2"))
               for line in path.read_text().splitlines() if pattern.search(line)]
    assert not spelled, spelled
