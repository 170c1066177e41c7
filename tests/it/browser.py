# SPDX-License-Identifier: BSD-2-Clause
"""A real browser for the tests: Debian's chromium, headless, driven through Debian's
chromedriver (the W3C WebDriver protocol: JSON over HTTP, so the standard library is enough).

chromedriver is started in the foreground on a free loopback port and stopped by PID; chromium
gets a profile of its own under the test's temporary directory, no sandbox (the tests run as
root), and a proxy on a closed loopback port for everything but loopback, so that nothing it
might fetch by itself (updates, safe browsing) leaves the machine.
"""

import base64
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

from harness import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def available():
    return os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)


class WebDriverError(Exception):
    pass


class Browser:
    def __init__(self, tmpdir, width=1280, height=1000, timeout=60.0):
        self.tmpdir = tmpdir
        self.timeout = timeout
        self.port = free_port()
        self.log = open(os.path.join(tmpdir, "chromedriver.log"), "ab")
        self.proc = subprocess.Popen(
            [CHROMEDRIVER, "--port=%d" % self.port,  # (no --allowed-ips: loopback only)
             "--log-path=%s" % os.path.join(tmpdir, "chromedriver-verbose.log")],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.base = "http://127.0.0.1:%d" % self.port
        self.session = None
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._call("GET", "/status").get("ready"):
                    break
            except (OSError, ValueError, WebDriverError):
                pass  # (not up yet, or something else on the port: timed out below)
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise WebDriverError("chromedriver did not start (see %s)" % self.log.name)
            time.sleep(0.05)
        profile = os.path.join(tmpdir, "chromium-profile")
        os.makedirs(profile, exist_ok=True)
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=%d,%d" % (width, height), "--user-data-dir=" + profile,
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-default-apps", "--disable-domain-reliability",
                "--disable-client-side-phishing-detection", "--no-pings",
                "--disable-features=MediaRouter",
                "--proxy-server=http://127.0.0.1:9"]  # (loopback is never proxied)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "pageLoadStrategy": "normal",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}}
        try:
            self.session = self._call("POST", "/session", caps)["sessionId"]
        except Exception:
            self.close()
            raise

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                out = json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read()).get("value", {})
            except ValueError:
                err = {}
            raise WebDriverError("%s %s: %s %s" % (method, path, err.get("error", e.code),
                                                   err.get("message", "")[:300]))
        return out.get("value", out) if isinstance(out, dict) and "value" in out else out

    def cmd(self, method, path, body=None):
        return self._call(method, "/session/%s%s" % (self.session, path), body)

    # the few commands the tests use ---------------------------------------------------------
    def go(self, url):
        self.cmd("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def element(self, css):
        v = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(v.values()))

    def type(self, css, text):
        e = self.element(css)
        self.cmd("POST", "/element/%s/clear" % e, {})
        self.cmd("POST", "/element/%s/value" % e, {"text": text})

    def click(self, css):
        self.cmd("POST", "/element/%s/click" % self.element(css), {})

    def alert_text(self):
        return self.cmd("GET", "/alert/text")

    def accept_alert(self):
        self.cmd("POST", "/alert/accept", {})

    def screenshot(self, path, full=False):
        """The viewport as a PNG at <path>; <full>: the window made as tall as the page first
        (and given back its height after)."""
        rect = None
        if full:
            rect = self.cmd("GET", "/window/rect")
            h = self.js("return document.documentElement.scrollHeight")
            self.cmd("POST", "/window/rect", {"width": rect["width"], "height": int(h) + 140})
        png = base64.b64decode(self.cmd("GET", "/screenshot"))
        if rect is not None:
            self.cmd("POST", "/window/rect", {"width": rect["width"], "height": rect["height"]})
        with open(path, "wb") as f:
            f.write(png)
        return path

    def wait_js(self, script, timeout=20.0, what="the page"):
        """Polls <script> (a function body returning a value) until it returns something
        truthy; returns it."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.js(script)
            except WebDriverError as e:
                last = e
            if last and not isinstance(last, WebDriverError):
                return last
            time.sleep(0.1)
        raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))

    def close(self):
        if self.session is not None:
            try:
                self._call("DELETE", "/session/%s" % self.session)
            except (OSError, WebDriverError):
                pass
            self.session = None
        if self.proc is not None:
            # chromedriver and the chromium it started: one process group of their own.
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.proc = None
        self.log.close()
