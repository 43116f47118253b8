"""How far the browser lags behind generation, measured in Chromium.

Starts ``python app.py`` (README's command) on a free loopback port, or uses ``--url``, opens it in
headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright), sets the prompt and Max
new tokens, presses Run and waits for the run to finish.

How lag is measured: every token update the app sends ends with a hidden ``<i class="sv-sent"
data-t="…">`` marker, the server's ``time.time()`` when the newest token before it was generated
(``specviz.ui.draw.run_views.sent_mark``; the panel is append-only while it streams, so the last marker is the
newest). A ``MutationObserver`` in the page records, for each update, ``Date.now()`` when the DOM
changed and again at the next animation frame (when the browser paints it). Browser and server
share one clock here, so ``frame time - data-t`` is the lag from generation to the screen. The
figure the issue asks for is that lag for the final update (the one with the ``.sv-done``
marker): the page showing the last token after generation ends. The goal is < 0.5 s for a
200-token run.

Usage::

    python -m scripts.stream_latency                       # start app.py, 200 tokens, free text
    python -m scripts.stream_latency --max-new-tokens 200 --runs 3 --json lag.json
    python -m scripts.stream_latency --url http://127.0.0.1:7860

Prints one line per run (lag figures and the app's own speculative tokens/s) and a summary over
all runs; run 0 also warms the models up and measures the plain baseline, so it is the cold one.
Exits 1 with one line if the app or the browser fails.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.browser_launch import CHROMIUM, LAUNCH_ARGS, free_port

ROOT = Path(__file__).resolve().parents[1]
# Long free text, so that a greedy run does not stop on EOS well before 200 tokens.
DEFAULT_PROMPT = ("Write a long, detailed story about a lighthouse keeper who finds a message in a bottle. "
                  "Describe the sea, the weather, the lighthouse and every person she meets.")

# Installed once per page load. Records one entry per token update of the panel.
OBSERVER_JS = """
() => {
  window.__svLag = [];
  const root = document.querySelector('#sv-tokens');
  const seen = new Set();
  const record = () => {
    const out = root.querySelector('.sv-out');
    const marks = out ? out.querySelectorAll('.sv-sent') : [];
    if (!marks.length) return;
    const sent = marks[marks.length - 1].dataset.t, done = out.querySelector('.sv-done') !== null;
    const key = sent + '/' + done + '/' + out.childElementCount;
    if (seen.has(key)) return;
    seen.add(key);
    const entry = {sent: parseFloat(sent), done: done,
                   tokens: out.querySelectorAll('.sv-tok').length, dom: Date.now() / 1000, frame: null};
    window.__svLag.push(entry);
    requestAnimationFrame(() => { entry.frame = Date.now() / 1000; });
  };
  new MutationObserver(record).observe(root, {childList: true, subtree: true, attributes: true,
                                              characterData: true});
  return true;
}
"""


def start_app(log_path: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"app.py exited with {proc.returncode}; log: {log_path}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"app.py did not start listening in 300 s; log: {log_path}")


def measure_run(page, timeout_s: float) -> dict:
    """Press Run once and return the lag figures of that run."""
    page.evaluate("() => { window.__svLag = []; }")
    started = time.time()
    page.get_by_role("button", name="Run", exact=True).click()
    # The previous run's final panel is still on screen until the new run's first update.
    page.wait_for_selector('#sv-tokens .sv-out .sv-done', state="detached", timeout=60_000)
    page.wait_for_selector('#sv-tokens .sv-out .sv-done', state="attached", timeout=timeout_s * 1000)
    # Let the final frame callback run before reading.
    page.wait_for_timeout(300)
    entries = page.evaluate("() => window.__svLag")
    streamed = [e for e in entries if e["tokens"] > 0 and e["frame"] is not None]
    final = [e for e in streamed if e["done"]]
    if not final:
        raise RuntimeError(f"no final update was recorded ({len(entries)} updates seen)")
    last = final[-1]
    lags = [e["frame"] - e["sent"] for e in streamed]
    summary = page.inner_text("#sv-summary")
    return {
        "tokens": last["tokens"],
        "updates": len(streamed),
        "final_lag_s": last["frame"] - last["sent"],
        "final_dom_lag_s": last["dom"] - last["sent"],
        "median_lag_s": statistics.median(lags),
        "max_lag_s": max(lags),
        "run_s": time.time() - started,
        "summary": summary,
        "app_tokens_per_s": _app_tokens_per_s(summary),
    }


def _app_tokens_per_s(summary: str) -> float | None:
    """The app's own "speculative tokens/s" figure from its summary table."""
    for line in summary.splitlines():
        if line.startswith("speculative tokens/s"):
            try:
                return float(line.split()[2])
            except (IndexError, ValueError):
                return None
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="an app already running (default: start app.py)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=200, dest="max_new_tokens",
                        help="1-512, the app slider's range (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=2,
                        help="runs after run 0, which also warms up and measures the baseline (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run (default: %(default)s)")
    parser.add_argument("--json", default=None, help="write the results to this file")
    args = parser.parse_args(argv)
    if not 1 <= args.max_new_tokens <= 512:
        parser.error("--max-new-tokens must be between 1 and 512 (the app's slider range)")
    if args.runs < 0:
        parser.error("--runs must be >= 0")

    from playwright.sync_api import sync_playwright

    proc = None
    log_path = Path(tempfile.mkdtemp(prefix="specviz-lag-")) / "app.log"
    url = args.url
    if url is None:
        proc, url = start_app(log_path)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1600})
            page.goto(url, wait_until="domcontentloaded")
            page.wait_for_selector("#sv-tokens .sv-out", timeout=120_000)
            page.wait_for_timeout(2000)  # let Gradio finish mounting (its heartbeat keeps the network busy)
            page.locator("#sv-prompt textarea").fill(args.prompt)
            number = page.locator("#sv-max-new input[type=number]")
            number.fill(str(args.max_new_tokens))
            number.press("Enter")
            page.locator("#sv-prompt textarea").click()  # blur the number box so the slider takes the value
            if int(number.input_value()) != args.max_new_tokens:
                raise RuntimeError(f"Max new tokens shows {number.input_value()}, not {args.max_new_tokens}")
            page.evaluate(OBSERVER_JS)
            results = []
            for i in range(1 + args.runs):
                result = measure_run(page, args.timeout)
                result["run"] = i
                results.append(result)
                print(f"run {i}: {result['tokens']} tokens in {result['updates']} updates; last token on screen "
                      f"{result['final_lag_s'] * 1e3:.0f} ms after it was generated (DOM "
                      f"{result['final_dom_lag_s'] * 1e3:.0f} ms); lag median {result['median_lag_s'] * 1e3:.0f} ms, "
                      f"max {result['max_lag_s'] * 1e3:.0f} ms; app: {result['app_tokens_per_s']} speculative tokens/s; "
                      f"run took {result['run_s']:.1f} s", flush=True)
            browser.close()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    finals = [r["final_lag_s"] for r in results]
    print(f"final-token lag over {len(finals)} runs (run 0 included): median {statistics.median(finals) * 1e3:.0f} ms, "
          f"max {max(finals) * 1e3:.0f} ms (goal < 500 ms)")
    if args.json:
        Path(args.json).write_text(json.dumps({"url": url, "max_new_tokens": args.max_new_tokens,
                                               "prompt": args.prompt, "runs": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # the app or the browser failed: one line, not a traceback
        print(f"stream_latency: error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        sys.exit(1)
