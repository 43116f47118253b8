"""SGLang: a response's ``meta_info`` speculative fields, and the server's cumulative accept length.

Per request (``TokenizerManager._calculate_spec_decoding_metrics``, python/sglang/srt/managers/
tokenizer_manager.py, and its CPU tests of the request-level denominators): ``spec_verify_ct`` verify
passes; ``spec_num_correct_drafts`` accepted drafts, bonus excluded (alias ``spec_accepted_drafts``);
``spec_num_proposed_drafts`` drafted tokens, ``spec_verify_ct × (speculative_num_draft_tokens − 1)``
unless the drafter reports its real proposals (alias ``spec_proposed_drafts``); ``spec_accept_rate`` =
correct ÷ proposed (÷ drafted); ``spec_accept_length`` = ``completion_tokens ÷ spec_verify_ct``, which
counts the first output token (sampled in the prompt's pass, before any verify pass) and each pass's
bonus; ``spec_correct_drafts_histogram`` (PR #33518, alias ``spec_accept_histogram``): entry j = passes
that kept j drafts, as long as the most kept. The native ``/generate`` response carries them in
``meta_info``; an OpenAI-style one in ``choices[].meta_info`` or ``sglext.spec_tokens_details``.

Server-wide (``/server_info`` or ``/get_server_info``): ``internal_states[].avg_spec_accept_length``,
accepted tokens (bonus included) ÷ verify passes over every request since the server started: a
cumulative figure, not one run's.
"""

from __future__ import annotations

import math

from specviz.engine_logs import normalise as nz
from specviz.engine_logs.assemble import Fields, from_histogram, from_totals
from specviz.engine_logs.checks import MAX_POSITIONS, count, counts, fail, json_documents, label, optional_count, plain_source, ratio
from specviz.engine_logs.imported import Figure, ImportedRun

__all__ = ["looks_like", "read"]

ENGINE = "sglang"
_ALIASES = {"spec_num_correct_drafts": "spec_accepted_drafts", "spec_num_proposed_drafts": "spec_proposed_drafts",
            "spec_correct_drafts_histogram": "spec_accept_histogram"}


def looks_like(text: str) -> bool:
    """Whether ``text`` reads as SGLang's speculative fields or its server info."""
    return any(key in text for key in ('"spec_verify_ct"', '"avg_spec_accept_length"', '"spec_accept_length"'))


def _meta_infos(docs) -> list[tuple[str, dict]]:
    found = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        if isinstance(doc.get("meta_info"), dict):
            found.append(("meta_info", doc["meta_info"]))
        for i, choice in enumerate(doc.get("choices") or []):
            if isinstance(choice, dict) and isinstance(choice.get("meta_info"), dict):
                found.append((f"choices[{i}].meta_info", choice["meta_info"]))
        details = (doc.get("sglext") or {}).get("spec_tokens_details") if isinstance(doc.get("sglext"), dict) else None
        if isinstance(details, list) and details and isinstance(details[0], dict):
            details = details[0]
        if isinstance(details, dict):
            found.append(("sglext.spec_tokens_details", details))
    return [(where, m) for where, m in found if "spec_verify_ct" in m]


def read(text: str, name: str) -> ImportedRun:
    """Read an SGLang response (JSON, JSON Lines or a recorded stream: the last ``meta_info`` with
    ``spec_verify_ct`` counts) or a server-info document. Raises EngineFileError."""
    docs = json_documents(text, ENGINE)
    metas = _meta_infos(docs)
    if not metas:
        info = next((d for d in docs if isinstance(d, dict) and ("internal_states" in d or "avg_spec_accept_length" in d)),
                    None)
        if info is None:
            fail(ENGINE, "meta_info.spec_verify_ct", "is missing (is speculative decoding on for this server?)")
        return _server_info(info, plain_source(name))
    where, meta = metas[-1]
    notes = []
    if len(metas) > 1:
        notes.append("The file holds several responses (or stream events); the last one's counts are read.")
    marker = next((d["specviz_export"] for d in docs if isinstance(d, dict) and isinstance(d.get("specviz_export"), dict)),
                  {})
    return _request(meta, where, plain_source(name), notes, marker.get("first_token_from_prefill", True) is not False)


def _field(meta: dict, key: str):
    value = meta.get(key)
    return meta.get(_ALIASES[key]) if value is None and key in _ALIASES else value


def _request(meta: dict, where: str, source: str, notes: list[str], first_from_prefill: bool = True) -> ImportedRun:
    passes = count(meta.get("spec_verify_ct"), ENGINE, f"{where}.spec_verify_ct")
    accepted = count(_field(meta, "spec_num_correct_drafts"), ENGINE, f"{where}.spec_num_correct_drafts")
    proposed = optional_count(_field(meta, "spec_num_proposed_drafts"), ENGINE, f"{where}.spec_num_proposed_drafts")
    completion = optional_count(meta.get("completion_tokens"), ENGINE, f"{where}.completion_tokens")
    finish = meta.get("finish_reason")
    if isinstance(finish, dict):
        finish = finish.get("type")
    if finish is not None:
        label(finish, ENGINE, f"{where}.finish_reason")
    if proposed is not None and accepted > proposed:
        fail(ENGINE, f"{where}.spec_num_correct_drafts", f"is {accepted}, more than the {proposed} proposed")
    k = proposed // passes if proposed is not None and passes and proposed % passes == 0 else None
    raw_hist = _field(meta, "spec_correct_drafts_histogram")
    hist = counts(raw_hist, ENGINE, f"{where}.spec_correct_drafts_histogram", MAX_POSITIONS + 1) if raw_hist else None
    f = Fields(ENGINE, source, f"{ENGINE}:{where}.spec_num_correct_drafts", f"{ENGINE}:{where}.spec_num_proposed_drafts",
               f"{ENGINE}:{where}.spec_verify_ct", k=k, notes=notes)
    _check_reported(meta, where, accepted, proposed, passes, completion, f, first_from_prefill)
    accepted_out = accepted
    if completion is not None and passes:
        clipped = nz.clip_total_at_stop(accepted, passes, completion, first_token_from_prefill=first_from_prefill)
        if clipped != accepted:
            f.extra.append(Figure("accepted drafts past the stop token", accepted - clipped,
                                  f"{ENGINE}:{where}.spec_num_correct_drafts, completion_tokens",
                                  "SGLang counts every draft a pass kept; these were after the stop token and are not "
                                  "in the response."))
            if hist is not None:
                f.notes.append("The histogram is SGLang's own and still counts the drafts after the stop token.")
            accepted_out = clipped
    if hist is not None:
        if sum(hist) != passes:
            fail(ENGINE, f"{where}.spec_correct_drafts_histogram", f"adds up to {sum(hist)} passes, not spec_verify_ct = {passes}")
        if sum(j * n for j, n in enumerate(hist)) != accepted:
            fail(ENGINE, f"{where}.spec_correct_drafts_histogram", "does not hold spec_num_correct_drafts accepted drafts")
        if k is not None and len(hist) > k + 1:
            fail(ENGINE, f"{where}.spec_correct_drafts_histogram", f"has passes keeping more than the {k} drafted")
        if k is not None:
            hist = hist + (0,) * (k + 1 - len(hist))
        f.notes.append("α (÷ tested) assumes chain drafts (--speculative-eagle-topk 1): a tree's proposed drafts are its nodes.")
        return from_histogram(f, hist, proposed, fixed_k=k is not None)
    return from_totals(f, accepted_out, proposed, passes)


def _check_reported(meta, where, accepted, proposed, passes, completion, f: Fields, first_from_prefill: bool) -> None:
    """SGLang's own ratios must agree with its counts; they become figures with their conversion."""
    rate = meta.get("spec_accept_rate")
    if rate is not None and proposed:
        rate = ratio(rate, ENGINE, f"{where}.spec_accept_rate")
        if not math.isclose(rate, accepted / proposed, rel_tol=1e-6, abs_tol=1e-9):
            fail(ENGINE, f"{where}.spec_accept_rate", f"is {rate:g}, but the counts give {accepted / proposed:g}")
    length = meta.get("spec_accept_length")
    if length is not None and passes:
        length = ratio(length, ENGINE, f"{where}.spec_accept_length", 0.0, MAX_POSITIONS * 2.0)
        if completion is not None and not math.isclose(length, completion / passes, rel_tol=1e-6, abs_tol=1e-9):
            fail(ENGINE, f"{where}.spec_accept_length", f"is {length:g}, but completion_tokens ÷ spec_verify_ct is "
                 f"{completion / passes:g}")
        f.extra.append(Figure("accept length (SGLang's spec_accept_length)", length, f"{ENGINE}:{where}.spec_accept_length",
                              "SGLang divides all completion tokens by the verify passes, so it also counts the first "
                              "token, which the prompt's pass sampled; specviz's tokens per pass leaves it out."))
        if completion is not None:
            f.extra.append(Figure(nz.TOKENS_PER_PASS + ", from the response's tokens",
                                  nz.tokens_per_pass(completion, passes, first_token_from_prefill=first_from_prefill),
                                  f"{ENGINE}:{where}.completion_tokens ÷ spec_verify_ct",
                                  "(completion_tokens − 1) ÷ spec_verify_ct: the first token came from the prompt's "
                                  "pass, not from a verify pass."))


def _server_info(info: dict, source: str) -> ImportedRun:
    states = info.get("internal_states")
    if states is None:
        states = [info]
    if not isinstance(states, list) or not states or len(states) > 1024:
        fail(ENGINE, "internal_states", "is not a list of 1 to 1024 rank states")
    values = []
    for i, state in enumerate(states):
        if not isinstance(state, dict) or state.get("avg_spec_accept_length") is None:
            fail(ENGINE, f"internal_states[{i}].avg_spec_accept_length", "is missing")
        values.append(ratio(state["avg_spec_accept_length"], ENGINE, f"internal_states[{i}].avg_spec_accept_length",
                            0.0, MAX_POSITIONS + 1.0))
    mean = sum(values) / len(values)
    conversion = ("SGLang's accepted tokens (bonus included) ÷ verify passes, over every request since the server "
                  "started" + (f", averaged over its {len(values)} ranks" if len(values) > 1 else "") + ".")
    figure = Figure("tokens per pass, server lifetime (SGLang's avg_spec_accept_length)", mean,
                    f"{ENGINE}:internal_states[].avg_spec_accept_length", conversion)
    notes = (("avg_spec_accept_length is cumulative over the server's life, not one run's: read one response's "
             "meta_info for a run."),)
    return ImportedRun(engine=ENGINE, source=source, k=None, accepted_per_pass=None, drafted_per_pass=None,
                       accepted_by_position=None, passes=None, cumulative=True, tokens=None, token_kinds=None,
                       figures=(figure,), notes=notes)
