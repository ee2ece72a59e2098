#!/usr/bin/env python3
"""TEST DOUBLE: a tiny pure-Python wheel named `cntk`, for running the cntk role here.

The real cntk 2.7 wheels need CPython 3.5/3.6 and Open MPI 1.10, neither of
which can be installed on this project's test machines. This wheel has the
two things the role's checks touch - `cntk.__version__` and
`cntk.device.all_devices()` (CPU only: nothing pretends a GPU is there) - so
the role's real steps run around it: the artifact download and sha256 checks,
the venv, pip without an index, mpi4py built against the cluster's Open MPI,
the import check and the MPI check across the cluster.

    cntk_wheel.py OUTDIR   -> OUTDIR/cntk-2.7.post2+testdouble-py3-none-any.whl
"""

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

VERSION = "2.7.post2+testdouble"

FILES = {
    "cntk/__init__.py": (
        '"""TEST DOUBLE of cntk (tests/doubles/cntk_wheel.py): not Microsoft CNTK."""\n'
        "from . import device  # noqa: F401\n"
        '__version__ = "2.7"\n'),
    "cntk/device.py": (
        '"""TEST DOUBLE: the CPU device only."""\n'
        "import enum\n\n\n"
        "class DeviceKind(enum.Enum):\n"
        "    CPU = 0\n"
        "    GPU = 1\n\n\n"
        "class DeviceDescriptor:\n"
        "    def type(self):\n"
        "        return DeviceKind.CPU\n\n"
        "    def __str__(self):\n"
        '        return "CPU (test double)"\n\n\n'
        "def all_devices():\n"
        "    return [DeviceDescriptor()]\n"),
}


def build(outdir):
    dist = f"cntk-{VERSION}.dist-info"
    files = dict(FILES)
    files[f"{dist}/METADATA"] = (f"Metadata-Version: 2.1\nName: cntk\nVersion: {VERSION}\n"
                                 "Summary: TEST DOUBLE of cntk for the cntk role's tests\n")
    files[f"{dist}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: tests/doubles/cntk_wheel.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    path = Path(outdir) / f"cntk-{VERSION}-py3-none-any.whl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, text in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            wheel.writestr(info, text)
    return path


if __name__ == "__main__":
    print(build(sys.argv[1]))
