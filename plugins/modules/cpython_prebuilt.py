#!/usr/bin/python
"""Check an installed CPython on the controller and pack it relocated to the nodes' prefix."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cpython_prebuilt
short_description: Check a CPython installation and pack it relocated to another prefix
description:
  - Runs on the controller (a task with C(delegate_to=localhost) and C(run_once)). Takes an installed CPython prefix
    (e.g. pyenv's C(versions/3.6.15)), or a C(.tar.gz) of one, checks it by running its
    C(bin/python<X.Y>) (the X.Y wanted, CPython, a shared libpython, the modules importing) and packs it
    into C(<dest_dir>/<name>-<X.Y.Z>-prebuilt-<platform>-<id>.tar.gz) plus a sha256sum-style
    C(.sha256), its members relative to the prefix (C(./bin/python3.6)), ready for the role
    source_build to unpack at O(target_prefix).
  - Relocation replaces the prefix the build was made for (its sysconfig C(prefix)) by O(target_prefix),
    the way conda relocates packages. Files without a NUL byte are text and get a plain replacement
    (shebangs, C(_sysconfigdata*.py), C(config-*/Makefile), pkgconfig, python-config). Other files get the
    replacement inside each NUL-terminated string, which keeps its place and length (ELF RUNPATHs,
    libpython's compiled-in prefix); the new string ends with a NUL and the old bytes after it are kept,
    as the linker may share them (libpython's version string is the tail of its prefix string). So a
    binary holding the old prefix needs a target prefix no longer than it. Absolute symlink targets under
    the old prefix are rewritten; modes and hard links are kept.
  - C(*.pyc) files are packed unchanged (marshal data, not C strings). They stay valid caches; only
    their tracebacks' file names name the old prefix.
  - The id is 12 hex of a sha256 over O(target_prefix) and every entry's path, type, mode, size, mtime
    and link target, so an unchanged prefix is not packed again (changed=false when the tarball and its
    C(.sha256) exist and agree). The tarball is reproducible (gzip header without name or time).
options:
  prefix:
    description: The CPython installation prefix on the controller, or a C(.tar.gz)/C(.tgz) of one
      (members relative to the prefix) with O(source_prefix).
    type: path
    required: true
  source_prefix:
    description: The prefix the build was made for (its C(./configure --prefix)). Required with a tarball;
      with a folder it is read from the interpreter and, if given, must agree.
    type: path
  version:
    description: The X.Y wanted, e.g. C(3.6).
    type: str
    required: true
  target_prefix:
    description: Where the nodes will have it, e.g. C(/opt/cntk/python3.6).
    type: path
    required: true
  dest_dir:
    description: The controller's folder of builds (created if missing).
    type: path
    required: true
  name:
    description: First part of the file name.
    type: str
    default: python
  platform:
    description: OS release and architecture it is built for, part of the file name
      (e.g. C(debian-bookworm-x86_64)).
    type: str
    required: true
  check_modules:
    description: Modules that must import.
    type: list
    elements: str
    default: [ssl, ctypes, zlib, sqlite3, bz2, lzma]
"""

EXAMPLES = r"""
- name: Pack pyenv's CPython 3.6.15 for /opt/cntk/python3.6
  cpython_prebuilt:
    prefix: "{{ lookup('ansible.builtin.pipe', 'pyenv root') }}/versions/3.6.15"
    version: "3.6"
    target_prefix: /opt/cntk/python3.6
    dest_dir: "{{ playbook_dir }}/.cache/artifacts/builds"
    platform: debian-bookworm-x86_64
  delegate_to: localhost
  run_once: true
  register: packed
"""

RETURN = r"""
file:
  description: The tarball's file name (in O(dest_dir)); its C(.sha256) is beside it.
  returned: success
  type: str
  sample: python-3.6.15-prebuilt-debian-bookworm-x86_64-0123456789ab.tar.gz
path:
  description: The tarball's full path.
  returned: success
  type: str
sha256:
  description: The tarball's sha256 (null in check mode when it would be packed).
  returned: success
  type: str
version:
  description: The interpreter's full version.
  returned: success
  type: str
  sample: 3.6.15
old_prefix:
  description: The prefix the build was made for, replaced by O(target_prefix).
  returned: success
  type: str
relocated:
  description: How many files had their content rewritten (0 when nothing was packed).
  returned: success
  type: int
"""

import gzip
import hashlib
import io
import json
import os
import re
import stat
import subprocess
import tarfile
import tempfile

from ansible.module_utils.basic import AnsibleModule

FORMAT = "1"  # part of the id: bump when the packing changes
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
TOO_BROAD = ("/", "/usr", "/usr/local", "/opt")

# Run by the checked interpreter (any CPython 3): what it is, and which modules fail to import.
PROBE = r"""
import json, platform, sys, sysconfig
failed = {}
for name in sys.argv[1:]:
    try:
        __import__(name)
    except Exception as e:
        failed[name] = '%s: %s' % (type(e).__name__, e)
print(json.dumps({'version': '%d.%d' % sys.version_info[:2], 'full': platform.python_version(),
                  'implementation': platform.python_implementation(),
                  'prefix': sysconfig.get_config_var('prefix'),
                  'shared': sysconfig.get_config_var('Py_ENABLE_SHARED'),
                  'ldlibrary': sysconfig.get_config_var('LDLIBRARY'), 'failed': failed}))
"""


class PrebuiltError(Exception):
    pass


def prefix_pattern(old):
    """The old prefix as a whole path component: /opt/py matches /opt/py/lib, not /opt/python."""
    return re.compile(re.escape(old) + rb"(?![A-Za-z0-9_.+-])")


def relocate_text(data, old, new):
    """(data with every old prefix replaced by new, how many)."""
    return prefix_pattern(old).subn(lambda m: new, data)


def relocate_binary(data, old, new):
    """(data with the old prefix replaced inside each NUL-terminated string, how many).

    Each string keeps its place and length, so offsets in the file stay valid: the new one ends with a NUL
    and the old bytes after it are kept, as linkers merge string constants into the tails of longer ones
    (libpython's version "3.6.15" is the tail of its prefix "<pyenv root>/versions/3.6.15": padding with
    NULs would empty sys.version's number)."""
    pattern = prefix_pattern(old)
    if not pattern.search(data):
        return data, 0
    if len(new) > len(old):
        raise ValueError("longer")
    total = 0

    def one(match):
        nonlocal total
        string = match.group(1)
        text, count = pattern.subn(lambda m: new, string)
        total += count
        return text + b"\0" + (string[len(text) + 1:] + b"\0" if len(text) < len(string) else b"")

    # one C string: from the old prefix to its NUL (more prefixes in it are rewritten too)
    data = re.compile(b"(" + pattern.pattern + rb"[^\0]*)\0").sub(one, data)
    return data, total


def relocate_link(target, old, new):
    """An absolute link target under the old prefix, moved under the new one."""
    if target == old or target.startswith(old.rstrip("/") + "/"):
        return new + target[len(old):]
    return target


def relocate(data, old, new):
    return (relocate_binary if b"\0" in data else relocate_text)(data, old, new)


def walk(root, rel=""):
    """(relative path, lstat) of everything under root, sorted, each folder before its content."""
    with os.scandir(os.path.join(root, rel)) as found:
        entries = sorted(found, key=lambda e: e.name)
    for entry in entries:
        path = f"{rel}/{entry.name}" if rel else entry.name
        st = entry.stat(follow_symlinks=False)
        yield path, st
        if stat.S_ISDIR(st.st_mode):
            yield from walk(root, path)


def prefix_id(root, target):
    """12 hex naming this prefix's content (by metadata) and the target prefix."""
    digest = hashlib.sha256(f"cpython_prebuilt {FORMAT}\0{target}\0".encode())
    for rel, st in walk(root):
        link = os.readlink(os.path.join(root, rel)) if stat.S_ISLNK(st.st_mode) else ""
        mtime = 0 if stat.S_ISDIR(st.st_mode) else st.st_mtime_ns  # a folder's mtime moves with its content
        digest.update(f"{rel}\0{st.st_mode:o}\0{st.st_size}\0{mtime}\0{link}\n".encode(errors="surrogateescape"))
    return digest.hexdigest()[:12]


def pack(root, old, new, out=None):
    """Write root as an uncompressed tar stream relocated from old to new into out (None: only check).

    Returns (files rewritten, files where the old prefix is left: not in a C string)."""
    old_b, new_b = os.fsencode(old), os.fsencode(new)
    tar = tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) if out else None
    first = {}  # (dev, inode) -> member name: hard links stay hard links
    rewritten, left = 0, []
    for rel, st in [(".", os.lstat(root))] + list(walk(root)):
        path = os.path.join(root, rel)
        info = tarfile.TarInfo("." if rel == "." else "./" + rel)
        info.mode, info.mtime = stat.S_IMODE(st.st_mode), st.st_mtime_ns // 10**9
        data = None
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
        elif stat.S_ISLNK(st.st_mode):
            info.type, info.linkname = tarfile.SYMTYPE, relocate_link(os.readlink(path), old, new)
        elif not stat.S_ISREG(st.st_mode):
            raise PrebuiltError(f"{path} is not a file, folder or symlink: remove it from the prefix")
        elif (st.st_dev, st.st_ino) in first:
            info.type, info.linkname = tarfile.LNKTYPE, first[(st.st_dev, st.st_ino)]
        else:
            first[(st.st_dev, st.st_ino)] = info.name
            with open(path, "rb") as f:
                data = f.read()
            if not rel.endswith((".pyc", ".pyo")):  # marshal data: kept, see DOCUMENTATION
                try:
                    data, count = relocate(data, old_b, new_b)
                except ValueError:
                    raise PrebuiltError(
                        f"{path} is a binary file holding the old prefix {old} ({len(old)} characters) in C strings, "
                        f"which are rewritten in place, so the target prefix {new} ({len(new)} characters) does not "
                        f"fit: choose a target_prefix of at most {len(old)} characters") from None
                rewritten += count > 0
                if prefix_pattern(old_b).search(data):
                    left.append(rel)
            info.size = len(data)
        if tar:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    if tar:
        tar.close()
    return rewritten, left


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def recorded_sha256(path):
    try:
        with open(path + ".sha256") as f:
            return (f.read().split() or [""])[0]
    except FileNotFoundError:
        return ""


def probe(shown, root, version, modules, env=None):
    """Run root's bin/python<version> and check it; returns what it printed."""
    python = os.path.join(root, "bin", f"python{version}")
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        found = sorted(n for n in os.listdir(os.path.join(root, "bin")) if re.match(r"python\d+\.\d+$", n)) \
            if os.path.isdir(os.path.join(root, "bin")) else []
        raise PrebuiltError(
            f"{shown}: no executable bin/python{version} (found: {', '.join('bin/' + n for n in found) or 'none'}): "
            f"give the prefix of a CPython {version} installation, e.g. $(pyenv root)/versions/{version}.<patch>")
    try:  # -E -s: the controller's PYTHON* variables and user site are not the build's
        run = subprocess.run([python, "-E", "-s", "-c", PROBE, *modules], capture_output=True, text=True,
                             cwd="/", timeout=300, env=env)
        error = f"exit status {run.returncode}: {run.stderr.strip()[-800:]}"
        facts = json.loads(run.stdout) if run.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        facts, error = None, str(e)
    if not facts:
        raise PrebuiltError(f"{shown}: bin/python{version} does not run on the controller ({error}): "
                            "give a CPython built for this machine's OS and architecture")
    if facts["version"] != version or facts["implementation"] != "CPython":
        raise PrebuiltError(f"{shown}: bin/python{version} is {facts['implementation']} {facts['full']}, "
                            f"not CPython {version}: give the prefix of a CPython {version} installation")
    if str(facts["shared"]) != "1":
        raise PrebuiltError(
            f"{shown}: CPython {facts['full']} was built without a shared libpython (Py_ENABLE_SHARED="
            f"{facts['shared']}, LDLIBRARY={facts['ldlibrary']}), and the CNTK wheel needs "
            f"libpython{version}m.so.1.0: rebuild it with --enable-shared, e.g. "
            f"PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install --force {facts['full']}")
    if facts["failed"]:
        failed = "; ".join(f"{k} ({v})" for k, v in sorted(facts["failed"].items()))
        raise PrebuiltError(
            f"{shown}: CPython {facts['full']} cannot import {failed}: install the development packages "
            "(libssl-dev, libffi-dev, zlib1g-dev, libsqlite3-dev, libbz2-dev, liblzma-dev) and rebuild it")
    if not facts["prefix"] or not os.path.isabs(facts["prefix"]):
        raise PrebuiltError(f"{shown}: its sysconfig prefix is {facts['prefix']!r}, not an absolute path: "
                            "give a CPython installed with ./configure --prefix=<path>")
    return facts


def prebuilt(module, p, tmp):
    version, target = p["version"], os.path.normpath(p["target_prefix"])
    if not re.match(r"^\d+\.\d+$", version):
        raise PrebuiltError(f"version {version!r} is not X.Y (e.g. 3.6)")
    if not os.path.isabs(target):
        raise PrebuiltError(f"target_prefix {target} is not an absolute path")
    for key in ("name", "platform"):
        if not NAME.match(p[key]):
            raise PrebuiltError(f"{key} {p[key]!r} cannot be part of a file name: use letters, digits, . _ + -")
    prefix, env = p["prefix"], None
    if os.path.isfile(prefix):
        if not prefix.endswith((".tar.gz", ".tgz")):
            raise PrebuiltError(f"prefix {prefix} is a file but not a .tar.gz: "
                                "give a CPython prefix or a tarball of one")
        if not p["source_prefix"]:
            raise PrebuiltError(f"prefix {prefix} is a tarball: give source_prefix, the prefix it was built for")
        root = os.path.join(tmp, "prefix")
        try:
            with tarfile.open(prefix, "r:gz") as tar:
                tar.extractall(root, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        except (OSError, tarfile.TarError) as e:
            raise PrebuiltError(f"prefix {prefix}: cannot unpack it ({e}): "
                                "give a .tar.gz of a CPython prefix") from None
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(root, "lib"))  # its RUNPATH names source_prefix
        shown = f"{prefix} (unpacked; its members must be relative to the prefix: ./bin/python{version})"
    elif os.path.isdir(prefix):
        root = shown = os.path.realpath(prefix)
        if root in TOO_BROAD:
            raise PrebuiltError(f"prefix {root} holds more than one Python and everything else installed there: "
                                "give a CPython installed into its own prefix (./configure --prefix=<own folder>)")
    else:
        raise PrebuiltError(f"prefix {prefix} does not exist: give an installed CPython prefix, "
                            f"e.g. $(pyenv root)/versions/{version}.<patch>")

    facts = probe(shown, root, version, p["check_modules"], env)
    old = os.path.normpath(facts["prefix"])
    if p["source_prefix"] and os.path.normpath(p["source_prefix"]) != old:
        raise PrebuiltError(f"{shown}: source_prefix is {p['source_prefix']}, but the build says it was made for "
                            f"{old} (sysconfig prefix): give source_prefix {old}")

    name = f"{p['name']}-{facts['full']}-prebuilt-{p['platform']}-{prefix_id(root, target)}.tar.gz"
    path = os.path.join(p["dest_dir"], name)
    result = dict(file=name, path=path, version=facts["full"], old_prefix=old, relocated=0)
    if os.path.isfile(path):
        digest = sha256_file(path)
        if digest == recorded_sha256(path):
            return dict(result, changed=False, sha256=digest)

    if module.check_mode:  # relocate without writing: a target prefix that does not fit fails here too
        relocated, left = pack(root, old, target)
        digest = None
    else:
        os.makedirs(p["dest_dir"], mode=0o755, exist_ok=True)
        part, sha_part = path + ".part", path + ".sha256.part"
        try:
            with open(part, "wb") as raw:  # no name or time in the gzip header: the same input packs the same
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz:
                    relocated, left = pack(root, old, target, gz)
            os.chmod(part, 0o644)
            digest = sha256_file(part)
            os.replace(part, path)
            with open(sha_part, "w") as f:
                f.write(f"{digest}  {name}\n")
            os.chmod(sha_part, 0o644)
            os.replace(sha_part, path + ".sha256")
        finally:
            for stale in (part, sha_part):
                if os.path.exists(stale):
                    os.remove(stale)
    if left:
        module.warn(f"{len(left)} file(s) still hold {old} outside a NUL-terminated string, left as they are: "
                    + ", ".join(left[:10]))
    return dict(result, changed=True, sha256=digest, relocated=relocated)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            prefix=dict(type="path", required=True),
            source_prefix=dict(type="path"),
            version=dict(type="str", required=True),
            target_prefix=dict(type="path", required=True),
            dest_dir=dict(type="path", required=True),
            name=dict(type="str", default="python"),
            platform=dict(type="str", required=True),
            check_modules=dict(type="list", elements="str",
                               default=["ssl", "ctypes", "zlib", "sqlite3", "bz2", "lzma"]),
        ),
        supports_check_mode=True,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="cpython_prebuilt.") as tmp:
            result = prebuilt(module, module.params, tmp)
    except PrebuiltError as e:
        module.fail_json(msg=str(e))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
