#!/usr/bin/env python3
"""Decode (Lq = 1, cold caches) against the measured DRAM read bandwidth.

For Llama-3.1-8B and SmolLM2 heads and f32/bf16/f16 K/V caches it runs, in
--rounds interleaved rounds, `qkv bench --preset P --lq 1 --lk N --kernel auto
--cold --roofline --repeat 10 --json` for three cases:

  one call of 16K keys, one call of 64K keys, and a run of layers of 16K keys
  (--layers all for SmolLM2, --layers 4 for Llama: each layer its own K/V)

and keeps each case's best KV GB/s (K/V bytes read / median time) and its
best fraction of the DRAM read bandwidth its own command measured (the same
minute of a host whose memory speed drifts). It also gives the best KV GB/s
against the median and the best `dram_gbs` of all the commands' rooflines (a
VM's memory can read 2x faster for a minute, so the best is an outlier's). It
prints a Markdown table.

    nice -n -20 python3 bench/decode_dram.py --threads 2 --rounds 3
"""
import argparse, json, os, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prefill_peak import ROOT, loadavg  # noqa: E402
PRESETS = {"llama": ("llama-3.1-8b", "4"), "smol": ("smollm2-135m", "all")}
CASES = [("one call, 16K keys", 16384, None), ("one call, 64K keys", 65536, None), ("layers in a run, 16K keys", 16384, "layers")]


def bench(binary, isa, args):
    env = dict(os.environ)
    if isa:
        env["QKV_ISA"] = isa
    r = subprocess.run([binary, "bench"] + args + ["--json"], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        print("decode_dram: bench %s failed: %s" % (" ".join(args), r.stderr.strip()), file=sys.stderr)
        sys.exit(2)
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"), help="the qkv binary")
    ap.add_argument("--isa", default="", help="QKV_ISA for every command (default: the best this CPU has)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", default="f32,bf16,f16")
    ap.add_argument("--models", default="llama,smol")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if not (os.path.isfile(a.qkv) and os.access(a.qkv, os.X_OK)):
        print("decode_dram: --qkv %s: not an executable file" % a.qkv, file=sys.stderr)
        sys.exit(2)
    for m in a.models.split(","):
        if m not in PRESETS:
            print("decode_dram: --models: unknown model %r (llama, smol)" % m, file=sys.stderr)
            sys.exit(2)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("%s; load average %s before; %d threads" % (cpu, loadavg(), a.threads), flush=True)
    best, own, drams, isa_used = {}, {}, [], "?"
    for rnd in range(a.rounds):
        for model in a.models.split(","):
            preset, layers = PRESETS[model]
            for dt in a.dtypes.split(","):
                for name, lk, lay in CASES:
                    args = ["--preset", preset, "--lq", "1", "--lk", str(lk), "--kv-dtype", dt, "--kernel", "auto",
                            "--cold", "--roofline", "--threads", str(a.threads), "--repeat", "10"]
                    if lay:
                        args += ["--layers", layers]
                    out = bench(a.qkv, a.isa, args)
                    isa_used = out["machine"]["isa"]
                    drams.append(out["roofline"]["dram_gbs"])
                    gbs = out["results"][0]["kv_gbs"]
                    key = (model, dt, name)
                    best[key] = max(best.get(key, 0.0), gbs)
                    own[key] = max(own.get(key, 0.0), gbs / out["roofline"]["dram_gbs"])
        print("round %d: DRAM read %.1f GB/s (best so far)" % (rnd + 1, max(drams)), flush=True)
    dram, med = max(drams), statistics.median(drams)
    print("\nISA %s; DRAM read over %d rooflines: median %.1f GB/s, best %.1f, lowest %.1f; load average %s after\n"
          % (isa_used, len(drams), med, dram, min(drams), loadavg()))
    print("Each cell: best KV GB/s; best fraction of its own command's DRAM read; that GB/s over the median and "
          "over the best DRAM read of all the rooflines.\n")
    print("| heads | K/V |" + "".join(" %s |" % n for n, _, _ in CASES))
    print("|---|---|" + "---:|" * len(CASES))
    for model in a.models.split(","):
        for dt in a.dtypes.split(","):
            cells = []
            for n, _, _ in CASES:
                g = best[(model, dt, n)]
                cells.append("%.1f GB/s; %.0f%%; %.0f%% / %.0f%%" % (g, own[(model, dt, n)] * 100, g / med * 100, g / dram * 100))
            print("| %s | %s | %s |" % (PRESETS[model][0], dt, " | ".join(cells)))


if __name__ == "__main__":
    main()
