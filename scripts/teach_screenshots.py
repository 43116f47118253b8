"""README screenshots of the teaching tabs: assets/playground.png and assets/sweep.png.

Starts ``python app.py`` on a free loopback port, opens it in headless Chromium (Debian's
``/usr/bin/chromium`` driven by Playwright; never ``playwright install``), then

* Playground: sets α = 0.8, K = 4, c = 0.1, v = 1.05 and captures the tab;
* Experiments: sets the Run tab's drafter and prompt (default: the int8 self-draft on the free-text
  poem prompt), runs a temperature sweep (0 0.3 0.7 1.0 1.5, ``--tokens`` each) and captures the
  tab when it is done.

Usage::

    python scripts/teach_screenshots.py [--tokens 24] [--draft int8] [--out assets]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def shoot(url: str, out: Path, tokens: int, draft: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1250})
        page.goto(url, wait_until="domcontentloaded")
        page.wait_for_selector("text=Run", timeout=60_000)
        page.get_by_role("tab", name="Playground").click()
        for elem_id, value in (("sv-pg-alpha", 0.8), ("sv-pg-k", 4), ("sv-pg-c", 0.1), ("sv-pg-v", 1.05)):
            _number(page, elem_id, value)
        page.wait_for_function("() => document.querySelector('#sv-pg-figures').innerText.includes('v = 1.050')")
        time.sleep(1.5)
        page.screenshot(path=str(out / "playground.png"))
        page.get_by_role("tab", name="Run").click()
        page.get_by_role("button", name="A poem (free text)").click()
        page.locator("#sv-prompt textarea").wait_for()
        drafter = page.get_by_label("Drafter")
        drafter.click()
        page.get_by_role("option", name="Self-draft: int8" if draft == "int8" else "Prompt lookup").click()
        page.get_by_role("tab", name="Experiments").click()
        _number(page, "sv-exp-tokens", tokens)
        page.locator("#sv-exp-run").click()
        page.wait_for_selector("#sv-exp-status >> text=Done", timeout=900_000)
        time.sleep(2)
        page.screenshot(path=str(out / "sweep.png"))
        browser.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--draft", default="int8", choices=["int8", "ngram"])
    p.add_argument("--out", default=str(ROOT / "assets"))
    args = p.parse_args(argv)
    port = _free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    try:
        for _ in range(480):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        shoot(f"http://127.0.0.1:{port}", Path(args.out), args.tokens, args.draft)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    print(f"wrote {args.out}/playground.png and {args.out}/sweep.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
