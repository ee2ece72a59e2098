"""bench/README.md's figures and bench/results/summary.md are what bench/summary.py
renders from the committed bench/results/*.json, so neither can drift from the
measurements (rerun `make docs` after `make bench`)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _summary():
    # bench/ is scripts, not a package: loaded from its file, under a name no package has.
    spec = importlib.util.spec_from_file_location("bench_summary", ROOT / "bench" / "summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_readme_figures_are_rendered_from_the_results():
    summary = _summary()
    readme = (ROOT / "bench" / "README.md").read_text()
    assert summary.BEGIN in readme and summary.END in readme
    assert summary.render_readme(readme, summary.rows()) == readme, "bench/README.md is stale: run make docs"


def test_committed_summary_is_rendered_from_the_results():
    summary = _summary()
    assert summary.render_summary(summary.rows()) == (ROOT / "bench" / "results" / "summary.md").read_text()


def test_missing_results_say_not_measured(tmp_path, monkeypatch):
    summary = _summary()
    monkeypatch.setattr(summary, "RESULTS", tmp_path)
    rendered = summary.render_figures(summary.rows())
    assert "not measured" in rendered
    assert rendered.startswith(summary.BEGIN) and rendered.endswith(summary.END)
