"""llama.cpp server: the response's ``timings`` and the slot's speculative log lines.

``timings`` (tools/server, PR #12603): ``draft_n`` drafted tokens and ``draft_n_accepted`` accepted
ones over the request, present when it drafted, beside ``predicted_n`` generated tokens. The server's
log line at a request's end (``draft acceptance rate = %0.5f (%5d accepted / %5d generated)``; since
PR #24536 ``draft acceptance = … (A accepted / G generated), mean acceptance length = L, acceptance
rate per position = (r1, r2, …)``) has L = 1 + accepted ÷ verify steps and r_i = steps that kept
position i ÷ steps (full acceptance). Its "acceptance" is accepted ÷ generated drafts (÷ drafted), not
α (llama.cpp #14104). The slot counts ``ids.size() − 1`` accepted per step before it stops at an EOS,
and samples the first token in the prompt's pass, so counts are clipped against the eval line's
tokens. The ``statistics <drafter>: … #gen drafts = …, #acc tokens = …`` line sums a drafter's whole
life (cumulative).
"""

from __future__ import annotations

import math
import re

from specviz.engine_logs import normalise as nz
from specviz.engine_logs.assemble import Fields, from_totals
from specviz.engine_logs.checks import MAX_POSITIONS, count, fail, json_documents, optional_count, plain_source, ratio
from specviz.engine_logs.imported import Figure, ImportedRun
import itertools

__all__ = ["looks_like", "read"]

ENGINE = "llamacpp"
_DRAFT = re.compile(r"draft acceptance(?: rate)?\s*=\s*([0-9.]+)\s*\(\s*(\d+)\s+accepted\s*/\s*(\d+)\s+generated\)"
                    r"(?:\s*,\s*mean acceptance length\s*=\s*([0-9.]+)\s*,\s*acceptance rate per position\s*=\s*\(([^)]*)\))?")
_EVAL = re.compile(r"(?<!prompt )eval time\s*=\s*[0-9.]+\s*ms\s*/\s*(\d+)\s+tokens")
_STATS = re.compile(r"statistics\s+(\S+):.*?#gen drafts\s*=\s*(\d+),\s*#acc drafts\s*=\s*(\d+),\s*#gen tokens\s*=\s*(\d+),"
                    r"\s*#acc tokens\s*=\s*(\d+)")
LOG_LINE = "draft acceptance"


def looks_like(text: str) -> bool:
    """Whether ``text`` reads as a llama.cpp response with draft timings or its server log."""
    return ('"draft_n_accepted"' in text and '"draft_rounds"' not in text) or LOG_LINE in text or "#acc tokens" in text


def read(text: str, name: str) -> ImportedRun:
    """Read a llama.cpp ``/completion`` (or OpenAI-style) response, a recorded stream, or server log
    lines. Raises EngineFileError."""
    source = plain_source(name)
    if text.lstrip()[:1] in "{[" or text.lstrip().startswith("data:"):
        return _timings(json_documents(text, ENGINE), source)
    return _log(text, source)


def _timings(docs, source: str) -> ImportedRun:
    timings = None
    for doc in docs:
        if isinstance(doc, dict) and isinstance(doc.get("timings"), dict) and "draft_n" in doc["timings"]:
            timings = doc["timings"]
    if timings is None:
        fail(ENGINE, "timings.draft_n", "is missing (the request did not draft, or this is not a llama.cpp response)")
    drafted = count(timings.get("draft_n"), ENGINE, "timings.draft_n")
    accepted = count(timings.get("draft_n_accepted"), ENGINE, "timings.draft_n_accepted")
    predicted = optional_count(timings.get("predicted_n"), ENGINE, "timings.predicted_n")
    if accepted > drafted:
        fail(ENGINE, "timings.draft_n_accepted", f"is {accepted}, more than the {drafted} drafted")
    if predicted is not None and accepted > predicted:
        fail(ENGINE, "timings.draft_n_accepted", f"is {accepted}, more than the {predicted} tokens generated")
    f = Fields(ENGINE, source, f"{ENGINE}:timings.draft_n_accepted", f"{ENGINE}:timings.draft_n", "",
               notes=[("timings give totals only: the verify passes, and so α (÷ tested) and acceptance by position, "
                      "are in the server log's 'draft acceptance' line.")])
    return from_totals(f, accepted, drafted, None)


def _kept(rates: list[float], steps: int, accepted: int) -> list[int] | None:
    """Whole per-position counts that print as ``rates`` (3 decimals) over ``steps``, add up to
    ``accepted`` and do not grow with the position; None when there are none."""
    lo = [max(0, math.ceil((r - 0.0005) * steps - 1e-9)) for r in rates]
    hi = [min(steps, math.floor((r + 0.0005) * steps + 1e-9)) for r in rates]
    if any(a > b for a, b in zip(lo, hi)) or not sum(lo) <= accepted <= sum(hi):
        return None
    kept, spare = list(lo), accepted - sum(lo)
    for i in range(len(kept)):
        extra = min(spare, hi[i] - lo[i])
        kept[i] += extra
        spare -= extra
    return kept if all(a >= b for a, b in itertools.pairwise(kept)) else None


def _passes(accepted: int, mean_length: float, rates: list[float]) -> tuple[int, list[int]] | None:
    """The verify steps behind a log line's rounded mean length (2 decimals) and rates (3 decimals),
    with the per-position counts: the first whole number of steps that reproduces them, or None when
    none does (or nothing was accepted, which leaves the steps unknown)."""
    if accepted == 0 or mean_length <= 1.0:
        return None
    lo = max(1, math.floor(accepted / (mean_length - 1 + 0.0051)))
    hi = math.ceil(accepted / max(mean_length - 1 - 0.0051, 1e-9))
    for steps in range(lo, min(hi, lo + 100_000) + 1):
        if round(1 + accepted / steps, 2) != round(mean_length, 2):
            continue
        kept = _kept(rates, steps, accepted) if rates else []
        if kept is not None:
            return steps, kept
    return None


def _log(text: str, source: str) -> ImportedRun:
    lines = [m for m in _DRAFT.finditer(text)]
    if not lines:
        stats = list(_STATS.finditer(text))
        if not stats:
            fail(ENGINE, "the log", "has no 'draft acceptance' line (is speculative decoding on?)")
        return _stats(stats[-1], source)
    m = lines[-1]
    accepted = count(int(m.group(2)), ENGINE, "the log's accepted count")
    drafted = count(int(m.group(3)), ENGINE, "the log's generated count")
    if accepted > drafted:
        fail(ENGINE, "the log's accepted count", f"is {accepted}, more than the {drafted} drafts generated")
    ratio(float(m.group(1)), ENGINE, "the log's draft acceptance")
    rates = []
    if m.group(5) is not None and m.group(5).strip():
        parts = m.group(5).split(",")
        if len(parts) > MAX_POSITIONS:
            fail(ENGINE, "the log's acceptance rate per position", f"has more than {MAX_POSITIONS} positions")
        rates = [ratio(float(p) if re.fullmatch(r"\s*[0-9.]+\s*", p) else -1.0, ENGINE,
                       f"the log's acceptance rate at position {i + 1}") for i, p in enumerate(parts)]
    mean_length = float(m.group(4)) if m.group(4) else None
    found = _passes(accepted, mean_length, rates) if mean_length is not None else None
    f = Fields(ENGINE, source, f"{ENGINE}:log 'draft acceptance' accepted", f"{ENGINE}:log 'draft acceptance' generated",
               f"{ENGINE}:log 'mean acceptance length'", positions=f"{ENGINE}:log 'acceptance rate per position'",
               k=len(rates) or None)
    if mean_length is not None:
        f.extra.append(Figure("accept length (llama.cpp's mean acceptance length)", mean_length,
                              f"{ENGINE}:log 'mean acceptance length'",
                              "llama.cpp's 1 + accepted ÷ verify steps includes the bonus token: it is tokens per pass."))
    if found is None:
        f.notes.append("The verify steps cannot be recovered from this line (nothing accepted, or an older llama.cpp "
                       "without the mean acceptance length), so only the acceptance rate is shown.")
        return from_totals(f, accepted, drafted, None)
    steps, kept = found
    f.passes_conversion = ("Recovered: the whole number of steps for which 1 + accepted ÷ steps and each position's "
                           "rate print as the line does.")
    f.notes.append(f"Verify steps ({steps}) and per-position counts are recovered from the line's rounded figures.")
    evals = list(_EVAL.finditer(text, 0, m.start()))
    clipped = accepted
    if evals:
        generated = count(int(evals[-1].group(1)), ENGINE, "the log's eval tokens")
        clipped = nz.clip_total_at_stop(accepted, steps, generated, first_token_from_prefill=True)
        if clipped != accepted:
            f.extra.append(Figure("accepted drafts past the stop token", accepted - clipped, f"{ENGINE}:log eval tokens",
                                  "llama.cpp counts a step's accepted drafts before it stops at the end-of-text token."))
    full_k = len(rates) > 0 and drafted == len(rates) * steps
    tested = [steps, *kept[:-1]] if full_k else None
    return from_totals(f, clipped, drafted, steps, kept or None, tested,
                       "The printed rate at this position, from its count recovered over the recovered steps.")


def _stats(m, source: str) -> ImportedRun:
    drafts, accepted_drafts, drafted, accepted = (count(int(m.group(i)), ENGINE, f"the statistics line's {what}")
                                                  for i, what in ((2, "#gen drafts"), (3, "#acc drafts"),
                                                                  (4, "#gen tokens"), (5, "#acc tokens")))
    if accepted > drafted or accepted_drafts > drafts:
        fail(ENGINE, "the statistics line's #acc tokens", "is more than what was generated")
    f = Fields(ENGINE, source, f"{ENGINE}:statistics #acc tokens", f"{ENGINE}:statistics #gen tokens",
               f"{ENGINE}:statistics #gen drafts", cumulative=True,
               notes=[(f"The statistics line sums the {m.group(1)[:40]} drafter's whole life in this slot, every request "
                      "together.")])
    f.extra.append(Figure("drafts that kept at least one token", accepted_drafts / drafts if drafts else 0.0,
                          f"{ENGINE}:statistics #acc drafts ÷ #gen drafts", ""))
    return from_totals(f, accepted, drafted, drafts)
