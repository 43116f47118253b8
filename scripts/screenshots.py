"""README screenshots: the run page, the inspector on a rejection, a tree round, the playground,
a sweep, a verify pass mid-beat and the page at a phone's width (assets/screenshot.png, inspector.png,
tree.png, playground.png, sweep.png, watch_pass.png, learned_draft.png, phone.png).

Starts ``python app.py`` on a free loopback port, opens it in headless Chromium (Debian's
``/usr/bin/chromium`` driven by Playwright; never ``playwright install``), then

* Run (default preset): runs, captures the page (screenshot.png), clicks the first struck-through
  rejected draft and captures the inspector with the charts below it (inspector.png);
* Tree: B = 4, N = 16 on the same prompt, opens a round that branched (tree.png);

* Playground: sets α = 0.8, K = 4, c = 0.1, v = 1.05 and captures the tab;
* Experiments: sets the Run tab's drafter and prompt (default: the int8 self-draft on the free-text
  poem prompt), runs a temperature sweep (0 0.3 0.7 1.0 1.5, ``--tokens`` each) and captures the
  tab when it is done;
* Watch a pass: its default trace (the poem at T = 1, int8 self-draft), six beats into pass 2;
* Learned draft: the lesson "A learned draft at T = 1" run with the shipped EAGLE head, the
  inspector open on an accepted draft with a fractional acceptance probability (learned_draft.png);
* Phone: a 390 × 844 page, a short run of the default preset, the inspector opened on a token
  (phone.png, the screen as the phone shows it); prints where Run and the tokens are and how tall
  the page is;
* Engines: one file per engine (tests/fixtures/engines/) dropped on "Your engine's numbers"
  (engine_vllm.png, engine_sglang.png, engine_llamacpp.png, engine_mlx.png);
* Screens: the Run tab's first screen on a 1366 × 768 projector and a 390 × 844 phone as the page
  opens on its recorded run (run_1366x768.png, run_390x844.png);
* Lane: the engines tab's lane, the offline pair's code prompt in specviz and in llama.cpp (lane.png;
  needs the pair prepared and xllamacpp, and a few minutes).

Usage::

    python -m scripts.screenshots [--only run tree playground sweep watch learned phone engines screens lane] [--tokens 24]
                                  [--draft int8] [--out assets]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from scripts.browser_launch import CHROMIUM, LAUNCH_ARGS, free_port

ROOT = Path(__file__).resolve().parents[1]


def _number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def shoot_run(page, out: Path) -> None:
    """The default run, then the inspector on its first rejection."""
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_selector("#sv-summary >> text=Done", timeout=300_000)
    time.sleep(2)
    page.screenshot(path=str(out / "screenshot.png"), full_page=True)
    # The first rejection whose draft the target gave some probability: a story worth showing.
    for token in page.locator("#sv-tokens .sv-out .sv-rejected").all():
        token.click()
        page.locator("#sv-inspector >> text=Rejected draft token").wait_for(timeout=60_000)
        if "p_target = 0.0000" not in page.inner_text("#sv-inspector"):
            break
    time.sleep(1.5)
    top = page.locator("#sv-tokens").bounding_box()
    bottom = page.locator("#sv-positions").bounding_box()
    page.screenshot(path=str(out / "inspector.png"), full_page=True,
                    clip={"x": 0, "y": top["y"] - 10, "width": 1400, "height": bottom["y"] + bottom["height"] - top["y"] + 20})


def shoot_tree(page, out: Path) -> None:
    """B = 4 prompt lookup on the typo prompt; the first round whose nodes branch, as a tree."""
    page.reload(wait_until="domcontentloaded")  # a fresh page: "Done" below is this run's
    page.wait_for_selector("text=Run", timeout=60_000)
    _number(page, "sv-branches", 4)
    _number(page, "sv-tree-nodes", 16)
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_selector("#sv-summary >> text=Done", timeout=300_000)
    best, most = None, 0
    for token in page.locator("#sv-tokens .sv-out [data-r]").all():
        r = int(token.get_attribute("data-r"))
        if r != best:
            token.click()
            page.locator(f"#sv-inspector-tree >> text=Verify pass {r + 1} as a tree").wait_for(timeout=30_000)
            nodes = page.locator("#sv-inspector-tree li").count()
            if nodes > most:
                best, most = r, nodes
            if nodes >= 8:
                break
    page.locator(f"#sv-tokens .sv-out [data-r='{best}']").first.click()
    page.locator(f"#sv-inspector-tree >> text=Verify pass {best + 1} as a tree").wait_for(timeout=30_000)
    time.sleep(1)
    page.locator("#sv-inspector").locator("xpath=..").screenshot(path=str(out / "tree.png"))
    _number(page, "sv-branches", 1)


def shoot_watch(page, out: Path, beats: int = 6) -> None:
    """The Watch a pass tab on its default trace, ``beats`` beats into its first pass (watch_pass.png)."""
    page.get_by_role("tab", name="Watch a pass").click()
    page.wait_for_selector("#sv-watch-stage .sv-watch-sentence", timeout=60_000)
    page.locator("#sv-watch-stage .sv-watch-context").click()  # focus on the page, not in a field
    for k in range(beats):
        page.keyboard.press("ArrowRight")
        page.wait_for_function("(want) => document.querySelector('#sv-watch-stage .sv-watch-progress')"
                               "?.innerText.includes(want)", arg=f"beat {k + 2} of", timeout=30_000)
    time.sleep(1.5)
    top = page.locator("#sv-watch-source").bounding_box()
    bottom = page.locator("#sv-watch-plot").bounding_box()
    page.screenshot(path=str(out / "watch_pass.png"), full_page=True,
                    clip={"x": 0, "y": top["y"] - 10, "width": 1400,
                          "height": bottom["y"] + bottom["height"] - top["y"] + 20})


def shoot_learned(page, out: Path) -> None:
    """The lesson "A learned draft at T = 1": the shipped EAGLE head on the poem, then the
    inspector on its first accepted draft whose acceptance probability is a fraction
    (learned_draft.png)."""
    page.get_by_role("tab", name="Lessons").click()
    page.get_by_role("button", name="A learned draft at T = 1 (EAGLE head)").click()
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_selector("#sv-summary >> text=Done", timeout=300_000)
    for token in page.locator("#sv-tokens .sv-out .sv-accepted").all():
        if not token.is_visible():  # inside a token hidden by the panel's layout
            continue
        token.click()
        page.locator("#sv-inspector >> text=pass").first.wait_for(timeout=60_000)
        if "= 1.0000" not in page.inner_text("#sv-inspector"):
            break
    time.sleep(1.5)
    page.screenshot(path=str(out / "learned_draft.png"), full_page=True)


def shoot_phone(browser, url: str, out: Path, tokens: int) -> None:
    """The page at a phone's width (390 × 844): a short default run, a token opened in the inspector."""
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector("#sv-run-btn", timeout=60_000)
    _number(page, "sv-max-new", tokens)
    top = page.evaluate("() => ({run: document.querySelector('#sv-run-btn').getBoundingClientRect().top + scrollY,"
                        " tokens: document.querySelector('#sv-tokens').getBoundingClientRect().top + scrollY,"
                        " height: document.documentElement.scrollHeight})")
    print(f"phone 390 px: Run at {top['run']:.0f} px, tokens at {top['tokens']:.0f} px, page {top['height']} px tall")
    page.locator("#sv-run-btn").click()
    page.wait_for_selector("#sv-summary >> text=Done", timeout=300_000)
    page.locator("#sv-tokens .sv-out .sv-tok").nth(3).click()
    page.wait_for_selector("#sv-inspector >> text=pass", timeout=60_000)
    time.sleep(1.5)
    page.locator("#sv-tokens").scroll_into_view_if_needed()
    page.evaluate("() => window.scrollBy(0, -120)")
    time.sleep(0.5)
    page.screenshot(path=str(out / "phone.png"))
    page.close()


#: README's "Bring your engine's numbers": one file per engine from tests/fixtures/engines/, each a picture.
ENGINE_FILES = {"vllm": "vllm_stream.sse", "sglang": "sglang_generate.json", "llamacpp": "llamacpp_server.log",
                "mlx": "mlx_lm_stream.jsonl"}


def shoot_engines(page, out: Path) -> None:
    """Each engine's file dropped on "Your engine's numbers": the summary, the text and the first row
    of charts (engine_vllm.png, engine_sglang.png, engine_llamacpp.png, engine_mlx.png)."""
    for engine, name in ENGINE_FILES.items():
        page.reload(wait_until="domcontentloaded")
        page.wait_for_selector("#sv-tour-btn", timeout=60_000)
        page.get_by_role("tab", name="Your engine's numbers").click()
        page.set_input_files("#sv-engine-file input[type=file]", str(ROOT / "tests" / "fixtures" / "engines" / name))
        page.locator("#sv-engine-summary >> text=Imported").wait_for(timeout=60_000)
        time.sleep(1.5)
        top = page.locator("#sv-engine-file").bounding_box()
        bottom = page.locator("#sv-engine-tpp").bounding_box()
        page.screenshot(path=str(out / f"engine_{engine}.png"),
                        clip={"x": 0, "y": top["y"] - 10, "width": 1200,
                              "height": bottom["y"] + bottom["height"] - top["y"] + 20})


def shoot_screens(browser, url: str, out: Path, tokens: int) -> None:
    """The Run tab's first screen as a projector (1366 × 768) and a phone (390 × 844) show it when
    the page opens: the recorded run of the offline pair replayed, nothing pressed (run_1366x768.png,
    run_390x844.png: the screen, not the whole page); prints where Run and the tokens are."""
    for width, height in ((1366, 768), (390, 844)):
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(url, wait_until="domcontentloaded")
        page.wait_for_selector("#sv-summary >> text=A recorded run", timeout=60_000)
        time.sleep(5)  # the replay's last pass, and the charts drawn
        at = page.evaluate("() => ({run: document.querySelector('#sv-run-btn').getBoundingClientRect().top,"
                           " tokens: document.querySelector('#sv-tokens').getBoundingClientRect().top})")
        print(f"{width} x {height}: Run at {at['run']:.0f} px, tokens at {at['tokens']:.0f} px of the screen")
        page.screenshot(path=str(out / f"run_{width}x{height}.png"))
        page.close()


def shoot_lane(page, out: Path, tokens: int) -> None:
    """The engines tab's lane on the offline pair's code prompt: specviz beside llama.cpp (lane.png).
    Needs the pair prepared and xllamacpp; takes a few minutes on a CPU."""
    page.get_by_role("tab", name="Run").click()
    page.get_by_label("Model pair").click()
    page.get_by_role("option", name="Qwen2.5-Coder 0.5B → 1.5B · offline", exact=False).first.click()
    page.locator("#sv-more-settings").click()
    _number(page, "sv-max-new", tokens)
    page.get_by_role("tab", name="Your engine's numbers").click()
    page.locator("#sv-lane-panel").click()
    page.locator("#sv-lane-run").click()
    page.wait_for_selector("#sv-lane-status >> text=Done", timeout=1_200_000)
    time.sleep(1.5)
    panel = page.locator("#sv-lane-panel").bounding_box()  # viewport coordinates
    top = panel["y"] + page.evaluate("() => window.scrollY")
    # The panel runs past the screen's bottom: clip the whole page, in the page's coordinates.
    page.screenshot(path=str(out / "lane.png"), full_page=True,
                    clip={"x": 0, "y": top - 10, "width": panel["x"] + panel["width"] + 10,
                          "height": panel["height"] + 20})


def shoot(url: str, out: Path, tokens: int, draft: str, only: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1250})
        page.goto(url, wait_until="domcontentloaded")
        page.wait_for_selector("text=Run", timeout=60_000)
        if "run" in only:
            shoot_run(page, out)
        if "tree" in only:
            shoot_tree(page, out)
        if "playground" in only:
            shoot_teaching(page, out, tokens, draft, "sweep" in only)
        if "watch" in only:
            page.set_viewport_size({"width": 1400, "height": 1400})
            shoot_watch(page, out)
        if "learned" in only:
            shoot_learned(page, out)
        if "phone" in only:
            shoot_phone(browser, url, out, tokens)
        if "engines" in only:
            page.set_viewport_size({"width": 1200, "height": 1400})
            shoot_engines(page, out)
        if "screens" in only:
            shoot_screens(browser, url, out, tokens)
        if "lane" in only:
            page.set_viewport_size({"width": 1400, "height": 1400})
            shoot_lane(page, out, max(tokens, 64))
        browser.close()


def shoot_teaching(page, out: Path, tokens: int, draft: str, sweep: bool) -> None:
    """The playground at α = 0.8, K = 4, c = 0.1, v = 1.05, then (optionally) a temperature sweep."""
    page.get_by_role("tab", name="Playground").click()
    for elem_id, value in (("sv-pg-alpha", 0.8), ("sv-pg-k", 4), ("sv-pg-c", 0.1), ("sv-pg-v", 1.05)):
        _number(page, elem_id, value)
    page.wait_for_function("() => document.querySelector('#sv-pg-figures').innerText.includes('v = 1.050')")
    time.sleep(1.5)
    page.screenshot(path=str(out / "playground.png"))
    if not sweep:
        return
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--draft", default="int8", choices=["int8", "ngram"])
    p.add_argument("--out", default=str(ROOT / "assets"))
    shots = ["run", "tree", "playground", "sweep", "watch", "learned", "phone", "engines", "screens"]
    p.add_argument("--only", nargs="+", default=shots, choices=[*shots, "lane"],
                   help="lane is left out by default: it needs the pair and xllamacpp")
    args = p.parse_args(argv)
    port = free_port()
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
        shoot(f"http://127.0.0.1:{port}", Path(args.out), args.tokens, args.draft, args.only)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    print(f"wrote the screenshots of {', '.join(args.only)} under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
