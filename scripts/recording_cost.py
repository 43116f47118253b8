"""What recording a run costs: the time the loop spends in its recorder, as a share of the run.

Every round, :class:`specviz.core.recorder.RoundRecorder` turns the verify pass's outcome into the
trace the page draws: the drafted nodes with their tests, the emitted tokens with their text, and
(for the inspector) the top tokens of p_draft, p_target and the residual. ``specviz bench`` prices
this as an A/B (tokens/s with the recording on against off, separate runs), whose noise on a
2-core machine is about ±5%; this script times the recorder itself, inside the same runs, so the
share it prints has no run-to-run noise in it.

How: ``RoundRecorder.record`` (and, inside it, the inspector's distributions and the drawn token's
source) is wrapped with ``time.perf_counter``; a run's share is recorder seconds ÷ the run's wall
seconds (prefill included), one torch thread.

Usage::

    python -m scripts.recording_cost                        # the default preset (SmolLM2-135M, prompt lookup)
    python -m scripts.recording_cost --pair --dtype int4    # the offline Qwen2.5-Coder pair, 4-bit blocks

Prints one line per run and the median share. Exits 1 with one line when the models are missing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

TYPO_PROMPT = ("Fix the typos in this text and change nothing else:\n\nTeh quick brown fox jumsp over the lazy "
               "dog. It was a sunny day and teh fox was vrey happy to be outside in the feild.")
CODE_PROMPT = ("Write a Python function is_prime(n) that returns True when n is prime, with a docstring and "
               "three doctests.")


def timed_recorder() -> dict[str, float]:
    """Wrap the recorder's methods so each adds its seconds to the returned dict's entry."""
    from specviz.core.recorder import RoundRecorder

    spent = {"record": 0.0, "inspector distributions": 0.0, "drawn token's source": 0.0}
    for name, attr in (("record", "record"), ("inspector distributions", "_record_distributions"),
                       ("drawn token's source", "_record_source")):
        original = getattr(RoundRecorder, attr)

        def wrapped(*args, _original=original, _name=name, **kwargs):
            started = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_name] += time.perf_counter() - started

        setattr(RoundRecorder, attr, wrapped)
    return spent


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", action="store_true", help="the offline Qwen2.5-Coder 0.5B → 1.5B pair on code")
    p.add_argument("--dtype", default="auto", help="auto, bfloat16, float32 or int4 (the pair)")
    p.add_argument("-k", type=int, default=4)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)

    import torch

    import specviz

    torch.set_num_threads(1)
    spent = timed_recorder()
    if args.pair:
        settings = dict(target="qwen2.5-coder-1.5b-instruct", draft="qwen2.5-coder-0.5b-instruct", chat=True)
        prompt = CODE_PROMPT
    else:
        settings, prompt = dict(draft="ngram"), TYPO_PROMPT
    try:
        run = specviz.prepare(prompt, k=args.k, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                              dtype=args.dtype, **settings)
    except Exception as err:  # noqa: BLE001 — one line, not a traceback
        print(f"could not prepare the run: {err}", file=sys.stderr)
        return 1
    run.generation().run()  # warm-up, not counted
    shares = []
    for i in range(args.runs):
        for key in spent:
            spent[key] = 0.0
        started = time.perf_counter()
        generation = run.generation().run()
        wall = time.perf_counter() - started
        shares.append(spent["record"] / wall)
        print(f"run {i}: {len(generation.tokens)} tokens in {len(generation.rounds)} passes, {wall:.2f} s; "
              + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in spent.items())
              + f"; the recorder is {shares[-1]:.1%} of the run")
    print(f"median: the recorder is {statistics.median(shares):.1%} of a run's wall time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
