#!/usr/bin/env python3
"""TEST DOUBLE: a signed apt repository of stand-in NVIDIA packages.

NVIDIA's repository cannot be reached from here. These packages carry the
real names and versions the version matrix pins (cuda-drivers, cuda-cudart-10-0,
cuda-libraries-10-0, libcudnn7, libnccl2) plus NEWER versions of the same
packages, so a role that forgot to pin or hold would visibly drift. Each
package installs only a marker file under /usr/share/doc/<package>/ and, for
the libraries, a text file where the real library would be: nothing here
pretends a GPU or a driver is present (no nvidia-smi, no kernel module). The
driver package (cuda-drivers) asks for a reboot in its postinst, as NVIDIA's
driver packages do (update-notifier's /run/reboot-required). Stand-ins with
Debian's names (nvidia-driver, nvidia-kernel-dkms; 535.x and a 390.x below
CUDA 10.0's minimum) are in the same repository for nvidia_driver_source:
distribution; they build no kernel module.

    nvidia_packages.py OUTDIR     builds OUTDIR/repo (flat, InRelease signed by a
                                  throwaway key, OUTDIR/repo/test-double.asc) and
                                  OUTDIR/debs (the pinned .debs alone, for offline mode)
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MARKER = "TEST DOUBLE built by tests/doubles/nvidia_packages.py: not NVIDIA software.\n"

# name, version, depends, files (path -> text). The first version of each name is
# the one matrix/cntk.yml pins for CNTK 2.7; the others are newer decoys.
PACKAGES = [
    ("cuda-drivers", "410.48-1", "", {}),
    ("cuda-drivers", "418.87.01-1", "", {}),
    ("cuda-cudart-10-0", "10.0.130-1", "", {
        "/usr/local/cuda-10.0/lib64/libcudart.so.10.0.130": MARKER,
        "/usr/local/cuda-10.0/version.txt": "CUDA Version 10.0.130\n"}),
    ("cuda-libraries-10-0", "10.0.130-1", "cuda-cudart-10-0 (= 10.0.130-1)", {
        "/usr/local/cuda-10.0/lib64/libcublas.so.10.0.130": MARKER}),
    ("libcudnn7", "7.3.1.20-1+cuda10.0", "", {
        "/usr/lib/x86_64-linux-gnu/libcudnn.so.7.3.1": MARKER}),
    ("libcudnn7", "7.6.5.32-1+cuda10.0", "", {
        "/usr/lib/x86_64-linux-gnu/libcudnn.so.7.6.5": MARKER}),
    ("libnccl2", "2.3.5-2+cuda10.0", "", {
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2.3.5": MARKER}),
    ("libnccl2", "2.4.8-1+cuda10.0", "", {
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2.4.8": MARKER}),
]
# Stand-ins with Debian's names for its non-free driver (nvidia_driver_source: distribution): the version
# bookworm has (535.x) and one below CUDA 10.0's minimum driver (410.48), as an older release had. They go into
# the same repository, which a test then presents to a node as its distribution's source; none is an offline .deb.
DISTRIBUTION_PACKAGES = [
    ("nvidia-driver", "535.183.01-1~deb12u1", "nvidia-kernel-dkms (= 535.183.01-1~deb12u1)", {}),
    ("nvidia-kernel-dkms", "535.183.01-1~deb12u1", "", {
        "/usr/src/nvidia-current-535.183.01/dkms.conf": MARKER}),
    ("nvidia-driver", "390.157-1~deb11u1", "nvidia-kernel-dkms (= 390.157-1~deb11u1)", {}),
    ("nvidia-kernel-dkms", "390.157-1~deb11u1", "", {
        "/usr/src/nvidia-current-390.157/dkms.conf": MARKER}),
]
# The driver: its postinst asks for a reboot, as NVIDIA's do for their new kernel module.
REBOOT_REQUIRED = {"cuda-drivers"}
POSTINST_REBOOT = """#!/bin/sh
# TEST DOUBLE: asks for a reboot as NVIDIA's driver packages do, in the words
# of update-notifier's notify-reboot-required (/var/run links to /run).
set -e
if [ "$1" = configure ]; then
  echo "*** System restart required ***" >/run/reboot-required
  echo "$DPKG_MAINTSCRIPT_PACKAGE" >>/run/reboot-required.pkgs
fi
"""
PINNED = {}
for _name, _version, _depends, _files in PACKAGES:
    PINNED.setdefault(_name, _version)


def build_deb(name, version, depends, files, outdir):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        control = [f"Package: {name}", f"Version: {version}", "Architecture: amd64",
                   "Maintainer: cntk-cluster tests <tests@localhost>", "Section: misc", "Priority: optional",
                   f"Description: TEST DOUBLE of NVIDIA's {name} {version}", " " + MARKER.strip()]
        if depends:
            control.insert(3, f"Depends: {depends}")
        (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        if name in REBOOT_REQUIRED:
            (root / "DEBIAN" / "postinst").write_text(POSTINST_REBOOT)
            (root / "DEBIAN" / "postinst").chmod(0o755)
        files = dict(files)
        files[f"/usr/share/doc/{name}/TEST-DOUBLE"] = MARKER
        for path, text in files.items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        deb = outdir / f"{name}_{version}_amd64.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
                       check=True, capture_output=True)
        return deb


def release_file(repo):
    lines = ["Origin: cntk-cluster test double", "Label: test double of NVIDIA's CUDA repository",
             "Architectures: amd64", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        data = (repo / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    (repo / "Release").write_text("\n".join(lines) + "\n")


def sign(repo):
    home = Path(tempfile.mkdtemp(prefix="gnupg-"))
    os.chmod(home, 0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    try:
        subprocess.run(["gpg", "--batch", "--quiet", "--passphrase", "", "--quick-gen-key",
                        "cntk-cluster test double <tests@localhost>", "ed25519", "sign", "1d"],
                       check=True, env=env, capture_output=True)
        subprocess.run(["gpg", "--batch", "--yes", "--quiet", "--clearsign", "-o", str(repo / "InRelease"),
                        str(repo / "Release")], check=True, env=env, capture_output=True)
        subprocess.run(["gpg", "--batch", "--yes", "--quiet", "--armor", "--export", "-o", str(repo / "test-double.asc")],
                       check=True, env=env, capture_output=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def build(outdir):
    outdir = Path(outdir)
    repo, debs = outdir / "repo", outdir / "debs"
    for path in (repo, debs):
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
    for name, version, depends, files in PACKAGES:
        deb = build_deb(name, version, depends, files, repo)
        if PINNED[name] == version:
            shutil.copy2(deb, debs / deb.name)
    for name, version, depends, files in DISTRIBUTION_PACKAGES:
        build_deb(name, version, depends, files, repo)
    index = subprocess.run(["dpkg-scanpackages", "-m", "."], cwd=repo, check=True, capture_output=True).stdout
    (repo / "Packages").write_bytes(index)
    subprocess.run(["gzip", "-9nk", "Packages"], cwd=repo, check=True)
    release_file(repo)
    sign(repo)
    return repo, debs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir")
    args = parser.parse_args(argv)
    repo, debs = build(args.outdir)
    print(f"repository: {repo}\noffline .debs: {debs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
