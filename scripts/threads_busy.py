"""Threads on a busy CPU: 1, 2 (and cores − 1) torch threads, with and without a competing load,
in one run.

For each thread count and each load (none, or ``--hogs`` busy-loop processes this script starts
before the setting and stops after it, each bounded by ``--max-hog-s`` so none outlives a crash),
it times ``--repeats`` pairs of one plain and one speculative run (the default pair: SmolLM2-135M
with prompt lookup, K = 4, greedy, the typo prompt, ``--tokens`` tokens each, after one warm-up
pair), and prints per setting: the speculative tokens/s (median, min–max), the plain tokens/s
(median) and the speedup spread (min–max over the repeats, each speedup = that pair's
speculative tokens/s ÷ its plain tokens/s, prefill included). The last column says how much the
load slowed that thread count.

    python -m scripts.threads_busy              # 64 tokens, 5 repeats
    python -m scripts.threads_busy --quick      # 32 tokens, 3 repeats

What it showed is in BENCHMARKS.md ("Threads on a busy CPU"); the app's default follows it
(:func:`specviz.ui.serve.threads.default_threads`).
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time

import torch

from specviz.run import bench
from specviz.models import loading as models
from specviz.drafters.registry import build_drafter
from specviz.core.sampling import SamplingConfig
from specviz.ui.serve.threads import cpu_cores, machine_load

#: A busy loop for one core that ends on its own after the given seconds.
HOG = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def thread_counts(cores: int) -> list[int]:
    """1, 2 and cores − 1, each once, none above the cores."""
    return sorted({n for n in (1, 2, cores - 1) if 1 <= n <= cores})


class Load:
    """``hogs`` busy-loop processes for the ``with`` block (none for 0), each bounded by ``max_s``."""

    def __init__(self, hogs: int, max_s: float):
        self.hogs, self.max_s, self.procs = hogs, max_s, []

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", HOG, str(self.max_s)]) for _ in range(self.hogs)]
        time.sleep(0.5 if self.hogs else 0.0)  # let them reach the loop
        return self

    def __exit__(self, *exc):
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=10)
        return False


def pair(target, drafter, ids, tokens: int) -> tuple[float, float]:
    """(speculative tokens/s, plain tokens/s) of one pair of runs."""
    greedy = SamplingConfig(temperature=0.0)
    plain = bench.time_ours(target, None, ids, 1, greedy, tokens, 0)
    spec = bench.time_ours(target, drafter, ids, 4, greedy, tokens, 0)
    return spec.tokens / spec.seconds, plain.tokens / plain.seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="32 tokens and 3 repeats")
    parser.add_argument("--tokens", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--hogs", type=int, default=1, help="busy-loop processes of the competing load")
    parser.add_argument("--max-hog-s", type=float, default=600.0, help="each busy loop ends by itself after this")
    parser.add_argument("--threads", type=int, nargs="+", default=None,
                        help="thread counts to measure (default: 1, 2 and cores − 1)")
    args = parser.parse_args(argv)
    # A terminated benchmark still stops its busy loops (the with-block's exit runs on SystemExit).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tokens = args.tokens or (32 if args.quick else 64)
    repeats = args.repeats or (3 if args.quick else 5)
    cores = cpu_cores()
    target = models.load_model("smollm2-135m-instruct")
    drafter = build_drafter("ngram", target)
    prompt = bench.load_prompts(None)[0]
    ids = target.encode(prompt.prompt, prompt.chat)
    print(f"{target.name} {target.dtype}, prompt lookup, K = 4, greedy, prompt {prompt.name}, {tokens} tokens, "
          f"{repeats} repeats; {cores} cores; load average at the start {machine_load() or float('nan'):.1f}")
    print("threads | load | spec tokens/s median (min–max) | plain tokens/s | speedup min–max | spec median "
          "÷ unloaded")
    unloaded = {}
    for threads in args.threads or thread_counts(cores):
        torch.set_num_threads(threads)
        for hogs in (0, args.hogs):
            with Load(hogs, args.max_hog_s):
                pair(target, drafter, ids, 8)  # warm-up at this thread count
                results = [pair(target, drafter, ids, tokens) for _ in range(repeats)]
            spec = [s for s, _ in results]
            plain = [p for _, p in results]
            speedups = [s / p for s, p in results]
            median = statistics.median(spec)
            unloaded.setdefault(threads, median)
            print(f"{threads} | {'none' if not hogs else f'{hogs} busy loop' + ('s' if hogs > 1 else '')} | "
                  f"{median:.1f} ({min(spec):.1f}–{max(spec):.1f}) | {statistics.median(plain):.1f} | "
                  f"{min(speedups):.2f}–{max(speedups):.2f}× | {median / unloaded[threads]:.2f}", flush=True)
    print(f"load average at the end {machine_load() or float('nan'):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
