"""What `ansible-galaxy collection build` puts in the tarball: what a user runs, one licence, and none of the
project's tests, benchmarks, molecule scenarios or test tools (the NVIDIA repository's test double among them)."""

import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def test_the_built_collection_holds_what_a_user_runs_and_no_test_material(tmp_path):
    galaxy = Path(sys.executable).with_name("ansible-galaxy")
    subprocess.run([galaxy, "collection", "build", "--output-path", tmp_path, ROOT], check=True,
                   capture_output=True)
    (tarball,) = tmp_path.glob("cntk-cluster-*.tar.gz")
    with tarfile.open(tarball) as archive:
        tops = {name.split("/")[0] for name in archive.getnames()}
        manifest = yaml.safe_load(archive.extractfile("MANIFEST.json"))
    assert {"site.yml", "playbooks", "roles", "plugins", "training", "matrix", "LICENSE"} <= tops
    assert not tops & {"tests", "bench", "molecule", "tools", ".ci"}, tops
    assert manifest["collection_info"]["license"] == ["MIT"]


def test_every_role_says_the_collections_licence():
    for meta in sorted(ROOT.glob("roles/*/meta/main.yml")):
        assert yaml.safe_load(meta.read_text())["galaxy_info"]["license"] == "MIT", meta
