"""The artifact_cache role run for real on the controller (two hosts with a local connection).

Downloads come from file:// URLs in a temporary folder, so the real get_url,
sha256 and copy paths run without a network."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]

PLAYBOOK = """
- name: Fetch the artifacts once, then push each node's copy
  hosts: nodes
  gather_facts: false
  tasks:
    - name: Fetch
      ansible.builtin.include_role:
        name: artifact_cache
    - name: Push
      ansible.builtin.include_role:
        name: artifact_cache
        tasks_from: push
"""


@pytest.fixture
def world(tmp_path):
    source = tmp_path / "upstream"
    source.mkdir()
    files = {}
    for name, content in {"a.tar.gz": b"alpha" * 1000, "b.whl": b"bravo" * 1000}.items():
        (source / name).write_bytes(content)
        files[name] = hashlib.sha256(content).hexdigest()
    return tmp_path, source, files


def item(source, name, sha256):
    return {"name": name.split(".")[0], "version": "1", "file": name, "dest": name,
            "url": (source / name).as_uri(), "sha256": sha256}


def run(tmp_path, items, extra=None):
    hosts = {host: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "artifact_cache_node_dir": str(tmp_path / host)}
             for host in ("node1", "node2")}
    variables = {"artifact_cache_dir": str(tmp_path / "cache"), "artifact_cache_items": items, **(extra or {})}
    inventory = {"all": {"children": {"nodes": {"hosts": hosts}}, "vars": variables}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(tmp_path / "hosts.yml"),
         str(tmp_path / "play.yml")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)


def changed(result):
    recap = result.stdout.split("PLAY RECAP")[1]
    return sum(int(part.split("=")[1]) for part in recap.split() if part.startswith("changed="))


def test_downloads_once_copies_to_every_node_and_reruns_unchanged(world):
    tmp_path, source, sha = world
    items = [item(source, name, sha[name]) for name in sha]
    first = run(tmp_path, items)
    assert first.returncode == 0, first.stdout
    # One download per file for the whole play, not one per node.
    download = first.stdout.split("TASK [artifact_cache : Download")[1].split("TASK [")[0]
    assert download.count("(item=a.tar.gz)") == 1, download
    for host in ("node1", "node2"):
        for name, digest in sha.items():
            assert hashlib.sha256((tmp_path / host / name).read_bytes()).hexdigest() == digest
    second = run(tmp_path, items)
    assert second.returncode == 0, second.stdout
    assert changed(second) == 0, second.stdout


def test_a_changed_upstream_file_is_refused(world):
    tmp_path, source, sha = world
    (source / "a.tar.gz").write_bytes(b"tampered")
    result = run(tmp_path, [item(source, "a.tar.gz", sha["a.tar.gz"])])
    assert result.returncode != 0
    assert "checksum" in result.stdout.lower()
    assert not (tmp_path / "cache" / "a.tar.gz").exists()
    assert not (tmp_path / "node1").exists()


def test_offline_names_the_missing_file_and_changes_nothing(world):
    tmp_path, source, sha = world
    result = run(tmp_path, [item(source, "b.whl", sha["b.whl"])], {"artifact_cache_offline": True})
    assert result.returncode != 0
    assert "Offline mode (cluster_offline: true)" in result.stdout
    assert f"b.whl (from {(source / 'b.whl').as_uri()}" in result.stdout
    assert "make artifacts" in result.stdout
    assert not (tmp_path / "node1").exists()


def test_offline_installs_from_a_folder_filled_elsewhere(world):
    tmp_path, source, sha = world
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "b.whl").write_bytes((source / "b.whl").read_bytes())
    (source / "b.whl").unlink()  # the upstream is out of reach
    result = run(tmp_path, [item(source, "b.whl", sha["b.whl"])], {"artifact_cache_offline": True})
    assert result.returncode == 0, result.stdout
    assert (tmp_path / "node2" / "b.whl").read_bytes() == (tmp_path / "cache" / "b.whl").read_bytes()


def test_offline_refuses_a_damaged_copy(world):
    tmp_path, source, sha = world
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "b.whl").write_bytes(b"truncated")
    result = run(tmp_path, [item(source, "b.whl", sha["b.whl"])], {"artifact_cache_offline": True})
    assert result.returncode != 0
    assert f"sha256 {sha['b.whl']}" in result.stdout


def test_a_file_without_sha256_is_refused_until_the_user_pins_one(world):
    tmp_path, source, sha = world
    items = [item(source, "a.tar.gz", None)]
    refused = run(tmp_path, items)
    assert refused.returncode != 0
    assert "have no published sha256" in refused.stdout
    assert "cluster_artifact_sha256" in refused.stdout
    assert not (tmp_path / "cache" / "a.tar.gz").exists()
    pinned = run(tmp_path, items, {"artifact_cache_sha256": {"a.tar.gz": sha["a.tar.gz"]}})
    assert pinned.returncode == 0, pinned.stdout
    assert (tmp_path / "node1" / "a.tar.gz").exists()


def test_a_file_with_no_public_url_must_be_put_there_by_hand(world):
    tmp_path, source, sha = world
    items = [dict(item(source, "b.whl", sha["b.whl"]), url=None)]
    refused = run(tmp_path, items)
    assert refused.returncode != 0
    assert "b.whl cannot be downloaded (no public URL" in refused.stdout
    (tmp_path / "cache").mkdir(exist_ok=True)
    (tmp_path / "cache" / "b.whl").write_bytes((source / "b.whl").read_bytes())
    placed = run(tmp_path, items)
    assert placed.returncode == 0, placed.stdout
