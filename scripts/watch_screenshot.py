"""README screenshot of the "Watch a pass" tab mid-beat (assets/watch_pass.png).

Starts ``python app.py`` on a free loopback port, opens it in headless Chromium (Debian's
``/usr/bin/chromium`` driven by Playwright; never ``playwright install``), opens the bundled int8
self-draft trace at pass 2 and steps with → to the beat where the second draft's u is drawn
against its acceptance probability, then captures the stage and its figure.

Usage::

    python scripts/watch_screenshot.py [--beats 6] [--out assets]
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


def shoot(url: str, out: Path, steps: int) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("tab", name="Watch a pass").click()
        page.wait_for_selector("#sv-watch-stage .sv-watch-sentence", timeout=60_000)
        page.locator("#sv-watch-stage .sv-watch-context").click()
        for k in range(steps):
            page.keyboard.press("ArrowRight")
            page.wait_for_function("(want) => document.querySelector('#sv-watch-stage .sv-watch-progress')"
                                   "?.innerText.includes(want)", arg=f"beat {k + 2} of", timeout=30_000)
        time.sleep(1.5)
        top = page.locator("#sv-watch-source").bounding_box()
        bottom = page.locator("#sv-watch-plot").bounding_box()
        page.screenshot(path=str(out / "watch_pass.png"),
                        clip={"x": 0, "y": top["y"] - 10, "width": 1400,
                              "height": bottom["y"] + bottom["height"] - top["y"] + 20})
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beats", type=int, default=6, help="beats to step forward from the first (default: 6)")
    parser.add_argument("--out", type=Path, default=ROOT / "assets")
    args = parser.parse_args()
    port = _free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        shoot(f"http://127.0.0.1:{port}", args.out, args.beats)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
