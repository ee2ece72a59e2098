"""The real CNTK 2.7 CPU wheel, runnable here: a venv and the MPI it links.

CNTK 2.7's cp36 wheel needs CPython 3.6 with a shared libpython and Open MPI
1.10's sonames (libmpi.so.12, libmpi_cxx.so.1). Here:

- CPython 3.6.15 comes from pyenv, found by tools/local_cluster's pyenv_python.
- The venv gets exactly the matrix's pins (matrix/cntk.yml: the cpu wheel for
  cntk 2.7 / Python 3.6 and its wheel_deps), installed with
  `pip install --require-hashes` against the matrix's sha256s. It is built
  once and cached in .cache/cntk-venv-<key>/, the key derived from the pins.
- Open MPI 1.10 cannot be had here: a folder of two symlinks presents the
  distribution's Open MPI 4.1 (libmpi.so.40, libmpi_cxx.so.40) under the 1.10
  sonames. That is a STAND-IN, not Open MPI 1.10.7: the ABI differs, it
  happens to cover what CNTK's CPU build calls.

Unavailable pieces raise Unavailable with the reason (the tests skip on it).
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import yaml

from local_cluster import backend

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "matrix" / "cntk.yml"
CACHE = ROOT / ".cache"
PYTHON_VERSION = "3.6.15"
CNTK_VERSION = "2.7"
STANDIN_SONAMES = {"libmpi.so.12": "libmpi.so.40", "libmpi_cxx.so.1": "libmpi_cxx.so.40"}
NETWORK_ERRORS = re.compile(r"NewConnectionError|Network is unreachable|Temporary failure in name resolution|"
                            r"Name or service not known|Max retries exceeded|ConnectTimeout|ReadTimeout")


class Unavailable(Exception):
    """A piece the real wheel needs is not on this machine (or not reachable)."""


def pins():
    """[(name, version, file, sha256)] for the cntk 2.7 cpu wheel (Python 3.6)
    and its wheel_deps, as matrix/cntk.yml pins them."""
    matrix = yaml.safe_load(MATRIX.read_text())
    series = PYTHON_VERSION.rsplit(".", 1)[0]
    cpu = matrix["cntk"][CNTK_VERSION]["wheels"]["cpu"]
    wheel = cpu[series]  # keyed by Python version
    entries = [(cpu["package"], wheel["version"], wheel["file"], wheel["sha256"])]
    entries += [(dep["name"], dep["version"], dep["file"], dep["sha256"]) for dep in matrix["wheel_deps"][series]]
    for name, version, _, sha256 in entries:
        if not sha256:
            raise Unavailable("matrix/cntk.yml has no sha256 for {} {}".format(name, version))
    return entries


def pyenv_python():
    """CPython 3.6.15's interpreter from pyenv (found as the local cluster finds it), or Unavailable."""
    prefix = backend.pyenv_python(PYTHON_VERSION)
    if prefix is None:
        raise Unavailable("CPython {0} not installed in pyenv (`pyenv root`, $PYENV_ROOT or ~/.pyenv, "
                          "versions/{0}): `pyenv install {0}` with a shared libpython".format(PYTHON_VERSION))
    return prefix / "bin" / "python3.6"


def _find_library(soname):
    result = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True) if shutil.which("ldconfig") \
        else subprocess.CompletedProcess([], 1, "", "")
    for line in result.stdout.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.split(" ")[0] == soname and "x86-64" in name and os.path.exists(path):
            return Path(path).resolve()
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    for directory in ("/usr/lib/" + multiarch, "/lib/" + multiarch, "/usr/lib64", "/usr/lib"):
        candidate = Path(directory) / soname
        if candidate.exists():
            return candidate.resolve()
    return None


def mpi_standin_dir():
    """A folder with libmpi.so.12 and libmpi_cxx.so.1 linked to the
    distribution's Open MPI 4 libraries (the stand-in), or Unavailable."""
    targets = {}
    for standin, real in STANDIN_SONAMES.items():
        found = _find_library(real)
        if found is None:
            raise Unavailable("{} not found (ldconfig -p, multiarch dir): the Open MPI 1.10 stand-in needs the "
                              "distribution's Open MPI 4 with C++ bindings (Debian: libopenmpi3)".format(real))
        targets[standin] = found
    links = CACHE / "cntk-mpi-standin"
    links.mkdir(parents=True, exist_ok=True)
    for standin, target in targets.items():
        link = links / standin
        if not (link.is_symlink() and Path(os.readlink(str(link))) == target):
            temporary = links / (standin + ".tmp")
            if temporary.is_symlink() or temporary.exists():
                temporary.unlink()
            temporary.symlink_to(target)
            os.replace(str(temporary), str(link))
    return links


def _import_check(python, mpi_dir):
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(mpi_dir),
                                                                         os.environ.get("LD_LIBRARY_PATH")])),
               PYTHONWARNINGS="ignore")
    return subprocess.run([str(python), "-c", "import cntk, numpy, scipy; print(cntk.__version__.strip())"],
                          capture_output=True, text=True, env=env, timeout=120)


def venv(mpi_dir):
    """The cached venv's python (built on first use), or Unavailable."""
    base = pyenv_python()
    entries = pins()
    key = hashlib.sha256(json.dumps([PYTHON_VERSION, entries]).encode()).hexdigest()[:12]
    target = CACHE / "cntk-venv-{}".format(key)
    python = target / "bin" / "python"
    marker = target / "pins.json"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(str(CACHE / "cntk-venv.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return python
        building = CACHE / "cntk-venv-{}.partial".format(key)
        shutil.rmtree(str(building), ignore_errors=True)
        subprocess.run([str(base), "-m", "venv", str(building)], check=True, capture_output=True)
        requirements = building / "requirements.txt"
        requirements.write_text("".join("{}=={} --hash=sha256:{}\n".format(name, version, sha256)
                                        for name, version, _, sha256 in entries))
        command = [str(building / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                   "--require-hashes", "--only-binary", ":all:", "-r", str(requirements)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        if result.returncode != 0:
            shutil.rmtree(str(building), ignore_errors=True)
            output = result.stdout + result.stderr
            if NETWORK_ERRORS.search(output):
                raise Unavailable("pip cannot reach PyPI for the pinned cntk wheel and its deps: {}".format(
                    output.strip().splitlines()[-1]))
            raise RuntimeError("pip install --require-hashes of the matrix's pins failed:\n" + output[-4000:])
        check = _import_check(building / "bin" / "python", mpi_dir)
        if check.returncode != 0 or check.stdout.strip() != CNTK_VERSION:
            shutil.rmtree(str(building), ignore_errors=True)
            raise RuntimeError("import cntk in the new venv failed:\n" + check.stdout + check.stderr[-4000:])
        (building / "pins.json").write_text(json.dumps(
            {"python": PYTHON_VERSION, "pins": entries, "base": str(base)}, indent=2) + "\n")
        # A venv finds its site-packages from bin/python's location
        # (pyvenv.cfg beside it), so the folder can be renamed into place.
        shutil.rmtree(str(target), ignore_errors=True)
        os.rename(str(building), str(target))
    return python


if __name__ == "__main__":
    try:
        mpi = mpi_standin_dir()
        print(venv(mpi), mpi)
    except Unavailable as error:
        sys.exit("unavailable: {}".format(error))
