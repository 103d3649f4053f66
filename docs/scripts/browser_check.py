"""Open the built site in headless Chromium and check what a reader sees.

    python docs/scripts/browser_check.py [--site DIR] [--shots results/docs-shots]

Builds the site (``mkdocs build --strict``) unless ``--site`` names a built one, serves it on
127.0.0.1, and opens the home page, every tutorial (one per domain and the sequence ones), the
benchmarks page and the gallery in headless Chromium (Debian's ``chromium`` package). On each page:
every ``<pre>`` holds a ``<code>``, no literal ```` ``` ```` is left in the text outside code, every
image has loaded (``naturalWidth > 0``), a code line wider than its block scrolls inside it, and the
console shows no error (a failed request, a script error). Screenshots of the top of each page and of
its first figure go to ``results/docs-shots/``. Exit status 1 if any page fails; 0 with a
"skipped" line when no Chromium is installed (``apt-get install chromium``).

The browser is driven through the DevTools protocol over a pipe (``--remote-debugging-pipe``:
NUL-separated JSON on file descriptors 3 and 4), so nothing beyond the standard library is needed.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = ["", "benchmarks/", "gallery/",
         *(f"tutorials/{p.stem}/" for p in sorted((REPO / "docs" / "tutorials").glob("*.md")))]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe", "--window-size=1280,900"]
CHECKS = r"""(async () => {
  await Promise.all([...document.images].map(i => i.complete ? 0 :
                     new Promise(r => { i.onload = i.onerror = r; })));
  const pres = [...document.querySelectorAll('article pre')];
  const text = document.querySelector('article').cloneNode(true);
  text.querySelectorAll('pre, code').forEach(e => e.remove());
  const wide = [...document.querySelectorAll('article pre > code')].filter(c => c.scrollWidth > c.clientWidth + 1);
  return {
    code_blocks: pres.length,
    pre_without_code: pres.filter(p => !p.querySelector(':scope > code')).length,
    literal_fences: (text.innerText.match(/```/g) || []).length,
    images: document.images.length,
    broken_images: [...document.images].filter(i => i.naturalWidth === 0).map(i => i.src),
    wide_code_not_scrolling: wide.filter(c => !['auto', 'scroll'].includes(getComputedStyle(c).overflowX)).length,
    wide_code: wide.length,
    copy_buttons: document.querySelectorAll('button[data-md-type="copy"]').length,
  };
})()"""


class Chromium:
    """A headless Chromium driven over --remote-debugging-pipe."""

    def __init__(self, executable: str, profile: str):
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def child_fds():  # the protocol's fixed descriptors: 3 = commands in, 4 = replies out
            os.dup2(commands_read, 3)
            os.dup2(replies_write, 4)

        self.process = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                        preexec_fn=child_fds, close_fds=False,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(commands_read)
        os.close(replies_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def _read_message(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(method)
            self.events.append(self._read_message())

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # one line per request otherwise
        pass


def console_errors(events: list[dict]) -> list[str]:
    errors = []
    for event in events:
        params = event.get("params", {})
        if event.get("method") == "Runtime.exceptionThrown":
            errors.append(params["exceptionDetails"].get("text", "exception"))
        elif event.get("method") == "Runtime.consoleAPICalled" and params.get("type") == "error":
            errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif event.get("method") == "Log.entryAdded" and params["entry"]["level"] == "error":
            errors.append(f"{params['entry']['text']} {params['entry'].get('url', '')}".strip())
    return errors


def check_site(site: Path, shots: Path, executable: str) -> list[dict]:
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    shots.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory() as profile:
        browser = Chromium(executable, profile)
        try:
            target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                browser.send(f"{domain}.enable", session=session)
            browser.send("Emulation.setDeviceMetricsOverride",
                         {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=session)
            for page in PAGES:
                browser.events.clear()
                browser.send("Page.navigate", {"url": base + page}, session=session)
                browser.wait_for("Page.loadEventFired")
                found = browser.send("Runtime.evaluate", {"expression": CHECKS, "awaitPromise": True,
                                                          "returnByValue": True}, session=session)["result"]["value"]
                name = page.strip("/").replace("/", "-") or "home"
                shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)
                (shots / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))
                if found["images"]:
                    browser.send("Runtime.evaluate", {"expression": "document.querySelector('article img')"
                                                      ".scrollIntoView({block: 'center'})"}, session=session)
                    time.sleep(0.3)
                    shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)
                    (shots / f"{name}-figure.png").write_bytes(base64.b64decode(shot["data"]))
                found["console_errors"] = console_errors(browser.events)
                found["page"] = "/" + page
                found["ok"] = (found["code_blocks"] > 0 or page == "gallery/") and not (
                    found["pre_without_code"] or found["literal_fences"] or found["broken_images"]
                    or found["wide_code_not_scrolling"] or found["console_errors"]) and (
                    found["copy_buttons"] == found["code_blocks"])
                results.append(found)
        finally:
            browser.close()
            server.shutdown()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, help="a built site (default: build one with mkdocs --strict)")
    parser.add_argument("--shots", type=Path, default=REPO / "results" / "docs-shots")
    args = parser.parse_args(argv)
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        print("browser check skipped: no chromium on PATH (Debian: apt-get install chromium)")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        site = args.site
        if site is None:
            site = Path(scratch) / "site"
            env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
            subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
                           cwd=REPO, check=True, env=env)
        results = check_site(site, args.shots, executable)
    (args.shots / "report.json").write_text(json.dumps(results, indent=1) + "\n")
    for r in results:
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['page']:40s} code blocks {r['code_blocks']:3d} "
              f"(copy buttons {r['copy_buttons']}, wide and scrolling {r['wide_code']}), images {r['images']:3d}"
              + "".join(f"\n     {key}: {r[key]}" for key in ("pre_without_code", "literal_fences", "broken_images",
                                                             "wide_code_not_scrolling", "console_errors") if r[key]))
    print(f"{sum(r['ok'] for r in results)} of {len(results)} pages pass; screenshots in {args.shots}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
