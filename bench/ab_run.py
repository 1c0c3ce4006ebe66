#!/usr/bin/env python3
"""Two builds of qkv, `qkv run` in turns: is B faster than A?

Each round runs A and B once each (A first in even rounds, B first in odd
ones), on the same prompt ids (the first N tokens of GPL-3, as
bench/model_speed.py), threads and load, and the result is the median of the
rounds' B / A ratios, which compares the same minutes of a host whose speed
drifts. With --load K, K busy spin processes run through every round (one per
CPU is threads_load.py's loaded phase).

    python3 bench/ab_run.py --a /tmp/qkv-base/build/qkv --b build/qkv --prompt 512 --rounds 8 --load 2
"""
import argparse, os, statistics, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_speed import MODEL, ROOT, prompt_ids, run_qkv  # noqa: E402
from threads_load import loadavg, spin_load  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the qkv binary to compare against")
    ap.add_argument("--b", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--load", type=int, default=0, help="busy spin processes while the rounds run")
    a = ap.parse_args()
    for b in (a.a, a.b):
        if not os.access(b, os.X_OK):
            sys.exit(f"ab_run: {b} is not an executable")
    ids = prompt_ids(a.b, a.model, a.prompt)
    before = loadavg()
    procs = spin_load(a.load)
    res = {"A": [], "B": []}
    try:
        time.sleep(0.5)
        for r in range(a.rounds):
            for k in ("A", "B") if r % 2 == 0 else ("B", "A"):
                res[k].append(run_qkv(a.a if k == "A" else a.b, a.model, ids, a.gen, a.threads)[:2])
    finally:
        for p in procs:
            p.kill()
            p.wait()
    print(f"{a.prompt} prompt tokens, {a.gen} generated, {a.threads} threads, {a.load} busy process(es); "
          f"load average {before} before, {loadavg()} after; {a.rounds} rounds")
    print("\n| build | prompt tok/s | generation tok/s | each round's generation tok/s |")
    print("|---|---:|---:|---|")
    for k, path in (("A", a.a), ("B", a.b)):
        rows = res[k]
        print(f"| {k}: `{path}` | {statistics.median(x[0] for x in rows):.1f} | "
              f"{statistics.median(x[1] for x in rows):.1f} | {', '.join(f'{x[1]:.1f}' for x in rows)} |")
    for i, name in ((0, "prompt"), (1, "generation")):
        ratios = [b[i] / x[i] for x, b in zip(res["A"], res["B"])]
        print(f"\nB / A, {name}: median {statistics.median(ratios):.3f} ({', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
