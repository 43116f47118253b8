"""A saved specviz run written in each engine's format, to compare with that engine's own output.

:func:`write` takes a trace's rounds and metadata (:func:`specviz.figures.trace.load_trace_file`) and writes
what the engine would report for those verify passes, in its field names and units:

* ``vllm``: a recorded ``/v1/completions`` stream: one chunk per pass with its tokens in
  ``logprobs.tokens``, and the final usage chunk with ``metrics.speculative_decoding`` at the
  ``detailed`` level;
* ``sglang``: a native ``/generate`` response with its ``meta_info`` speculative fields;
* ``llamacpp``: the server log lines a request ends with, as llama.cpp b11549 prints them at trace
  verbosity (eval tokens, ``draft acceptance … mean len``, ``acc per pos``);
* ``mlx``: mlx-lm ``stream_generate`` records as JSON Lines, each token with ``from_draft``.

Each file starts with (or holds) a ``specviz_export`` object no engine writes: it says the run's K
and that specviz's first pass drafts from the prompt, so the first token is not the prompt pass's own
(engines other than mlx-lm sample it there). Passes that drafted nothing are no engine's verify step:
they are left out of the counts, their tokens kept as the target's.
"""

from __future__ import annotations

import json

from specviz.engine_logs.checks import fail
from specviz.engine_logs.imported import ENGINES

__all__ = ["SUFFIXES", "write"]

#: A file suffix for each engine's export.
SUFFIXES = {"vllm": ".sse", "sglang": ".json", "llamacpp": ".log", "mlx": ".jsonl"}
_FINISH = {"eos": "stop", "length": "length", "max_new_tokens": "length"}


def _passes(rounds) -> list[tuple[int, int]]:
    """(accepted, drafted) of each pass that drafted something."""
    return [(r.n_accepted, len(r.drafted)) for r in rounds if r.drafted]


def _k(rounds, meta: dict) -> int:
    settings = meta.get("settings") or {}
    return int(meta.get("k") or settings.get("k") or max([r.k for r in rounds] + [0]))


def _finish(meta: dict) -> str:
    return _FINISH.get(meta.get("finish_reason") or "", "length")


def _marker(k: int) -> dict:
    return {"source": "specviz run --trace", "num_draft_tokens": k, "first_token_from_prefill": False}


def write(engine: str, rounds, meta: dict) -> str:
    """The run (``rounds``: :class:`~specviz.core.records.Round` list, ``meta``: its saved metadata) in
    ``engine``'s format (one of :data:`~specviz.engine_logs.imported.ENGINES`), as text.

    Raises:
        EngineFileError: for an unknown engine.
    """
    writers = {"vllm": _vllm, "sglang": _sglang, "llamacpp": _llamacpp, "mlx": _mlx}
    if engine not in writers:
        fail("export", "the engine", f"{str(engine)[:20]!r} is not one of {', '.join(ENGINES)}")
    return writers[engine](rounds, meta, _k(rounds, meta))


def _vllm(rounds, meta: dict, k: int) -> str:
    passes = _passes(rounds)
    width = max([k] + [a for a, _ in passes])
    hist = [0] * (width + 1)
    for a, _ in passes:
        hist[a] += 1
    accepted, drafted = sum(a for a, _ in passes), sum(d for _, d in passes)
    emitted = [t for r in rounds for t in r.emitted]
    lines = []
    chunks = [r for r in rounds if r.emitted]
    for n, r in enumerate(chunks):
        choice = {"index": 0, "text": "".join(t.text for t in r.emitted), "logprobs": {"tokens": [t.text for t in r.emitted]},
                  "finish_reason": _finish(meta) if n == len(chunks) - 1 else None}
        lines.append({"id": "cmpl-specviz", "object": "text_completion", "choices": [choice]})
    spec = {"mean_acceptance_length": 1 + accepted / len(passes) if passes else 1.0,
            "draft_acceptance_rate": accepted / drafted if drafted else 0.0, "acceptance_histogram": hist,
            "num_spec_steps": len(passes), "num_accepted_draft_tokens": accepted, "num_draft_tokens": drafted,
            "num_spec_tokens": width, "per_step_accepted": [a for a, _ in passes],
            "per_step_drafted": [d for _, d in passes]}
    lines.append({"id": "cmpl-specviz", "object": "text_completion", "choices": [],
                  "usage": {"prompt_tokens": 0, "completion_tokens": len(emitted), "total_tokens": len(emitted)},
                  "metrics": {"speculative_decoding": spec}, "specviz_export": _marker(width)})
    return "".join(f"data: {json.dumps(line, ensure_ascii=False)}\n\n" for line in lines) + "data: [DONE]\n\n"


def _sglang(rounds, meta: dict, k: int) -> str:
    passes = _passes(rounds)
    hist = [0] * (max([0] + [a for a, _ in passes]) + 1)
    for a, _ in passes:
        hist[a] += 1
    accepted, proposed = sum(a for a, _ in passes), sum(d for _, d in passes)
    emitted = [t for r in rounds for t in r.emitted]
    meta_info = {"id": "specviz", "finish_reason": {"type": _finish(meta)}, "prompt_tokens": 0,
                 "completion_tokens": len(emitted), "spec_verify_ct": len(passes),
                 "spec_num_correct_drafts": accepted, "spec_num_proposed_drafts": proposed,
                 "spec_accept_rate": accepted / proposed if proposed else 0.0,
                 "spec_accept_length": len(emitted) / len(passes) if passes else 0,
                 "spec_correct_drafts_histogram": hist}
    doc = {"text": "".join(t.text for t in emitted), "output_ids": [t.id for t in emitted], "meta_info": meta_info,
           "specviz_export": _marker(k)}
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


def _llamacpp(rounds, meta: dict, k: int) -> str:
    """The lines llama.cpp's server (b11549) prints as a request ends, at trace verbosity (``-lv 4``):
    its timings, ``draft acceptance = … mean len = …`` and the ``acc per pos`` line, each with the
    logger's time and level prefix, as tests/fixtures/engines/llamacpp_b11549_trace.log holds them."""
    passes = [(a, d) for a, d in _passes(rounds) if d]  # llama.cpp counts the steps that carried a draft
    width = max([k] + [d for _, d in passes])
    per_pos = [sum(1 for a, _ in passes if a > i) for i in range(width)]
    accepted, drafted = sum(a for a, _ in passes), sum(d for _, d in passes)
    emitted = sum(len(r.emitted) for r in rounds)
    steps = len(passes)
    prefill_ms = float(meta.get("prefill_ms") or 0.0)
    eval_ms = max(0.0, float(meta.get("wall_s") or 0.0) * 1e3 - prefill_ms)
    per_token = eval_ms / emitted if emitted else 0.0
    head = "0.00.000.000 I slot print_timing: id  0 | task 0 | "
    rates = ", ".join(f"{n / steps:.3f}" for n in per_pos) if steps else ""
    mean = 1.0 + accepted / steps if steps else 1.0
    lines = [f"{head}prompt eval time = {prefill_ms:10.2f} ms /     1 tokens ({prefill_ms:8.2f} ms per token, "
             f"{1e3 / prefill_ms if prefill_ms else 0.0:8.2f} tokens per second)",
             f"{head}       eval time = {eval_ms:10.2f} ms / {emitted:5d} tokens ({per_token:8.2f} ms per token, "
             f"{1e3 / per_token if per_token else 0.0:8.2f} tokens per second)",
             f"{head}      total time = {prefill_ms + eval_ms:10.2f} ms / {emitted + 1:5d} tokens",
             f"{head}draft acceptance = {accepted / drafted if drafted else 0.0:0.5f} ({accepted:5d} accepted / "
             f"{drafted:5d} generated), mean len = {mean:5.2f}",
             f"{head}     acc per pos = ({rates})",
             f"# specviz_export {json.dumps(_marker(k))}"]
    return "\n".join(lines) + "\n"


def _mlx(rounds, meta: dict, k: int) -> str:
    emitted = [t for r in rounds for t in r.emitted]
    lines = [{"specviz_export": _marker(k)}]
    for n, t in enumerate(emitted, start=1):
        lines.append({"text": t.text, "token": t.id, "from_draft": t.kind == "accepted", "generation_tokens": n,
                      "finish_reason": _finish(meta) if n == len(emitted) else None})
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
