"""The views of an engine's imported numbers (the "Bring your engine's numbers" tab): the summary,
the table of figures (each with the engine field it came from and what was converted), the text
coloured as far as the engine can tell, and the Run tab's charts drawn from the counts
(:mod:`.engine_counts`).

Everything from the file (its name, token texts, field names, notes) is put into the page through
:func:`specviz.ui.draw.escape.as_text`: nothing from a file renders as markup. Gradio-free.
"""

from __future__ import annotations

import plotly.graph_objects as go

from specviz.engine_logs import ImportedRun
from specviz.engine_logs.normalise import ALPHA
from specviz.ui.teach import playground
from specviz.ui.draw import charts, diagnostic_charts
from specviz.ui.draw.charts import waiting_figure
from specviz.ui.draw.engine_counts import EngineFigures
from specviz.ui.draw.escape import as_text

__all__ = ["ENGINE_NAMES", "KIND_CLASSES", "MAX_TOKENS_SHOWN", "closed_form_figure", "engine_charts",
           "engine_legend_html", "engine_summary_markdown", "engine_tokens_html", "figures_markdown", "imported_alpha"]

#: Each engine's name as its users write it.
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp", "mlx": "mlx-lm / mlx-vlm"}
#: An imported token's kind (:data:`specviz.engine_logs.TOKEN_KINDS`) → its classes in the token panel:
#: an accepted draft looks like the Run tab's, the target's own token (resampled or bonus: an engine's
#: flag does not say which) and an unknown token have looks of their own (draw/styles.py).
KIND_CLASSES = {"draft": "sv-tok sv-accepted", "target": "sv-tok sv-engine-target", "unknown": "sv-tok sv-unknown"}
#: What each kind's hover says.
KIND_TITLES = {"draft": "an accepted draft token (the engine says it came from the draft)",
               "target": "the target's own token (resampled or bonus: the engine does not say which)",
               "unknown": "unknown: the engine's file does not say where this token came from"}
#: Tokens shown at most (a longer text is cut, and the panel says so).
MAX_TOKENS_SHOWN = 20_000
#: Where a chart's counts would be when the file has totals only.
TOTALS_ONLY = "this file has totals only: no counts per pass or per position to draw"
#: The closed form's map: α across, K up (the Playground's grid).
MAP_ALPHAS = [i / 40 for i in range(41)]
MAP_KS = list(range(1, playground.BEST_K_MAX + 1))
#: The importers' name of the per-token α figure (:data:`specviz.engine_logs.normalise.ALPHA`), read when the
#: file has no counts to compute it from.
ALPHA_NAMES = (ALPHA,)


def engine_legend_html() -> str:
    """The colour key above an imported text (the three kinds an engine can tell)."""
    return ('<div class="sv-legend">'
            '<span><span class="sv-tok sv-accepted">draft</span> an accepted draft token</span>'
            '<span><span class="sv-tok sv-engine-target">target</span> the target\'s own token (resampled or '
            'bonus: the engine does not say which)</span>'
            '<span><span class="sv-tok sv-unknown">unknown</span> the file does not say</span>'
            "<span>No engine logs u, p_draft, p_target or the rejected drafts, so none is shown.</span></div>")


def engine_tokens_html(run: ImportedRun | None) -> str:
    """The imported text, each token coloured by what the engine told of it (``token_kinds``; a
    token without one is unknown), as a token panel (``<div class="sv-out sv-imported">``) under its
    legend; a note (``sv-no-text``) when the file carries no text. Every token's text goes through
    :func:`as_text`."""
    if run is None:
        return ""
    if not run.tokens:
        # Not a token panel (.sv-out): that one says "output appears here" while empty.
        return ('<div class="sv-imported sv-no-text">This file carries no text of the output, only counters: '
                "nothing to colour.</div>")
    kinds = tuple(run.token_kinds or ())
    shown = run.tokens[:MAX_TOKENS_SHOWN]
    out = [engine_legend_html(), '<div class="sv-out sv-imported">']
    for i, text in enumerate(shown):
        kind = kinds[i] if i < len(kinds) and kinds[i] in KIND_CLASSES else "unknown"
        out.append(f'<span class="{KIND_CLASSES[kind]}" data-kind="{kind}" title="{KIND_TITLES[kind]}">'
                   f"{as_text(text)}</span>")
    if len(run.tokens) > len(shown):
        out.append(f"<i> … {len(run.tokens) - len(shown):,} more tokens not shown</i>")
    out.append("</div>")
    return "".join(out)


def figures_markdown(run: ImportedRun | None) -> str:
    """The table of the file's figures: specviz's name, the value in specviz's units, the engine's
    field it came from and what was converted ("as reported" when nothing was)."""
    if run is None:
        return ""
    if not run.figures:
        return "*The file gave no figures.*"
    rows = [f"| {as_text(f.name)} | {_value(f.value)} | {as_text(f.engine_field)} | "
            f"{as_text(f.conversion) if f.conversion else 'as reported'} |" for f in run.figures]
    return ("**Figures** (specviz's units; each says which field of the file it came from and what was converted)"
            "\n\n| figure | value | engine field | converted |\n|---|---|---|---|\n" + "\n".join(rows))


def _value(x: float) -> str:
    return f"{x:,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:.4g}"


def imported_alpha(run: ImportedRun, figures: EngineFigures) -> float | None:
    """The run's per-token α (accepted ÷ tested): from its counts when it has any, else the file's
    own figure of that name (:data:`ALPHA_NAMES`), else None."""
    if figures.analysis is not None:
        return figures.analysis.alpha
    for f in run.figures:
        if f.name in ALPHA_NAMES and 0.0 <= f.value <= 1.0:
            return float(f.value)
    return None


def engine_summary_markdown(run: ImportedRun, figures: EngineFigures, c: float, v: float) -> str:
    """The imported run in a few lines: which engine and file, K, passes, α and tokens per pass,
    the K an engine would pick at the stated c and v, how the passes were rebuilt, and the
    importer's notes (each as text)."""
    engine = ENGINE_NAMES.get(run.engine, as_text(run.engine))
    lines = [f"**Imported** {as_text(run.source)} · read as **{engine}**"]
    a = figures.analysis
    facts = [f"K = {figures.k}" if figures.k else "K not in the file"]
    if a is not None:
        facts += [f"{a.target_passes:,} verify passes", f"tokens per pass {a.tokens_per_pass:.2f}",
                  "per-token α (accepted ÷ tested) " + ("—" if a.alpha is None else f"{a.alpha:.3f}")]
    elif run.passes:
        facts.append(f"{run.passes:,} verify passes (totals only)")
    lines.append(" · ".join(facts))
    if run.cumulative:
        lines.append("⚠ These counters add up over the server's whole life, not one run: they mix every request "
                     "it has served.")
    e = figures.diagnostics.engine_k if figures.diagnostics is not None else None
    if e is not None:
        lines.append(f"An engine would pick **K = {e.k}** at c = {c:.3f}, v = {v:.2f} (vLLM's Adaptive K on these "
                     f"conditional acceptances: goodput {e.goodput:.2f} tokens per target-step cost).")
    if figures.how:
        lines.append(f"The charts read the passes {figures.how}.")
    notes = [f"- {as_text(note)}" for note in run.notes]
    return "\n\n".join(lines) + ("\n\n**What the file cannot tell**\n\n" + "\n".join(notes) if notes else "")


def closed_form_figure(alpha: float | None, k: int, c: float, v: float,
                       missing: str = "no per-token α in this file") -> go.Figure:
    """The closed form at the user's stated ``c`` and ``v``: the Playground's map of expected
    speedup over (α, K), the imported run marked at (α, K); the note ``missing`` when α is not known.

    Raises:
        ValueError: from :func:`specviz.figures.theory.expected_speedup` for c < 0 or v ≤ 0.
    """
    title = f"Closed form at your c = {c:.3f}, v = {v:.2f}: expected speedup over (α, K)"
    if alpha is None:
        return waiting_figure(title, "engine_closed_form", "per-token α", "K", missing)
    z = playground.speedup_grid(MAP_ALPHAS, ks=MAP_KS, c=c, v=v)
    point = (alpha, min(max(k, 1), MAP_KS[-1]))
    return charts.playground_map_figure(MAP_ALPHAS, MAP_KS, z, "K", point=point, title=title)


def engine_charts(run: ImportedRun, figures: EngineFigures, c: float, v: float) -> tuple[go.Figure, ...]:
    """The Run tab's charts of an imported run: tokens per pass against the theory, accepted drafts
    per pass (the engines' histogram units, the zero-accept share in its title), full and
    conditional acceptance by position, and the closed form at ``c`` and ``v``; a file with totals
    only gets notes where the counts would be."""
    alpha = imported_alpha(run, figures)
    closed = closed_form_figure(alpha, figures.k, c, v)
    if figures.analysis is None:
        return (waiting_figure("Tokens emitted per target pass", "tokens_per_pass", note=TOTALS_ONLY),
                waiting_figure("Accepted drafts per pass (bonus not counted)", "accepted_lengths", note=TOTALS_ONLY),
                waiting_figure("Acceptance by draft position", "per_position", note=TOTALS_ONLY), closed)
    a = figures.analysis
    return (charts.tokens_per_pass_counts_figure(figures.passes_by_tokens, figures.k, a.alpha, short=figures.short),
            diagnostic_charts.accepted_length_figure(figures.diagnostics),
            charts.per_position_figure(a, figures.diagnostics.positions), closed)
