"""The page of `qkv serve` driven in Debian's chromium: starting the server
and the browser, and the page's pieces the browser tests
(test_serve_browser.py) and the paint benchmark (bench/serve_paint.py) read.

The browser is Debian's chromium through Debian's chromedriver, both by
explicit path, headless. Selenium is given the driver's path, so Selenium
Manager never runs and nothing is downloaded (SE_OFFLINE says the same to it
in case it were ever asked).
"""
import json
import os
import select
import signal
import subprocess
import time
import urllib.request

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def start_server(qkv, model, ctx, threads=2):
    """`qkv serve --port 0` (a free loopback port): (process, base URL without
    the trailing slash), once it printed its line; raises if it did not."""
    proc = subprocess.Popen([str(qkv), "serve", "-m", str(model), "--port", "0", "--ctx", str(ctx),
                             "--threads", str(threads)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = ""
    if select.select([proc.stdout], [], [], 120)[0]:
        line = proc.stdout.readline()
    if not line.startswith("qkv serve: http://"):
        proc.kill()
        raise RuntimeError(f"qkv serve did not start: {line!r} {proc.stderr.read()}")
    return proc, line.split()[2].rstrip("/")


def stop_server(proc):
    """SIGTERM; the exit status (0 when it stopped cleanly) and its stderr."""
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=60)
    return rc, proc.stderr.read()


def browser_missing():
    """None, or what is missing to run the browser."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} missing (make deps installs chromium and chromium-driver)"
    return None


def start_browser(width=1280, height=900):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--window-size={width},{height}", "--force-device-scale-factor=1", "--lang=zh-CN"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def api(url, path, body=None, method=None):
    """The JSON API: GET, or POST with a JSON body."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method or ("POST" if data else "GET"),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


class Page:
    """The page in the browser: script calls, waits, and the pieces the tests read.
    window.qkv (web/app.js) is the page's state: busy, errors, row, rowId, paintMs."""

    def __init__(self, driver, url):
        self.d = driver
        self.url = url
        driver.get(url + "/")
        self.wait("window.qkv && window.qkv.ready", 60)

    def js(self, expr, *args):
        return self.d.execute_script("return " + expr, *args)

    def wait(self, expr, timeout=120):
        """Until expr is true; fails at once when the page shows an error."""
        end = time.time() + timeout
        while time.time() < end:
            done, errors = self.js(f"[!!({expr}), window.qkv ? window.qkv.errors : []]")
            if errors:
                raise AssertionError(f"the page failed while waiting for {expr}: {errors}")
            if done:
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout} s waiting for {expr}")

    def idle(self, timeout=300):
        """No request in flight, and none failed."""
        self.wait("window.qkv.busy === 0", timeout)
        assert self.js("window.qkv.errors") == []

    def el(self, css):
        return self.d.find_element("css selector", css)

    def click(self, css):
        e = self.el(css)
        self.d.execute_script("arguments[0].scrollIntoView({block: 'center'})", e)
        e.click()

    def choose(self, select_id, value):
        from selenium.webdriver.support.ui import Select
        Select(self.el("#" + select_id)).select_by_value(str(value))

    def sid(self):
        return self.js("window.qkv.session.id")

    @staticmethod
    def token(i):
        return f"#tokens span.t[data-i='{i}']"

    def click_token(self, i):
        self.click(self.token(i))

    def prefill(self, timeout=600):
        self.click("#prefill")
        self.wait("window.qkv.session && window.qkv.abort === null", timeout)
        self.idle(timeout)

    def painted(self):
        """{position: weight} of every span in the chunks that show the current row."""
        pairs = self.js("Array.from(document.querySelectorAll("
                        "`#tokens .chunk[data-row='${window.qkv.rowId}'] span.t[data-w]`))"
                        ".map(s => [Number(s.dataset.i), Number(s.dataset.w)])")
        return dict(pairs)

    def show_row(self, query, layer, head):
        """Choose layer and head, click token `query`; wait for its row."""
        self.choose("layer", layer)
        self.choose("head", head)
        self.click_token(query)
        self.wait(f"window.qkv.row && window.qkv.row.query === {query} && window.qkv.row.layer === {layer}"
                  f" && String(window.qkv.row.head) === '{head}'")
        self.idle()

    def severe_logs(self):
        return [e for e in self.d.get_log("browser") if e["level"] == "SEVERE"]
