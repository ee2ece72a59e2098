"""What the node's health check (roles/slurm/files/node_health.py) believes: root's record from the data step and
Slurm's own state, never what the training user wrote; and nothing that user wrote reaches a drain reason."""

import json
import pathlib
import subprocess
import sys

import pytest
import yaml

import source_modules

ROOT = pathlib.Path(__file__).resolve().parents[3]
health = source_modules.load(ROOT / "roles/slurm/files/node_health.py", "cntk_node_health_trust")

FORGED = "x State=IDLE \x1b]0;owned\x07\x1b[2J Reason=none"


@pytest.fixture
def node(tmp_path, monkeypatch):
    """main() with its config and root's record in tmp_path; sinfo's answers and scontrol's updates recorded;
    the data check run in this process (data_as's own run as another user: test_node_health.py)."""
    config = {"node": "node3", "data_dir": str(tmp_path / "data"), "interface": "fab0", "address": "10.42.0.13",
              "user": "cntk", "python": "", "modules": [], "gpus": 0}
    (tmp_path / "health.json").write_text(json.dumps(config))
    (tmp_path / "data").mkdir()
    monkeypatch.setattr(health, "CONFIG", str(tmp_path / "health.json"))
    monkeypatch.setattr(health, "RECORD", str(tmp_path / "data-record.json"))
    calls = {"updates": [], "sinfo": "idle|none\n", "data": tmp_path / "data", "config": config}
    ip = json.dumps([{"ifname": "fab0", "flags": ["UP", "LOWER_UP"], "operstate": "UP",
                      "addr_info": [{"family": "inet", "local": "10.42.0.13"}]}])

    def output_or_none(argv):
        if argv[0] == "ip":
            return ip
        if argv[0] == "sinfo":
            return calls["sinfo"]
        raise AssertionError(argv)

    monkeypatch.setattr(health, "output_or_none", output_or_none)
    monkeypatch.setattr(health, "data_as", lambda user, data_dir, files: (health.check_data(data_dir, files), ""))
    monkeypatch.setattr(health, "scontrol_update", lambda n, **fields: calls["updates"].append((n, fields)))
    return calls


def test_a_manifest_the_training_user_wrote_drains_nothing(node):
    """The user's manifest.json lists a shard of 1 EiB named to forge a reason: it is not root's evidence."""
    (node["data"] / "manifest.json").write_text(json.dumps({"shards": [{"shard": FORGED, "bytes": 1 << 60}]}))
    assert health.main([]) == 0
    assert node["updates"] == []


def test_no_word_of_the_training_user_reaches_the_drain_reason(node, monkeypatch, capsys):
    """The backend import runs as the training user, whose site-packages can make it fail with any words: the
    reason names the Python, the modules and the exit status; the words go to the output, printable."""
    node["config"].update(python=sys.executable, modules=["cntk"])
    pathlib.Path(health.CONFIG).write_text(json.dumps(node["config"]))
    monkeypatch.setattr(health, "import_as", lambda user, python, modules: subprocess.CompletedProcess(
        [], 1, "", "Traceback\nImportError: " + FORGED + "\n"))
    assert health.main([]) == 1
    [(_, fields)] = node["updates"]
    assert fields["Reason"] == f"cntk-health: backend: {sys.executable} cannot import cntk (exit status 1)"
    out = capsys.readouterr().out
    assert "ImportError: x State=IDLE" in out and "\x1b" not in out and "\x07" not in out


def test_a_reason_saying_state_idle_does_not_hide_our_drain(node):
    """sinfo's state comes first and is a Slurm word: a reason holding State=IDLE is the reason, and the
    node this check drained is resumed once healthy."""
    node["sinfo"] = "drained|cntk-health: data: x State=IDLE|y\n"
    assert health.main([]) == 0
    assert node["updates"] == [("node3", {"State": "RESUME"})]


@pytest.mark.parametrize("text, expected", [
    ("idle|none\n", ("idle", "none")),
    ("drained|cntk-health: fabric: no interface fab0\ndrained|cntk-health: fabric: no interface fab0\n",
     ("drained", "cntk-health: fabric: no interface fab0")),
    ("draining*|a|b State=IDLE\n", ("draining*", "a|b State=IDLE")),
    ("mixed+drain|x\n", ("mixed+drain", "x")),
    ("NodeName=node3 State=IDLE Reason=x\n", (None, "")),
    ("State=IDLE|x\n", (None, "")),
    ("", (None, "")),
    (None, (None, "")),
])
def test_sinfos_line_is_read_state_first(text, expected):
    assert health.parse_sinfo(text) == expected


def test_drain_states():
    assert all(health.drained(state) for state in ("drained", "draining", "drained*", "mixed+drain"))
    assert not any(health.drained(state) for state in ("idle", "allocated", "mixed", "down*", None))


@pytest.mark.parametrize("text", ['{"present": "1 State=IDLE", "missing": 0, "denied": 0, "free": 1}',
                                  '{"present": -1, "missing": 0, "denied": 0, "free": 1}',
                                  '{"present": true, "missing": 0, "denied": 0, "free": 1}',
                                  '{"problem": "data: anything", "files": {}}', "not json", "[1, 2]"])
def test_the_answer_of_the_check_run_as_the_training_user_must_be_numbers(text):
    assert health.numbers(text) is None


def test_numbers_are_read():
    assert health.numbers('{"present": 1, "missing": 2, "denied": 0, "free": null}') == {
        "present": 1, "missing": 2, "denied": 0, "free": None}


def test_root_record_ignores_what_it_cannot_read(tmp_path, monkeypatch):
    monkeypatch.setattr(health, "RECORD", str(tmp_path / "record.json"))
    (tmp_path / "record.json").write_text(json.dumps({"/d": {"a": 10, "b": "x"}}))
    assert health.load_record("/d") == {}
    (tmp_path / "record.json").write_text(json.dumps({"/d": {"a": 10}, "/e": {"b": 1}}))
    assert health.load_record("/d") == {"a": 10} and health.load_record("/f") == {}


def test_the_data_step_writes_the_record_the_check_reads():
    """roles/dataset records, as root, what it sent to a node, where node_health.py reads it."""
    tasks = yaml.safe_load((ROOT / "roles/dataset/tasks/node-Linux.yml").read_text())
    record = next(task["ansible.builtin.copy"] for task in tasks if "ansible.builtin.copy" in task
                  and task["ansible.builtin.copy"]["dest"] == health.RECORD)
    assert record["owner"] == "root" and record["mode"] == "0644"
    assert "cluster_dataset_dir" in record["content"] and "'bytes'" in record["content"]
