"""Headless Chromium (Debian's package, /usr/bin/chromium) driven over the DevTools protocol on a pipe.

``--remote-debugging-pipe`` speaks the protocol on file descriptors 3 (commands in) and 4
(replies and events out), NUL-separated JSON: nothing listens on a port, and no browser build is
downloaded. ``Browser.open(url)`` loads a page and records every console message, uncaught
exception, log entry and network request; ``evaluate`` runs JavaScript in it; ``screenshot``
captures the whole page. The flags are the ones that work on a closed network (no background
requests, component updates or sync at start-up), with a fresh profile per browser.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any, Optional

CHROMIUM = os.environ.get("GTPO_CHROMIUM", "/usr/bin/chromium")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
)


def chromium_path() -> Optional[str]:
    """The Chromium binary, or None when it is not installed."""
    path = shutil.which(CHROMIUM) or (CHROMIUM if os.access(CHROMIUM, os.X_OK) else None)
    return path


class BrowserError(RuntimeError):
    pass


class Browser:
    """One Chromium process and one page; use as a context manager."""

    def __init__(self, width: int = 1400, height: int = 900, timeout: float = 60.0):
        self.width, self.height, self.timeout = width, height, timeout
        self.events: list[dict] = []
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._next_id = 0
        self._profile = tempfile.mkdtemp(prefix="gtpo-chromium-")
        commands_read, self._commands = os.pipe()
        self._replies_read, replies_write = os.pipe()

        def child_fds():  # the protocol's fixed descriptors: 3 = commands, 4 = replies
            high_in = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10)  # above 4, so neither dup2 clobbers the other
            high_out = fcntl.fcntl(replies_write, fcntl.F_DUPFD, 10)
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)

        path = chromium_path()
        if path is None:
            raise BrowserError(f"{CHROMIUM} not found: apt-get install -y chromium (or set GTPO_CHROMIUM)")
        self.process = subprocess.Popen(
            [path, *FLAGS, f"--user-data-dir={self._profile}", f"--window-size={width},{height}",
             "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            # close_fds runs after preexec_fn: keep the two descriptors it placed
            preexec_fn=child_fds, pass_fds=(3, 4), start_new_session=True,
        )
        os.close(commands_read)
        os.close(replies_write)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=self.session)
        self.call("Emulation.setDeviceMetricsOverride", session=self.session, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    # ---- protocol ----
    def _read(self) -> None:
        buffer = b""
        with os.fdopen(self._replies_read, "rb", buffering=0) as pipe:
            while True:
                chunk = pipe.read(1 << 16)
                if not chunk:
                    break
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                with self._cond:
                    for raw in messages:
                        message = json.loads(raw)
                        if "id" in message:
                            self._replies[message["id"]] = message
                        else:
                            self.events.append(message)
                    self._cond.notify_all()

    def call(self, method: str, session: Optional[str] = None, **params: Any) -> dict:
        with self._cond:
            self._next_id += 1
            ident = self._next_id
        message = {"id": ident, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        with self._cond:
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise BrowserError(f"{method}: no reply from Chromium within {self.timeout:.0f} s")
                self._cond.wait(min(left, 0.5))
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_for_event(self, method: str, timeout: Optional[float] = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cond:
            while True:
                for event in self.events:
                    if event.get("method") == method:
                        return event
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError(f"no {method} within {timeout or self.timeout:.0f} s")
                self._cond.wait(min(left, 0.5))

    # ---- page ----
    def open(self, url: str) -> None:
        self.call("Page.navigate", session=self.session, url=url)
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session=self.session, expression=expression,
                           awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"page script failed: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result["result"].get("value")

    def wait_until(self, expression: str, timeout: Optional[float] = None) -> Any:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"{expression!r} still false after {timeout or self.timeout:.0f} s")
            time.sleep(0.05)

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and log errors, as text."""
        found = []
        for event in list(self.events):
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                found.append(f"console.{params['type']}: " + " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                found.append("exception: " + str(params.get("exceptionDetails", {}).get("exception", {}).get("description")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
                found.append(f"log {params['entry']['level']}: {params['entry'].get('text')}")
        return found

    def requests(self) -> list[str]:
        """Every URL the page asked the network stack for (the page's own file:// included)."""
        return [e["params"]["request"]["url"] for e in list(self.events) if e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: str, max_height: int = 16000) -> int:
        """A PNG of the whole page (up to ``max_height`` pixels); returns the height captured."""
        height = min(int(self.evaluate("document.documentElement.scrollHeight")), max_height)
        self.call("Emulation.setDeviceMetricsOverride", session=self.session, width=self.width, height=height,
                  deviceScaleFactor=1, mobile=False)
        data = self.call("Page.captureScreenshot", session=self.session, format="png")["data"]
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(data))
        self.call("Emulation.setDeviceMetricsOverride", session=self.session, width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)
        return height

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                try:
                    self.call("Browser.close")
                except BrowserError:
                    pass
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, 9)
                    self.process.wait()
        finally:
            os.close(self._commands)
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
