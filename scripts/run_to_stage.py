"""How long from pressing Run to the run's stage in the token box ("Loading the models for …" on a
first run, "Preparing …" after), in headless Chromium at 1366×768: the first-minute promise
("the live run's stage named inside the token box within 1 s of pressing Run"), measured.

Starts ``python app.py`` on a free loopback port (or uses ``--url``), waits for the recorded run the
page opens on, then presses Run ``--presses`` times, each after the previous run's Done. A
``MutationObserver`` on the token box notes the first moment (``performance.now()``, ms after the
click) the stage is in it, however briefly it is shown. ``tests/test_browser_first_minute.py``
checks the same bound in the suite (best of two presses); this prints every press.

Usage::

    python -m scripts.run_to_stage                  # this checkout, 4 presses
    python -m scripts.run_to_stage --root /tmp/old-checkout
    python -m scripts.run_to_stage --url http://127.0.0.1:7860 --presses 2

Prints one line per press and exits 1 with one line if the app or the browser fails. Wall-clock
figures: run it alone on the machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from scripts.browser_launch import CHROMIUM, LAUNCH_ARGS

#: Note in ``window.svStage`` the first moment after the next click on Run, and the text, of the
#: token box's stage line (one observer at a time: an earlier one would time from its own click).
STAGE_WATCH = """() => {
  window.svStage = null;
  let clicked = null;
  document.querySelector('#sv-run-btn').addEventListener('click', () => { clicked = performance.now(); },
                                                         {once: true, capture: true});
  const look = () => {
    const stage = document.querySelector('#sv-tokens .sv-stage');
    if (stage && clicked !== null && window.svStage === null)
      window.svStage = {t: performance.now() - clicked, text: stage.innerText};
  };
  if (window.svStageObserver) window.svStageObserver.disconnect();
  window.svStageObserver = new MutationObserver(look);
  window.svStageObserver.observe(document.querySelector('#sv-tokens'),
                                 {childList: true, subtree: true, characterData: true});
}"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="an app already running (default: start python app.py)")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]),
                        help="the checkout whose app.py is started (default: this one)")
    parser.add_argument("--presses", type=int, default=4)
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from scripts import stream_latency

    proc, url = None, args.url
    try:
        if url is None:
            stream_latency.ROOT = Path(args.root).resolve()
            proc, url = stream_latency.start_app(Path(tempfile.mkdtemp(prefix="specviz-stage-")) / "app.log")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 1366, "height": 768})
            page.goto(url, wait_until="domcontentloaded")
            page.wait_for_selector("#sv-tokens .sv-done", state="attached", timeout=120_000)
            run = page.get_by_role("button", name="Run", exact=True)
            for i in range(args.presses):
                page.evaluate(STAGE_WATCH)
                run.click()
                page.wait_for_function("() => window.svStage !== null", timeout=120_000)
                stage = page.evaluate("() => window.svStage")
                print(f"press {i + 1}: the stage {stage['t']:.0f} ms after Run: {stage['text'][:70]}", flush=True)
                page.wait_for_selector("#sv-summary >> text=Done", timeout=600_000)
            browser.close()
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        print(f"run_to_stage: error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        return 1
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
