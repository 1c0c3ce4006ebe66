"""progress= of qkv.Model's long calls (ablate, stream, needle, attention, sinks, inspect).

    None / False  nothing (the default: scripts, notebooks and tests stay quiet)
    fn            fn(done, total) after each unit of work: done counts up to total,
                  the last call has done == total. Its return value is ignored; an
                  exception it raises stops the call (the KV cache left empty, the
                  model usable) and comes out of it as raised.
    True          a tqdm bar when tqdm can be imported, else one line on stderr
                  redrawn in place (as the CLI's); tqdm is never a dependency.

The units are the library's: tokens run through the model (ablate, stream,
needle) or layers of one forward call (attention, sinks, inspect).
"""
import sys
import time

_REDRAW_S = 0.1  # the stderr line: at most 10 redraws a second, as the CLI's


def _clock(s):
    """1:05, 12:00:09"""
    t = max(int(s + 0.5), 0)
    return f"{t // 3600}:{t // 60 % 60:02d}:{t % 60:02d}" if t >= 3600 else f"{t // 60}:{t % 60:02d}"


class _Line:
    """progress=True without tqdm: "<label>: done/total unit (p%), elapsed, ~rest left"
    on stderr, redrawn with \\r, left there with a newline when the call ends."""

    def __init__(self, label, unit, total):
        self.label, self.unit, self.total = label, unit, total
        self.done, self.shown, self.t0, self.last = 0, 0, time.monotonic(), None

    def _draw(self, now):
        elapsed = now - self.t0
        if self.total:
            frac = min(self.done / self.total, 1.0)
            rest = f"~{_clock(elapsed * (1 - frac) / frac)}" if self.done > 0 else "?"
            line = (f"{self.label}: {self.done}/{self.total} {self.unit} ({100 * frac:.0f}%), "
                    f"{_clock(elapsed)} elapsed, {rest} left")
        else:
            line = f"{self.label}: {_clock(elapsed)} elapsed"
        sys.stderr.write("\r" + line.ljust(self.shown))  # blanks what is left of a longer line
        sys.stderr.flush()
        self.shown, self.last = len(line), now

    def update(self, done, total):
        self.done, self.total = done, total
        now = time.monotonic()
        if self.last is None or now - self.last >= _REDRAW_S or done >= total:
            self._draw(now)

    def stage(self, label):
        self.label = label
        self._draw(time.monotonic())

    def close(self):
        if self.shown:
            self._draw(time.monotonic())
            sys.stderr.write("\n")
            sys.stderr.flush()


class _Bar:
    """progress=True with tqdm: one bar, its total the library's."""

    def __init__(self, tqdm, label, unit, total):
        self.bar = tqdm(total=total, desc=label, unit=f" {unit}")  # "12.5 tokens/s"

    def update(self, done, total):
        if self.bar.total != total:
            self.bar.total = total
        self.bar.update(done - self.bar.n)

    def stage(self, label):
        self.bar.set_description(label)

    def close(self):
        self.bar.close()


def _view(label, unit, total):
    try:
        from tqdm import tqdm  # imported here: tqdm is optional
    except ImportError:
        return _Line(label, unit, total)
    return _Bar(tqdm, label, unit, total)


class Progress:
    """One long call's report, a context manager: fn is what the engine calls
    (None: nothing), report(done, total) calls it from Python, part(offset, total)
    is fn for a piece of the call that counts from offset of the whole total,
    stage(label) names what runs now (on the bar or line only)."""

    def __init__(self, progress, label, unit, total=None):
        self._view = None
        if progress is None or progress is False:
            self.fn = None
        elif progress is True:
            self._view = _view(label, unit, total)
            self.fn = self._view.update
        elif callable(progress):
            self.fn = progress
        else:
            raise TypeError(f"progress: expected None, True or a function fn(done, total), "
                            f"got {type(progress).__name__}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._view is not None:
            self._view.close()

    def report(self, done, total):
        if self.fn is not None:
            self.fn(done, total)

    def part(self, offset, total):
        if self.fn is None:
            return None
        fn = self.fn
        return lambda done, _: fn(offset + done, total)

    def stage(self, label):
        if self._view is not None:
            self._view.stage(label)
