"""--backend: cntk when CPython 3.6 can be had (the controller's pyenv, or the pinned sources in the artifact
cache), numpy otherwise."""

import os
import shutil
import subprocess
from pathlib import Path

import yaml

from local_cluster import ROOT, ClusterError


def pyenv_python(version="3.6.15"):
    """The controller's pyenv CPython <version> prefix, or None.

    pyenv is asked where it lives (`pyenv root`, else $PYENV_ROOT, else
    ~/.pyenv): machines differ."""
    roots = []
    if shutil.which("pyenv"):
        found = subprocess.run(["pyenv", "root"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            roots.append(found.stdout.strip())
    roots += [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv")]
    for root in filter(None, roots):
        prefix = Path(root) / "versions" / version
        if (prefix / "bin" / f"python{version.rsplit('.', 1)[0]}").exists():
            return prefix
    return None


def cached_python_sources(cache_dir, matrix_file=ROOT / "matrix" / "cntk.yml", python="3.6"):
    """True when the pinned CPython and the OpenSSL it is built against are already in the artifact cache."""
    matrix = yaml.safe_load(matrix_file.read_text())
    pin = matrix["python_source"][python]
    files = [pin["file"]] + [entry["file"] for entry in matrix["openssl_source"].values()
                             if entry.get("series") == pin.get("openssl_max")]
    return len(files) == 2 and all((cache_dir / name).is_file() for name in files)


def backend_settings(wanted, cache_dir=ROOT / ".cache" / "artifacts", python_prefix=None):
    """(settings for the inventory, a line saying what was chosen and why) for --backend.

    cntk needs CPython 3.6 with a shared libpython: the controller's pyenv
    3.6.15 (shipped as a prebuilt), or the pinned sources already in the
    artifact cache (built on a node). Neither: cntk is refused, auto falls
    back to numpy, each in one line."""
    if wanted not in ("auto", "cntk", "numpy"):
        raise ClusterError(f"--backend {wanted!r}: choose cntk, numpy or auto")
    if wanted == "numpy":
        return {"cluster_backend": "numpy"}, "backend numpy (the reference backend)"
    cntk = {"cluster_backend": "cntk", "cluster_device": "cpu", "cluster_openmpi_standin": True}
    stand_in = "Debian's Open MPI as the labelled stand-in for 1.10.7"
    if python_prefix:
        return (dict(cntk, cpython_prebuilt_prefix=str(python_prefix)),
                f"backend cntk: CNTK 2.7 on CPython 3.6 from {python_prefix} (shipped to the nodes), {stand_in}")
    if cached_python_sources(cache_dir):
        return cntk, f"backend cntk: CNTK 2.7 on CPython 3.6 built from the cached pinned sources, {stand_in}"
    why = ("no CPython 3.6.15 here (pyenv's versions/3.6.15) and the pinned Python/OpenSSL sources are not in "
           f"{cache_dir} (make artifacts on a connected machine)")
    if wanted == "cntk":
        raise ClusterError(f"--backend cntk: {why}; nothing was changed. Use BACKEND=numpy.")
    return {"cluster_backend": "numpy"}, f"backend numpy, not cntk: {why}"
