"""progress= of Model's long calls (python/qkv/_progress.py, python/src/progress.c),
on the tiny Llama-3.1 fixture (2 layers x 8 heads) and, for needle, SmolLM2:
  - fn(done, total): done counts up, total stays, the last call has done == total,
    total as the library documents it (ablate: n + n(n+1)/2, 2n, (1 + L Hq) n
    tokens; stream: qkv_stream_steps summed over the six variants; one forward:
    its layers; needle: each cell's length; patch: its components);
  - reporting changes no result (bit for bit, timings aside);
  - an exception raised in fn stops the call and comes out as raised (the same
    object), the KV cache empty, and the next call gives the normal result;
    fn's return value is ignored (False does not cancel);
  - progress=True: a bar when tqdm imports (a stand-in module records it), one
    line on stderr when it does not, and no error with whatever is installed;
  - anything else than None, a bool or a callable is a TypeError.
"""
import sys
import types

import numpy as np
import pytest

import qkv
from conftest import FIXTURES, fixture

TINY = FIXTURES / "model" / "tiny31" / "tiny-llama31.gguf"
N = 24


@pytest.fixture(scope="module")
def tiny():
    m = qkv.Model(TINY, ctx=128, threads=2)
    yield m
    m.close()


@pytest.fixture(scope="module")
def ids():
    return fixture("model", "tiny31", "s64.ids.npy")[:N]


class Log:
    """A progress function that keeps its calls; raises `exc` on call number `at`."""

    def __init__(self, exc=None, at=0, returns=None):
        self.calls, self.exc, self.at, self.returns = [], exc, at, returns

    def __call__(self, done, total):
        self.calls.append((done, total))
        if self.exc is not None and len(self.calls) == self.at:
            raise self.exc
        return self.returns

    def check(self, total):
        """Counts up to total, which stays the same, and ends there."""
        assert self.calls, "no report"
        done = [d for d, _ in self.calls]
        assert all(isinstance(d, int) for d in done)
        assert all(b > a for a, b in zip(done, done[1:])), done
        assert {t for _, t in self.calls} == {total}
        assert done[-1] == total


def same(a, b):
    """Two results of the same call equal, arrays bit for bit."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            if k != "tokens_per_s":
                same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b, equal_nan=True)
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b)
    else:
        assert a == b


# each long call of the tiny model: (name, fn(model, ids, progress), the total it reports)
L, HQ = 2, 8
CALLS = [
    ("ablate all", lambda m, ids, p: m.ablate(ids, progress=p), N + N * (N + 1) // 2),
    ("ablate last", lambda m, ids, p: m.ablate(ids, scope="last", progress=p), 2 * N),
    ("ablate heads", lambda m, ids, p: m.ablate(ids, heads=True, progress=p), (1 + L * HQ) * N),
    ("attention", lambda m, ids, p: m.attention(ids, layers=[0, 1], heads=[3, 5], progress=p), L),
    ("sinks", lambda m, ids, p: m.sinks(ids, skip=2, every=1, progress=p), L),
    ("inspect", lambda m, ids, p: m.inspect(ids, layers=[1], progress=p).html, L),
]


def stream(m, ids, p):
    return m.stream(ids, window=8, sinks=2, chunk=4, progress=p)


def stream_total(n, window, sinks, chunk):
    """Tokens run by the six variants: n - 1 each, and recompute's W - C before each chunk after the first."""
    return 6 * (n - 1) + sum(min(t0, window - chunk) for t0 in range(0, n - 1, chunk))


def patch(m, ids, p):
    """The ids against themselves with token N // 2 replaced: every sweep but head_out_pos."""
    corrupt = ids.copy()
    corrupt[N // 2] = (ids[N // 2] + 7) % m.config.n_vocab
    return vars(m.patch(ids, corrupt, progress=p))


CALLS.append(("stream", stream, stream_total(N, 8, 2, 4)))
CALLS.append(("patch", patch, L * (HQ + 3 * N)))
NAMES = [c[0] for c in CALLS]


@pytest.mark.parametrize("name, call, total", CALLS, ids=NAMES)
def test_counts_up_to_total_and_changes_nothing(tiny, ids, name, call, total):
    plain = call(tiny, ids, None)
    log = Log()
    same(call(tiny, ids, log), plain)
    log.check(total)
    if name in ("attention", "sinks", "inspect"):
        assert log.calls == [(l + 1, L) for l in range(L)]  # one report per layer


@pytest.mark.parametrize("name, call, total", CALLS, ids=NAMES)
def test_an_exception_stops_the_call_and_comes_out_as_raised(tiny, ids, name, call, total):
    plain = call(tiny, ids, None)
    boom = LookupError("stop here")
    log = Log(exc=boom, at=2 if total > 2 else 1)
    with pytest.raises(LookupError) as e:
        call(tiny, ids, log)
    assert e.value is boom
    assert len(log.calls) == log.at  # never called again once it raised
    assert tiny._c.pos() == 0  # the KV cache left empty
    same(call(tiny, ids, None), plain)  # and the model as it was


def test_keyboard_interrupt_comes_out_too(tiny, ids):
    with pytest.raises(KeyboardInterrupt):
        tiny.ablate(ids, progress=Log(exc=KeyboardInterrupt(), at=3))
    same(tiny.ablate(ids, scope="last"), tiny.ablate(ids, scope="last", progress=Log()))


def test_the_return_value_is_ignored(tiny, ids):
    log = Log(returns=False)
    same(tiny.ablate(ids, scope="last", progress=log), tiny.ablate(ids, scope="last"))
    log.check(2 * N)


def test_needle_reports_each_cell(smollm2):
    log = Log()
    got = smollm2.needle(lengths=[256], depths=[0, 50], progress=log)
    assert log.calls == [(256, 512), (512, 512)]
    assert got["cells"][1]["correct"]
    boom = LookupError("first cell")
    with pytest.raises(LookupError) as e:
        smollm2.needle(lengths=[256], depths=[0, 50], progress=Log(exc=boom, at=1))
    assert e.value is boom


def test_true_without_tqdm_draws_one_line_on_stderr(tiny, ids, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `from tqdm import tqdm` raises ImportError
    got = tiny.ablate(ids, scope="last", progress=True)
    same(got, tiny.ablate(ids, scope="last"))
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("\rablate: ") and err.endswith("\n") and err.count("\n") == 1
    assert err.rstrip().split("\r")[-1].startswith(f"ablate: {2 * N}/{2 * N} tokens (100%), ")
    stream(tiny, ids, True)
    err = capsys.readouterr().err
    assert "stream recompute (6/6)" in err and f"{stream_total(N, 8, 2, 4)}/" in err


class FakeTqdm:
    """What _progress.py uses of tqdm.tqdm, recorded."""
    bars = []

    def __init__(self, total=None, desc=None, unit=None):
        self.total, self.desc, self.unit, self.n, self.closed = total, desc, unit, 0, False
        FakeTqdm.bars.append(self)

    def update(self, k):
        assert k > 0
        self.n += k

    def set_description(self, desc):
        self.desc = desc

    def close(self):
        self.closed = True


def test_true_with_tqdm_shows_a_bar(tiny, ids, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeTqdm))
    FakeTqdm.bars.clear()
    tiny.attention(ids, layer=0, head=1, progress=True)
    tiny.ablate(ids, heads=True, progress=True)
    with pytest.raises(LookupError):
        tiny.sinks(ids, progress=Log(exc=LookupError(), at=1))  # a function, not a bar
    a, b = FakeTqdm.bars
    assert (a.desc, a.unit, a.total, a.n, a.closed) == ("attention", " layers", L, L, True)
    assert (b.desc, b.total, b.n, b.closed) == ("ablate --heads", (1 + L * HQ) * N, (1 + L * HQ) * N, True)
    assert capsys.readouterr().err == ""


def test_true_with_whatever_is_installed(tiny, ids):
    same(tiny.sinks(ids, progress=True), tiny.sinks(ids))
    same(stream(tiny, ids, True), stream(tiny, ids, None))


@pytest.mark.parametrize("bad", ["yes", 1, [print]])
def test_anything_else_is_a_type_error(tiny, ids, bad):
    for call in (lambda: tiny.ablate(ids, progress=bad), lambda: tiny.attention(ids, layer=0, head=0, progress=bad),
                 lambda: stream(tiny, ids, bad)):
        with pytest.raises(TypeError, match="progress"):
            call()
    assert tiny.ablate(ids, scope="last", progress=False)["kl"].shape == (N,)
