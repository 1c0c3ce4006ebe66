#!/usr/bin/env python3
"""Painting one attention row over a long document in the page of `qkv serve`,
in Debian's headless chromium (the browser tests' setup: tests/python/serve_page.py).

    build/pyvenv/bin/python bench/serve_paint.py [--tokens 32768] [--repeats 5]

Prefills GPL-3, repeated, cut to --tokens ids (sent as token ids through the
page's form), then clicks tokens near the end, in a global and in a sliding
layer, and prints the page's own measures of each paint (web/app.js):
paintMs, the DOM update with the style and layout it forces
(performance.now() around both), and frameMs, until the next frame.
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from serve_page import Page, api, start_browser, start_server, stop_server  # noqa: E402

GEMMA3 = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"


def document_ids(qkv, n):
    text = pathlib.Path("/usr/share/common-licenses/GPL-3").read_text()
    out = subprocess.run([str(qkv), "tokenize", "-m", str(GEMMA3), "-f", "-", "--json"], input=text.encode(),
                         capture_output=True, check=True).stdout
    ids = json.loads(out)["ids"]
    body = ids[1:]  # the repeats without their BOS
    while len(ids) < n:
        ids += body
    return ids[:n]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--qkv", default=str(ROOT / "build" / "qkv"))
    a = ap.parse_args()
    ids = document_ids(a.qkv, a.tokens)
    proc, url = start_server(a.qkv, GEMMA3, ctx=a.tokens)
    driver = start_browser()
    try:
        page = Page(driver, url)
        page.choose("input-kind", "tokens")
        page.js("document.getElementById('prompt').value = arguments[0]", ",".join(map(str, ids)))
        t0 = time.time()
        page.prefill(timeout=3600)
        n = page.js("window.qkv.session.n_tokens")
        print(f"prefill of {n} tokens: {time.time() - t0:.1f} s (page to session), "
              f"session bytes {page.js('window.qkv.session.bytes')}")
        windows = api(url, "/api/model")["windows"]
        layers = {"global": windows.index(0), "sliding": windows.index(next(w for w in windows if w))}
        for name, layer in layers.items():
            paint, frame = [], []
            for r in range(a.repeats):
                q = n - 2 - r
                page.show_row(q, layer, r % 2)
                time.sleep(0.2)  # frameMs is written after the next frame
                paint.append(page.js("window.qkv.paintMs"))
                frame.append(page.js("window.qkv.frameMs"))
            print(f"{name} layer {layer}, rows over ~{n} keys: paint median {statistics.median(paint):.1f} ms "
                  f"(max {max(paint):.1f}), to the next frame median {statistics.median(frame):.1f} ms "
                  f"(max {max(frame):.1f})")
    finally:
        driver.quit()
        stop_server(proc)


if __name__ == "__main__":
    main()
