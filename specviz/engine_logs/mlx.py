"""mlx-lm and mlx-vlm: the per-token ``from_draft`` flag and the server's draft timings.

mlx-lm (mlx_lm/generate.py, ``GenerationResponse``): ``stream_generate`` yields every token with
``from_draft``, True for a draft token the target accepted, False for the target's own token (the
resample at a rejection, or the bonus). Its test (tests/test_generate.py,
``test_stream_generate_speculative``: 5 tokens, 2 drafts a round, the draft model the target) expects
``[True, True, False, True, True]``: a pass is a run of accepted drafts closed by one target token,
and the first pass drafts from the prompt (no token of the prompt's pass). A file is those records
as JSON Lines (or one JSON list).

mlx-vlm's server (mlx_vlm/server/schemas.py ``GenerationTimings``, following llama.cpp's names, PR #1788):
``timings.draft_rounds`` verify rounds, ``draft_n`` drafted tokens, ``draft_n_accepted`` accepted ones
and ``predicted_n`` output tokens. The drafters record every accepted draft of a round, also those after
the stop token (mlx-vlm #2324), so ``predicted_n − draft_n_accepted`` understates the rounds' target
tokens; the counts are clipped against ``predicted_n`` here. Its MTP, EAGLE-3 and DFlash drafters start
after the prompt's pass has sampled the first token.
"""

from __future__ import annotations

from specviz.engine_logs import normalise as nz
from specviz.engine_logs.assemble import Fields, from_passes, from_totals
from specviz.engine_logs.checks import (MAX_POSITIONS, MAX_TOKENS, count, fail, json_documents, label, optional_count, plain_source,
                     token_text)
from specviz.engine_logs.imported import Figure, ImportedRun

__all__ = ["looks_like", "read"]

ENGINE = "mlx"


def looks_like(text: str) -> bool:
    """Whether ``text`` reads as mlx-lm stream records or an mlx-vlm response with draft timings."""
    return '"from_draft"' in text or '"draft_rounds"' in text


def read(text: str, name: str) -> ImportedRun:
    """Read mlx-lm ``stream_generate`` records or an mlx-vlm response (JSON or a recorded stream).
    Raises EngineFileError."""
    docs = json_documents(text, ENGINE)
    if len(docs) == 1 and isinstance(docs[0], list):
        docs = docs[0]
    if len(docs) > MAX_TOKENS + 1:
        fail(ENGINE, "the file", f"holds more than {MAX_TOKENS} records")
    marker = next((d["specviz_export"] for d in docs if isinstance(d, dict) and isinstance(d.get("specviz_export"), dict)),
                  {})
    records = [d for d in docs if isinstance(d, dict) and "from_draft" in d]
    if records:
        return _stream(records, plain_source(name), marker)
    timings = [d["timings"] for d in docs if isinstance(d, dict) and isinstance(d.get("timings"), dict)
               and d["timings"].get("draft_rounds") is not None]
    if not timings:
        fail(ENGINE, "from_draft", "is in no record, and no timings.draft_rounds either (did the run use a draft model?)")
    return _timings(timings[-1], plain_source(name))


def _stream(records: list, source: str, marker: dict) -> ImportedRun:
    tokens, kinds = [], []
    for i, r in enumerate(records):
        flag = r.get("from_draft")
        if not isinstance(flag, bool):
            fail(ENGINE, f"record {i + 1}'s from_draft", "is not true or false")
        tokens.append(token_text(r.get("text", ""), ENGINE, f"record {i + 1}'s text"))
        kinds.append("draft" if flag else "target")
        if r.get("finish_reason") is not None:
            label(r["finish_reason"], ENGINE, f"record {i + 1}'s finish_reason")
    k = optional_count(marker.get("num_draft_tokens", records[0].get("num_draft_tokens")), ENGINE, "num_draft_tokens",
                       MAX_POSITIONS)
    accepted, run = [], 0
    for kind in kinds:
        if kind == "draft":
            run += 1
        else:
            accepted.append(run)
            run = 0
    notes = []
    if run:
        accepted.append(run)
        notes.append("The last pass's target token is not in the stream (the run stopped inside its accepted drafts).")
    if k is not None and any(a > k for a in accepted):
        fail(ENGINE, "from_draft", f"marks a run of more than num_draft_tokens = {k} accepted drafts")
    f = Fields(ENGINE, source, f"{ENGINE}:from_draft", f"{ENGINE}:num_draft_tokens", f"{ENGINE}:from_draft",
               k=k, tokens=tuple(tokens), token_kinds=tuple(kinds), notes=notes)
    f.notes.append("Passes are read from the flags: a run of accepted drafts closed by the target's token.")
    drafted = None
    if k is not None:
        drafted = [k] * len(accepted)
        f.notes.append(f"Each pass is taken to have drafted num_draft_tokens = {k} (mlx-lm drafts fewer only near "
                       "max_tokens).")
    else:
        f.notes.append("The stream does not say how many tokens each pass drafted: α (÷ tested) and the acceptance "
                       "rate need num_draft_tokens.")
    return from_passes(f, accepted, drafted, chain=True)


def _timings(t: dict, source: str) -> ImportedRun:
    rounds = count(t.get("draft_rounds"), ENGINE, "timings.draft_rounds")
    drafted = optional_count(t.get("draft_n"), ENGINE, "timings.draft_n")
    accepted = count(t.get("draft_n_accepted"), ENGINE, "timings.draft_n_accepted")
    predicted = optional_count(t.get("predicted_n"), ENGINE, "timings.predicted_n")
    if t.get("draft_kind") is not None:
        label(t["draft_kind"], ENGINE, "timings.draft_kind")
    if drafted is not None and accepted > drafted:
        fail(ENGINE, "timings.draft_n_accepted", f"is {accepted}, more than the {drafted} drafted")
    k = drafted // rounds if drafted is not None and rounds and drafted % rounds == 0 else None
    f = Fields(ENGINE, source, f"{ENGINE}:timings.draft_n_accepted", f"{ENGINE}:timings.draft_n",
               f"{ENGINE}:timings.draft_rounds", k=k)
    f.extra.append(Figure("accept length (mlx-vlm: (accepted + rounds) ÷ rounds)",
                          (accepted + rounds) / rounds if rounds else 1.0,
                          f"{ENGINE}:timings.draft_n_accepted, draft_rounds", "As mlx-vlm logs it, before clipping."))
    if predicted is not None and rounds:
        clipped = nz.clip_total_at_stop(accepted, rounds, predicted, first_token_from_prefill=True)
        if clipped != accepted:
            f.extra.append(Figure("accepted drafts past the stop token", accepted - clipped,
                                  f"{ENGINE}:timings.draft_n_accepted, predicted_n",
                                  "mlx-vlm counts every draft a round kept, also those after the stop token (mlx-vlm "
                                  f"#2324); clipped to predicted_n − draft_rounds = {clipped} that reached the output."))
            accepted = clipped
    f.notes.append("mlx-vlm's timings give totals only: passes by position and per-token colours are not in them.")
    return from_totals(f, accepted, drafted, rounds or None)
