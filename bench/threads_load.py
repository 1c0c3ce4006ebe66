#!/usr/bin/env python3
"""Whole-model speed on a quiet and on a busy machine, qkv against llama.cpp.

Two phases — idle (nothing started here) and loaded (one busy spin process
per core, started and stopped by this script) — take turns: each round runs a
pass of each, in alternating order, so the ratio of the two compares the same
minutes of a host whose speed drifts. A pass runs, one after the other so
every program sees the same load:
  qkv run (this build)              --tokens IDS -n GEN --threads T, each prompt length
  qkv run on one thread (--one-thread)
  qkv run (an older build, --old)   with OMP_WAIT_POLICY unset and =passive
  llama-bench (--llama-bench)       -p N -n GEN -t T, -fa 0 and -fa 1
and prints the median tokens/s of each (prompt, generation), the CPUs its
process used on average (user + system seconds over wall seconds), the load
average before each pass, and each round's idle / loaded ratio. With --one-thread it also prints the
ceiling a fair scheduler allows: with one busy process per CPU, T threads of
ours get T / 2 CPUs at best, so loaded T threads can run at most as fast as
the better of idle T threads / 2 and idle 1 thread (a thread has at most
one CPU), and the table gives loaded / that ceiling. The prompt
ids are bench/model_speed.py's (the first N tokens of GPL-3); llama-bench
draws its own prompt ids, which does not change the work of a dense model.

    /work/oracle-venv/bin/python bench/threads_load.py --threads 2 --prompts 512,4096 --gen 64 \\
        --old /tmp/qkv-base/build/qkv --llama-bench /tmp/llama.cpp/build/bin/llama-bench

llama-bench is llama.cpp's own, built from source (e.g. the llama-cpp-python
sdist's vendored tree) with -DGGML_NATIVE=ON; it is a peer, never part of qkv.
"""
import argparse, os, resource, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_speed import MODEL, ROOT, llama_bench_json, prompt_ids, run_qkv  # noqa: E402


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run_llama_bench(binary, model, n_prompt, gen, threads, fa, reps):
    """Prompt tok/s of n_prompt tokens from an empty cache, and generation
    tok/s of gen tokens after n_prompt tokens already in the cache (-d, as
    qkv run generates after its prompt; a plain -n test would generate from
    an empty cache)."""
    def bench(*args):
        return llama_bench_json(binary, ["-m", model, "-t", str(threads), "-fa", str(fa), "-r", str(reps),
                                         "--no-warmup", *args])[0]["avg_ts"]
    return bench("-p", str(n_prompt), "-n", "0"), bench("-p", "0", "-n", str(gen), "-d", str(n_prompt))


def spin_load(n):
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]


def cpus_used(fn):
    """fn()'s result and the CPUs its child processes used on average while
    it ran (their user + system seconds over the wall seconds): 2.0 is both
    CPUs of a 2-CPU machine, 1.0 the fair share of one with a busy process per CPU."""
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    out = fn()
    r1, t1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    return out, (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / (t1 - t0)


def record(res, key, fn):
    """Runs fn(), which returns (prompt tok/s, generation tok/s, ...), and
    appends (prompt tok/s, generation tok/s, CPUs used) to res[key]; a run
    past its timeout counts as 0 (slower than n / timeout tokens/s)."""
    try:
        out, cpu = cpus_used(fn)
        row = (out[0], out[1], cpu)
    except subprocess.TimeoutExpired:
        row = (0.0, 0.0, 0.0)
    res.setdefault(key, []).append(row)


def one_pass(a, ids_by_n, n_load, res):
    """Every program once at every prompt length under n_load busy processes,
    recorded in res[(program, n)]."""
    procs = spin_load(n_load)
    try:
        for n, ids in ids_by_n.items():
            for kv in a.kv_dtypes.split(","):
                record(res, (f"qkv, {kv} KV", n),
                       lambda: run_qkv(a.qkv, a.model, ids, a.gen, a.threads, kv_dtype=kv))
                if a.one_thread and a.threads > 1:
                    record(res, (f"qkv, {kv} KV, 1 thread", n),
                           lambda: run_qkv(a.qkv, a.model, ids, a.gen, 1, kv_dtype=kv))
            if a.old and n <= a.old_max_prompt:
                for pol in ("default", "passive"):
                    env = dict(os.environ)
                    env.pop("OMP_WAIT_POLICY", None)
                    if pol == "passive":
                        env["OMP_WAIT_POLICY"] = "passive"
                    record(res, (f"qkv before, OMP {pol}", n),
                           lambda: run_qkv(a.old, a.model, ids, a.gen, a.threads, env=env, timeout=a.old_timeout))
            if a.llama_bench and n <= a.llama_max_prompt:
                for fa in (0, 1):
                    record(res, (f"llama-bench -fa {fa}", n),
                           lambda: run_llama_bench(a.llama_bench, a.model, n, a.gen, a.threads, fa, a.llama_reps))
    finally:
        for p in procs:
            p.kill()
            p.wait()


def print_phase(a, name, n_load, res, loads):
    print(f"\n### {name}: {n_load} busy process(es); load average {', '.join(loads)} before each pass; "
          f"{a.threads} threads, median of {a.repeat}\n")
    print(f"| program | prompt tokens | prompt tok/s | generation tok/s ({a.gen} new) | CPUs used |")
    print("|---|---:|---:|---:|---:|")
    for (prog, n), rows in res.items():
        pp, tg, cpu = (statistics.median(r[i] for r in rows) for i in range(3))
        print(f"| {prog} | {n} | {pp:.1f} | {tg:.1f} | {cpu:.2f} |")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--old", help="an older qkv binary (OpenMP threads), run with OMP_WAIT_POLICY unset and passive")
    ap.add_argument("--old-max-prompt", type=int, default=512, help="the older build runs prompts up to this length")
    ap.add_argument("--llama-bench", help="llama.cpp's llama-bench binary")
    ap.add_argument("--llama-reps", type=int, default=1, help="llama-bench -r (no warm-up run)")
    ap.add_argument("--llama-max-prompt", type=int, default=1 << 30, help="llama-bench runs prompts up to this length")
    ap.add_argument("--old-timeout", type=float, default=300, help="seconds an older build's run may take (0 tok/s past it)")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", default="512,4096")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--load", type=int, default=os.cpu_count(), help="busy processes in the loaded phase")
    ap.add_argument("--kv-dtypes", default="f32,f16",
                    help="qkv run's KV caches to measure (llama.cpp's default cache is f16)")
    ap.add_argument("--phases", default="idle,loaded", help="which phases to run")
    ap.add_argument("--one-thread", action="store_true",
                    help="also qkv run on one thread, and the loaded runs against a fair share's ceiling")
    a = ap.parse_args()
    ns = [int(x) for x in a.prompts.split(",")]
    ids_all = prompt_ids(a.qkv, a.model, max(ns))
    ids_by_n = {n: ids_all[:n] for n in ns}
    print(f"model {os.path.basename(a.model)}; CPU: {cpu_name()}; {os.cpu_count()} CPUs")
    # The phases take turns, a pass of each per round (idle first in even
    # rounds, loaded first in odd ones), so the two see the same minutes of a
    # host whose speed drifts; each round's idle / loaded ratio compares
    # passes minutes apart, not phases a quarter of an hour apart.
    phases = [(name, n) for name, n in (("idle", 0), ("loaded", a.load)) if name in a.phases.split(",")]
    res = {name: {} for name, _ in phases}
    loads = {name: [] for name, _ in phases}
    for r in range(a.repeat):
        for name, n_load in (phases if r % 2 == 0 else phases[::-1]):
            loads[name].append(loadavg())
            one_pass(a, ids_by_n, n_load, res[name])
    for name, n_load in phases:
        print_phase(a, name, n_load, res[name], loads[name])
    if len(phases) < 2:
        return
    idle, busy = res["idle"], res["loaded"]
    print("\n### idle / loaded (how many times slower under the load)\n")
    print("Median of the rounds' ratios, each round's idle pass against its loaded pass; the rounds' own in brackets.\n")
    print("| program | prompt tokens | prompt | generation |")
    print("|---|---:|---:|---:|")
    for k in idle:
        if k in busy:
            cols = []
            for i in range(2):
                rs = [ratio(x[i], y[i]) for x, y in zip(idle[k], busy[k])]
                cols.append(f"{fmt_ratio(statistics.median(rs))} ({', '.join(fmt_ratio(x) for x in rs)})")
            print(f"| {k[0]} | {k[1]} | {cols[0]} | {cols[1]} |")
    if a.one_thread and a.threads > 1:
        print_fair_share(a, idle, busy)


def print_fair_share(a, idle, busy):
    """Loaded T threads against what a fair share of the CPUs allows them:
    with a busy process per CPU a thread gets half a CPU, so T threads get
    T / 2 CPUs, which is at best idle T threads' speed / 2, or idle 1
    thread's where T / 2 >= 1 CPU and one thread uses it better. Medians."""
    print(f"\n### loaded {a.threads} threads against a fair share of the CPUs\n")
    print(f"The ceiling is max(idle {a.threads} threads / 2, idle 1 thread): {a.threads} threads beside a busy process "
          "per CPU get half of each CPU. Medians.\n")
    print("| program | prompt tokens | idle 1 thread | idle, all threads | ceiling | loaded | loaded / ceiling |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    med = lambda rows, i: statistics.median(r[i] for r in rows)
    for (prog, n), rows in busy.items():
        one = (prog + ", 1 thread", n)
        if prog.endswith("1 thread") or one not in idle or (prog, n) not in idle:
            continue
        for i, what in ((0, "prompt"), (1, "generation")):
            i1, it, lo = med(idle[one], i), med(idle[(prog, n)], i), med(rows, i)
            ceil = max(it / 2, i1)
            print(f"| {prog}, {what} | {n} | {i1:.1f} | {it:.1f} | {ceil:.1f} | {lo:.1f} | {lo / ceil:.2f} |")


def ratio(a, b):
    return a / b if b > 0 else float("inf")


def fmt_ratio(x):
    return f"{x:.2f}x" if x != float("inf") else "timed out"


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
