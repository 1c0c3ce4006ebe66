"""Shared pieces of the Python tests: where the fixtures and the model are,
and the runner's summary line. As in the C runner (tests/main.c), a test
that cannot find what it needs is SKIPPED, and any skip fails the run unless
QKV_ALLOW_SKIP=1; the last line is "N passed, N failed, N skipped"."""
import os
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def fixture(*parts):
    """A committed .npy fixture as a numpy array."""
    return np.load(FIXTURES.joinpath(*parts))


def qkv_cli_bin():
    """The CLI the tests compare with: $QKV_BIN, else build/qkv; skips the test when it is missing."""
    path = pathlib.Path(os.environ.get("QKV_BIN", ROOT / "build" / "qkv"))
    if not path.exists():
        pytest.skip(f"{path} missing (make)")
    return path


def model_path():
    return pathlib.Path(os.environ.get("QKV_MODEL", ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct (make model), opened once for the session."""
    import qkv

    path = model_path()
    if not path.exists():
        pytest.skip(f"{path} missing (make model)")
    m = qkv.Model(path, ctx=2048, threads=2)
    yield m
    m.close()


GEMMA3 = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"


@pytest.fixture(scope="session")
def gemma3():
    """Gemma 3 270M (Q4_K_M, make model: the Gemma terms of use apply), opened once for the session."""
    import qkv

    if not GEMMA3.exists():
        pytest.skip(f"{GEMMA3} missing (make model)")
    m = qkv.Model(GEMMA3, ctx=256, threads=2)
    yield m
    m.close()


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    return x - x.max() - np.log(np.exp(x - x.max()).sum())


def at_position(p):
    def replace(act, clean_act):
        act[p] = clean_act[p]
    return replace


def head(h):
    def replace(act, clean_act):
        act[:, h] = clean_act[:, h]
    return replace


def recovery_by_hand(m, clean, corrupt, name, replace, metric):
    """The recovery of one component and how far m.patch's may lie from it: the
    corrupted ids with replace(act, clean_act) at hook `name`, a full forward call,
    the metric at the last position in float64. metric: "kl" or (answer, wrong).

    The bound. Both sides compute the metric in float64 from float32 logits (V
    terms: V * 2^-53, about 3e-11, negligible); they differ in the logits. m.patch
    resumes at the patched layer over the same rows with the same kernels and
    projects the last row alone; this path projects every row, so each logit
    differs by at most delta: twice the largest |forward(ids)[-1] - forward(ids,
    positions="last")[0]| of the clean and corrupted ids on the ISA that runs
    (run_with_hooks cannot project the patched row alone; the ISA's summation order
    sets it: 1.3e-5 AVX-512, 1.9e-5 AVX2, 2.5e-5 scalar on Gemma 3, logits up to 32).
    To first order, moving every logit by at most delta moves
      KL(p||q) by <= delta * (sum |q - p| + sum p |log p - log q - KL|)  (q's, then p's logits),
      a logit difference by <= 2 delta,
    and through R = 1 - A/B (KL) or (p - k)/(c - k) (logit differences):
      |dR| <= (|dA| + |A/B| |dB|) / B,   |dR| <= 2 delta (1 + |1 - R| + |R|) / |c - k|;
    plus half a float32 ulp of R (m.patch stores float32)."""
    _, cache = m.run_with_cache(clean, names_filter=name)

    def hook(act, h):
        replace(act, cache[name])

    last = [m.forward(clean)[-1], m.forward(corrupt)[-1], m.run_with_hooks(corrupt, [(name, hook)])[-1]]
    delta = 2 * max(np.abs(m.forward(ids)[-1].astype(np.float64) - m.forward(ids, positions="last")[0]).max()
                    for ids in (clean, corrupt))
    if metric == "kl":
        lc, lk, lp = (log_softmax(x) for x in last)
        pc = np.exp(lc)

        def kl_and_slope(lq):
            kl = (pc * (lc - lq)).sum()
            return kl, np.abs(np.exp(lq) - pc).sum() + (pc * np.abs(lc - lq - kl)).sum()

        (a, sa), (b, sb) = kl_and_slope(lp), kl_and_slope(lk)
        r, err = 1 - a / b, delta * (sa + abs(a / b) * sb) / b
    else:
        a, w = metric
        c, k, p = (float(x[a]) - float(x[w]) for x in last)
        r = (p - k) / (c - k)
        err = 2 * delta * (1 + abs(1 - r) + abs(r)) / abs(c - k)
    return r, err + float(np.spacing(np.float32(abs(r)))) / 2


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped and os.environ.get("QKV_ALLOW_SKIP") != "1" and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    st = terminalreporter.stats
    passed = len(st.get("passed", []))
    failed = len(st.get("failed", [])) + len(st.get("error", []))
    skipped = len(st.get("skipped", []))
    terminalreporter.write_line(f"{passed} passed, {failed} failed, {skipped} skipped")
