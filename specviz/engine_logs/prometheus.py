"""Prometheus counters of speculative decoding, as vLLM and llama.cpp's server expose them.

Both name the same four counters under their own prefix (``vllm:spec_decode_``,
``llamacpp:spec_decode_``), each with a ``_total`` suffix: ``num_drafts`` (verify steps that carried
a draft), ``num_draft_tokens``, ``num_accepted_tokens`` and ``num_accepted_tokens_per_pos{position="i"}``
(steps that kept position i, 0-based; accepted at i implies accepted before i). vLLM:
``vllm/v1/spec_decode/metrics.py`` (``SpecDecodingProm``); llama.cpp: ``tools/server`` ``/metrics``
with ``--metrics`` (checked against a real scrape of llama.cpp b11549, tests/fixtures/engines). They
cover the server's lifetime: two scrapes differenced give one run.
"""

from __future__ import annotations

import re

from specviz.engine_logs import normalise as nz
from specviz.engine_logs.assemble import Fields, from_totals
from specviz.engine_logs.checks import MAX_POSITIONS, count, fail, label, plain_source
from specviz.engine_logs.imported import Figure, ImportedRun

__all__ = ["ENGINE_LABELS", "read_counters"]

_PROM_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_PROM_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
#: How each engine is named in the figures' sentences.
ENGINE_LABELS = {"vllm": "vLLM", "llamacpp": "llama.cpp"}


def _prom_samples(text: str, engine: str, prefix: str) -> tuple[dict[tuple[str, int | None], float], int]:
    """The spec-decode counters of a scrape, summed over engines and models: ``(name, position)`` →
    value, and how many label sets (engines, models) were summed."""
    out: dict[tuple[str, int | None], float] = {}
    series: set[tuple] = set()
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#") or not line.startswith(prefix):
            continue
        m = _PROM_LINE.match(line)
        if m is None:
            fail(engine, f"line {n}", "is not a Prometheus sample")
        metric, labels, value = m.group(1), m.group(2) or "", m.group(3)
        if metric.endswith("_created"):
            continue
        metric = metric.removesuffix("_total")
        position, others = None, []
        for key, raw in _PROM_LABEL.findall(labels.strip("{}")):
            label(raw, engine, f"line {n}'s label {key}")
            if key != "position":
                others.append((key, raw))
            if key == "position":
                position = count(int(raw) if raw.isdigit() else raw, engine, f"line {n}'s position", MAX_POSITIONS - 1)
        try:
            number = float(value)
        except ValueError:
            fail(engine, f"line {n}", f"has the value {value[:20]!r}, not a number")
        count(number, engine, f"{metric} (line {n})")
        out[(metric, position)] = out.get((metric, position), 0.0) + number
        series.add(tuple(sorted(others)))
    return out, len(series)


def _prom_counts(samples: dict, where: str, engine: str, prefix: str) -> dict:
    def total(suffix: str) -> int:
        key = (prefix + suffix, None)
        if key not in samples:
            fail(engine, f"{prefix}{suffix}_total", f"is missing from {where}")
        return count(samples[key], engine, f"{prefix}{suffix}_total")

    positions = sorted(p for (name, p) in samples if name == prefix + "num_accepted_tokens_per_pos" and p is not None)
    if positions != list(range(len(positions))):
        fail(engine, f"{prefix}num_accepted_tokens_per_pos_total", "does not list positions 0, 1, 2, … in turn")
    per_pos = [count(samples[(prefix + "num_accepted_tokens_per_pos", p)], engine,
                     f"{prefix}num_accepted_tokens_per_pos_total{{position=\"{p}\"}}") for p in positions]
    out = {f"{prefix}{n}_total": total(n) for n in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    out.update({_per_pos(prefix, i): v for i, v in enumerate(per_pos)})
    return out


def _per_pos(prefix: str, i: int) -> str:
    return f'{prefix}num_accepted_tokens_per_pos_total{{position="{i}"}}'


def read_counters(text: str, name: str, engine: str, prefix: str, before: str | None = None) -> ImportedRun:
    """Read a scrape of an engine's ``/metrics``; with ``before`` (an earlier scrape of the same
    server) the difference is one run's counters, else the counters are the server's lifetime
    (``cumulative``).

    Args:
        text, before: the scrapes' text.
        name: the file's name, for the view.
        engine: ``"vllm"`` or ``"llamacpp"``.
        prefix: its counters' prefix (``"vllm:spec_decode_"``).

    Raises:
        EngineFileError: a counter missing, negative or inconsistent (accepted above drafted,
            per-position counts that rise or do not add up), or two scrapes that are not one run.
    """
    who = ENGINE_LABELS.get(engine, engine)
    samples, n_series = _prom_samples(text, engine, prefix)
    after = _prom_counts(samples, "the scrape", engine, prefix)
    cumulative = before is None
    if before is not None:
        try:
            after = nz.per_run(_prom_counts(_prom_samples(before, engine, prefix)[0], "the earlier scrape", engine,
                                            prefix), after)
        except ValueError as err:
            fail(engine, "the two scrapes", f"do not make one run: {err}")
    k = sum(1 for key in after if key.startswith(prefix + "num_accepted_tokens_per_pos"))
    kept = [after[_per_pos(prefix, i)] for i in range(k)]
    steps, accepted, drafted = (after[f"{prefix}{n}_total"] for n in ("num_drafts", "num_accepted_tokens",
                                                                       "num_draft_tokens"))
    if accepted > drafted:
        fail(engine, f"{prefix}num_accepted_tokens_total", f"is {accepted}, more than the {drafted} draft tokens")
    if kept and (sum(kept) != accepted or any(b > a for a, b in zip([steps, *kept], kept))):
        fail(engine, f"{prefix}num_accepted_tokens_per_pos_total",
             "does not fall position by position and add up to num_accepted_tokens")
    notes = [("These counters cover the server's lifetime, every request together: scrape before and after one run "
             "(python -m specviz import AFTER --before BEFORE) for that run's numbers.")] if cumulative else []
    if n_series > 1:
        notes.append(f"The scrape holds {n_series} engines or models; their counters are added together.")
    full_k = drafted == k * steps and k > 0
    tested = [steps, *kept[:-1]] if full_k else None
    if not full_k:
        notes.append("Conditional acceptance and α (÷ tested) need every draft to be K long; these drafts were not.")
    f = Fields(engine, plain_source(name), f"{prefix}num_accepted_tokens", f"{prefix}num_draft_tokens",
               f"{prefix}num_drafts", positions=f"{prefix}num_accepted_tokens_per_pos", k=k or None,
               cumulative=cumulative, notes=notes)
    f.extra.append(Figure(f"accept length ({who}: 1 + accepted ÷ drafts)", 1 + accepted / steps if steps else 1.0,
                          f"{prefix}num_accepted_tokens ÷ {prefix}num_drafts",
                          f"{who}'s mean acceptance length includes the bonus token: it is tokens per pass."))
    return from_totals(f, accepted, drafted, steps, kept if k else None, tested,
                       f"The position's counter ÷ num_drafts: {who}'s own per-position acceptance rate.")
