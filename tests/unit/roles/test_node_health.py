"""The node's own health check (roles/slurm/files/node_health.py, slurmd's HealthCheckProgram): each check on real
files and real command output, and when it drains and resumes a node."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest
from prerequisites import require

import source_modules

ROOT = pathlib.Path(__file__).resolve().parents[3]
health = source_modules.load(ROOT / "roles/slurm/files/node_health.py", "cntk_node_health")


def lay_out(data_dir, shards):
    """The shards and the training user's manifest.json, as the data step leaves them; root's record of them
    ({name: bytes}) returned."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, size in shards.items():
        (data_dir / name).write_bytes(b"x" * size)
    (data_dir / "manifest.json").write_text(json.dumps(
        {"shards": [{"shard": name, "rank": i, "bytes": size} for i, (name, size) in enumerate(shards.items())]}))
    return dict(shards)


def test_data_passes_when_the_recorded_shards_are_there(tmp_path):
    record = lay_out(tmp_path / "d", {"shard-00000.ctf": 100, "shard-00001.ctf": 50})
    assert health.check_data(str(tmp_path / "d"), record) is None


def test_data_fails_when_the_folder_cannot_hold_what_the_record_says(tmp_path, monkeypatch):
    """A small disk mounted over the data folder: root's record says what the node must hold."""
    (tmp_path / "d").mkdir()
    monkeypatch.setattr(health.shutil, "disk_usage", lambda path: type("U", (), {"free": 64 << 10})())
    problem = health.check_data(str(tmp_path / "d"), {"shard-00000.ctf": 3 << 20})
    assert problem.startswith("data: ") and "64.0 KiB free" in problem and "3.0 MiB" in problem
    assert "1 missing" in problem


def test_data_counts_the_bytes_already_there(tmp_path, monkeypatch):
    record = lay_out(tmp_path / "d", {"shard-00000.ctf": 1000})
    monkeypatch.setattr(health.shutil, "disk_usage", lambda path: type("U", (), {"free": 10})())
    assert health.check_data(str(tmp_path / "d"), record) is None
    (tmp_path / "d" / "shard-00000.ctf").write_bytes(b"x" * 100)
    assert "900 B short" in health.check_data(str(tmp_path / "d"), record)


def test_data_passes_before_any_data_step(tmp_path, monkeypatch):
    monkeypatch.setattr(health, "RECORD", str(tmp_path / "no-record.json"))
    assert health.load_record(str(tmp_path / "d")) == {}
    assert health.check_data(str(tmp_path / "none"), {}) is None


def test_the_data_check_runs_as_the_training_user_and_sees_what_that_user_sees(monkeypatch):
    """data_as: this program again through runuser as `nobody`; a folder nobody may enter is named, never read
    by root."""
    require(os.geteuid() == 0 and shutil.which("runuser") is not None and os.path.exists("/usr/bin/python3"),
            "runuser as another user needs root, and the system's Python")
    # On a node the program runs under /usr/bin/python3 (its #! line); this venv's may be under root's home.
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")
    top = pathlib.Path(tempfile.mkdtemp(prefix="node-health-"))
    try:
        top.chmod(0o755)
        lay_out(top / "open", {"shard-00000.ctf": 10})
        (top / "open").chmod(0o755)
        for path in (top / "open").iterdir():
            path.chmod(0o644)
        assert health.data_as("nobody", str(top / "open"), {"shard-00000.ctf": 10}) == (None, "")
        assert "1 missing" in health.data_as("nobody", str(top / "open"), {"shard-00000.ctf": 10, "x": 1 << 60})[0]
        lay_out(top / "closed", {"shard-00000.ctf": 10})
        (top / "closed").chmod(0o700)
        problem, _ = health.data_as("nobody", str(top / "closed"), {"shard-00000.ctf": 10})
        assert problem.startswith("data: ") and "closed" in problem and "cannot be reached" in problem, problem
    finally:
        shutil.rmtree(top)


def ip_json(flags=("BROADCAST", "UP", "LOWER_UP"), state="UP", addresses=("10.42.0.11",)):
    return json.dumps([{"ifname": "fab0", "flags": list(flags), "operstate": state,
                        "addr_info": [{"family": "inet", "local": a} for a in addresses]}])


def test_fabric_needs_the_interface_up_and_holding_the_nodes_address():
    assert health.check_fabric("fab0", "10.42.0.11", ip_json()) is None
    assert "no interface fab0" in health.check_fabric("fab0", "10.42.0.11", None)
    assert "fab0 is down" in health.check_fabric("fab0", "10.42.0.11", ip_json(flags=("BROADCAST",), state="DOWN"))
    assert "not this node's cluster_address 10.42.0.11" in health.check_fabric(
        "fab0", "10.42.0.11", ip_json(addresses=("10.42.0.99",)))


def test_fabric_reads_this_machines_own_loopback():
    out = subprocess.run(["ip", "-j", "addr", "show", "dev", "lo"], capture_output=True, text=True)
    require(out.returncode == 0, "no ip -j here (Debian: iproute2)")
    assert health.check_fabric("lo", "127.0.0.1", out.stdout) is None


def test_backend_names_the_python_and_the_import_error():
    ok = subprocess.run([sys.executable, "-c", "import json"], capture_output=True, text=True)
    bad = subprocess.run([sys.executable, "-c", "import no_such_backend"], capture_output=True, text=True)
    assert health.check_backend(ok, sys.executable, ["json"]) == (None, "")
    problem, detail = health.check_backend(bad, sys.executable, ["no_such_backend"])
    assert problem == f"backend: {sys.executable} cannot import no_such_backend (exit status 1)"
    # The import's words are the training user's (its site-packages): in the output, not in a drain reason.
    assert "ModuleNotFoundError" in detail


def test_gpus_count_what_nvidia_smi_lists():
    listing = "GPU 0: NVIDIA H100 (UUID: GPU-1)\nGPU 1: NVIDIA H100 (UUID: GPU-2)\n"
    assert health.check_gpus(2, listing) is None
    assert health.check_gpus(0, None) is None
    assert health.check_gpus(4, listing) == "gpus: nvidia-smi lists 2 GPUs, cluster_gpus=4"
    assert health.check_gpus(1, None) == "gpus: nvidia-smi does not run, cluster_gpus=1"


@pytest.fixture
def node(tmp_path, monkeypatch):
    """main() with its config and record in tmp_path, and scontrol's answers and updates recorded."""
    config = {"node": "node3", "data_dir": str(tmp_path / "data"), "interface": "fab0", "address": "10.42.0.13",
              "user": "cntk", "python": "", "modules": [], "gpus": 0}
    (tmp_path / "health.json").write_text(json.dumps(config))
    monkeypatch.setattr(health, "CONFIG", str(tmp_path / "health.json"))
    monkeypatch.setattr(health, "RECORD", str(tmp_path / "state" / "data-record.json"))
    calls = {"updates": [], "state": "idle", "reason": "none", "ip": ip_json(addresses=("10.42.0.13",))}

    def output_or_none(argv):
        if argv[0] == "ip":
            return calls["ip"]
        if argv == ["sinfo", "--noheader", "--Node", "--nodes=node3", "--format=%T|%E"]:
            # One line a partition the node is in.
            return f"{calls['state']}|{calls['reason']}\n" * 2
        raise AssertionError(argv)

    monkeypatch.setattr(health, "output_or_none", output_or_none)
    # As root, without the training user's account (data_as itself: the test above).
    monkeypatch.setattr(health, "data_as", lambda user, data_dir, files: (health.check_data(data_dir, files), ""))
    monkeypatch.setattr(health, "scontrol_update", lambda n, **fields: calls["updates"].append((n, fields)))
    return calls


def test_a_failing_node_is_drained_naming_the_check_and_the_value(node, capsys):
    node["ip"] = ip_json(addresses=("10.42.0.99",))
    assert health.main([]) == 1
    [(name, fields)] = node["updates"]
    assert name == "node3" and fields["State"] == "DRAIN"
    assert fields["Reason"].startswith("cntk-health: fabric: fab0 holds 10.42.0.99")
    assert "node3: fabric:" in capsys.readouterr().out


def test_an_operators_drain_is_kept_and_our_own_is_resumed_once_healthy(node):
    node["state"], node["reason"] = "drained", "replacing the PSU [admin]"
    node["ip"] = None
    assert health.main([]) == 1
    assert node["updates"] == []
    assert health.main([]) == 1
    node["ip"] = ip_json(addresses=("10.42.0.13",))
    assert health.main([]) == 0 and node["updates"] == []
    node["reason"] = "cntk-health: fabric: no interface fab0"
    assert health.main([]) == 0
    assert node["updates"] == [("node3", {"State": "RESUME"})]


def test_the_data_check_measures_against_roots_record(node, tmp_path, monkeypatch):
    record = lay_out(tmp_path / "data", {"shard-00000.ctf": 4096})
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "data-record.json").write_text(json.dumps({str(tmp_path / "data"): record}))
    assert health.main([]) == 0
    for path in (tmp_path / "data").iterdir():
        path.unlink()
    monkeypatch.setattr(health.shutil, "disk_usage", lambda path: type("U", (), {"free": 100})())
    assert health.main([]) == 1
    assert "data: " in node["updates"][-1][1]["Reason"]
