"""Building an :class:`~specviz.engine_logs.imported.ImportedRun` and its standard figures from what a
format holds: per-pass counts (:func:`from_passes`), a histogram of passes (:func:`from_histogram`)
or totals only (:func:`from_totals`). The engine modules read their fields and call one of these, so
every engine's figures are named and derived the same way (:mod:`specviz.engine_logs.normalise`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specviz.engine_logs import normalise as nz
from specviz.engine_logs.imported import Figure, ImportedRun

__all__ = ["Fields", "from_histogram", "from_passes", "from_totals"]


@dataclass
class Fields:
    """Where each figure came from, as ``engine:field`` text, and the run's plain facts."""

    engine: str
    source: str
    accepted: str
    drafted: str
    passes: str
    positions: str = ""
    k: int | None = None
    cumulative: bool = False
    tokens: tuple[str, ...] | None = None
    token_kinds: tuple[str, ...] | None = None
    notes: list[str] = field(default_factory=list)
    extra: list[Figure] = field(default_factory=list)
    passes_conversion: str = ""


def _rate_figures(f: Fields, accepted: int, drafted: int | None, passes: int | None) -> list[Figure]:
    figures = []
    rate = nz.acceptance_rate(accepted, drafted) if drafted is not None else None
    if rate is not None:
        figures.append(Figure(nz.ACCEPTANCE_RATE, rate, f"{f.accepted} ÷ {f.drafted}",
                              "Accepted ÷ drafted, as the engine counts it: drafts after a rejection count as failures."))
    if passes:
        figures.append(Figure(nz.PASSES, passes, f.passes, f.passes_conversion))
        figures.append(Figure(nz.ACCEPTED_PER_PASS, accepted / passes, f"{f.accepted} ÷ {f.passes}",
                              "Accepted drafts divided by verify passes; the target's own token is not counted."))
        figures.append(Figure(nz.TOKENS_PER_PASS, 1 + accepted / passes, f"{f.accepted} ÷ {f.passes}",
                              "1 + accepted drafts per pass: each pass adds the target's own token (bonus or resample)."))
    return figures


def from_passes(f: Fields, accepted_per_pass, drafted_per_pass=None, chain: bool = True) -> ImportedRun:
    """A run whose format lists accepted (and drafted) drafts per verify pass, bonus excluded.

    ``chain``: the passes drafted chains, so a pass's tested drafts are min(a + 1, d) and α ÷ tested and
    conditional acceptance follow; False (a tree, or unknown) leaves them out with a note.
    """
    accepted_per_pass = tuple(accepted_per_pass)
    drafted = None if drafted_per_pass is None else tuple(drafted_per_pass)
    passes = len(accepted_per_pass)
    accepted = sum(accepted_per_pass)
    # Positions run to K (or the deepest draft of a chain); a tree's drafted count is its nodes, not a depth.
    width = max([f.k or 0, *accepted_per_pass, *((drafted or ()) if chain else ())])
    kept = nz.accepted_by_position(accepted_per_pass, width)
    figures = _rate_figures(f, accepted, None if drafted is None else sum(drafted), passes)
    tested_pos = None
    if drafted is not None and chain and passes:
        a, tested = nz.alpha(accepted_per_pass, drafted)
        if a is not None:
            figures.insert(0, Figure(nz.ALPHA, a, f"{f.accepted}, {f.drafted}",
                                     f"Accepted ÷ tested: a pass that kept a of d drafts tested min(a + 1, d) = {tested} "
                                     "drafts in all, not every drafted one."))
        tested_pos = nz.tested_by_position(accepted_per_pass, drafted, width)
    elif drafted is not None:
        f.notes.append("Per-token α (÷ tested) needs chain drafts: a tree pass's drafted count is its nodes, "
                       "and which of them faced the test is not in the file.")
    if passes:
        zero = sum(1 for a in accepted_per_pass if a == 0) / passes
        figures.append(Figure(nz.ZERO_ACCEPT, zero, f.accepted, "Passes that kept no draft ÷ verify passes."))
    figures += nz.position_figures(kept, passes, tested_pos, f.positions or f.accepted,
                                   "Counted from the per-pass accepted drafts: a pass that kept a drafts kept positions 1..a.")
    return ImportedRun(
        engine=f.engine, source=f.source, k=f.k or (width or None), accepted_per_pass=accepted_per_pass,
        drafted_per_pass=drafted, accepted_by_position=kept, passes=passes, cumulative=f.cumulative,
        tokens=f.tokens, token_kinds=f.token_kinds, figures=tuple(f.extra + figures), notes=tuple(f.notes),
        accepted_histogram=nz.histogram(accepted_per_pass, f.k or 0) if passes else None,
        tested_by_position=tested_pos)


def from_histogram(f: Fields, hist, drafted: int | None, fixed_k: bool) -> ImportedRun:
    """A run whose format gives passes by accepted drafts (vLLM's ``acceptance_histogram``, SGLang's
    ``spec_correct_drafts_histogram``) but not their order. ``fixed_k``: every pass drafted K (the
    histogram's width − 1), so tested counts and conditional acceptance follow."""
    hist = tuple(hist)
    passes = sum(hist)
    accepted = sum(j * n for j, n in enumerate(hist))
    k = f.k or len(hist) - 1
    kept = nz.positions_from_histogram(hist)
    figures = _rate_figures(f, accepted, drafted, passes)
    tested_pos = None
    if fixed_k and passes:
        tested_pos, tested = nz.tested_from_histogram(hist, k)
        figures.insert(0, Figure(nz.ALPHA, accepted / tested if tested else 0.0, f.accepted,
                                 f"Accepted ÷ tested: with K = {k} drafts a pass, a pass that kept j tested min(j + 1, K), "
                                 f"{tested} drafts in all."))
    else:
        f.notes.append("Per-token α (÷ tested) is not shown: the passes did not all draft K, and the file does not "
                       "say how many each drafted.")
    if passes:
        figures.append(Figure(nz.ZERO_ACCEPT, hist[0] / passes, f.accepted, "Passes that kept no draft ÷ verify passes."))
    figures += nz.position_figures(kept, passes, tested_pos, f.accepted,
                                   "From the histogram: the passes that kept more than i drafts kept position i + 1.")
    f.notes.append("The file gives how many passes kept each number of drafts, not their order: per-pass charts "
                   "over time are not drawn.")
    return ImportedRun(
        engine=f.engine, source=f.source, k=k, accepted_per_pass=None, drafted_per_pass=None,
        accepted_by_position=kept, passes=passes, cumulative=f.cumulative, tokens=f.tokens,
        token_kinds=f.token_kinds, figures=tuple(f.extra + figures), notes=tuple(f.notes),
        accepted_histogram=hist, tested_by_position=tested_pos)


def from_totals(f: Fields, accepted: int, drafted: int | None, passes: int | None,
                kept=None, tested_pos=None, positions_conversion: str = "") -> ImportedRun:
    """A run whose format gives totals only (and perhaps full acceptance counts by position, with
    ``positions_conversion`` the sentence saying how they were read)."""
    figures = _rate_figures(f, accepted, drafted, passes)
    if kept is not None and passes:
        figures += nz.position_figures(kept, passes, tested_pos, f.positions or f.accepted, positions_conversion)
        if tested_pos is not None and len(kept) == len(tested_pos):
            tested = sum(tested_pos)
            if tested:
                figures.insert(0, Figure(nz.ALPHA, accepted / tested, f.positions,
                                         "Accepted ÷ tested, with tested at position i = passes that kept position i − 1 "
                                         "(every pass drafting K)."))
    return ImportedRun(
        engine=f.engine, source=f.source, k=f.k, accepted_per_pass=None, drafted_per_pass=None,
        accepted_by_position=None if kept is None else tuple(kept), passes=passes, cumulative=f.cumulative,
        tokens=f.tokens, token_kinds=f.token_kinds, figures=tuple(f.extra + figures), notes=tuple(f.notes),
        tested_by_position=None if tested_pos is None else tuple(tested_pos))
