"""The cntk.cluster.cpython_prebuilt module (plugins/modules): relocation on small synthetic files, its checks on
fake prefixes (a shell script answering as the interpreter would), and pyenv's CPython 3.6.15 packed for
real through `ansible`, unpacked at another prefix and run from there."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
from prerequisites import requires

from ansible_collections.cntk.cluster.plugins.modules import cpython_prebuilt as cp

ROOT = Path(__file__).resolve().parents[4]

OLD = "/old/prefix/3.6.15"


def pyenv_prefix(version):
    root = os.environ.get("PYENV_ROOT")
    if not root and shutil.which("pyenv"):
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
    prefix = Path(root or Path.home() / ".pyenv") / "versions" / version
    return prefix if (prefix / "bin").is_dir() else None


def ansible(tmp_path, check=False, **args):
    """Run the module as a task would (ansible ad hoc, local connection); its result as a dict."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    run = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-m", "cntk.cluster.cpython_prebuilt", "-a", json.dumps(args),
         *(["--check"] if check else [])],
        capture_output=True, text=True, env=env, timeout=300)
    head, body = run.stdout.split(" => ", 1)  # "localhost | CHANGED => {...}"
    return dict(json.loads(body), failed="FAILED" in head)


def fake_prefix(path, version="3.6", full="3.6.15", shared=1, failed=None, prefix=OLD):
    """A tiny prefix whose bin/python<version> prints what the module's probe would."""
    facts = {"version": full.rsplit(".", 1)[0], "full": full, "implementation": "CPython", "prefix": prefix,
             "shared": shared, "ldlibrary": "libpython3.6m.so" if shared else "libpython3.6m.a",
             "failed": failed or {}}
    (path / "bin").mkdir(parents=True)
    (path / "lib").mkdir()
    python = path / "bin" / f"python{version}"
    python.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(facts)}\nEOF\n")
    python.chmod(0o755)
    (path / "bin" / "pip").write_text(f"#!{prefix}/bin/python{version}\nimport pip\n")
    (path / "lib" / "libfake.so").write_bytes(b"\x7fELF\0" + f"{prefix}/lib\0".encode() + b"\x01\x02")
    (path / "bin" / "python3").symlink_to(f"{prefix}/bin/python{version}")
    return path


def params(tmp_path, prefix, **more):
    return {"prefix": str(prefix), "source_prefix": None, "version": "3.6", "target_prefix": "/opt/py",
            "dest_dir": str(tmp_path / "builds"), "name": "python", "platform": "debian-bookworm-x86_64",
            "check_modules": ["ssl"], **more}


class Module:
    check_mode = False

    def warn(self, text):
        self.warning = text


# Relocation of one file or link.

def test_text_files_get_every_prefix_replaced_whole_paths_only():
    data = f"#!{OLD}/bin/python3.6\nLIBDIR='{OLD}/lib' other='{OLD}-debug/lib' x={OLD}.1\n".encode()
    out, count = cp.relocate_text(data, OLD.encode(), b"/a/much/longer/target/prefix")
    assert count == 2
    assert out == (b"#!/a/much/longer/target/prefix/bin/python3.6\nLIBDIR='/a/much/longer/target/prefix/lib' "
                   + f"other='{OLD}-debug/lib' x={OLD}.1\n".encode())


def test_binary_strings_are_rewritten_in_place_keeping_offsets():
    data = b"\x7fELF\x00\x01" + f"{OLD}/lib\0".encode() + b"\x02\x03" + f"-L{OLD}/lib -rpath {OLD}\0".encode() + b"\xff"
    out, count = cp.relocate_binary(data, OLD.encode(), b"/opt/py")
    assert count == 3 and len(out) == len(data)
    # each string ends at a new NUL, the old bytes up to the old NUL stay
    assert out == (b"\x7fELF\x00\x01/opt/py/lib\0" + b"3.6.15/lib\0" + b"\x02\x03"
                   + b"-L/opt/py/lib -rpath /opt/py\0" + f"-L{OLD}/lib -rpath {OLD}"[29:].encode() + b"\0\xff")
    assert cp.relocate(data, OLD.encode(), b"/opt/py") == (out, 3)


def test_binary_strings_keep_tails_that_the_linker_shares():
    # The version "3.6.15" is the tail of the prefix string: a pointer into it must still read "3.6.15".
    data = b"\0" + OLD.encode() + b"\0rest"
    tail = data.index(b"3.6.15")
    out, _ = cp.relocate_binary(data, OLD.encode(), b"/opt/py")
    assert out[1:].split(b"\0")[0] == b"/opt/py" and out[tail:].split(b"\0")[0] == b"3.6.15"


def test_binary_with_the_prefix_refuses_a_longer_target():
    with pytest.raises(ValueError):
        cp.relocate_binary(f"\0{OLD}/lib\0".encode(), OLD.encode(), b"/a/longer/target/prefix/x")
    assert cp.relocate_binary(b"\0nothing\0", OLD.encode(), b"/a/longer/target/prefix/x") == (b"\0nothing\0", 0)


def test_symlinks_under_the_old_prefix_move_others_stay():
    assert cp.relocate_link(f"{OLD}/bin/python3.6", OLD, "/opt/py") == "/opt/py/bin/python3.6"
    assert cp.relocate_link(OLD, OLD, "/opt/py") == "/opt/py"
    assert cp.relocate_link("python3.6", OLD, "/opt/py") == "python3.6"
    assert cp.relocate_link("/usr/lib/libssl.so", OLD, "/opt/py") == "/usr/lib/libssl.so"
    assert cp.relocate_link(f"{OLD}-debug/bin", OLD, "/opt/py") == f"{OLD}-debug/bin"


# Packing a tree.

def test_pack_relocates_and_keeps_modes_links_and_pyc(tmp_path):
    root = fake_prefix(tmp_path / "p")
    (root / "lib" / "libfake.so").chmod(0o555)
    os.link(root / "bin" / "python3.6", root / "bin" / "python3.6m")
    (root / "bin" / "pydoc").symlink_to("pip")
    pyc = b"\x33\x0d\x0d\x0a\0\0\0\0" + f"z\x20{OLD}/lib/os.py".encode()
    (root / "lib" / "os.cpython-36.pyc").write_bytes(pyc)
    with open(tmp_path / "out.tar", "wb") as out:
        rewritten, left = cp.pack(str(root), OLD, "/opt/py", out)
    assert rewritten == 3 and left == []  # bin/pip, bin/python3.6 (its answer), lib/libfake.so; not the .pyc
    with tarfile.open(tmp_path / "out.tar") as tar:
        members = {m.name: m for m in tar.getmembers()}
        read = lambda name: tar.extractfile(members[name]).read()  # noqa: E731
        assert list(members)[:2] == [".", "./bin"] and all(n == "." or n.startswith("./") for n in members)
        assert read("./bin/pip").startswith(b"#!/opt/py/bin/python3.6\n")
        # the string ends at its new NUL; the old bytes after it stay (a tail some pointer may share)
        assert read("./lib/libfake.so") == b"\x7fELF\0/opt/py/lib\0" + b"3.6.15/lib\0\x01\x02"
        assert read("./lib/os.cpython-36.pyc") == pyc
        assert members["./lib/libfake.so"].mode == 0o555 and members["./bin/python3.6"].mode == 0o755
        assert members["./bin/python3"].issym() and members["./bin/python3"].linkname == "/opt/py/bin/python3.6"
        assert members["./bin/pydoc"].linkname == "pip"
        assert members["./bin/python3.6m"].islnk() and members["./bin/python3.6m"].linkname == "./bin/python3.6"


def test_pack_names_the_binary_when_the_target_is_too_long(tmp_path):
    root = fake_prefix(tmp_path / "p")
    with pytest.raises(cp.PrebuiltError, match=r"libfake\.so .*at most 18 characters"):
        cp.pack(str(root), OLD, "/a/much/longer/target/prefix")
    (root / "lib" / "libfake.so").unlink()
    assert cp.pack(str(root), OLD, "/a/much/longer/target/prefix") == (2, [])  # text only: any length


def test_the_id_follows_the_target_and_the_files(tmp_path):
    root = fake_prefix(tmp_path / "p")
    first = cp.prefix_id(str(root), "/opt/py")
    assert re.fullmatch(r"[0-9a-f]{12}", first) and cp.prefix_id(str(root), "/opt/py") == first
    assert cp.prefix_id(str(root), "/opt/other") != first
    os.utime(root / "bin" / "pip", ns=(0, 10**9))
    assert cp.prefix_id(str(root), "/opt/py") != first


# The checks, and the tarball input, called directly.

@pytest.mark.parametrize("fake, version, message", [
    ({"shared": 0}, "3.6", r"without a shared libpython \(Py_ENABLE_SHARED=0, LDLIBRARY=libpython3\.6m\.a\).*"
                           r"--enable-shared"),
    ({"full": "3.7.16", "version": "3.6"}, "3.6", r"bin/python3\.6 is CPython 3\.7\.16, not CPython 3\.6"),
    ({"failed": {"ssl": "ImportError: no _ssl"}}, "3.6", r"cannot import ssl \(ImportError: no _ssl\).*libssl-dev"),
    ({}, "3.7", r"no executable bin/python3\.7 \(found: bin/python3\.6\)"),
    ({}, "3", r"version '3' is not X\.Y"),
])
def test_checks_refuse_with_the_prefix_what_was_found_and_the_fix(tmp_path, fake, version, message):
    root = fake_prefix(tmp_path / "p", **fake)
    with pytest.raises(cp.PrebuiltError, match=message) as error:
        cp.prebuilt(Module(), params(tmp_path, root, version=version), str(tmp_path))
    assert version == "3" or str(root) in str(error.value)
    assert not (tmp_path / "builds").exists()


def test_a_tarball_is_unpacked_checked_against_source_prefix_and_packed(tmp_path):
    root = fake_prefix(tmp_path / "p")
    with tarfile.open(tmp_path / "in.tar.gz", "w:gz") as tar:
        tar.add(root, ".")
    args = params(tmp_path, tmp_path / "in.tar.gz")
    (tmp_path / "work").mkdir()
    with pytest.raises(cp.PrebuiltError, match="give source_prefix"):
        cp.prebuilt(Module(), args, str(tmp_path / "work"))
    with pytest.raises(cp.PrebuiltError, match=f"made for {OLD} .*give source_prefix {OLD}"):
        cp.prebuilt(Module(), dict(args, source_prefix="/elsewhere"), str(tmp_path / "work"))
    shutil.rmtree(tmp_path / "work")
    (tmp_path / "work").mkdir()
    result = cp.prebuilt(Module(), dict(args, source_prefix=OLD), str(tmp_path / "work"))
    assert result["changed"] and result["old_prefix"] == OLD and result["relocated"] == 3
    with tarfile.open(result["path"]) as tar:
        assert tar.extractfile("./bin/pip").read().startswith(b"#!/opt/py/bin/python3.6\n")


def test_packs_once_reproducibly_and_again_when_the_tarball_is_damaged(tmp_path):
    root = fake_prefix(tmp_path / "p")
    args = params(tmp_path, root)
    first = cp.prebuilt(Module(), args, str(tmp_path))
    assert first["changed"] and first["sha256"] == hashlib.sha256(Path(first["path"]).read_bytes()).hexdigest()
    assert cp.prebuilt(Module(), args, str(tmp_path)) == dict(first, changed=False, relocated=0)
    Path(first["path"]).write_bytes(b"damaged")
    again = cp.prebuilt(Module(), args, str(tmp_path))
    assert again == first  # same bytes: no name or time in the gzip header
    assert sorted(p.name for p in (tmp_path / "builds").iterdir()) == [first["file"], first["file"] + ".sha256"]


# Through ansible.

def test_check_mode_writes_nothing_and_a_too_long_target_fails(tmp_path):
    root = fake_prefix(tmp_path / "p")
    args = params(tmp_path, root)
    result = ansible(tmp_path, check=True, **dict(args, target_prefix="/opt/py"))
    assert result["changed"] and result["sha256"] is None and result["relocated"] == 3
    assert re.fullmatch(r"python-3\.6\.15-prebuilt-debian-bookworm-x86_64-[0-9a-f]{12}\.tar\.gz", result["file"])
    assert not (tmp_path / "builds").exists()
    failed = ansible(tmp_path, **dict(args, target_prefix="/a/much/longer/target/prefix"))
    assert failed["failed"] and "choose a target_prefix of at most 18 characters" in failed["msg"]
    assert not any((tmp_path / "builds").iterdir())


@requires(pyenv_prefix("3.6.15") is not None, "no pyenv CPython 3.6.15 ($(pyenv root)/versions/3.6.15)")
def test_pyenv_cpython_36_packs_once_and_runs_from_the_new_prefix(tmp_path):
    source = pyenv_prefix("3.6.15")
    short = tempfile.TemporaryDirectory(prefix="cp", dir="/tmp")  # pytest's tmp_path is too long
    target = Path(short.name) / "py3.6"
    if len(str(target)) > len(str(source.resolve())):
        pytest.skip(f"{target} is longer than {source.resolve()}: no shorter target prefix to test with")
    try:
        packs_once_and_runs(tmp_path, source, target)
    finally:
        short.cleanup()


def packs_once_and_runs(tmp_path, source, target):
    args = params(tmp_path, source, target_prefix=str(target), check_modules=["ssl", "ctypes", "zlib", "sqlite3",
                                                                              "bz2", "lzma"])
    first = ansible(tmp_path, **args)
    assert first["changed"], first
    assert first["version"] == "3.6.15" and first["old_prefix"] == str(source.resolve())
    assert first["relocated"] > 10
    tarball = tmp_path / "builds" / first["file"]
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert first["sha256"] == digest
    assert (tmp_path / "builds" / (first["file"] + ".sha256")).read_text() == f"{digest}  {first['file']}\n"
    assert sorted(p.name for p in (tmp_path / "builds").iterdir()) == [first["file"], first["file"] + ".sha256"]

    second = ansible(tmp_path, **args)
    assert not second["changed"] and second["file"] == first["file"] and second["sha256"] == digest

    # Installed as source_build does it.
    target.mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(tarball), "-C", str(target), "--no-same-owner"], check=True)
    python = target / "bin" / "python3.6"
    ldd = subprocess.run(["ldd", str(python)], capture_output=True, text=True, check=True).stdout
    assert f"libpython3.6m.so.1.0 => {target}/lib/libpython3.6m.so.1.0" in ldd
    probe = "import sys, ssl, ctypes, zlib, sysconfig, platform; print(sys.prefix, " \
            "sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('prefix'), platform.python_version())"
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(target), f"{target}/lib", str(target), "3.6.15"]
    assert (target / "bin" / "pip3.6").read_text().startswith(f"#!{target}/bin/python3.6\n")
    config = subprocess.run([str(target / "bin" / "python3.6-config"), "--ldflags"], capture_output=True,
                            text=True, check=True).stdout
    assert f"-L{target}/lib" in config and str(source) not in config
    subprocess.run([str(python), "-m", "venv", str(tmp_path / "venv")], check=True, capture_output=True)
    ssl = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c", "import ssl, sys; print(sys.base_prefix)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert ssl == str(target)


@requires(pyenv_prefix("3.7.16") is not None, "no pyenv CPython 3.7.16 ($(pyenv root)/versions/3.7.16)")
def test_another_version_is_refused(tmp_path):
    source = pyenv_prefix("3.7.16")
    result = ansible(tmp_path, **params(tmp_path, source))
    assert result["failed"]
    assert f"{source.resolve()}: no executable bin/python3.6 (found: bin/python3.7)" in result["msg"]
