#!/usr/bin/env python3
"""Causal prefill against the FMA peak, per ISA, and an older build beside it.

For every ISA this CPU runs (QKV_ISA=avx512, avx2) it measures the machine's
fp32 FMA peak (`qkv bench --roofline`, the best of --peak-runs runs: a low run
would flatter the fraction), then each shape — Llama-3.1-8B and SmolLM2 heads
(--models llama,smol; gemma3 adds Gemma 3 270M's, 4 / 1 heads of D = 256),
f32/bf16/f16 K/V, n in --n — in --rounds interleaved rounds of `qkv bench
--kernel flash --repeat 3`, this build and (with --old) an older one one after
the other (in turns: the older first in even rounds), and keeps the best (min)
time of each and, with --old, the median of the rounds' old / new ratios (two
builds' runs seconds apart see the same machine). It prints a Markdown table:
GFLOP/s = 4 * Hq * D * n (n + 1) / 2 / s (the visible keys of a causal mask),
and the new build's fraction of the peak.

With --mix, bench/fma_mix.sh (built once into /tmp) also runs for --mix-seconds
just before each shape, on the same threads and ISA: the median rate of the
flash micro-kernels' instruction mix (broadcasts and loads from L1 feeding a
register tile of FMAs), which on some machines is well below the FMA peak for
AVX2. The row then also gives that rate and the new build's fraction of it.

    nice -n -20 python3 bench/prefill_peak.py --threads 2 --old /tmp/qkv-base/qkv
    nice -n -20 python3 bench/prefill_peak.py --threads 2 --mix
"""
import argparse, os, re, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADS = {"llama": (32, 8, 128), "smol": (9, 3, 64), "gemma3": (4, 1, 256)}  # (Hq, Hkv, D); gemma3: Gemma 3 270M
MIX_BIN = "/tmp/qkv-fma_mix/fma_mix"  # built by bench/fma_mix.sh


def bench(binary, isa, args):
    env = dict(os.environ, QKV_ISA=isa)
    r = subprocess.run([binary, "bench"] + args, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        print("prefill_peak: %s bench %s failed: %s" % (binary, " ".join(args), r.stderr.strip()), file=sys.stderr)
        sys.exit(2)
    return r.stdout


def mix_rate(isa, threads, seconds):
    """Median GFLOP/s of fma_mix's micro-kernel mix for isa (bench/fma_mix.c)."""
    r = subprocess.run([MIX_BIN, "--isa", isa, "--threads", str(threads), "--seconds", str(seconds)],
                       capture_output=True, text=True)
    m = re.search(r"mix_GFLOP/s median=([0-9.]+)", r.stdout)
    if r.returncode != 0 or not m:
        print("prefill_peak: fma_mix failed: %s" % (r.stderr.strip() or r.stdout.strip()), file=sys.stderr)
        sys.exit(2)
    return float(m.group(1))


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"), help="this build's qkv")
    ap.add_argument("--old", help="an older build's qkv, measured beside it")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--isas", default="avx512,avx2")
    ap.add_argument("--n", default="2048,4096")
    ap.add_argument("--dtypes", default="f32,bf16,f16")
    ap.add_argument("--models", default="llama,smol")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peak-runs", type=int, default=3)
    ap.add_argument("--mix", action="store_true", help="also the micro-kernels' instruction mix's rate, per shape")
    ap.add_argument("--mix-seconds", type=float, default=2.0)
    a = ap.parse_args()
    if a.mix:
        r = subprocess.run([os.path.join(ROOT, "bench", "fma_mix.sh"), "--seconds", "0.1"], capture_output=True, text=True)
        if r.returncode != 0:
            print("prefill_peak: bench/fma_mix.sh failed: %s" % r.stderr.strip(), file=sys.stderr)
            sys.exit(2)
    for flag, path in (("--qkv", a.qkv), ("--old", a.old)):
        if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            print("prefill_peak: %s %s: not an executable file" % (flag, path), file=sys.stderr)
            sys.exit(2)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("%s; load average %s; %d threads" % (cpu, loadavg(), a.threads), flush=True)
    bins = [("old", a.old)] if a.old else []
    bins.append(("new", a.qkv))
    thr = ["--threads", str(a.threads)]
    head = "| ISA | heads | K/V | n |" + "".join(" %s ms | %s GFLOP/s |" % (b, b) for b, _ in bins)
    head += (" speed-up | median of rounds |" if a.old else "") + " % of FMA peak |"
    head += " mix GFLOP/s | % of mix |" if a.mix else ""
    rows = []
    for isa in a.isas.split(","):
        peaks = []
        for _ in range(a.peak_runs):
            out = bench(a.qkv, isa, ["--n", "256", "--kernel", "flash", "--roofline", "--repeat", "1"] + thr)
            m = re.search(r"fma_GFLOP/s=([0-9.]+)", out)
            if not m:
                sys.exit("prefill_peak: no roofline in: " + out)
            peaks.append(float(m.group(1)))
        peak = max(peaks)
        print("%s: FMA peak %.1f GFLOP/s (runs: %s)" % (isa, peak, ", ".join("%.1f" % p for p in peaks)), flush=True)
        for model in a.models.split(","):
            hq, hkv, d = HEADS[model]
            for dt in a.dtypes.split(","):
                for n in (int(x) for x in a.n.split(",")):
                    best, ratios = {}, []
                    mix = mix_rate(isa, a.threads, a.mix_seconds) if a.mix else None
                    args = ["--n", str(n), "--hq", str(hq), "--hkv", str(hkv), "--d", str(d), "--kernel", "flash",
                            "--kv-dtype", dt, "--repeat", "3"] + thr
                    for r in range(a.rounds):
                        this = {}
                        for name, binary in bins if r % 2 == 0 else bins[::-1]:
                            this[name] = float(re.search(r"min=([0-9.]+)", bench(binary, isa, args)).group(1))
                            best[name] = min(best.get(name, 9e99), this[name])
                        if a.old:
                            ratios.append(this["old"] / this["new"])
                    flops = 4.0 * hq * d * n * (n + 1) / 2
                    line = "| %s | %s | %s | %d |" % (isa, model, dt, n)
                    for name, _ in bins:
                        line += " %.1f | %.1f |" % (best[name] * 1e3, flops / best[name] / 1e9)
                    if a.old:
                        line += " %.2fx | %.3f |" % (best["old"] / best["new"], statistics.median(ratios))
                    line += " %.0f%% |" % (flops / best["new"] / 1e9 / peak * 100)
                    if a.mix:
                        line += " %.1f | %.0f%% |" % (mix, flops / best["new"] / 1e9 / mix * 100)
                    rows.append(line)
                    print(line, flush=True)
    print()
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for line in rows:
        print(line)
    print("load average %s" % loadavg())


if __name__ == "__main__":
    main()
