#!/usr/bin/env python3
"""Whole models, qkv against llama.cpp and ik_llama.cpp, in one run.

Each model, each prompt length N (512 and 4096 by default), 2 threads:
  prompt      N prompt tokens from an empty cache, tok/s
  generation  GEN tokens (64) generated after N tokens already in the cache, tok/s

  qkv          `qkv run -m MODEL --tokens IDS -n GEN --threads T` (model_speed.run_qkv: its
               stderr stats line gives both figures of one run); IDS are the first N tokens of
               GPL-3 (model_speed.prompt_ids). --qkv-passes native,avx2:f16 runs two passes: the
               default kernels and KV cache (f32), and QKV_ISA=avx2 with --kv-dtype f16 (the
               llama-bench tools' default cache). qkv picks its kernels at run time;
               llama.cpp and ik_llama.cpp are compiled for one ISA and have no such switch
  llama-bench  llama.cpp's own (--llama-bench), `-p N -n 0` and `-p 0 -n GEN -d N`, each -fa
               of --llama-fa (0,1); the table shows the better -fa of each test
  ik_llama     ik_llama.cpp's llama-bench (--ik-bench), `-p N -n 0` and `-gp N,GEN` (its
               generation after N tokens; it has no -d), with --ik-args (-rtr 1: run-time
               repacking into its row-interleaved layouts) and each -fa of --ik-fa (1)

The llama-bench tools draw random token ids and cannot take ours; a dense model does
the same work for any ids (the same matmuls and the same attention lengths, the ids
only pick embedding rows), so the speeds compare. Both run with --no-warmup / -w 0
like qkv run, which also starts a fresh process each time; one repetition a call
(-r 1), so a round is one sample of every tool. Rounds run every tool in a rotated
order, so load drift on a shared machine hits them alike; the table gives the
median of the rounds (min-max) and the ratios of the medians.

    python3 bench/whole_model_peers.py --llama-bench $G/llama-bench \\
        --ik-bench /tmp/ik_llama/build/bin/llama-bench --qkv-passes native,native:f16,avx2:f16 --rounds 3 \\
        --md peers.md --json peers.json

The peers are built outside this repository (never committed); see BENCHMARKS.md.
A wrong peer path fails at once with one line and exit status 2.
"""
import argparse, json, os, statistics, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_speed import ROOT, llama_bench_json, prompt_ids, run_qkv  # noqa: E402
from threads_load import cpu_name, loadavg  # noqa: E402

MODELS = {"smol": os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"),
          "gemma3": os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")}


def fail(msg):
    print(f"whole_model_peers: {msg}", file=sys.stderr)
    sys.exit(2)


class QkvRun:
    """qkv run, native kernels or those QKV_ISA names."""

    def __init__(self, binary, isa, kv_dtype, threads, gen):
        self.binary, self.isa, self.kv_dtype, self.threads, self.gen = binary, isa, kv_dtype, threads, gen
        self.name = " ".join(["qkv"] + ([isa] if isa != "native" else []) + ([kv_dtype] if kv_dtype else []))
        self.env = dict(os.environ)
        self.env.pop("QKV_ISA", None)
        if isa != "native":
            self.env["QKV_ISA"] = isa

    def measure(self, model, ids_by_n):
        """{("prompt", N): tok/s, ("gen", N): tok/s} of one run per N."""
        out = {}
        for n, ids in ids_by_n.items():
            pp, tg = run_qkv(self.binary, model, ids, self.gen, self.threads, env=self.env,
                             kv_dtype=self.kv_dtype)[:2]
            out[("prompt", n)], out[("gen", n)] = pp, tg
        return out


class LlamaBench:
    """A llama-bench binary: mainline llama.cpp's (generation at a depth with -d) or
    ik_llama.cpp's (-gp N,GEN); one call for the prompts, one for the generation."""

    def __init__(self, name, binary, flavor, threads, gen, fa, extra):
        self.name, self.binary, self.flavor = name, binary, flavor
        self.threads, self.gen, self.fa, self.extra = threads, gen, fa, extra

    def calls(self, ns):
        ps = ",".join(map(str, ns))
        if self.flavor == "ik":
            yield "prompt", ["-p", ps, "-n", "0", "-w", "0"]
            yield "gen", ["-p", "0", "-n", "0", "-w", "0"] + [x for n in ns for x in ("-gp", f"{n},{self.gen}")]
        else:
            yield "prompt", ["-p", ps, "-n", "0", "--no-warmup"]
            yield "gen", ["-p", "0", "-n", str(self.gen), "-d", ps, "--no-warmup"]

    def measure(self, model, ids_by_n):
        """{(test, N): {fa: tok/s}} of one call per kind of test."""
        ns = list(ids_by_n)
        out = {}
        for kind, args in self.calls(ns):
            entries = llama_bench_json(self.binary, ["-m", model, "-t", str(self.threads), "-r", "1",
                                                     "-fa", ",".join(self.fa), *self.extra, *args])
            for e in entries:
                if kind == "prompt":
                    n = e["n_prompt"]
                elif self.flavor == "ik":  # tg GEN @ pp N
                    n = e["n_prompt"]
                else:
                    n = e["n_depth"]
                fa = str(int(e["flash_attn"])) if not isinstance(e["flash_attn"], str) else e["flash_attn"]
                out.setdefault((kind, n), {})[fa] = e["avg_ts"]
        missing = [k for k in [(t, n) for t in ("prompt", "gen") for n in ns] if k not in out]
        if missing:
            fail(f"{self.binary} returned no figure for {missing}")
        return out


def check_binary(flag, path):
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        fail(f"{flag} {path}: not an executable file")


def cpu_id():
    """'family F model M, ISA' of the first CPU in /proc/cpuinfo."""
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if ":" in line:
                k, v = (x.strip() for x in line.split(":", 1))
                info.setdefault(k, v)
    flags = set(info.get("flags", "").split())
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    isa += " + AMX" if "amx_tile" in flags else ""
    return f"family {info.get('cpu family', '?')} model {info.get('model', '?')}, {isa}"


def wait_quiet(below, max_wait):
    """Seconds waited for the 1-minute load average to fall below `below`
    (gives up after max_wait seconds; below <= 0: no wait)."""
    t0 = time.time()
    while below > 0 and os.getloadavg()[0] >= below and time.time() - t0 < max_wait:
        time.sleep(5)
    return round(time.time() - t0, 1)


def median_minmax(xs):
    return statistics.median(xs), min(xs), max(xs)


def summarize(rounds, tools, models, ns):
    """Per (model, test, N, tool): the median over rounds (min, max, each round's),
    where a llama-bench round counts its better -fa, and which -fa that was most often."""
    rows = []
    for m in models:
        for kind in ("prompt", "gen"):
            for n in ns:
                row = {"model": m, "test": kind, "n": n, "tools": {}}
                for t in tools:
                    vals, fas = [], []
                    for r in rounds:
                        v = r["results"][m][t][f"{kind} {n}"]
                        if isinstance(v, dict):
                            fa = max(v, key=v.get)
                            vals.append(v[fa])
                            fas.append(fa)
                        else:
                            vals.append(v)
                    med, lo, hi = median_minmax(vals)
                    cell = {"median": med, "min": lo, "max": hi, "rounds": vals}
                    if fas:
                        cell["fa"] = max(set(fas), key=fas.count)
                    row["tools"][t] = cell
                rows.append(row)
    return rows


def markdown(rows, tools, meta):
    qkvs = [t for t in tools if t.startswith("qkv")]
    peers = [t for t in tools if not t.startswith("qkv")]
    ratios = [(q, p) for p in peers for q in qkvs]
    name = {"smol": "SmolLM2-135M Q4_1", "gemma3": "Gemma 3 270M Q4_K_M"}
    out = [f"{meta['cpu']} ({meta['cpu_id']}), {meta['threads']} threads, {meta['date_utc']}; median of {meta['rounds']} rounds "
           f"(min-max), tok/s; 1-minute load average {meta['load_1min'][0]:.2f}–{meta['load_1min'][1]:.2f} "
           f"before and after the rounds.\n",
           "| model | test | " + " | ".join(tools + [f"{q} / {p}" for q, p in ratios]) + " |",
           "|---|---|" + "---:|" * (len(tools) + len(ratios))]
    for r in rows:
        test = f"prompt {r['n']}" if r["test"] == "prompt" else f"{meta['gen']} generated after {r['n']}"
        cells = []
        for t in tools:
            c = r["tools"][t]
            fa = f" (-fa {c['fa']})" if "fa" in c and len(meta["fa"][t]) > 1 else ""
            cells.append(f"{c['median']:.1f} ({c['min']:.1f}–{c['max']:.1f}){fa}")
        rat = [f"{r['tools'][q]['median'] / r['tools'][p]['median']:.2f}x" for q, p in ratios]
        out.append(f"| {name.get(r['model'], r['model'])} | {test} | " + " | ".join(cells + rat) + " |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--qkv-passes", default="native",
                    help="qkv passes, ISA[:KV] each: native (no QKV_ISA), avx512, avx2 or scalar; KV the "
                         "--kv-dtype (f32, bf16, f16; left out: qkv's default)")
    ap.add_argument("--llama-bench", help="llama.cpp's llama-bench (left out: not measured)")
    ap.add_argument("--llama-fa", default="0,1", help="llama-bench -fa values; the better one counts")
    ap.add_argument("--ik-bench", help="ik_llama.cpp's llama-bench (left out: not measured)")
    ap.add_argument("--ik-fa", default="1", help="ik_llama.cpp -fa values; the better one counts")
    ap.add_argument("--ik-args", default="-rtr 1", help="more ik_llama.cpp llama-bench flags")
    ap.add_argument("--models", default="smol,gemma3", help="smol, gemma3, or paths of GGUF files")
    ap.add_argument("--prompts", default="512,4096", help="prompt lengths, also the generation depths")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quiet-below", type=float, default=0.0,
                    help="before each round, wait (up to --max-wait seconds) for the 1-minute load average to fall "
                         "below this (0: do not wait); other tenants' work slows llama.cpp's spinning threads most")
    ap.add_argument("--max-wait", type=float, default=600.0)
    ap.add_argument("--md", help="write the markdown table here")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args()

    check_binary("--qkv", a.qkv)
    models = {}
    for m in a.models.split(","):
        path = MODELS.get(m, m)
        if not os.path.isfile(path):
            fail(f"--models: {path} is not a file")
        models[m] = path
    try:
        ns = [int(x) for x in a.prompts.split(",")]
    except ValueError:
        fail(f"--prompts {a.prompts}: not a list of integers")
    tools = []
    for p in a.qkv_passes.split(","):
        isa, _, kv = p.partition(":")
        if isa not in ("native", "avx512", "avx2", "scalar") or kv not in ("", "f32", "bf16", "f16"):
            fail(f"--qkv-passes: '{p}' is not ISA[:KV] (native, avx512, avx2, scalar; f32, bf16, f16)")
        tools.append(QkvRun(a.qkv, isa, kv or None, a.threads, a.gen))
    if a.llama_bench:
        check_binary("--llama-bench", a.llama_bench)
        tools.append(LlamaBench("llama-bench", a.llama_bench, "mainline", a.threads, a.gen,
                                a.llama_fa.split(","), []))
    if a.ik_bench:
        check_binary("--ik-bench", a.ik_bench)
        tools.append(LlamaBench("ik_llama", a.ik_bench, "ik", a.threads, a.gen, a.ik_fa.split(","),
                                a.ik_args.split()))

    ids_by_model = {}
    for m, path in models.items():
        ids = prompt_ids(a.qkv, path, max(ns))
        ids_by_model[m] = {n: ids[:n] for n in ns}
    print(f"# {cpu_name()}; {os.cpu_count()} CPUs; {a.threads} threads; tools: "
          + ", ".join(t.name for t in tools), flush=True)
    rounds = []
    for r in range(a.rounds):
        order = tools[r % len(tools):] + tools[:r % len(tools)]
        waited = wait_quiet(a.quiet_below, a.max_wait)
        rec = {"load_before": loadavg(), "waited_s": waited, "t0": time.time(), "order": [t.name for t in order], "results": {}}
        for m, path in models.items():
            for t in order:
                res = t.measure(path, ids_by_model[m])
                rec["results"].setdefault(m, {})[t.name] = {f"{k} {n}": v for (k, n), v in res.items()}
                print(f"round {r + 1} (load {rec['load_before'].split()[0]}) {m:6s} {t.name:12s} " + "  ".join(
                    f"{k} {n}: " + (f"{v:.1f}" if not isinstance(v, dict) else
                                     "/".join(f"fa{f} {x:.1f}" for f, x in sorted(v.items())))
                    for (k, n), v in sorted(res.items())), flush=True)
        rec["load_after"] = loadavg()
        rounds.append(rec)
        write(a, tools, models, ns, rounds, final=r + 1 == a.rounds)


def write(a, tools, models, ns, rounds, final):
    """The table and the JSON of the rounds so far (rewritten after each round, so
    a run cut short keeps its finished rounds); printed at the end."""
    names = [t.name for t in tools]
    loads = [float(r[k].split()[0]) for r in rounds for k in ("load_before", "load_after")]
    rows = summarize(rounds, names, list(models), ns)
    meta = {"date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_name(), "cpu_id": cpu_id(),
            "cpus": os.cpu_count(), "threads": a.threads, "gen": a.gen, "rounds": len(rounds),
            "load_1min": [min(loads), max(loads)],
            "fa": {t.name: getattr(t, "fa", []) for t in tools}, "argv": sys.argv,
            "models": models, "prompts": ns}
    md = markdown(rows, names, meta)
    if final:
        print("\n" + md)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rounds": rounds, "rows": rows}, f, indent=1)

if __name__ == "__main__":
    main()
