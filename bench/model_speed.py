#!/usr/bin/env python3
"""Whole-model speed, qkv against llama.cpp, in one run on the same GGUF.

Prompt processing (one prefill of N tokens) and generation (M greedy tokens,
one decode call each), same thread count, same prompt token ids (qkv's
tokenizer and llama.cpp's agree on SmolLM2). qkv is timed through
`qkv run --tokens ... --print-ids` (its stderr stats line: prompt tok/s, generated
tok/s, peak RSS); llama.cpp through llama-cpp-python (its bundled ggml), timed
around eval() here, peak RSS from getrusage of a fresh process.

    /work/oracle-venv/bin/python bench/model_speed.py --threads 2 --prompt 512 --gen 64 --repeat 3

llama-cpp-python is pinned in tools/oracle/requirements.txt; it is a peer, not
a dependency: without it only qkv is measured.
"""
import argparse, json, os, re, resource, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
GPL = "/usr/share/common-licenses/GPL-3"


def prompt_ids(qkv, model, n):
    out = subprocess.run([qkv, "tokenize", "-m", model, "-f", GPL, "--json"], capture_output=True, text=True, check=True)
    ids = json.loads(out.stdout)["ids"]
    if len(ids) < n:
        sys.exit(f"GPL-3 has only {len(ids)} tokens")
    return ids[:n]


def run_qkv(qkv, model, ids, gen, threads, env=None, timeout=None, kv_dtype=None):
    cmd = [qkv, "run", "-m", model, "--tokens", ",".join(map(str, ids)), "-n", str(gen), "--print-ids",
           "--threads", str(threads), "--ctx", str(len(ids) + gen + 8)]
    if kv_dtype:
        cmd += ["--kv-dtype", kv_dtype]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, timeout=timeout)
    m = re.search(r"prompt (\d+) tokens ([\d.]+) tok/s \| generated (\d+) tokens ([\d.]+) tok/s \| peak RSS ([\d.]+) MiB", r.stderr)
    return float(m.group(2)), float(m.group(4)), float(m.group(5)), [int(x) for x in r.stdout.split()]


def llama_bench_json(binary, args):
    """The JSON entries (one per test) of a llama-bench run (llama.cpp's or
    ik_llama.cpp's) with args; one line and exit status 2 if it fails."""
    r = subprocess.run([binary, *args, "-o", "json"], capture_output=True, text=True)
    if r.returncode:
        tail = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        print(f"{os.path.basename(binary)} {' '.join(args)} failed (exit {r.returncode}): {tail}", file=sys.stderr)
        sys.exit(2)
    return json.loads(r.stdout)


LLAMA_CHILD = r'''
import sys, time, json, resource, llama_cpp
model, ids, gen, threads = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
llm = llama_cpp.Llama(model_path=model, n_ctx=len(ids) + gen + 8, n_batch=len(ids), n_ubatch=len(ids),
                      n_threads=threads, n_threads_batch=threads, verbose=False, logits_all=False)
t0 = time.perf_counter(); llm.eval(ids); t1 = time.perf_counter()
out = []
for _ in range(gen):
    tok = llm.sample(temp=0.0)
    out.append(int(tok))
    llm.eval([tok])
t2 = time.perf_counter()
print(json.dumps({"pp": len(ids) / (t1 - t0), "tg": gen / (t2 - t1),
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "ids": out}))
'''


def run_llama(python, model, ids, gen, threads):
    r = subprocess.run([python, "-c", LLAMA_CHILD, model, json.dumps(ids), str(gen), str(threads)],
                       capture_output=True, text=True)
    if r.returncode:
        return None
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return d["pp"], d["tg"], d["rss"], d["ids"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--llama-python", default=sys.executable)
    a = ap.parse_args()
    ids = prompt_ids(a.qkv, a.model, a.prompt)
    rows = {"qkv": [], "llama.cpp": []}
    for _ in range(a.repeat):  # interleaved, so both see the same machine load
        rows["qkv"].append(run_qkv(a.qkv, a.model, ids, a.gen, a.threads))
        r = run_llama(a.llama_python, a.model, ids, a.gen, a.threads)
        if r:
            rows["llama.cpp"].append(r)
    print(f"model {os.path.basename(a.model)}, prompt {a.prompt} tokens, generate {a.gen}, threads {a.threads}, "
          f"median of {a.repeat} (min-max)")
    med = {}
    for name, rs in rows.items():
        if not rs:
            print(f"{name:10s} not available (pip install llama-cpp-python, pinned in tools/oracle/requirements.txt)")
            continue
        pp = [r[0] for r in rs]; tg = [r[1] for r in rs]; rss = max(r[2] for r in rs)
        med[name] = (statistics.median(pp), statistics.median(tg))
        print(f"{name:10s} prompt {statistics.median(pp):8.1f} tok/s ({min(pp):.1f}-{max(pp):.1f})   "
              f"generation {statistics.median(tg):6.1f} tok/s ({min(tg):.1f}-{max(tg):.1f})   peak RSS {rss:.0f} MiB")
    if len(med) == 2:
        q, l = med["qkv"], med["llama.cpp"]
        print(f"qkv / llama.cpp: prompt {q[0] / l[0]:.2f}x, generation {q[1] / l[1]:.2f}x")
        same = sum(1 for x, y in zip(rows["qkv"][0][3], rows["llama.cpp"][0][3]) if x == y)
        print(f"greedy ids equal for the first {next((i for i, (x, y) in enumerate(zip(rows['qkv'][0][3], rows['llama.cpp'][0][3])) if x != y), a.gen)} of {a.gen} tokens")


if __name__ == "__main__":
    main()
