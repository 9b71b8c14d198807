"""Check the built documentation site in headless Chromium (``make docs-check``).

    python docs/check_site.py docs/_build/html [--browser chromium]

The site is served over HTTP from this process, and Chromium (Debian's ``chromium`` package)
loads every page, driven through the DevTools protocol on a pipe (``--remote-debugging-pipe``:
no port, no dependency beyond the standard library). For each page it checks that the page
rendered (a title and text in its main element), that no request for a local asset failed or
answered 4xx/5xx, and that every image on it loaded (``naturalWidth > 0``, lazy ones made eager
first). Then it searches for "gradient" on search.html and checks that results appear. Exit
status 0 when all is well; otherwise one line per problem.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
SEARCH_TERM = "gradient"


def find_browser(name: str | None = None) -> str | None:
    """The path of a Chromium executable (``name``, or the first of BROWSERS found)."""
    for candidate in ([name] if name else BROWSERS):
        path = shutil.which(candidate)
        if path:
            return path
    return None


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the browser's events report what matters
        pass


class _Serve:
    """The site over HTTP on a free local port, in a thread."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(_Quiet, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return self.base

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class Browser:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (fd 3: commands in, fd 4:
    replies and events out, JSON messages ended by a NUL byte)."""

    def __init__(self, executable: str) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:  # in the child, before exec: the pipe ends where Chromium expects
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.process = subprocess.Popen(
            [executable, *FLAGS, "--remote-debugging-pipe", "--window-size=1280,900",
             "--user-data-dir=" + _scratch_profile(), "about:blank"],
            preexec_fn=wire, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.call(f"{domain}.enable", session=True)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (OSError, RuntimeError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def _read(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("Chromium stopped answering")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its debugging pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, *, session: bool = False,
             timeout: float = 30.0) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read(timeout)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:60]}...: {result['exceptionDetails']}")
        return result["result"].get("value")

    def load(self, url: str, settle: float = 0.3, timeout: float = 30.0) -> list[dict]:
        """Navigate to ``url`` and wait for its load event and for the network to go quiet;
        the events seen meanwhile."""
        self.events = []
        self.call("Page.navigate", {"url": url}, session=True)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not finish loading in {timeout:.0f} s")
            self.events.append(self._read(deadline - time.monotonic()))
        self.wait_quiet(settle, deadline)
        return self.events

    def wait_quiet(self, settle: float, deadline: float) -> None:
        """Wait until every request started has finished and ``settle`` s passed quietly."""
        while time.monotonic() < deadline:
            open_requests = set()
            for e in self.events:
                params = e.get("params", {})
                if e.get("method") == "Network.requestWillBeSent":
                    open_requests.add(params["requestId"])
                elif e.get("method") in ("Network.loadingFinished", "Network.loadingFailed"):
                    open_requests.discard(params["requestId"])
            count = len(self.events)
            self.evaluate(f"new Promise(r => setTimeout(r, {int(settle * 1000)}))")
            if not open_requests and len(self.events) == count:
                return


def _scratch_profile() -> str:
    import tempfile
    return tempfile.mkdtemp(prefix="pyzyme-docs-check-")


_PAGE_STATE = """(() => {
  const main = document.querySelector('main') || document.body;
  return {title: document.title, text: main.innerText.trim().length,
          images: Array.from(document.images).map(i => [i.getAttribute('src'), i.complete,
                                                        i.naturalWidth])};
})()"""

_EAGER = """(() => { let n = 0;
  document.querySelectorAll('img').forEach(i => { if (i.loading === 'lazy') {
    i.loading = 'eager'; n++; } }); return n; })()"""


def failed_requests(events: list[dict], base: str) -> list[str]:
    """The local requests in ``events`` that failed or answered an error status."""
    urls = {}
    problems = []
    for e in events:
        params = e.get("params", {})
        method = e.get("method")
        if method == "Network.requestWillBeSent":
            urls[params["requestId"]] = params["request"]["url"]
        elif method == "Network.responseReceived":
            response = params["response"]
            # favicon.ico: the browser asks for it on its own; no page of the site links it
            if (response["url"].startswith(base) and response["status"] >= 400
                    and response["url"] != base + "favicon.ico"):
                problems.append(f"{response['status']} {response['url'][len(base):]}")
        elif method == "Network.loadingFailed":
            url = urls.get(params["requestId"], "?")
            if url.startswith(base) and not params.get("canceled"):
                problems.append(f"{params.get('errorText')} {url[len(base):]}")
    return problems


def check_site(root: Path, browser: str, log=print, search_timeout: float = 20.0) -> list[str]:
    """Load every page of the site at ``root``; the problems found (empty: all is well).
    The search's results may take ``search_timeout`` seconds to appear."""
    pages = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.html")
                   if not p.relative_to(root).parts[0].startswith("_"))
    problems: list[str] = []
    images = 0
    with _Serve(root) as base:
        chrome = Browser(browser)
        try:
            for page in pages:
                events = chrome.load(base + page)
                if chrome.evaluate(_EAGER):
                    chrome.wait_quiet(0.3, time.monotonic() + 15)
                state = chrome.evaluate(_PAGE_STATE)
                events = chrome.events
                problems += [f"{page}: {p}" for p in failed_requests(events, base)]
                # search.html holds only a form until it is given a query (checked below)
                if not state["title"] or (state["text"] < 20 and page != "search.html"):
                    problems.append(f"{page}: renders no content (title {state['title']!r})")
                for src, complete, width in state["images"]:
                    images += 1
                    if not complete or width == 0:
                        problems.append(f"{page}: image {src} did not load")
            chrome.load(f"{base}search.html?q={SEARCH_TERM}")
            results = 0
            deadline = time.monotonic() + search_timeout
            while time.monotonic() < deadline:
                results = chrome.evaluate(
                    "document.querySelectorAll('#search-results ul.search li').length")
                if results:
                    break
                chrome.evaluate("new Promise(r => setTimeout(r, 250))")
            if not results:
                problems.append(f"search.html: no results for {SEARCH_TERM!r}")
        finally:
            chrome.close()
    log(f"{len(pages)} pages, {images} images, search for {SEARCH_TERM!r}: {results} results, "
        f"{len(problems)} problems")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site (docs/_build/html)")
    parser.add_argument("--browser", help="the Chromium executable (default: found on PATH)")
    args = parser.parse_args(argv)
    browser = find_browser(args.browser)
    if browser is None:
        print("no Chromium found: apt-get install chromium", file=sys.stderr)
        return 2
    if not (args.site / "index.html").exists():
        print(f"no site at {args.site}: run make docs first", file=sys.stderr)
        return 2
    problems = check_site(args.site, browser)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
