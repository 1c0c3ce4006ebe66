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
