#!/usr/bin/env python3
"""bench/sweep_md.py — `qkv bench --sweep ... --json` as markdown tables (the
form BENCHMARKS.md quotes). Standard library only.

  ./build/qkv bench --sweep all --json > sweep.json
  python3 bench/sweep_md.py sweep.json > sweep.md
"""
import json
import sys

TITLES = {
    "prefill": "Prefill: causal, Lq = Lk = n",
    "chunk": "Chunked prefill: causal, Lq = 512 against Lk",
    "decode": "Decode: Lq = 1 against Lk keys, cold cache",
    "ref": "Reference kernel beside flash, causal, f32",
}


def main():
    data = json.load(open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin)
    m, roof = data["machine"], data.get("roofline")
    print("Machine: %s, %d CPUs, %s kernels, %d threads, load %.2f at the start, %s." % (
        m["cpu"], m["cpus_online"], m["isa"], m["threads"], m["loadavg_1min"], m["date_utc"]))
    if roof:
        print("Roofline (same run): fp32 FMA %.1f GFLOP/s, bf16 dot %.1f GFLOP/s, DRAM read %.1f GB/s." % (
            roof["fma_gflops"], roof["bf16_gflops"], roof["dram_gbs"]))
    for sweep in ("prefill", "chunk", "decode", "ref"):
        rows = [r for r in data["results"] if r["sweep"] == sweep]
        if not rows:
            continue
        decode = sweep == "decode"
        print("\n#### %s\n" % TITLES[sweep])
        rate = "KV GB/s" if decode else "GFLOP/s"
        print("| model | KV | kernel | Lq | Lk | median s | min s | max s | runs | %s | %% of peak | peak RSS MiB | kernel's extra MiB |" % rate)
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            t = r["time_s"]
            frac = "%.0f%%" % (100 * r["peak_fraction"]) if r["peak_fraction"] is not None else "-"
            extra = "%.1f" % r["extra_rss_mib"] if r["extra_rss_mib"] is not None else "-"
            print("| %s | %s | %s | %d | %d | %.4g | %.4g | %.4g | %d | %.1f | %s | %.0f | %s |" % (
                r["model"], r["kv_dtype"], r["kernel"], r["lq"], r["lk"], t["median"], t["min"], t["max"], r["runs"],
                r["kv_gbs"] if decode else r["gflops"], frac, r["peak_rss_mib"], extra))


if __name__ == "__main__":
    main()
