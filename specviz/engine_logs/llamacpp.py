"""llama.cpp server: the response's ``timings``, the server's log, and its ``/metrics``.

``timings`` (tools/server, PR #12603): ``draft_n`` drafted tokens and ``draft_n_accepted`` accepted
ones over the request, present when it drafted, beside ``predicted_n`` generated tokens. The verify
passes follow from them: each pass adds one token of the target's own, the first token comes from the
prompt's pass, so passes = predicted_n − draft_n_accepted − 1 (checked against the server's
``n_decode_total`` on llama.cpp b11549).

The log line at a request's end comes in the spellings llama.cpp has printed: ``draft acceptance rate
= %0.5f (%5d accepted / %5d generated)``; PR #24536's ``…, mean acceptance length = L, acceptance rate
per position = (r1, r2, …)``; and b11549's ``draft acceptance = %0.5f (%5d accepted / %5d generated),
mean len = %5.2f``, with the rates on a trace-level (``-lv 4``) line of their own, ``acc per pos =
(r1, …)``. L = 1 + accepted ÷ verify steps and r_i = steps that kept position i ÷ steps (full
acceptance). Its "acceptance" is accepted ÷ generated drafts (÷ drafted), not α (llama.cpp #14104).
A server log holds one such line per request: every one is read and their counts added. The slot
counts ``ids.size() − 1`` accepted per step before it stops at an EOS, and samples the first token in
the prompt's pass, so counts are clipped against the eval line's tokens. The trace-level ``statistics
<drafter>: … #gen drafts = …, #acc tokens = …, #acc rate/pos = (…)`` line sums the drafter's whole
life in the server (cumulative); where its totals are exactly the requests' sums, its ``#gen drafts``
gives the verify steps with a draft exactly.

``/metrics`` (``--metrics``): ``llamacpp:spec_decode_num_drafts_total`` and its siblings, the same
counters as vLLM's under another prefix (:mod:`specviz.engine_logs.prometheus`).
"""

from __future__ import annotations

import math
import re

import itertools
from dataclasses import dataclass

from specviz.engine_logs import normalise as nz
from specviz.engine_logs import prometheus
from specviz.engine_logs.assemble import Fields, from_totals
from specviz.engine_logs.checks import MAX_POSITIONS, count, fail, json_documents, optional_count, plain_source, ratio
from specviz.engine_logs.imported import Figure, ImportedRun

__all__ = ["PROM_PREFIX", "looks_like", "read"]

ENGINE = "llamacpp"
PROM_PREFIX = "llamacpp:spec_decode_"
_DRAFT = re.compile(r"draft acceptance(?: rate)?\s*=\s*([0-9.]+)\s*\(\s*(\d+)\s+accepted\s*/\s*(\d+)\s+generated\)"
                    r"(?:\s*,\s*mean (?:acceptance length|len)\s*=\s*([0-9.]+))?"
                    r"(?:\s*,\s*acceptance rate per position\s*=\s*\(([^)]*)\))?")
_ACC_PER_POS = re.compile(r"acc per pos\s*=\s*\(([^)]*)\)")
_TASK = re.compile(r"\|\s*task\s+(-?\d+)\s*\|")
_EVAL = re.compile(r"(?<!prompt )eval time\s*=\s*[0-9.]+\s*ms\s*/\s*(\d+)\s+tokens")
_STATS = re.compile(r"statistics\s+(\S+):.*?#gen drafts\s*=\s*(\d+),\s*#acc drafts\s*=\s*(\d+),\s*#gen tokens\s*=\s*(\d+),"
                    r"\s*#acc tokens\s*=\s*(\d+)(?:.*?#acc rate/pos\s*=\s*\(([^)]*)\))?")
LOG_LINE = "draft acceptance"
#: What a request that drafted nothing says (llama.cpp writes draft_n = 0 when speculation is on but
#: never proposed, and no draft_n at all when it is off).
NEVER_RAN = ("Speculation never ran in this request: nothing was drafted (draft_n = 0). A draft model path alone "
             "does not turn it on: start llama-server with --spec-type draft-simple (or ngram-simple), and check that "
             "the draft model loaded.")


def looks_like(text: str) -> bool:
    """Whether ``text`` reads as a llama.cpp response with draft timings, its server log or its
    ``/metrics`` scrape."""
    return (('"draft_n_accepted"' in text and '"draft_rounds"' not in text) or LOG_LINE in text
            or "#acc tokens" in text or PROM_PREFIX in text)


def read(text: str, name: str, before: str | None = None) -> ImportedRun:
    """Read a llama.cpp ``/completion`` (or OpenAI-style) response, a recorded stream, server log
    lines, or a ``/metrics`` scrape (with ``before``, an earlier scrape, subtracted). Raises
    EngineFileError."""
    source = plain_source(name)
    if PROM_PREFIX in text:
        return prometheus.read_counters(text, name, ENGINE, PROM_PREFIX, before)
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
    never = [] if drafted else [NEVER_RAN]
    predicted = optional_count(timings.get("predicted_n"), ENGINE, "timings.predicted_n")
    if accepted > drafted:
        fail(ENGINE, "timings.draft_n_accepted", f"is {accepted}, more than the {drafted} drafted")
    if predicted is not None and accepted > predicted:
        fail(ENGINE, "timings.draft_n_accepted", f"is {accepted}, more than the {predicted} tokens generated")
    passes = None if predicted is None or predicted < accepted + 1 else predicted - accepted - 1
    f = Fields(ENGINE, source, f"{ENGINE}:timings.draft_n_accepted", f"{ENGINE}:timings.draft_n",
               f"{ENGINE}:timings.predicted_n − draft_n_accepted − 1",
               notes=never + ["timings give totals: α (÷ tested) and acceptance by position are in the server's "
                              "trace-level log ('acc per pos') and its /metrics."],
               passes_conversion=("Each verify pass adds one token of the target's own after its accepted drafts, and "
                                  "the first token comes from the prompt's pass: predicted − accepted − 1."))
    return from_totals(f, accepted, drafted, passes)


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


@dataclass
class _Request:
    """One request's ``draft acceptance`` line, its rates and its eval line's token count."""

    task: str
    accepted: int
    drafted: int
    mean_length: float | None
    rates: list[float]
    eval_tokens: int | None


def _rates(text: str, what: str) -> list[float]:
    parts = [part for part in text.split(",") if part.strip()]
    if len(parts) > MAX_POSITIONS:
        fail(ENGINE, what, f"has more than {MAX_POSITIONS} positions")
    return [ratio(float(part) if re.fullmatch(r"\s*[0-9.]+\s*", part) else -1.0, ENGINE, f"{what} at position {i + 1}")
            for i, part in enumerate(parts)]


def _requests(text: str) -> list[_Request]:
    """Every request's line of a log, in order, each with the per-position rates printed on it or on
    its own task's ``acc per pos`` line, and its task's eval tokens."""
    requests: list[_Request] = []
    evals: dict[str, int] = {}
    for line in text.splitlines():
        task_match = _TASK.search(line)
        task = task_match.group(1) if task_match else ""
        if (e := _EVAL.search(line)) is not None:
            evals[task] = count(int(e.group(1)), ENGINE, "the log's eval tokens")
        elif (m := _DRAFT.search(line)) is not None:
            accepted = count(int(m.group(2)), ENGINE, "the log's accepted count")
            drafted = count(int(m.group(3)), ENGINE, "the log's generated count")
            if accepted > drafted:
                fail(ENGINE, "the log's accepted count", f"is {accepted}, more than the {drafted} drafts generated")
            ratio(float(m.group(1)), ENGINE, "the log's draft acceptance")
            rates = _rates(m.group(5), "the log's acceptance rate per position") if m.group(5) else []
            requests.append(_Request(task, accepted, drafted, float(m.group(4)) if m.group(4) else None, rates,
                                     evals.pop(task, None)))
        elif (r := _ACC_PER_POS.search(line)) is not None and requests and requests[-1].task == task \
                and not requests[-1].rates:
            requests[-1].rates = _rates(r.group(1), "the log's acc per pos")
    return requests


def _log(text: str, source: str) -> ImportedRun:
    requests = _requests(text)
    stats = list(_STATS.finditer(text))
    if not requests:
        if not stats:
            fail(ENGINE, "the log", "has no 'draft acceptance' line (is speculative decoding on?)")
        return _stats(stats[-1], source)
    accepted, drafted = sum(r.accepted for r in requests), sum(r.drafted for r in requests)
    k = max((len(r.rates) for r in requests), default=0) or None
    f = Fields(ENGINE, source, f"{ENGINE}:log 'draft acceptance' accepted", f"{ENGINE}:log 'draft acceptance' generated",
               f"{ENGINE}:log 'mean len'", positions=f"{ENGINE}:log 'acc per pos'", k=k)
    if len(requests) > 1:
        last = requests[-1]
        f.notes.append(f"This log holds {len(requests)} requests: every one is read and their counts added "
                       f"({accepted} accepted of {drafted} drafted; the last request alone: {last.accepted} of "
                       f"{last.drafted}).")
        f.extra.append(Figure("requests in the log", len(requests), f"{ENGINE}:log 'draft acceptance' lines",
                              "One line per request that drafted."))
    found = [_passes(r.accepted, r.mean_length, r.rates) if r.mean_length is not None else None for r in requests]
    steps, kept = _from_statistics(stats, accepted, drafted, f)
    if steps is None and all(x is not None for x in found):
        steps = sum(x[0] for x in found)
        widths = {len(x[1]) for x in found}
        kept = [sum(x[1][i] for x in found) for i in range(widths.pop())] if len(widths) == 1 else []
        f.passes_conversion = ("Recovered per request: the whole number of steps for which 1 + accepted ÷ steps and "
                               "each position's rate print as its line does; then added. These are the steps that "
                               "carried a draft: a last pass that drafted nothing is not among them.")
        f.notes.append(f"Verify steps ({steps}) and per-position counts are recovered from the lines' rounded figures.")
    if steps is None:
        f.notes.append("The verify steps cannot be recovered from these lines (nothing accepted, or a llama.cpp that "
                       "prints no mean length), so only the acceptance rate is shown.")
        return from_totals(f, accepted, drafted, None)
    clipped = _clipped(requests, found, f)
    full_k = bool(kept) and drafted == len(kept) * steps
    tested = [steps, *kept[:-1]] if full_k else None
    return from_totals(f, clipped, drafted, steps, kept or None, tested,
                       "The printed rate at this position, from its count recovered over the recovered steps.")


def _from_statistics(stats: list, accepted: int, drafted: int, f: Fields) -> tuple[int | None, list[int]]:
    """The verify steps and per-position counts from the last ``statistics`` line, where its
    lifetime totals are exactly the requests' sums (the log covers the server's whole life); else
    ``(None, [])``."""
    if not stats:
        return None, []
    m = stats[-1]
    gen_drafts, gen_tokens, acc_tokens = (count(int(m.group(i)), ENGINE, f"the statistics line's {what}")
                                          for i, what in ((2, "#gen drafts"), (4, "#gen tokens"), (5, "#acc tokens")))
    if (acc_tokens, gen_tokens) != (accepted, drafted):
        f.notes.append(f"The statistics line sums the drafter's whole life ({acc_tokens} accepted of {gen_tokens}), "
                       "more than this log's requests, so it is not used for them.")
        return None, []
    rates = _rates(m.group(6), "the statistics line's #acc rate/pos") if m.group(6) else []
    if rates and f.k and len(rates) < f.k:  # positions never accepted in the drafter's life are left out
        rates += [0.0] * (f.k - len(rates))
    kept = _kept(rates, gen_drafts, accepted) if rates else []
    f.passes = f"{ENGINE}:statistics #gen drafts"
    f.passes_conversion = ("The statistics line's #gen drafts: its totals are exactly the requests' sums, so it covers "
                           "them and nothing else.")
    f.notes.append("The trace-level statistics line agrees with the requests' lines: its #gen drafts gives the verify "
                   "steps exactly.")
    return gen_drafts, kept or []


def _clipped(requests: list[_Request], found: list, f: Fields) -> int:
    """The requests' accepted drafts, each clipped at its eval line's tokens where its steps are known
    (llama.cpp counts a step's accepted drafts before it stops at the end-of-text token)."""
    total = 0
    for r, x in zip(requests, found):
        if x is not None and r.eval_tokens is not None:
            total += nz.clip_total_at_stop(r.accepted, x[0], r.eval_tokens, first_token_from_prefill=True)
        else:
            total += r.accepted
    accepted = sum(r.accepted for r in requests)
    if total != accepted:
        f.extra.append(Figure("accepted drafts past the stop token", accepted - total, f"{ENGINE}:log eval tokens",
                              "llama.cpp counts a step's accepted drafts before it stops at the end-of-text token."))
    return total


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
