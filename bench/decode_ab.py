#!/usr/bin/env python3
"""Two builds of qkv, decode against a cold 64K-key cache in turns: is B faster than A?

Each round runs, for every ISA and K/V dtype, `qkv bench --preset
llama-3.1-8b --lq 1 --lk 65536 --kv-dtype T --cold --threads N --repeat 10
--roofline --json` with A and B (A first in even rounds, B first in odd
ones). Each command's K/V GB/s is divided by the STREAM-like read its own
roofline measured (the same seconds of a host whose memory speed drifts);
the table gives, per ISA and dtype, the median and best of those fractions
for A and B and the median of the rounds' B / A ratios of K/V GB/s.

    nice -n -20 python3 bench/decode_ab.py --a /tmp/qkv-base/qkv --b build/qkv --rounds 4 --isas avx512,avx2
"""
import argparse, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_dram import bench  # noqa: E402
from prefill_peak import ROOT, loadavg  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="the qkv binary to compare against")
    ap.add_argument("--b", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--isas", default="", help="comma-separated QKV_ISA values (default: the best this CPU has)")
    ap.add_argument("--dtypes", default="f32,bf16,f16")
    ap.add_argument("--lk", type=int, default=65536)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    for b in (a.a, a.b):
        if not os.access(b, os.X_OK):
            print(f"decode_ab: {b} is not an executable", file=sys.stderr)
            sys.exit(2)
    isas = a.isas.split(",") if a.isas else [""]
    dtypes = a.dtypes.split(",")
    frac = {}   # (isa, dt, "A"/"B") -> [K/V GB/s over the command's own read]
    ratio = {}  # (isa, dt) -> [B / A K/V GB/s]
    before = loadavg()
    for r in range(a.rounds):
        for isa in isas:
            for dt in dtypes:
                args = ["--preset", "llama-3.1-8b", "--lq", "1", "--lk", str(a.lk), "--kv-dtype", dt, "--cold",
                        "--threads", str(a.threads), "--repeat", "10", "--roofline"]
                gbs = {}
                for side in (("A", "B") if r % 2 == 0 else ("B", "A")):
                    out = bench(a.a if side == "A" else a.b, isa, args)
                    gbs[side] = out["results"][0]["kv_gbs"]
                    frac.setdefault((isa, dt, side), []).append(gbs[side] / out["roofline"]["dram_gbs"])
                ratio.setdefault((isa, dt), []).append(gbs["B"] / gbs["A"])
    print(f"load average {before} before, {loadavg()} after; {a.rounds} rounds, lk {a.lk}, {a.threads} threads")
    print("| ISA | K/V | A of its read: median (best) | B of its read: median (best) | B / A K/V GB/s: median (range) |")
    print("|---|---|---|---|---|")
    for isa in isas:
        for dt in dtypes:
            fa, fb, q = frac[(isa, dt, "A")], frac[(isa, dt, "B")], ratio[(isa, dt)]
            print(f"| {isa or 'best'} | {dt} | {statistics.median(fa):.2f} ({max(fa):.2f}) | "
                  f"{statistics.median(fb):.2f} ({max(fb):.2f}) | {statistics.median(q):.3f} ({min(q):.2f}–{max(q):.2f}) |")


if __name__ == "__main__":
    main()
