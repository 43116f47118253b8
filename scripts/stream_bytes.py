"""Bytes the Run tab sends while a run streams: the token panel and the charts, per update.

every token update used to resend the whole token panel (209 kB at the end of a
1,024-token run, for a round that adds about 1 kB), so a long run sent O(n²) bytes. The panel is
now append-only while it streams (:class:`specviz.ui.tabs.run_stream.TokenPanel`), and gradio sends a string
that extends the previous one as an "append" of the new part.

How it is measured: the page's own stream generator (:func:`specviz.ui.tabs.run_stream.stream`) runs a tiny
random Llama (``tests/helpers.py``) with a noisy copy of itself as the draft model, greedy, K = 4.
Each yielded update goes through the page's own postprocessing (``Blocks.postprocess_data`` of the
/run event) and gradio's own streaming diff (``Blocks.handle_streaming_diffs``, i.e.
``gradio.utils.diff``), exactly as the server does before it sends the update; the bytes are
those of each output's JSON. The tiny model decodes a round in milliseconds, so the stream's clock
is simulated: each round counts as ``--round-ms`` (default 60 ms, about the offline SmolLM2's
pace on a small CPU), which sets how often the stream sends tokens (every 0.25 s) and charts
(every 1 s) as a real run would. Nothing here is timed; the figures are bytes, the same on any
machine.

Usage::

    python -m scripts.stream_bytes                   # 1,024 and 4,096 tokens, before and after
    python -m scripts.stream_bytes --tokens 1024 --json bytes.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tests/helpers.py: the tiny Llama builders

from specviz.ui.serve.state import FIGURES  # noqa: E402

#: Outputs of the /run event: the token panel, the summary, then the charts (RunView's, in order).
TOKENS, SUMMARY, CHARTS = 0, 1, slice(2, 2 + len(FIGURES))


class _SimulatedClock:
    """``time.perf_counter`` for the stream, advanced by a fixed time per round."""

    def __init__(self, round_s: float):
        self.now, self.round_s = 0.0, round_s

    def perf_counter(self) -> float:
        return self.now


class _PacedRun:
    """A Generation whose rounds each advance the simulated clock by one round's time."""

    def __init__(self, run, clock: _SimulatedClock):
        self._run, self._clock = run, clock

    def __getattr__(self, name):
        return getattr(self._run, name)

    def __iter__(self):
        for round_ in self._run:
            self._clock.now += self._clock.round_s
            yield round_


def stream_updates(tokens: int, whole: bool, round_ms: float = 60.0, seed: int = 0):
    """The /run event's updates for a ``tokens``-token run of a tiny Llama, as the server would send
    them: one list of per-output values (after postprocessing and gradio's streaming diff) per
    yielded update. ``whole``: the old behaviour (the whole panel per token update)."""
    import torch
    from helpers import noisy_copy, tiny_llama

    from specviz.drafters import ModelDrafter
    from specviz.core.engine import Generation
    from specviz.run.request import RunRequest
    from specviz.core.sampling import SamplingConfig
    from specviz.ui.tabs import run_stream
    from specviz.ui.page import build_page
    from specviz.ui.serve.state import RunState

    torch.set_num_threads(1)
    vocab = 256
    target = tiny_llama(seed, vocab_size=vocab, max_position_embeddings=tokens + 64, lm_head_scale=8.0)
    drafter = ModelDrafter(noisy_copy(target, seed + 1, 0.01), vocab)
    words = [f" w{i}" for i in range(vocab)]  # short word-like token texts, as a real tokenizer's
    greedy = SamplingConfig(temperature=0.0)
    run = Generation(target, list(range(1, 17)), drafter, k=4, sampling=greedy, max_new_tokens=tokens, seed=seed,
                     decode=lambda ids: "".join(words[i] for i in ids))
    request = RunRequest(prompt="tiny", target="tiny-llama", draft="draft model", k=4, sampling=greedy,
                         max_new_tokens=tokens, seed=seed)
    state = RunState(label="tiny Llama ← noisy copy", k=4, max_new_tokens=tokens)
    clock = _SimulatedClock(round_ms / 1e3)
    runs_time, run_stream.time = run_stream.time, SimpleNamespace(perf_counter=clock.perf_counter, time=time.time)
    demo = build_page(public=False)
    block_fn = next(fn for fn in demo.fns.values() if fn.api_name == "run")
    session = __import__("gradio.state_holder", fromlist=["SessionState"]).SessionState(demo)
    loop = asyncio.new_event_loop()
    try:
        generator = run_stream.stream(_PacedRun(run, clock), request, state, {}, lambda _: {},
                                panel=run_stream.TokenPanel(state, whole=whole))
        for outputs in generator:
            data = loop.run_until_complete(demo.postprocess_data(block_fn, list(outputs), session))
            yield demo.handle_streaming_diffs(block_fn, data, "bench", "run", final=False)
    finally:
        run_stream.time = runs_time
        loop.close()


def _bytes(value) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def measure(tokens: int, whole: bool, round_ms: float = 60.0) -> dict:
    """Bytes per update of the token panel and of the five charts over one run (see the module doc).

    Returns:
        ``{"tokens", "updates", "token_updates", "tokens_mean", "tokens_last", "tokens_total",
        "charts_updates", "charts_mean", "charts_last", "charts_total", "last_token_edit"}``: bytes
        (JSON) of each output's diff; "updates" counts every yield, "token_updates" those that
        changed the panel, "charts_updates" those that changed a chart; "last_token_edit" is the
        final update's edit kind for the panel ("append" or "replace").
    """
    panel, charts, last_edit, updates = [], [], None, 0
    for data in stream_updates(tokens, whole, round_ms):
        updates += 1
        edit = data[TOKENS]
        if _changes(edit):
            panel.append(_bytes(edit))
            last_edit = edit[0][0] if isinstance(edit, list) and edit else "replace"
        chart_bytes = [_bytes(d) for d in data[CHARTS] if _changes(d)]
        if chart_bytes:
            charts.append(sum(chart_bytes))
    return {"tokens": tokens, "updates": updates, "token_updates": len(panel),
            "tokens_mean": statistics.mean(panel), "tokens_last": panel[-1], "tokens_total": sum(panel),
            "charts_updates": len(charts), "charts_mean": statistics.mean(charts), "charts_last": charts[-1],
            "charts_total": sum(charts), "last_token_edit": last_edit}


def _changes(edit) -> bool:
    """Whether an output's diff changes anything on the page (an empty diff or a skip does not)."""
    if isinstance(edit, list):
        return bool(edit) and not all(e[0] == "replace" and _is_skip(e[2]) for e in edit)
    return not _is_skip(edit)


def _is_skip(value) -> bool:
    """gr.skip() as postprocessed (``{"__type__": "update", "props": {...}}`` with no value)."""
    return isinstance(value, dict) and value.get("__type__") == "update" and "value" not in value


def _kb(n: float) -> str:
    return f"{n / 1e3:,.1f} kB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096], help="run lengths (tokens)")
    parser.add_argument("--round-ms", type=float, default=60.0, dest="round_ms",
                        help="simulated time per round (ms; default %(default)s)")
    parser.add_argument("--json", default=None, help="write the results to this file")
    args = parser.parse_args(argv)
    results = []
    for tokens in args.tokens:
        for whole in (True, False):
            r = {"behaviour": "before (whole panel)" if whole else "after (append-only)", **measure(tokens, whole,
                                                                                                  args.round_ms)}
            results.append(r)
            print(f"{tokens:5d} tokens, {r['behaviour']:21s}: token panel {r['token_updates']} updates, "
                  f"mean {_kb(r['tokens_mean'])}, last {_kb(r['tokens_last'])} ({r['last_token_edit']}), total "
                  f"{_kb(r['tokens_total'])}; charts {r['charts_updates']} updates, mean {_kb(r['charts_mean'])}, "
                  f"last {_kb(r['charts_last'])}, total {_kb(r['charts_total'])}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
