"""bench/whole_model_peers.py: a wrong or failing peer is one line and exit 2;
both llama-bench flavours' JSON is read into the right cells (a stand-in
llama-bench that answers what the real ones answer, with made-up speeds); the
better -fa of each round counts."""
import json
import subprocess
import sys

from conftest import ROOT, model_path, qkv_cli_bin

SCRIPT = ROOT / "bench" / "whole_model_peers.py"
sys.path.insert(0, str(ROOT / "bench"))

# A llama-bench stand-in: answers -o json like llama.cpp's (-d DEPTHS) or
# ik_llama.cpp's (-gp N,GEN), at made-up speeds: prompt 1000 + N + 10·fa,
# generation 100 + N / 100 + fa.
FAKE = r'''#!PYTHON
import json, sys
a = sys.argv[1:]
def vals(flag):
    return [x for i, f in enumerate(a) if f == flag for x in a[i + 1].split(",")]
out = []
for fa in map(int, vals("-fa")):
    for p in map(int, vals("-p")):
        if p:
            out.append({"n_prompt": p, "n_gen": 0, "n_depth": 0, "flash_attn": FA(fa), "avg_ts": 1000.0 + p + 10 * fa})
    gen = [int(x) for x in vals("-n") if x != "0"]
    for d in map(int, vals("-d")):
        out.append({"n_prompt": 0, "n_gen": gen[0], "n_depth": d, "flash_attn": FA(fa), "avg_ts": 100.0 + d / 100 + fa})
    gps = vals("-gp")
    for n, g in zip(gps[::2], gps[1::2]):
        out.append({"n_prompt": int(n), "n_gen": int(g), "flash_attn": FA(fa), "avg_ts": 100.0 + int(n) / 100 + fa})
print(json.dumps(out))
'''


def fake(tmp_path, name, fa_repr):
    p = tmp_path / name
    p.write_text(FAKE.replace("PYTHON", sys.executable).replace("FA(fa)", fa_repr))
    p.chmod(0o755)
    return p


def run(*args):
    """The script on SmolLM2 alone (the model `make model` fetches)."""
    return subprocess.run([sys.executable, str(SCRIPT), "--qkv", str(qkv_cli_bin()), "--models", str(model_path()),
                           *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def one_line_exit_2(r, *words):
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0]


def test_wrong_peer_path_is_one_line_and_exit_2(tmp_path):
    one_line_exit_2(run("--llama-bench", tmp_path / "no-such-llama-bench"), "--llama-bench", "not an executable")
    one_line_exit_2(run("--ik-bench", ROOT / "README.md"), "--ik-bench", "not an executable")
    one_line_exit_2(run("--qkv-passes", "avx3"), "--qkv-passes")
    one_line_exit_2(run("--qkv-passes", "avx2:f8"), "--qkv-passes")


def test_failing_peer_is_one_line_and_exit_2():
    r = run("--prompts", "8", "--gen", "2", "--rounds", "1", "--llama-bench", "/bin/false")
    one_line_exit_2(r, "false", "failed")


def test_both_flavours_read_into_their_cells(tmp_path):
    main, ik = fake(tmp_path, "llama-bench", "fa"), fake(tmp_path, "ik-bench", "bool(fa)")
    out = tmp_path / "peers.json"
    r = run("--prompts", "8,16", "--gen", "2", "--rounds", "2", "--llama-bench", main,
            "--ik-bench", ik, "--ik-fa", "0,1", "--qkv-passes", "native,avx2:f16", "--json", out,
            "--md", tmp_path / "peers.md")
    assert r.returncode == 0, r.stderr
    rows = {(x["test"], x["n"]): x["tools"] for x in json.loads(out.read_text())["rows"]}
    for n in (8, 16):
        for tool in ("llama-bench", "ik_llama"):
            assert rows[("prompt", n)][tool]["median"] == 1000 + n + 10
            assert rows[("gen", n)][tool]["median"] == 100 + n / 100 + 1
            assert rows[("prompt", n)][tool]["fa"] == "1"
        for tool in ("qkv", "qkv avx2 f16"):
            assert rows[("prompt", n)][tool]["median"] > 0 and rows[("gen", n)][tool]["median"] > 0
    md = (tmp_path / "peers.md").read_text()
    assert "| qkv / llama-bench |" in md and "| qkv avx2 f16 / ik_llama |" in md and md.count("\n| ") == 5


def test_the_better_fa_of_each_round_counts():
    import whole_model_peers as w

    def rnd(q, fa0, fa1):
        return {"results": {"m": {"qkv": {"prompt 8": q, "gen 8": 1.0},
                                  "lb": {"prompt 8": {"0": fa0, "1": fa1}, "gen 8": {"0": 1.0}}}}}

    rounds = [rnd(50.0, 10.0, 30.0), rnd(70.0, 40.0, 20.0), rnd(60.0, 5.0, 35.0)]
    rows = w.summarize(rounds, ["qkv", "lb"], ["m"], [8])
    prompt = [r for r in rows if r["test"] == "prompt"]
    assert len(prompt) == 1
    lb = prompt[0]["tools"]["lb"]
    assert lb["rounds"] == [30.0, 40.0, 35.0] and lb["median"] == 35.0 and lb["fa"] == "1"
    assert prompt[0]["tools"]["qkv"]["median"] == 60.0
