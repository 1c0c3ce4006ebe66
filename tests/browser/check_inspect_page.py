#!/usr/bin/env python3
"""Browser test of the page `qkv inspect --html` writes, in headless Chromium
(Debian package `chromium`) driven through the DevTools protocol over a pipe
(--remote-debugging-pipe: NUL-separated JSON on fds 3 and 4), so nothing but
the Python standard library is needed.

    check_inspect_page.py PAGE.html SCREENSHOT.png LAYERS HEADS

Checks: the page loads from file:// with no script error (uncaught exceptions
and console errors), the grid holds LAYERS x HEADS maps, choosing another head
(a real mouse click on its thumbnail, then the head <select>) changes the large
view's pixels and title, hovering the large view shows a weight, and the log
scale and hide-token-0 toggles redraw without error. Saves a screenshot.
Prints one line per check; exit status 0 only if all passed, 77 if Chromium
is missing.
"""
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time


def find_chromium():
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class Browser:
    def __init__(self, exe):
        self.profile = tempfile.mkdtemp(prefix="qkv-chromium-")
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()

        def setup_fds():  # in the child: the pipe ends become fds 3 and 4 (via fds >= 10, never clobbered)
            r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        args = [exe, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--allow-file-access-from-files", "--user-data-dir=" + self.profile,
                "--window-size=1400,1000", "about:blank"]
        self.proc = subprocess.Popen(args, pass_fds=(3, 4, to_child_r, from_child_w), preexec_fn=setup_fds,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.next_id = 0
        self.buf = b""
        self.events = []

    def _read_message(self, timeout):
        deadline = time.time() + timeout
        while b"\0" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError("no answer from chromium")
            r, _, _ = select.select([self.from_child], [], [], left)
            if r:
                chunk = os.read(self.from_child, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=None, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_child, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read_message(timeout)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method, timeout=60):
        deadline = time.time() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._read_message(max(0.01, deadline - time.time())))

    def close(self):
        try:
            self.send("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    page, shot, layers, heads = os.path.abspath(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    exe = find_chromium()
    if not exe:
        print("skipped: chromium missing")
        return 77
    b = Browser(exe)
    failed = 0

    def check(ok, what):
        nonlocal failed
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failed += 1

    try:
        target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        b.send("Runtime.enable", session=s)
        b.send("Page.enable", session=s)
        b.send("Emulation.setDeviceMetricsOverride",
               {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False}, session=s)
        t_nav = time.time()
        b.send("Page.navigate", {"url": "file://" + page}, session=s)
        b.wait_event("Page.loadEventFired", timeout=120)

        def js(expr):
            r = b.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True},
                       session=s)
            if "exceptionDetails" in r:
                raise RuntimeError("evaluate %s: %s" % (expr, r["exceptionDetails"]))
            return r["result"].get("value")

        for _ in range(600):
            if js("!!(window.qkv && window.qkv.ready)"):
                break
            time.sleep(0.1)
        check(js("!!(window.qkv && window.qkv.ready)"),
              "page script ran to the end (window.qkv.ready) %.0f ms after navigation" % ((time.time() - t_nav) * 1e3))
        n_maps = js("document.querySelectorAll('#grid canvas.thumb').length")
        check(n_maps == layers * heads, "grid has %d x %d = %d maps (found %s)" % (layers, heads, layers * heads, n_maps))
        drawn = js("Array.from(document.querySelectorAll('#grid canvas.thumb')).every(c => c.width > 0)")
        check(drawn, "every thumbnail is drawn")

        big = "document.getElementById('bigc').toDataURL()"
        before, title0 = js(big), js("document.getElementById('viewtitle').textContent")
        # a real click on the thumbnail of layer 0, head 1 (another head)
        js("document.querySelector('.cell[data-li=\"0\"][data-hi=\"1\"]').scrollIntoView({block: 'center'})")
        rect = js("(() => { const r = document.querySelector('.cell[data-li=\"0\"][data-hi=\"1\"] canvas')"
                  ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            b.send("Input.dispatchMouseEvent", {"type": kind, "x": rect[0], "y": rect[1], "button": "left",
                                                "clickCount": 1}, session=s)
        after, title1 = js(big), js("document.getElementById('viewtitle').textContent")
        check(after != before and title1 != title0,
              "clicking head 1's map changes the large view (%r -> %r)" % (title0, title1))
        # choosing a head in the <select>
        if heads > 2:
            ms = js("(() => { const t = performance.now(), s = document.getElementById('head'); s.value = '2';"
                    " s.dispatchEvent(new Event('change')); return performance.now() - t; })()")
            third, title2 = js(big), js("document.getElementById('viewtitle').textContent")
            check(third != after and "head" in title2,
                  "choosing head 2 in the menu changes the large view (%r, %.0f ms)" % (title2, ms))
        # hover over the large view's bottom-left cell: query n-1, key 0
        r = js("(() => { const c = document.getElementById('bigc'); c.scrollIntoView({block: 'center'});"
               " const r = c.getBoundingClientRect(); return [r.x + 2, r.y + r.height - 2]; })()")
        b.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": r[0], "y": r[1]}, session=s)
        tip = js("document.getElementById('tip').textContent")
        check("weight" in (tip or "") and "query" in tip, "hovering shows query, key and weight (%r)" % tip)
        ms = js("(() => { const t = performance.now(); document.getElementById('log').click();"
                " document.getElementById('hide0').click(); return performance.now() - t; })()")
        toggled = js(big)
        check(toggled != after, "log scale and hide-token-0 redraw every map (%.0f ms for both)" % ms)
        errors = js("window.qkv.errors")
        exceptions = [e for e in b.events if e.get("method") == "Runtime.exceptionThrown"]
        console = [e for e in b.events if e.get("method") == "Runtime.consoleAPICalled"
                   and e["params"].get("type") == "error"]
        check(not errors and not exceptions and not console,
              "no script error (%d caught, %d exceptions, %d console errors)" % (len(errors or []), len(exceptions),
                                                                                len(console)))
        js("window.scrollTo(0, 0)")
        png = b.send("Page.captureScreenshot", {"format": "png"}, session=s)["data"]
        with open(shot, "wb") as f:
            f.write(base64.b64decode(png))
        check(os.path.getsize(shot) > 1000, "screenshot saved to %s" % shot)
    except Exception as e:  # a protocol failure is a test failure, with its reason
        check(False, "browser session: %s" % e)
    finally:
        b.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
