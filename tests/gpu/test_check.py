"""tests/gpu/check.py reads the matrix without PyYAML; it must read what PyYAML reads."""

from pathlib import Path

import source_modules
import yaml

ROOT = Path(__file__).resolve().parents[2]
check = source_modules.load(ROOT / "tests" / "gpu" / "check.py", "gpu_check")

MATRIX = yaml.safe_load((ROOT / "matrix" / "cntk.yml").read_text())


def test_driver_minimum_matches_the_matrix():
    for cuda in MATRIX["cuda"]:
        assert check.matrix_value(("cuda", cuda), "driver_min") == MATRIX["cuda"][cuda]["driver_min"]


def test_compute_capability_minimum_matches_the_matrix():
    for release in MATRIX["cntk"]:
        assert (check.matrix_value(("cntk", release), "min_compute_capability")
                == MATRIX["cntk"][release]["min_compute_capability"])


def test_without_a_driver_the_check_fails_and_says_why(tmp_path):
    if Path("/dev/nvidiactl").exists():
        return  # a GPU machine: the real checks run instead
    assert check.main(["--out", str(tmp_path)]) == 1
    report = (tmp_path / "gpu_check.json").read_text()
    assert "nvidia-smi not found" in report
