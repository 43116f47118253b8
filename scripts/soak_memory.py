"""Long uptime: many runs in a row in one app process keep its memory flat.

Calls the app's own run callback (``specviz.ui.tabs.run_stream.run_demo``, exactly what the page and ``/run`` call)
``--runs`` times on the offline model with varying prompts, seeds, drafters and temperatures,
draining each stream as the page would, and prints the process's resident memory (VmRSS) after
warm-up and every ``--every`` runs, then the growth over the warm-up level.

    python -m scripts.soak_memory --runs 200 --max-new-tokens 16

The issue's bar: growth under 50 MB after warm-up (BENCHMARKS.md records the output).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from specviz.ui.tabs.run_stream import run_demo  # noqa: E402

PROMPTS = ["Fix the typos: Teh cat sat on teh mat.", "Write one sentence about the sea.",
           "Convert to JSON: name,age\nAnn,31\nBo,42", "Name three colours."]
DRAFTERS = ["ngram", "none", "early-exit"]


def rss_mb() -> float:
    """This process's resident set size (MB), from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class _NoProgress:
    def __call__(self, *args, **kwargs):
        pass


def one_run(i: int, max_new_tokens: int, baselines: dict) -> dict:
    args = dict(prompt=PROMPTS[i % len(PROMPTS)], target_id="smollm2-135m-instruct",
                drafter_kind=DRAFTERS[i % len(DRAFTERS)], draft_model="", early_exit_layers=4, k=4,
                temperature=(0.0, 0.7, 1.0)[i % 3], top_k=0, top_p=1.0, max_new_tokens=max_new_tokens, seed=i,
                chat=True, device="cpu", dtype="auto", baselines=baselines)
    last = None
    for last in run_demo(**args, progress=_NoProgress()):
        pass
    return last[-3]  # the visitor's baselines after the run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10, help="runs before the reference reading")
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args()
    started = time.perf_counter()
    baselines: dict = {}
    reference = None
    for i in range(args.runs):
        # A fresh visitor every run (its own baselines), like strangers on a Space.
        baselines = one_run(i, args.max_new_tokens, {} if i % 2 else baselines)
        if i + 1 == args.warmup:
            gc.collect()
            reference = rss_mb()
            print(f"after {i + 1} warm-up runs: RSS {reference:.1f} MB", flush=True)
        elif reference is not None and (i + 1) % args.every == 0:
            gc.collect()
            print(f"after {i + 1} runs: RSS {rss_mb():.1f} MB ({rss_mb() - reference:+.1f} MB) "
                  f"[{time.perf_counter() - started:.0f} s]", flush=True)
    gc.collect()
    growth = rss_mb() - reference if reference is not None else float("nan")
    print(f"{args.runs} runs in {time.perf_counter() - started:.0f} s; RSS growth after warm-up: {growth:+.1f} MB")
    return 0 if growth < 50 else 1


if __name__ == "__main__":
    sys.exit(main())
