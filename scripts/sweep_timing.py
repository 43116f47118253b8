"""How long a temperature sweep takes, and what it measures.

Runs the Experiments tab's (and ``python -m specviz sweep``'s) experiment in this process, through
:mod:`specviz.run.sweep`: for each temperature a speculative run and a plain baseline of the same target,
prompt, seed and length, after one warm-up per pair and kind of sampling. The goal: 5 temperatures
× 48 tokens on SmolLM2-135M-Instruct in under 2 minutes on a 2-core CPU, model loading included.

Reported: the model load time, the sweep's wall time (warm-ups, speculative runs and baselines),
their total, and per temperature the per-token α (accepted ÷ tested), the acceptance rate
(accepted ÷ proposed), tokens per pass, the measured and theoretical speedups and how many drafts
were tested (α over few tested drafts is noisy: prompt lookup on free text tests few).

Usage (run it alone on the machine: other processes on the same cores change every figure)::

    python -m scripts.sweep_timing                                  # ngram, 5 temperatures, 48 tokens
    python -m scripts.sweep_timing --draft int8 --json sweep_int8.json
    python -m scripts.sweep_timing --temperature 0 1 --max-new-tokens 4   # a quick check that it runs

Exits 1 with one line if a setting is malformed or a model fails to load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

GOAL_S = 120.0
FREE_TEXT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="smollm2-135m-instruct")
    p.add_argument("--draft", default="ngram", help="the held drafter (default: %(default)s)")
    p.add_argument("--temperature", type=float, nargs="+", default=[0.0, 0.3, 0.7, 1.0, 1.5])
    p.add_argument("-k", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=48, dest="max_new_tokens")
    p.add_argument("--prompt", default=FREE_TEXT, help="default: a free-text prompt (chat template applied)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, metavar="FILE", help="also write the figures and rows to FILE")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from specviz.run.request import RequestError, validate_request
    from specviz.run.runner import load_pair
    from specviz.run.sweep import alpha_trend, sweep, sweep_requests

    try:
        base = validate_request(prompt=args.prompt, target=args.target, draft=args.draft, k=args.k,
                                temperature=args.temperature[0], top_k=0, top_p=1.0,
                                max_new_tokens=args.max_new_tokens, seed=args.seed, chat=True, device="cpu",
                                dtype=args.dtype)
        requests = sweep_requests(base, "temperature", args.temperature)
    except RequestError as err:
        print(f"sweep_timing: error: {err}", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    try:
        load_pair(base.target, base.draft, base.device, base.dtype)  # cached for the sweep
    except Exception as err:  # noqa: BLE001 - one line for any loading failure
        print(f"sweep_timing: error: {err}", file=sys.stderr)
        return 1
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    rows = [step.row for step in sweep(requests) if step.row is not None]
    sweep_s = time.perf_counter() - t1
    total = load_s + sweep_s
    print(f"{len(rows)} temperatures × {args.max_new_tokens} tokens, {args.target} ← {args.draft}, K = {args.k}: "
          f"load {load_s:.1f} s + sweep {sweep_s:.1f} s = {total:.1f} s "
          f"({'under' if total < GOAL_S else 'OVER'} the {GOAL_S:.0f} s goal)")
    def f(x, spec=".3f"):
        return "n/a" if x is None else format(x, spec)

    for r in rows:
        print(f"  T = {r['temperature']:<4g} per-token α {f(r['alpha'])} ({r['accepted']}/{r['tested']} tested), "
              f"acceptance rate {f(r['acceptance_rate'])}, tokens/pass {r['tokens_per_pass']:.2f}, "
              f"speedup {f(r['speedup'], '.2f')}× (theory {f(r['theoretical_speedup'], '.2f')}×)")
    print(alpha_trend(rows, "temperature").sentence)
    if args.json:
        Path(args.json).write_text(json.dumps({"load_s": load_s, "sweep_s": sweep_s, "total_s": total,
                                               "goal_s": GOAL_S, "args": vars(args), "rows": rows}, indent=1) + "\n",
                                   encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
