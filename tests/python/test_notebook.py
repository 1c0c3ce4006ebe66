"""examples/qkv_python.ipynb runs top to bottom: its code cells, in order, in
one namespace, from examples/ (as Jupyter would run them). Without Jupyter:
the cells are plain Python (no magics), so exec runs exactly what a kernel would."""
import json
import os

import pytest

from conftest import ROOT, model_path


def test_notebook_runs(monkeypatch):
    if not model_path().exists():
        pytest.skip(f"{model_path()} missing (make model)")
    nb = json.loads((ROOT / "examples" / "qkv_python.ipynb").read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    monkeypatch.chdir(ROOT / "examples")
    ns = {}
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert len(cells) >= 6
    for i, cell in enumerate(cells):
        src = "".join(cell["source"])
        exec(compile(src, f"notebook cell {i}", "exec"), ns)
    assert "page" in ns and ns["page"]._repr_html_().startswith("<iframe")
    assert float(abs(ns["o"] - ns["o64"]).max()) < 2e-5
