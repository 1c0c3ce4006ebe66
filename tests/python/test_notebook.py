"""examples/qkv_python.ipynb runs top to bottom under nbclient, as Jupyter would
run it: a real IPython kernel (ipykernel) started from this venv's python, which
has the built qkv installed, with examples/ as its working directory. Any cell
that raises fails the test (nbclient's CellExecutionError names the cell)."""
import os
import sys

import pytest

from conftest import ROOT, model_path

nbformat = pytest.importorskip("nbformat", reason="nbformat missing (make pytest installs tests/python/requirements.txt)")
nbclient = pytest.importorskip("nbclient", reason="nbclient missing (make pytest installs tests/python/requirements.txt)")
pytest.importorskip("ipykernel", reason="ipykernel missing (make pytest installs tests/python/requirements.txt)")

# The kernel states where it runs; the test checks that it is this venv's python.
WHERE = "import sys, qkv; print(sys.executable); print(qkv.__file__)"


def test_notebook_runs_under_nbclient(tmp_path, monkeypatch):
    if not model_path().exists():
        pytest.skip(f"{model_path()} missing (make model)")
    nb = nbformat.read(ROOT / "examples" / "qkv_python.ipynb", as_version=4)
    nbformat.validate(nb)
    n_code = sum(c.cell_type == "code" for c in nb.cells)
    assert n_code >= 6
    nb.cells.append(nbformat.v4.new_code_cell(WHERE))
    # kernel "python3": this venv's ipykernel (jupyter_client starts "python" as
    # sys.executable); connection files in a directory of the test's own
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter-runtime"))
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=120, allow_errors=False,
                                     resources={"metadata": {"path": str(ROOT / "examples")}})
    client.execute()  # raises CellExecutionError at the first cell that fails

    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, c in enumerate(code):
        errors = [o for o in c.outputs if o.output_type == "error"]
        assert not errors, f"code cell {i}: {errors[0].ename}: {errors[0].evalue}"
    out = "".join(o.get("text", "") for o in code[-1].outputs if o.output_type == "stream").split()
    assert os.path.realpath(out[0]) == os.path.realpath(sys.executable), f"the kernel ran {out[0]}"
    import qkv
    assert os.path.realpath(out[1]) == os.path.realpath(qkv.__file__)
    # the inspect cell's rich output is the page in an iframe
    shown = [o for c in code for o in c.outputs if o.output_type == "execute_result" and "text/html" in o.data]
    assert any(o.data["text/html"].startswith("<iframe") for o in shown), "no inline page"
    text = "".join(o.get("text", "") for c in code for o in c.outputs if o.output_type == "stream")
    assert "rows sum to 1: True" in text
    diff = float(text.split("max |o - float64| =")[1].split()[0])
    assert diff < 2e-5, f"the notebook's attention is {diff} from float64"
    assert "wrote a PNG of" in text
    assert "same as forward(zero_heads=[(10, 3)]): True" in text  # run_with_hooks' zeroed hook_z


def test_a_raising_cell_fails_the_run(tmp_path, monkeypatch):
    """The mechanism the test above relies on: nbclient stops at a cell that raises."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter-runtime"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("raise RuntimeError('cell 2 fails')"),
                                         nbformat.v4.new_code_cell("y = 2")])
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=60)
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="cell 2 fails"):
        client.execute()
    assert nb.cells[2].outputs == [] and nb.cells[2].execution_count is None
