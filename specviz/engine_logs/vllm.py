"""vLLM: the per-request metrics of ``--per-request-spec-decode-metrics`` and the Prometheus counters.

**Per request** (vLLM PR #48915; docs/features/speculative_decoding/acceptance_metrics.md;
``RequestSpecDecodeMetrics.to_dict``): the response's ``metrics.speculative_decoding`` object, on the
final usage chunk when streamed. ``num_spec_steps`` verify steps, ``num_accepted_draft_tokens`` (bonus
excluded), ``num_draft_tokens`` (grammar-invalid drafts subtracted), ``num_spec_tokens`` = K,
``acceptance_histogram`` (entry j = steps that kept j drafts, K + 1 entries),
``mean_acceptance_length`` = 1 + accepted ÷ steps (bonus included), ``draft_acceptance_rate`` =
accepted ÷ drafted; with ``detailed``, ``per_step_accepted`` and ``per_step_drafted`` in order. The
scheduler counts a step's accepted drafts before it truncates the output at a stop token, and samples
the first output token in the prompt's pass (no step), so the counts are clipped against
``usage.completion_tokens`` here (:func:`specviz.engine_logs.normalise.clip_at_stop`).

**Prometheus** (``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingProm``): counters
``vllm:spec_decode_num_drafts`` (steps), ``_num_draft_tokens``, ``_num_accepted_tokens`` and
``_num_accepted_tokens_per_pos{position="i"}`` (steps that kept position i, 0-based), each exposed
with a ``_total`` suffix. They cover the server's lifetime: two scrapes differenced give one run.
"""

from __future__ import annotations

import math

from specviz.engine_logs import normalise as nz
from specviz.engine_logs import prometheus
from specviz.engine_logs.assemble import Fields, from_histogram, from_passes
from specviz.engine_logs.checks import (MAX_POSITIONS, MAX_STEPS, MAX_TOKENS, count, counts, fail, json_documents, label,
                     optional_count, plain_source, ratio, token_text)
from specviz.engine_logs.imported import Figure, ImportedRun

__all__ = ["PROM_PREFIX", "looks_like", "read", "read_prometheus"]

ENGINE = "vllm"
SPEC = "metrics.speculative_decoding"
PROM_PREFIX = "vllm:spec_decode_"
_SUMMARY = ("num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens", "num_spec_tokens", "acceptance_histogram")


def looks_like(text: str) -> bool:
    """Whether ``text`` reads as vLLM's per-request metrics or its Prometheus counters."""
    return PROM_PREFIX in text or ('"num_spec_steps"' in text and '"acceptance_histogram"' in text)


def read(text: str, name: str, before: str | None = None) -> ImportedRun:
    """Read a vLLM response (JSON, or a recorded SSE stream), its bare metrics object, or a
    Prometheus scrape (with ``before``, an earlier scrape, subtracted). Raises EngineFileError."""
    if PROM_PREFIX in text and '"num_spec_steps"' not in text:
        return read_prometheus(text, name, before)
    docs = json_documents(text, ENGINE)
    spec, usage, finish, chunks = _find_spec(docs)
    if spec is None:
        fail(ENGINE, SPEC, "is missing (start the server with --per-request-spec-decode-metrics summary or detailed)")
    return _per_request(spec, usage, finish, chunks, plain_source(name), _export_marker(docs))


def _export_marker(docs) -> dict:
    """specviz's own export header (``"specviz_export"``), which a real vLLM file lacks."""
    for doc in docs:
        if isinstance(doc, dict) and isinstance(doc.get("specviz_export"), dict):
            return doc["specviz_export"]
    return {}


def _find_spec(docs):
    """(metrics object, usage, finish reason, streamed chunks) from a response or a stream."""
    spec = usage = finish = None
    chunks = []
    for doc in docs:
        if not isinstance(doc, dict):
            fail(ENGINE, "the file", "holds a JSON value that is not an object")
        if all(key in doc for key in _SUMMARY):
            spec = doc
            continue
        metrics = doc.get("metrics")
        if isinstance(metrics, dict) and metrics.get("speculative_decoding") is not None:
            spec = metrics["speculative_decoding"]
        if isinstance(doc.get("usage"), dict):
            usage = doc["usage"]
        for choice in doc.get("choices") or []:
            if isinstance(choice, dict):
                finish = choice.get("finish_reason") or finish
                chunks.append(choice)
    return spec, usage, finish, chunks


def _checked_summary(spec) -> dict:
    if not isinstance(spec, dict):
        fail(ENGINE, SPEC, "is not an object")
    k = count(spec.get("num_spec_tokens"), ENGINE, f"{SPEC}.num_spec_tokens", MAX_POSITIONS)
    hist = counts(spec.get("acceptance_histogram"), ENGINE, f"{SPEC}.acceptance_histogram", MAX_POSITIONS + 1)
    steps = count(spec.get("num_spec_steps"), ENGINE, f"{SPEC}.num_spec_steps")
    accepted = count(spec.get("num_accepted_draft_tokens"), ENGINE, f"{SPEC}.num_accepted_draft_tokens")
    drafted = count(spec.get("num_draft_tokens"), ENGINE, f"{SPEC}.num_draft_tokens")
    if len(hist) != k + 1:
        fail(ENGINE, f"{SPEC}.acceptance_histogram", f"has {len(hist)} entries, not num_spec_tokens + 1 = {k + 1}")
    if sum(hist) != steps:
        fail(ENGINE, f"{SPEC}.num_spec_steps", f"is {steps}, not the histogram's sum {sum(hist)}")
    if sum(j * n for j, n in enumerate(hist)) != accepted:
        fail(ENGINE, f"{SPEC}.num_accepted_draft_tokens", f"is {accepted}, not what the histogram holds")
    if accepted > drafted:
        fail(ENGINE, f"{SPEC}.num_accepted_draft_tokens", f"is {accepted}, more than the {drafted} drafted")
    for key, expected in (("mean_acceptance_length", 1 + accepted / steps if steps else 1.0),
                          ("draft_acceptance_rate", accepted / drafted if drafted else 0.0)):
        if spec.get(key) is not None:
            value = ratio(spec[key], ENGINE, f"{SPEC}.{key}", 0.0, MAX_POSITIONS + 1.0)
            if not math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-9):
                fail(ENGINE, f"{SPEC}.{key}", f"is {value:g}, but the counts give {expected:g}")
    return {"k": k, "hist": hist, "steps": steps, "accepted": accepted, "drafted": drafted}


def _checked_steps(spec, s: dict) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    if spec.get("per_step_accepted") is None:
        return None
    acc = counts(spec["per_step_accepted"], ENGINE, f"{SPEC}.per_step_accepted", MAX_STEPS, s["k"])
    dra = counts(spec.get("per_step_drafted"), ENGINE, f"{SPEC}.per_step_drafted", MAX_STEPS, MAX_POSITIONS * 64)
    if len(acc) != s["steps"] or len(dra) != s["steps"]:
        fail(ENGINE, f"{SPEC}.per_step_accepted", f"has {len(acc)} steps and per_step_drafted {len(dra)}, not "
             f"num_spec_steps = {s['steps']}")
    for i, (a, d) in enumerate(zip(acc, dra)):
        if a > d:
            fail(ENGINE, f"{SPEC}.per_step_accepted[{i}]", f"is {a}, more than the {d} drafted at that step")
    if sum(acc) != s["accepted"] or sum(dra) != s["drafted"]:
        fail(ENGINE, f"{SPEC}.per_step_accepted", "does not add up to num_accepted_draft_tokens and num_draft_tokens")
    return acc, dra


def _per_request(spec, usage, finish, chunks, source: str, marker: dict) -> ImportedRun:
    s = _checked_summary(spec)
    steps = _checked_steps(spec, s)
    first_from_prefill = marker.get("first_token_from_prefill", True) is not False
    tokens, kinds, notes = _stream_tokens(chunks, finish, first_from_prefill)
    f = Fields(ENGINE, source, f"{ENGINE}:{SPEC}.per_step_accepted" if steps else f"{ENGINE}:{SPEC}.acceptance_histogram",
               f"{ENGINE}:{SPEC}.per_step_drafted" if steps else f"{ENGINE}:{SPEC}.num_draft_tokens",
               f"{ENGINE}:{SPEC}.num_spec_steps", k=s["k"], tokens=tokens, token_kinds=kinds, notes=notes)
    f.extra.append(Figure("accept length (vLLM's mean_acceptance_length)", 1 + s["accepted"] / s["steps"] if s["steps"] else 1.0,
                          f"{ENGINE}:{SPEC}.mean_acceptance_length", "vLLM's figure includes the bonus token: it is tokens per pass."))
    completion = optional_count((usage or {}).get("completion_tokens"), ENGINE, "usage.completion_tokens")
    if steps is None:
        f.notes.append("Summary level: start vLLM with --per-request-spec-decode-metrics detailed for per-step counts.")
        return from_histogram(f, s["hist"], s["drafted"], fixed_k=s["drafted"] == s["k"] * s["steps"])
    accepted, drafted = steps
    if completion is not None:
        clipped, removed = nz.clip_at_stop(accepted, completion, first_from_prefill)
        if clipped != accepted:
            f.extra.append(Figure("accepted drafts past the stop token", sum(accepted) - sum(clipped),
                                  f"{ENGINE}:{SPEC}.per_step_accepted, usage.completion_tokens",
                                  f"vLLM counts a step's drafts before it cuts the output at the stop token; {removed} "
                                  "counted tokens are not in the response and were taken out of the last steps."))
            accepted = clipped
    chain = all(d <= s["k"] for d in drafted)
    return from_passes(f, accepted, drafted, chain=chain)


def _chunk_tokens(choice: dict) -> list[str] | None:
    """The tokens of one streamed choice, from its logprobs (completions or chat shape), or None."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return None
    if isinstance(logprobs.get("tokens"), list):
        return [token_text(t, ENGINE, "choices[].logprobs.tokens[]") for t in logprobs["tokens"]]
    if isinstance(logprobs.get("content"), list):
        return [token_text(t.get("token") if isinstance(t, dict) else t, ENGINE, "choices[].logprobs.content[].token")
                for t in logprobs["content"]]
    return None


def _stream_tokens(chunks: list, finish, first_from_prefill: bool = True) -> tuple[tuple | None, tuple | None, list[str]]:
    """Tokens and their kinds from a stream whose chunks carry logprobs, one chunk per engine step:
    the first chunk is the prompt pass's token (target); a later chunk of n tokens is n − 1 accepted
    drafts and the target's token, except the final chunk of a stopped response, whose last token
    may be a draft (shown as unknown)."""
    if finish is not None:
        label(finish, ENGINE, "choices[].finish_reason")
    per_chunk = [_chunk_tokens(c) for c in chunks]
    per_chunk = [t for t in per_chunk if t]
    if not per_chunk:
        return None, None, [("The file carries no per-token logprobs, so the text is not split into tokens "
                            "(stream with logprobs to colour it).")]
    tokens, kinds = [], []
    for n, chunk in enumerate(per_chunk):
        if n == 0 and first_from_prefill:
            kinds += ["target"] * len(chunk)
        else:
            last = "unknown" if n == len(per_chunk) - 1 and finish == "stop" else "target"
            kinds += ["draft"] * (len(chunk) - 1) + [last]
        tokens += chunk
        if len(tokens) > MAX_TOKENS:
            fail(ENGINE, "the stream", f"holds more than {MAX_TOKENS} tokens")
    return tuple(tokens), tuple(kinds), [("Token colours assume one streamed chunk per engine step (vLLM's default "
                                         "stream interval): within a chunk, all but the last token are accepted drafts.")]


def read_prometheus(text: str, name: str, before: str | None = None) -> ImportedRun:
    """Read a scrape of vLLM's ``/metrics`` (:func:`specviz.engine_logs.prometheus.read_counters`)."""
    return prometheus.read_counters(text, name, ENGINE, PROM_PREFIX, before)
