"""The notebooks in examples/ run top to bottom under nbclient, as Jupyter would
run them: a real IPython kernel (ipykernel) started from this venv's python,
which has the built qkv installed, with examples/ as its working directory. Any
cell that raises fails the test (nbclient's CellExecutionError names the cell).
  - qkv_python.ipynb: the package on SmolLM2;
  - patching.ipynb: the 年假 / 病假 experiment on Gemma 3; its stored outputs are
    the ones a fresh run prints, and docs/patch-experiment.md quotes them."""
import os
import re
import sys

import pytest

from conftest import GEMMA3, ROOT, head, model_path, recovery_by_hand

nbformat = pytest.importorskip("nbformat", reason="nbformat missing (make pytest installs tests/python/requirements.txt)")
nbclient = pytest.importorskip("nbclient", reason="nbclient missing (make pytest installs tests/python/requirements.txt)")
pytest.importorskip("ipykernel", reason="ipykernel missing (make pytest installs tests/python/requirements.txt)")

# The kernel states where it runs; the test checks that it is this venv's python.
WHERE = "import sys, qkv; print(sys.executable); print(qkv.__file__)"


def execute(name, tmp_path, monkeypatch, min_code, timeout=120):
    """examples/<name> run top to bottom with WHERE appended: (the notebook, its code cells)."""
    nb = nbformat.read(ROOT / "examples" / name, as_version=4)
    nbformat.validate(nb)
    assert sum(c.cell_type == "code" for c in nb.cells) >= min_code
    nb.cells.append(nbformat.v4.new_code_cell(WHERE))
    # kernel "python3": this venv's ipykernel (jupyter_client starts "python" as
    # sys.executable); connection files in a directory of the test's own
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter-runtime"))
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout, allow_errors=False,
                                     resources={"metadata": {"path": str(ROOT / "examples")}})
    client.execute()  # raises CellExecutionError at the first cell that fails
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, c in enumerate(code):
        errors = [o for o in c.outputs if o.output_type == "error"]
        assert not errors, f"code cell {i}: {errors[0].ename}: {errors[0].evalue}"
    return nb, code


def printed(cells):
    """Everything the cells printed (their stream outputs), as one string."""
    return "".join(o.get("text", "") for c in cells for o in c.outputs if o.output_type == "stream")


def test_notebook_runs_under_nbclient(tmp_path, monkeypatch):
    if not model_path().exists():
        pytest.skip(f"{model_path()} missing (make model)")
    nb, code = execute("qkv_python.ipynb", tmp_path, monkeypatch, min_code=6)
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


# What docs/patch-experiment.md quotes from the patching notebook: its printed lines, as a fresh run prints them.
QUOTED = (r"KL\(p_clean \|\| p_corrupt\) = [0-9.]+ nats", r"clean [+-][0-9.]+, corrupt [+-][0-9.]+",
          r"\d+ components in [0-9,]+ layer-token steps", r"would be [0-9,]+",
          r"rho\([^)]*\) = [+-][0-9.]+", r"L\d+ +attn [+-][0-9.]+|L\d+ +mlp [+-][0-9.]+",
          r"L\d+ +p\(年\) = [0-9.]+", r"L\d+ *H\d +[+-][0-9.]+ +[+-][0-9.]+ +[0-9.]+ +[0-9.]+",
          r"first layer where [^:]*: L\d+")


NUMBER = r"[+-]?\d[\d,]*(?:\.\d+)?(?:e-\d+)?"


def close_as_printed(fresh, stored):
    """Two printed lines alike but for their decimals (integers exact), each within
    two units of its last printed digit: the kernels' summation order differs by ISA (AVX-512,
    AVX2, scalar), which may move a last digit; anything more is a change."""
    if re.sub(NUMBER, "#", fresh) != re.sub(NUMBER, "#", stored):
        return False
    for a, b in zip(re.findall(NUMBER, fresh), re.findall(NUMBER, stored)):
        if "." not in b:  # counts, layers, heads: exact
            if a != b:
                return False
            continue
        digits = len(b.split(".")[1].split("e")[0])
        if abs(float(a) - float(b)) > 2 * 10.0 ** -digits + 1e-12:
            return False
    return True


def test_patching_notebook_runs_and_is_quoted(tmp_path, monkeypatch, gemma3):
    """The 年假 / 病假 notebook on Gemma 3, top to bottom: its m.patch and hand-made
    patch agree within the bound conftest.recovery_by_hand derives for that head, the
    stored outputs are what a fresh run prints (the quoted lines below, number by
    number to the printed precision), and every number docs/patch-experiment.md
    quotes is one the stored run printed."""
    if not GEMMA3.exists():
        pytest.skip(f"{GEMMA3} missing (make model)")
    stored = printed(c for c in nbformat.read(ROOT / "examples" / "patching.ipynb", as_version=4).cells
                     if c.cell_type == "code")
    nb, code = execute("patching.ipynb", tmp_path, monkeypatch, min_code=10, timeout=300)
    text = printed(code)
    assert "they differ at position 1 only: True" in text
    shown = [o for c in code for o in c.outputs if o.output_type == "execute_result" and "text/html" in o.data]
    assert any(o.data["text/html"].startswith("<iframe") and "head_out" in o.data["text/html"] for o in shown)
    l, h, diff = re.search(r"L(\d+)H(\d+): m\.patch .* difference (\S+)", text).groups()
    _, bound = recovery_by_hand(gemma3, gemma3.tokenize("年假怎么申请？"), gemma3.tokenize("病假怎么申请？"),
                                f"blocks.{l}.attn.hook_z", head(int(h)), "kl")
    assert float(diff) <= bound, f"m.patch and the hand-made patch differ by {diff}, bound {bound:.1e}"
    fresh_lines = [m for q in QUOTED for m in re.findall(q, text)]
    stored_lines = [m for q in QUOTED for m in re.findall(q, stored)]
    assert len(fresh_lines) >= 20 and len(fresh_lines) == len(stored_lines), \
        f"{len(fresh_lines)} quoted lines printed, {len(stored_lines)} stored"
    changed = [(f, s) for f, s in zip(fresh_lines, stored_lines) if not close_as_printed(f, s)]
    assert not changed, ("the stored outputs are not what a fresh run prints "
                         f"(jupyter execute --inplace examples/patching.ipynb): {changed[:3]}")
    doc = (ROOT / "docs" / "patch-experiment.md").read_text(encoding="utf-8")
    numbers = set(re.findall(r"[+-]?\d+\.\d+(?:e-\d+)?", doc))
    printed_numbers = {n.lstrip("+-") for n in re.findall(r"[+-]?\d+\.\d+(?:e-\d+)?", stored)}
    unprinted = {n for n in numbers if n.lstrip("+-") not in printed_numbers}
    assert not unprinted, f"docs/patch-experiment.md quotes numbers the notebook does not print: {sorted(unprinted)}"


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
