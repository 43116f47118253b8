"""What a streamed run costs the browser: "the page freezes while tokens stream",
measured in Chromium on the default page.

Starts ``python app.py`` from ``--root`` (default: this checkout) on a free loopback port, or uses
``--url``, opens it in headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright),
sets Max new tokens (256) and presses Run, as ``tests/test_browser_stream.py`` does. From the first
"Generating" status until a few seconds after "Done" (so the end's follow-up events, the race lanes
among them, count too) it records:

- **long tasks** (a ``PerformanceObserver`` of ``longtask`` entries: the browser's own definition,
  over 50 ms of wall-clock time): count, total and the longest, split at "Done";
- **the main thread's own work**: a Chromium trace (``toplevel``, ``devtools.timeline``) of the
  renderer's main thread, each task's *thread* time (``tdur``: CPU time of that thread, which a
  busy machine does not inflate the way it inflates wall time), summed over the window, with the
  longest task in thread time and the share of layout, style and paint;
- **a click mid-run**: after 40 tokens, a click on token 11, and how long the inspector took to
  answer (polled every 20 ms) and whether it was then inside the viewport.

On a machine whose cores other programs share, wall-clock figures (long tasks, the click) grow with
the load; the thread-time figures compare two versions of the page fairly when they are measured in
one session, one after the other.

Usage::

    python -m scripts.stream_browser_work                        # this checkout, 2 runs of 256 tokens
    python -m scripts.stream_browser_work --root /tmp/old-checkout --json before.json
    python -m scripts.stream_browser_work --url http://127.0.0.1:7860 --runs 1

Prints one line per run. Exits 1 with one line if the app or the browser fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from scripts.browser_launch import CHROMIUM, LAUNCH_ARGS

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Write a long story about a lighthouse keeper and the sea."
TRACE_CATEGORIES = ["toplevel", "devtools.timeline", "disabled-by-default-devtools.timeline", "blink.user_timing"]

#: Long tasks from now on, and a user-timing mark when the summary first says "Done".
OBSERVE_JS = """() => {
  window.__svLong = [];
  if (window.__svObserver) window.__svObserver.disconnect();  // one observer: a second run's counted once
  window.__svObserver = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__svLong.push({start: e.startTime, ms: e.duration});
  });
  window.__svObserver.observe({type: 'longtask', buffered: false});
  window.__svDoneAt = null;
  const summary = document.querySelector('#sv-summary');
  const watch = new MutationObserver(() => {
    if (window.__svDoneAt === null && summary.innerText.includes('Done')) {
      window.__svDoneAt = performance.now();
      performance.mark('sv-done');
      watch.disconnect();
    }
  });
  watch.observe(summary, {childList: true, subtree: true, characterData: true});
  return true;
}"""

#: Sub-events of a task whose thread time is reported as a share (they do not nest in each other).
RENDERING = {"Layout": "layout", "UpdateLayoutTree": "style", "Paint": "paint", "PrePaint": "paint",
             "ParseHTML": "parse_html"}


def _main_thread_tasks(trace: dict) -> tuple[list[dict], list[dict], float | None]:
    """The renderer main thread's top-level tasks, its rendering sub-events (both as
    ``{"ts", "dur", "tdur", "name"}``, µs) and the ``sv-done`` mark's time (µs, or None)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    mains = {(e["pid"], e["tid"]) for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"}
    names = {e.get("name") for e in events if e.get("ph") == "X"}
    top = "RunTask" if "RunTask" in names else "ThreadControllerImpl::RunTask"
    by_thread: dict[tuple, list[dict]] = {}
    subs: dict[tuple, list[dict]] = {}
    done = None
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if e.get("name") == "sv-done" and done is None:
            done = e["ts"]
        if key not in mains or e.get("ph") != "X":
            continue
        item = {"ts": e["ts"], "dur": e.get("dur", 0), "tdur": e.get("tdur", e.get("dur", 0)), "name": e["name"]}
        if e["name"] == top:
            by_thread.setdefault(key, []).append(item)
        elif e["name"] in RENDERING:
            subs.setdefault(key, []).append(item)
    if not by_thread:
        return [], [], done
    busiest = max(by_thread, key=lambda k: sum(t["tdur"] for t in by_thread[k]))
    return by_thread[busiest], subs.get(busiest, []), done


def _threads(trace: dict, top: int = 6) -> dict[str, float]:
    """Thread time (ms) of each browser thread's top-level tasks over the whole trace, by thread
    name (the busiest ``top``): the renderer's main thread and what else the page keeps busy
    (the compositor, raster workers, the GPU process's software compositing)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {(e["pid"], e["tid"]): e["args"].get("name", "?") for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    totals: dict[str, float] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("name") in ("ThreadControllerImpl::RunTask", "ThreadPool_RunTask"):
            name = names.get((e.get("pid"), e.get("tid")), "?")
            totals[name] = totals.get(name, 0.0) + e.get("tdur", e.get("dur", 0)) / 1e3
    return dict(sorted(totals.items(), key=lambda item: -item[1])[:top])


def _work(tasks: list[dict], subs: list[dict], start: float, end: float) -> dict:
    """Thread-time figures (ms) of the tasks that start in [start, end) (µs)."""
    mine = [t for t in tasks if start <= t["ts"] < end]
    shares: dict[str, float] = {}
    for s in subs:
        if start <= s["ts"] < end:
            shares[RENDERING[s["name"]]] = shares.get(RENDERING[s["name"]], 0.0) + s["tdur"] / 1e3
    longest = max(mine, key=lambda t: t["tdur"], default=None)
    return {"tasks": len(mine), "thread_ms": sum(t["tdur"] for t in mine) / 1e3,
            "wall_ms": sum(t["dur"] for t in mine) / 1e3,
            "longest_thread_ms": longest["tdur"] / 1e3 if longest else 0.0,
            "longest_wall_ms": max((t["dur"] for t in mine), default=0) / 1e3,
            "over_50ms_wall": sum(t["dur"] > 50e3 for t in mine), **{f"{k}_ms": v for k, v in shares.items()}}


def measure_run(browser, page, settle_s: float, timeout_s: float, trace_path: str | None = None) -> dict:
    """One run: Run pressed, the click mid-run, the figures of the module doc."""
    page.locator("#sv-run-btn").click()
    page.wait_for_selector("#sv-summary >> text=Generating", timeout=timeout_s * 1000)
    browser.start_tracing(page=page, categories=TRACE_CATEGORIES)
    page.evaluate(OBSERVE_JS)
    page.evaluate("() => performance.mark('sv-generating')")
    started = page.evaluate("() => performance.now()")
    page.wait_for_function("document.querySelectorAll('#sv-tokens .sv-out .sv-tok').length >= 40",
                           timeout=timeout_s * 1000, polling=100)
    token = page.locator("#sv-tokens .sv-out .sv-tok").nth(10)
    token.scroll_into_view_if_needed()
    box = token.bounding_box()
    clicked = time.perf_counter()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function("() => !document.querySelector('#sv-inspector').innerText.includes('Click any token')",
                           timeout=120_000, polling=20)
    answered_s = time.perf_counter() - clicked
    page.wait_for_timeout(300)
    inspector = page.locator("#sv-inspector").bounding_box()
    height = page.viewport_size["height"]
    mid_run = "Generating" in page.inner_text("#sv-summary")
    page.wait_for_selector("#sv-summary >> text=Done", timeout=timeout_s * 1000)
    page.wait_for_timeout(settle_s * 1000)
    long_tasks = page.evaluate("() => window.__svLong")
    done_at = page.evaluate("() => window.__svDoneAt")
    tokens = page.evaluate("() => document.querySelectorAll('#sv-tokens .sv-out .sv-tok').length")
    updates = page.evaluate("() => document.querySelectorAll('#sv-tokens .sv-out .sv-sent').length")
    raw = browser.stop_tracing()
    if trace_path is not None:
        Path(trace_path).write_bytes(raw)
    trace = json.loads(raw)
    tasks, subs, done_ts = _main_thread_tasks(trace)
    first = min((t["ts"] for t in tasks), default=0)
    end = float("inf")
    split = done_ts if done_ts is not None else end

    def long_figures(entries):
        ms = [e["ms"] for e in entries]
        return {"count": len(ms), "total_ms": sum(ms), "max_ms": max(ms, default=0.0)}

    stream = [e for e in long_tasks if done_at is None or e["start"] < done_at]
    return {
        "tokens": tokens, "token_updates": updates, "window_s": (done_at or started) / 1e3 - started / 1e3,
        "click_answered_s": answered_s, "click_mid_run": mid_run,
        "inspector_in_view": bool(inspector) and 0 <= inspector["y"] and inspector["y"] + inspector["height"] <= height,
        "long_tasks_stream": long_figures(stream),
        "long_tasks_end": long_figures([e for e in long_tasks if e not in stream]),
        "main_thread_stream": _work(tasks, subs, first, split),
        "main_thread_end": _work(tasks, subs, split, end),
        "threads_ms": _threads(trace),
        "summary_head": page.inner_text("#sv-summary").splitlines()[0][:120],
    }


def _line(i: int, r: dict) -> str:
    ls, le, ms, me = r["long_tasks_stream"], r["long_tasks_end"], r["main_thread_stream"], r["main_thread_end"]
    per = ms["thread_ms"] / max(r["token_updates"], 1)
    return (f"run {i}: {r['tokens']} tokens, {r['token_updates']} token updates, {r['window_s']:.1f} s streamed | "
            f"long tasks while streaming {ls['count']} ({ls['total_ms'] / 1e3:.2f} s, max {ls['max_ms']:.0f} ms), "
            f"after Done {le['count']} ({le['total_ms'] / 1e3:.2f} s, max {le['max_ms']:.0f} ms) | main thread "
            f"while streaming {ms['thread_ms']:.0f} ms thread time ({per:.1f} ms per token update; longest task "
            f"{ms['longest_thread_ms']:.0f} ms), after Done {me['thread_ms']:.0f} ms (longest "
            f"{me['longest_thread_ms']:.0f} ms) | click answered in {r['click_answered_s']:.2f} s"
            f"{'' if r['click_mid_run'] else ' (after the run ended)'}, inspector "
            f"{'in' if r['inspector_in_view'] else 'NOT in'} view | threads (ms): "
            + ", ".join(f"{name} {ms:.0f}" for name, ms in r["threads_ms"].items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="an app already running (default: start app.py from --root)")
    parser.add_argument("--root", default=str(ROOT), help="the checkout whose app.py to start (default: this one)")
    parser.add_argument("--max-new-tokens", type=int, default=256, dest="max_new_tokens")
    parser.add_argument("--runs", type=int, default=2, help="runs (the first also warms up and times the baseline)")
    parser.add_argument("--settle", type=float, default=4.0, help="seconds after Done still recorded")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    parser.add_argument("--json", default=None, help="write the results to this file")
    parser.add_argument("--trace-prefix", default=None, dest="trace_prefix",
                        help="also keep each run's Chromium trace as PREFIX-<run>.json")
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    from scripts import stream_latency

    proc, url = None, args.url
    if url is None:
        stream_latency.ROOT = Path(args.root).resolve()
        proc, url = stream_latency.start_app(Path(tempfile.mkdtemp(prefix="specviz-work-")) / "app.log")
    results = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url, wait_until="domcontentloaded")
            # the recorded run the page opens on replays to its end (its done mark) before anything
            # is set, then Max new tokens is behind "More settings"
            page.wait_for_selector("#sv-tokens .sv-done", state="attached", timeout=120_000)
            page.wait_for_timeout(2000)
            more = page.locator("#sv-more-settings > .label-wrap")
            if more.count() and "open" not in (more.get_attribute("class") or ""):
                more.click()
            page.locator("#sv-prompt textarea").fill(PROMPT)
            number = page.locator("#sv-max-new input[type=number]")
            number.fill(str(args.max_new_tokens))
            number.press("Enter")
            page.locator("#sv-prompt textarea").click()
            for i in range(args.runs):
                if i:
                    page.evaluate("() => window.scrollTo(0, 0)")
                trace_path = f"{args.trace_prefix}-{i}.json" if args.trace_prefix else None
                try:
                    results.append(measure_run(browser, page, args.settle, args.timeout, trace_path))
                except Exception as exc:  # noqa: BLE001 - one failed run is reported, the others still run
                    print(f"run {i}: failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}", flush=True)
                    try:
                        browser.stop_tracing()
                    except Exception:  # noqa: BLE001 - tracing had not started
                        pass
                    page.wait_for_selector("#sv-summary >> text=Done", timeout=args.timeout * 1000)
                    continue
                print(_line(i, results[-1]), flush=True)
            browser.close()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except Exception:  # noqa: BLE001 - a stuck app is killed
                proc.kill()
    if args.json:
        Path(args.json).write_text(json.dumps({"root": args.root, "url": url, "runs": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # the app or the browser failed: one line, not a traceback
        print(f"stream_browser_work: error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        sys.exit(1)
