"""The source_build role run for real on the controller (local connection),
on a tiny autoconf-style project that stands in for Open MPI: its configure
writes the prefix for its Makefile, its build appends to a log so that every
compile is counted. Shared by tests/unit/roles/test_source_build_role.py and
tests/security/test_build_folder.py."""

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

PLAYBOOK = """
- name: Build or install hello from source
  hosts: nodes
  gather_facts: true
  tasks:
    - name: Build or install hello
      ansible.builtin.include_role:
        name: source_build
"""

PROJECT = {
    "configure": (0o755, '#!/bin/sh\n'
                         'prefix=/usr/local\n'
                         'for arg in "$@"; do case "$arg" in --prefix=*) prefix="${arg#--prefix=}";; esac; done\n'
                         'echo "PREFIX = $prefix" > config.mk\n'),
    "Makefile": (0o644, 'include config.mk\n'
                        'all:\n'
                        '\tcp hello.in hello\n'
                        '\techo compiled >> "$$BUILD_LOG"\n'
                        'install:\n'
                        '\tmkdir -p $(DESTDIR)$(PREFIX)/bin\n'
                        '\tinstall -m 755 hello $(DESTDIR)$(PREFIX)/bin/hello\n'),
    "hello.in": (0o644, '#!/bin/sh\necho "hello 1.0 $0"\n'),
}


def source_tarball(path):
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for name, (mode, text) in PROJECT.items():
            body = text.encode()
            info = tarfile.TarInfo(f"hello-1.0/{name}")
            info.size, info.mode = len(body), mode
            tar.addfile(info, io.BytesIO(body))
    path.write_bytes(data.getvalue())
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(tmp_path, upstream, sha, extra=None):
    prefix = tmp_path / "opt" / "hello"
    variables = {
        "cluster_artifact_cache_dir": str(tmp_path / "cache"),
        "artifact_cache_dir": str(tmp_path / "cache"),
        "source_build_name": "hello",
        "source_build_version": "1.0",
        "source_build_source": {"name": "hello", "version": "1.0", "file": "hello-1.0.tar.gz",
                                "dest": "hello-1.0.tar.gz", "url": (upstream / "hello-1.0.tar.gz").as_uri(),
                                "sha256": sha},
        "source_build_prefix": str(prefix),
        "source_build_configure_args": ["--enable-greeting"],
        "source_build_environment": {"BUILD_LOG": str(tmp_path / "compiles.log")},
        "source_build_base_packages": [],
        "source_build_ldconfig": False,
        "source_build_check_argv": [str(prefix / "bin" / "hello")],
        "source_build_check_patterns": ["^hello 1\\.0 "],
        "source_build_work_dir": str(tmp_path / "work"),
        # The tiny project builds in a blink: look every second, not every 10.
        "source_build_poll_seconds": 1,
        "source_build_node_dir": str(tmp_path / "node-builds"),
        "source_build_artifact_dir": str(tmp_path / "node-artifacts"),
        **(extra or {}),
    }
    hosts = {"node1": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}
    inventory = {"all": {"children": {"nodes": {"hosts": hosts}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(tmp_path / "hosts.yml"),
         "-e", f"@{tmp_path / 'vars.json'}", str(tmp_path / "play.yml")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def changed(result):
    recap = result.stdout.split("PLAY RECAP")[1]
    return sum(int(part.split("=")[1]) for part in recap.split() if part.startswith("changed="))


def compiles(tmp_path):
    log = tmp_path / "compiles.log"
    return len(log.read_text().splitlines()) if log.exists() else 0
