"""Where a decoding run's time goes: cProfile of one warm 64-token run of each method.

For one prompt of ``specviz/data/bench_prompts.json`` (index as the first argument, default 0), runs
ours speculative (instrumented and not), transformers' assisted generation (prompt lookup, same K),
ours plain and ``generate()`` on SmolLM2-135M-Instruct (``--dtype auto``), after one warm-up call
each, and prints for each: forward passes, the share of time inside the outermost model
``forward``, and the time outside it per token. ``--detail`` adds the top functions by own time.
This is the profile behind BENCHMARKS.md's "Where the time goes".

    python -m scripts.profile_loop 0      # fix-typos
    python -m scripts.profile_loop 1      # csv-to-json
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time

from specviz.run import bench
from specviz.models import loading as models
from specviz.drafters.registry import build_drafter
from specviz.core.sampling import SamplingConfig

K, TOKENS = 4, 64


def main(argv: list[str]) -> int:
    which = int(next((a for a in argv if a.isdigit()), 0))
    target = models.load_model("smollm2-135m-instruct")
    drafter = build_drafter("ngram", target)
    prompt = bench.load_prompts(None)[which]
    ids = target.encode(prompt.prompt, prompt.chat)
    greedy = SamplingConfig(temperature=0.0)
    runs = {
        "ours spec, instrumented": lambda: bench.time_ours(target, drafter, ids, K, greedy, TOKENS, 0, instrument=True),
        "ours spec, instrument off": lambda: bench.time_ours(target, drafter, ids, K, greedy, TOKENS, 0, instrument=False),
        "transformers assisted": lambda: bench.time_hf(target, ids, greedy, TOKENS, 0, lookup_k=K),
        "ours plain": lambda: bench.time_ours(target, None, ids, 1, greedy, TOKENS, 0),
        "generate()": lambda: bench.time_hf(target, ids, greedy, TOKENS, 0),
    }
    for run in runs.values():
        run()  # warm-up
    print(f"prompt {prompt.name}, {target.name} {target.dtype}, K = {K}, T = 0, {TOKENS} tokens")
    for name, run in runs.items():
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        sample = run()
        prof.disable()
        wall = time.perf_counter() - t0
        forwards = [v for k, v in pstats.Stats(prof).stats.items() if k[2] == "forward" and "modeling_" in k[0]]
        _, calls, _, forward_s, _ = max(forwards, key=lambda v: v[3])  # the outermost has the largest cumulative time
        print(f"{name}: {sample.tokens} tokens, {wall * 1e3:.0f} ms under cProfile; {calls} forward passes, "
              f"{forward_s / wall:.1%} in the forward; outside it {(wall - forward_s) * 1e3:.0f} ms "
              f"= {(wall - forward_s) / sample.tokens * 1e3:.2f} ms/token")
        if "--detail" in argv:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(10)
            print("\n".join(out.getvalue().splitlines()[6:20]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
