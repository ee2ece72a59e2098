"""The CTF check at real sizes with hostile shapes (issue 44, fault 1): demo-shaped lines of 64 and 1,024 values
with a misspelled stream on line 700 or the last line, one 1 MB line among short ones, a file of bad lines only.
Each check runs in a child process under a bound this test sets: a check that backtracks over a line's values
(2.3x more time per value) never ends on these files, so it fails here instead of hanging the suite. Both of the
module's paths run: the one-regex check (Python 3.11+) and the line-by-line one older Pythons take."""

import os
import subprocess
import sys

import pytest

from dataset_helpers import hostile_ctf_files

BOUND_S = 60  # the whole check of one file, child start included; the linear check needs well under 2 s here

CHILD = """
import sys
from ansible_collections.cntk.cluster.plugins.module_utils import dataset_ctf, dataset_io
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import ShardError
if sys.argv[2] == "line-by-line":
    dataset_ctf.CTF_BLOCK = None  # as on a Python without possessive quantifiers
try:
    print(dataset_io.scan([sys.argv[1]])[2][0])
except ShardError as exc:
    print("refused:", exc)
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return hostile_ctf_files(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("path", ["one-regex", "line-by-line"])
@pytest.mark.parametrize("name", ["clean", "wide_clean", "bad_name_line_700", "bad_name_last_line", "wide_bad_name_line_700",
                                  "wide_bad_name_last_line", "one_1mb_line", "only_bad_lines"])
def test_the_check_ends_within_its_bound_naming_the_bad_line(files, name, path):
    source, bad_line = files[name]
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(source), path], capture_output=True, text=True,
                              timeout=BOUND_S, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the CTF check of {name} ({source.stat().st_size} bytes) ran past {BOUND_S} s")
    assert done.returncode == 0, done.stderr
    if not bad_line:
        assert done.stdout.strip() == "1000"
        return
    assert done.stdout.startswith(f"refused: {source}:{bad_line}: "), done.stdout
    if name == "one_1mb_line":
        assert "stream |features has 149796 values where the file's first line has 64" in done.stdout
    elif name == "only_bad_lines":
        assert "value '1;' of |labels is neither a number nor a sparse index:value" in done.stdout
    else:
        assert "stream |lables is not in the file's first line (|features, |labels)" in done.stdout
