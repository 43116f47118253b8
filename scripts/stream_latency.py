"""How far the browser lags behind generation: run the app's default pair for N tokens in headless
Chromium and report when each token update reached the page, against when the server sent it.

Usage: python scripts/stream_latency.py [--url URL] [--tokens 200]
(without --url it starts `python app.py` on a free port). Needs Debian's chromium and playwright.
The app stamps every token update with the server clock (``data-sent``); the page and the server
share this machine's clock, so ``Date.now()/1000 - data-sent`` is the display lag.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

OBSERVER = """
() => {
  window.__lags = [];
  window.__final = null;
  const seen = new WeakSet();
  const obs = new MutationObserver(() => {
    const el = document.querySelector('#sv-tokens .sv-out');
    if (!el || seen.has(el) || !el.dataset.sent) return;
    seen.add(el);
    const lag = Date.now() / 1000 - parseFloat(el.dataset.sent);
    window.__lags.push(lag);
    if (el.dataset.done === '1') window.__final = lag;
  });
  obs.observe(document.querySelector('#sv-tokens'), {childList: true, subtree: true});
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    proc = None
    url = args.url
    if url is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1"}
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        for _ in range(480):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.goto(url)
            page.wait_for_selector("text=Run")
            page.locator("#sv-prompt textarea").fill("Write a long story about a lighthouse keeper and a storm.")
            box = page.locator('input[aria-label="number input for Max new tokens"]')
            box.fill(str(args.tokens))
            box.press("Enter")
            page.evaluate(OBSERVER)
            page.get_by_role("button", name="Run", exact=True).click()
            page.wait_for_function("window.__final !== null", timeout=600_000)
            lags = page.evaluate("window.__lags")
            final = page.evaluate("window.__final")
            summary = page.inner_text("#sv-summary")
            browser.close()
    finally:
        if proc is not None:
            proc.terminate()
    print(f"token updates seen by the page: {len(lags)}")
    print(f"display lag (s): median {statistics.median(lags):.3f}, max {max(lags):.3f}")
    print(f"last token shown {final:.3f} s after the server sent it (goal < 0.5 s)")
    print(summary.splitlines()[0])


if __name__ == "__main__":
    main()
