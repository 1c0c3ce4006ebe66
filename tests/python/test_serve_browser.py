"""The page of `qkv serve` in a real browser: Debian's chromium driven by
Debian's chromedriver through Selenium (explicit paths, headless; the driver
path given, so Selenium Manager never runs and nothing is downloaded),
against a real `qkv serve --port 0` on Gemma 3 270M.

What the page shows is read back from the DOM (each painted token's data-w,
the grid's and the lens's data attributes, the KL's data-kl) and compared
with what the JSON API answers for the same question:

- the article's prompt 年假怎么申请？: click 申请, its row painted for a global
  layer's mean of heads and for a sliding layer's head; the grid; zero a head
  and hide a key, the KL and the recomputed row; the lens grid's top-1;
  patching against 病假怎么申请？; three generated tokens, one of them clicked.
  Saves a screenshot (build/serve-page.png; docs/serve.png is a copy);
- the overview of one head on ~1,300 tokens of GPL-3: the canvas holds the
  server's bins; dragging over a region fetches its exact rows, which equal
  the API's, and the largest of them in each block is the overview's bin;
- a document of >= 8,000 tokens (GPL-3 and part of LGPL-3) opened as a file:
  a prefill cancelled mid-way frees its session; the full prefill; the row
  of a late token over a sliding and a global layer, in the chunks painted
  at once and in the first chunk once it is scrolled to; an edit's KL. The
  row's paint time is printed, not asserted (a benchmark, BENCHMARKS.md).
"""
import math
import pathlib
import time

import pytest

from conftest import GEMMA3, ROOT, qkv_cli_bin
from serve_page import Page, api, browser_missing, start_browser, start_server, stop_server

PROMPT = "年假怎么申请？"
CORRUPT = "病假怎么申请？"
LONG_TOKENS = 8000
SHOT = ROOT / "build" / "serve-page.png"

# The page's float32 weights against the API's JSON (9 significant digits:
# the same float32): equal up to the float32 rounding of the text.
REL = 1e-6


def close(a, b):
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-9)


@pytest.fixture(scope="module")
def server():
    """`qkv serve` on Gemma 3, a free loopback port; yields its base URL.
    Stopped with SIGTERM at the end, which must exit 0."""
    qkv = qkv_cli_bin()
    if not GEMMA3.exists():
        pytest.skip(f"{GEMMA3} missing (make model)")
    proc, url = start_server(qkv, GEMMA3, ctx=8448)
    yield url
    rc, err = stop_server(proc)
    assert rc == 0, err


@pytest.fixture(scope="module")
def browser():
    missing = browser_missing()
    if missing:
        pytest.skip(missing)
    driver = start_browser()
    yield driver
    driver.quit()


def check_row(page, url, query, layer, head, need=None):
    """The painted row equals the API's; `need`: positions that must be among the painted ones."""
    row = api(url, f"/api/sessions/{page.sid()}/attention?layer={layer}&head={head}&query={query}")["weights"]
    assert len(row) == query + 1
    painted = page.painted()
    assert painted, "no painted token"
    assert query in painted
    for i in need if need is not None else range(query + 1):
        assert i in painted, f"position {i} is not painted"
    bad = [(i, w, row[i]) for i, w in painted.items() if not close(w, row[i])]
    assert not bad, f"{len(bad)} painted weights differ from the API's, first {bad[:5]}"
    assert close(float(page.el("#sink").get_attribute("data-w")), row[0])
    top = max(range(1, query + 1), key=lambda k: row[k])
    assert int(page.el("#top-keys li").get_attribute("data-key")) == top
    if top in painted:
        assert "w15" in page.el(page.token(top)).get_attribute("class").split()
    return row


def apply_edit(page, url, zero, hide):
    """Pick heads in the grid and hide keys by clicking tokens, apply; the KL
    and the distributions equal the API's for the same edit."""
    page.click("input[name=mode][value=hide]")
    for i in hide:
        page.click_token(i)
    page.click("input[name=mode][value=row]")
    page.click("#zero-mode")
    for l, h in zero:
        page.click(f"#grid td.cell[data-layer='{l}'][data-head='{h}']")
    page.click("#zero-mode")
    assert all(f"L{l} h{h}" in page.el("#zero-list").text for l, h in zero)
    page.js("document.getElementById('kl').removeAttribute('data-kl')")
    page.click("#apply-edit")
    page.wait("document.getElementById('kl').dataset.kl !== undefined", 300)
    page.idle()
    kl = float(page.el("#kl").get_attribute("data-kl"))
    want = api(url, f"/api/sessions/{page.sid()}/edit", {"zero_heads": [list(z) for z in zero], "exclude": sorted(hide)})
    assert close(kl, want["kl"]), (kl, want["kl"])
    assert kl > 0
    after = [int(li.get_attribute("data-id")) for li in page.d.find_elements("css selector", "#edit-after li")]
    assert after == [t["id"] for t in want["after"]["top"]][:len(after)] and after
    return want


def check_lens(page, url, positions):
    """Every lens cell's top-1 (id, piece, p) equals the API's lens of the same window."""
    p0 = positions[0]
    lens = api(url, f"/api/sessions/{page.sid()}/lens?k=5&pos0={p0}&pos1={positions[-1] + 1}")
    cells = page.js("Array.from(document.querySelectorAll('#lens td.lcell'))"
                    ".map(c => [Number(c.dataset.layer), Number(c.dataset.pos), Number(c.dataset.id),"
                    " Number(c.dataset.p), c.textContent])")
    assert len(cells) == lens["n_layer"] * len(positions)
    assert {p for _, p, _, _, _ in cells} == set(positions)
    for l, p, tid, prob, text in cells:
        assert tid == lens["top_ids"][l][p - p0][0], (l, p)
        assert text == lens["top_pieces"][l][p - p0][0]
        assert close(prob, lens["top_probs"][l][p - p0][0])


def test_article_prompt(server, browser):
    page = Page(browser, server)
    box = page.el("#prompt")
    box.clear()
    box.send_keys(PROMPT)
    page.prefill()
    tokens = page.js("window.qkv.tokens")
    pieces = [t["piece"] for t in tokens]
    assert "申请" in pieces, pieces
    q = pieces.index("申请")
    model = api(server, "/api/model")
    glob = model["windows"].index(0)
    slide = model["windows"].index(next(w for w in model["windows"] if w))

    page.show_row(q, glob, "mean")
    check_row(page, server, q, glob, "mean")
    page.show_row(q, slide, 1)
    check_row(page, server, q, slide, 1)

    grid = api(server, f"/api/sessions/{page.sid()}/grid?query={q}&metric=sink")
    cells = page.js("Array.from(document.querySelectorAll('#grid td.cell'))"
                    ".map(c => [Number(c.dataset.layer), Number(c.dataset.head), Number(c.dataset.v)])")
    assert len(cells) == model["n_layer"] * model["n_head"]
    assert all(close(v, grid["values"][l][h]) for l, h, v in cells)

    # the lens (loaded with the session: few tokens) before any edit
    page.wait("document.querySelectorAll('#lens td.lcell').length > 0")
    check_lens(page, server, list(range(len(tokens))))

    apply_edit(page, server, [(3, 1)], [])
    page.click("#clear-edit")
    page.idle()
    apply_edit(page, server, [(3, 1)], [pieces.index("假")])
    # the recomputed row of the last query, painted "after" for the chosen head
    n = len(tokens)
    row = api(server, f"/api/sessions/{page.sid()}/edit",
              {"zero_heads": [[3, 1]], "exclude": [pieces.index("假")], "layer": slide, "head": 1})["row"]
    assert page.js("window.qkv.row.query") == n - 1
    painted = page.painted()
    assert all(close(painted[i], row["after"][i]) for i in range(n)), (painted, row["after"])
    assert "hid" in page.el(page.token(pieces.index("假"))).get_attribute("class").split()
    page.click("#clear-edit")
    page.idle()

    page.show_row(q, glob, "mean")
    page.js("window.scrollTo(0, 0)")
    SHOT.parent.mkdir(exist_ok=True)
    page.d.save_screenshot(str(SHOT))
    assert SHOT.stat().st_size > 10000

    # patching: the head_out map equals the API's; clicking a head opens it
    corrupt = page.el("#corrupt")
    corrupt.clear()
    corrupt.send_keys(CORRUPT)
    page.click("#run-patch")
    page.wait("document.querySelectorAll('#head-out td.pcell').length > 0", 300)
    page.idle()
    patch = api(server, f"/api/sessions/{page.sid()}/patch", {"corrupt": CORRUPT, "sweeps": ["head_out", "resid_pre"]})
    cells = page.js("Array.from(document.querySelectorAll('#head-out td.pcell'))"
                    ".map(c => [Number(c.dataset.layer), Number(c.dataset.head), c.dataset.v])")
    assert len(cells) == model["n_layer"] * model["n_head"]
    for l, h, v in cells:
        w = patch["head_out"][l][h]
        assert (v == "" and w is None) or close(float(v), w), (l, h, v, w)
    cells = page.js("Array.from(document.querySelectorAll('#resid td.pcell')).map(c => c.dataset.v)")
    want = [w for row in patch["resid_pre"] for w in row]
    assert len(cells) == len(want) == model["n_layer"] * n
    assert all((v == "" and w is None) or close(float(v), w) for v, w in zip(cells, want))
    page.click("#head-out td.pcell[data-layer='4'][data-head='2']")
    page.wait("window.qkv.row && window.qkv.row.layer === 4 && window.qkv.row.head === 2")
    page.idle()
    check_row(page, server, n - 1, 4, 2)

    # generation: three greedy tokens, appended and inspectable
    page.el("#gen-n").clear()
    page.el("#gen-n").send_keys("3")
    page.click("#generate")
    page.wait(f"window.qkv.session.n_tokens === {n + 3} && window.qkv.abort === null", 120)
    page.idle()
    assert page.js("document.querySelectorAll('#tokens span.t.gen').length") == 3
    session = api(server, f"/api/sessions/{page.sid()}")
    assert [t["id"] for t in session["tokens"]] == [t["id"] for t in page.js("window.qkv.tokens")]
    page.show_row(n + 1, glob, 0)
    check_row(page, server, n + 1, glob, 0)
    assert not page.severe_logs()


def long_text():
    """GPL-3 and as much of LGPL-3 as takes the document past LONG_TOKENS tokens."""
    lic = pathlib.Path("/usr/share/common-licenses")
    return (lic / "GPL-3").read_text() + (lic / "LGPL-3").read_text()[:3000]


def test_long_document(server, browser, tmp_path):
    page = Page(browser, server)
    doc = tmp_path / "long.txt"
    doc.write_text(long_text())
    page.el("#file").send_keys(str(doc))
    page.wait("document.getElementById('prompt').value.length > 30000")
    before = {s["id"] for s in api(server, "/api/sessions")["sessions"]}

    # a prefill cancelled once its progress shows: the server frees the session
    page.click("#prefill")
    page.wait("document.getElementById('progress').value > 0", 120)
    page.click("#cancel")
    page.wait("window.qkv.abort === null")
    page.idle()
    assert page.el("#status").text == "cancelled"
    end = time.time() + 30
    while {s["id"] for s in api(server, "/api/sessions")["sessions"]} - before and time.time() < end:
        time.sleep(0.2)
    assert not {s["id"] for s in api(server, "/api/sessions")["sessions"]} - before

    t0 = time.time()
    page.prefill()
    n = page.js("window.qkv.session.n_tokens")
    print(f"\nlong document: {n} tokens prefilled in {time.time() - t0:.1f} s")
    assert n >= LONG_TOKENS
    model = api(server, "/api/model")
    glob = model["windows"].index(0)
    slide = model["windows"].index(next(w for w in model["windows"] if w))
    window = model["windows"][slide]
    q = n - 3

    # a sliding layer: keys outside the window are drawn `out` with weight 0
    page.show_row(q, slide, 2)
    row = check_row(page, server, q, slide, 2, need=range(q - window + 1, q + 1))
    out = page.js("Array.from(document.querySelectorAll("
                  "`#tokens .chunk[data-row='${window.qkv.rowId}'] span.t.out`)).map(s => Number(s.dataset.i))")
    assert out and all(i < q - window + 1 and row[i] == 0 for i in out)

    page.show_row(q, glob, 0)
    check_row(page, server, q, glob, 0, need=range(q - 400, q + 1))
    print(f"row over {q + 1} keys painted in {page.js('window.qkv.paintMs'):.1f} ms, "
          f"{page.js('window.qkv.frameMs'):.1f} ms to the next frame (chromium, headless)")
    # the first chunk, painted once scrolled to
    page.js("document.getElementById('tokens').scrollTop = 0")
    page.wait("document.querySelector('#tokens .chunk').dataset.row === String(window.qkv.rowId)")
    check_row(page, server, q, glob, 0, need=range(0, 300))

    apply_edit(page, server, [(glob, 1)], [q - 1])
    page.click("#clear-edit")
    page.idle()

    # the lens of the 48 positions up to the page's query (the prompt runs again up to it)
    page.click("#load-lens")
    page.wait("document.querySelectorAll('#lens td.lcell').length > 0", 300)
    last = page.js("window.qkv.query")
    check_lens(page, server, list(range(last - 47, last + 1)))
    assert not page.severe_logs()


def test_overview_zoom(server, browser):
    from selenium.webdriver.common.action_chains import ActionChains

    page = Page(browser, server)
    text = pathlib.Path("/usr/share/common-licenses/GPL-3").read_text()[:6000]
    page.js("document.getElementById('prompt').value = arguments[0]", text)
    page.prefill()
    n = page.js("window.qkv.session.n_tokens")
    glob = api(server, "/api/model")["windows"].index(0)
    page.choose("layer", glob)
    page.choose("head", 1)
    page.idle()
    page.click("#overview-pane summary")
    page.wait(f"window.qkv.overview && window.qkv.overview.layer === {glob} && window.qkv.overview.head === 1")
    page.idle()
    ov = api(server, f"/api/sessions/{page.sid()}/overview?layer={glob}&head=1")
    b, block = ov["bins"], ov["block"]
    assert ov["n"] == n and b == -(-n // block)
    assert page.js("[document.getElementById('overview').width, document.getElementById('overview').height]") == [b, b]
    assert page.js("window.qkv.overview.values") == ov["values"]

    # drag from bin (b - 3, 0) to bin (b - 1, 2): the last query blocks over the first keys
    canvas = page.el("#overview")
    page.d.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    box = page.js("(c => [c.offsetWidth, c.offsetHeight, c.clientLeft, c.clientTop, c.clientWidth, c.clientHeight])"
                  "(document.getElementById('overview'))")

    def at(r, c):  # offsets from the canvas's centre (border box) to the centre of bin (r, c)
        w, h, left, top, cw, ch = box
        return (round(left + (c + 0.5) * cw / b - w / 2), round(top + (r + 0.5) * ch / b - h / 2))

    ActionChains(page.d).move_to_element_with_offset(canvas, *at(b - 3, 0)).click_and_hold() \
        .move_to_element_with_offset(canvas, *at(b - 1, 2)).release().perform()
    page.wait("window.qkv.zoom !== null")
    page.idle()
    z = page.js("window.qkv.zoom")
    # a bin is about 2 pixels here: the drag's ends may land one bin off
    r0, c0 = z["q0"] // block, z["k0"] // block
    assert z["q0"] % block == 0 and abs(r0 - (b - 3)) <= 1 and c0 <= 1, z
    assert z["q1"] >= min(n, z["q0"] + 256, (b - 1) * block) and z["q1"] <= min(n, z["q0"] + 256)
    assert 2 * block <= z["k1"] <= min(4 * block, z["q1"])
    rows = api(server, f"/api/sessions/{page.sid()}/rows?layer={glob}&head=1"
                       f"&q0={z['q0']}&q1={z['q1']}&k0={z['k0']}&k1={z['k1']}")["values"]
    assert len(z["values"]) == len(rows) == z["q1"] - z["q0"]
    assert all(close(a, w) for ra, rw in zip(z["values"], rows) for a, w in zip(ra, rw))
    # each whole block's largest exact weight is its bin: the overview is max-pooled from
    # the prefill's own rows, the zoom recomputed one row at a time (same up to rounding)
    for R in range(z["q0"] // block, z["q1"] // block):
        for C in range(z["k0"] // block, z["k1"] // block):
            top = max(rows[q - z["q0"]][k - z["k0"]] for q in range(R * block, (R + 1) * block)
                      for k in range(C * block, (C + 1) * block) if k <= q)
            assert math.isclose(top, ov["values"][R][C], rel_tol=1e-4, abs_tol=1e-7), (R, C, top, ov["values"][R][C])
    assert not page.severe_logs()
