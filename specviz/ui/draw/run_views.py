"""HTML and Markdown views of a run, for the app: the coloured token stream, the summary table
and the token inspector's story of one decision.

Pure string building from trace records and the run analysis (no gradio, no torch), so the views
are tested without a browser and a saved trace renders exactly like a live run.

Token stream. Each round (one verify pass) is a ``<span class="sv-round">`` whose tokens carry
``data-r`` (round index) and ``data-i`` (slot in ``Round.emitted``); a struck-through rejected
draft carries ``data-rej="1"`` too. The app's click handler reads those attributes to open the
inspector on that decision.
"""

from __future__ import annotations

import html

import dataclasses
import time

from specviz.figures.analysis import RunAnalysis, draft_depth, health_notes, is_tree_round
from specviz.diagnose.diagnostics import describe
from specviz.figures.speedup import NOT_MEASURABLE, format_speedup, speedup_shown
from specviz.figures.trace import emitted_piece, token_label, visible_text
from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED, Round
from specviz.ui.teach.beats import fmt
from specviz.ui.draw.escape import as_text

__all__ = ["DONE_MARK", "stage_panel", "ENGINE_LOG_LEGEND", "KIND_LABELS", "NO_TRACE_BASELINE", "PANEL_OPEN", "TREE_BONUS_LABEL",
           "UNLOGGED", "inspector_markdown", "kind_label",
           "legend_html", "render_round", "render_rounds", "round_tree_html", "sent_mark", "stream_head",
           "stream_tail", "summary_markdown", "unlogged", "with_caption", "wrap_output"]

KIND_LABELS = {
    ACCEPTED: "accepted draft token",
    RESAMPLED: "resampled at the first rejection",
    BONUS: "bonus token (all drafts accepted)",
    PLAIN: "plain target step (nothing drafted)",
}

#: A bonus token in a tree round: the accepted path ended at a node with no children.
TREE_BONUS_LABEL = "bonus token (the accepted path reached a leaf of the draft tree)"
#: Where a loaded trace's speedup would be when it carries no plain baseline to divide by.
NO_TRACE_BASELINE = "no plain baseline in this trace"


def kind_label(kind: str, round_: Round) -> str:
    """What an emitted token of ``kind`` is, in the words of its round (a tree's bonus token is
    not "all drafts accepted": the path reached a leaf while siblings were rejected)."""
    if kind == BONUS and is_tree_round(round_):
        return TREE_BONUS_LABEL
    return KIND_LABELS[kind]

# ----------------------------------------------------------------------------- token rendering
def _token_title(kind: str, round_: Round, i: int) -> str:
    """A token's hover text, as an attribute value: the page's words and numbers, and the
    rejected draft's label (text from outside) through :func:`as_text`."""
    tok = round_.emitted[i]
    parts = [f"{kind_label(kind, round_)} · pass {round_.index + 1}", f"p_target = {tok.p_target:.3f}"]
    d = round_.drafted_for(i)
    if kind == ACCEPTED and d is not None:
        parts += [f"p_draft = {d.p_draft:.3f}", f"accept prob min(1, p_target/p_draft) = {d.accept_prob:.3f}",
                  f"uniform draw u = {d.uniform:.3f} &lt; accept prob"]
    if kind == RESAMPLED and d is not None:
        parts += [f"rejected draft {as_text(token_label(d.text, d.id))}: p_draft = {d.p_draft:.3f}, "
                  f"p_target = {d.p_target:.3f}, "
                  f"accept prob = {d.accept_prob:.3f}, u = {d.uniform:.3f}",
                  "resampled from normalize(max(0, p_target − p_draft))"]
    return "\n".join(parts)


def _shown_draft(text: str) -> str:
    """A struck rejected draft's text: made visible when it is only whitespace or empty (``∅``),
    else as is with its line breaks as ``↵`` (it never reached the output, so it must not break
    the output's lines)."""
    return text.replace("\r", "␍").replace("\n", "↵") if text.strip() else visible_text(text)


def render_round(round_: Round, eos_ids: set[int], clickable: bool = True) -> str:
    """HTML for one round's emitted tokens (rejected draft struck through before a resampled token),
    wrapped in the round's own span so the round boundaries show (a thin dotted line).

    ``clickable`` (the Run tab's panel, which opens the inspector): every token is a button reachable by
    Tab, written into the HTML itself. Adding those attributes in the browser after each update made the
    page's morph (gradio's HTML component compares the new HTML with the DOM) strip and re-add them on
    every token of every update."""
    r = round_.index
    button = ' tabindex="0" role="button"' if clickable else ""
    out = [f'<span class="sv-round" data-round="{r}">']
    for i, tok in enumerate(round_.emitted):
        title = _token_title(tok.kind, round_, i)
        if tok.kind == RESAMPLED and tok.rejected_text is not None:
            out.append(f'<s class="sv-rejected" data-r="{r}" data-i="{i}" data-rej="1"{button} title="{title}">'
                       f'{as_text(_shown_draft(tok.rejected_text))}</s>')
        text = tok.text
        if not text and tok.id in eos_ids:
            text_html = '<span class="sv-special">⟨eos⟩</span>'
        else:
            text_html = as_text(text)
        out.append(f'<span class="sv-tok sv-{tok.kind}" data-r="{r}" data-i="{i}"{button} title="{title}">'
                   f'{text_html}</span>')
    out.append("</span>")
    return "".join(out)


def render_rounds(rounds: list[Round], eos_ids: set[int], clickable: bool = True) -> str:
    """HTML of several rounds in order (a whole run, or a replay up to some pass); ``clickable`` as
    :func:`render_round`."""
    return "".join(render_round(r, eos_ids, clickable) for r in rounds)


#: The Run tab's legend under the "What an engine would have logged" switch (shown only then, draw/styles.py).
ENGINE_LOG_LEGEND = ('<span class="sv-engine-log-only">What an engine would have logged: the tokens that came from '
                     'the draft, <span class="sv-tok sv-engine-target">target</span> for the rest; the rejected '
                     "drafts and every probability greyed out.</span>")


def legend_html(clickable: bool = True) -> str:
    """The colour key above a token panel; ``clickable``: the panel opens the inspector on a click
    (the Run tab's does, the side-by-side tab's does not, so only the first promises it, and only
    the first has the engine-log switch, :data:`ENGINE_LOG_LEGEND`)."""
    click = " click it to open its story in the inspector." if clickable else ""
    return (
        '<div class="sv-legend">'
        '<span><span class="sv-tok sv-accepted">accepted</span> draft token passed min(1, p_target/p_draft)</span>'
        '<span><s class="sv-rejected">rejected</s><span class="sv-tok sv-resampled">resampled</span> '
        'first rejection, redrawn from max(0, p_target − p_draft)</span>'
        '<span><span class="sv-tok sv-bonus">bonus</span> every draft accepted (in a tree: the accepted path '
        'reached a leaf): one more from the target</span>'
        '<span><span class="sv-tok sv-plain">plain</span> target step with nothing drafted</span>'
        f"<span>Hover or tap a token for its probabilities{';' + click if click else '.'} A dotted line starts each "
        f"verify pass.</span>{ENGINE_LOG_LEGEND if clickable else ''}</div>"
    )


def with_caption(panel_html: str, caption: str) -> str:
    """``panel_html`` (from :func:`wrap_output`) with ``caption``, one line of plain text (escaped
    here), as the first line of its sticky legend: what the panel holds when it is not the visitor's
    own run (the recorded run the page opens on), in view however far the tokens scroll."""
    line = f'<span class="sv-caption">{html.escape(caption)}</span>'
    return panel_html.replace('<div class="sv-legend">', '<div class="sv-legend">' + line, 1)


#: Opens the token panel; a streamed panel stays open until its run ends, so every update only
#: appends to the previous one (gradio sends a string that extends the last one as an "append"
#: of the new part, resending the whole panel made a long run O(n²) bytes).
PANEL_OPEN = '<div class="sv-out">'
#: Appended once a run has ended (finished, stopped or loaded whole): scripts and tests wait for it.
DONE_MARK = '<i hidden class="sv-done"></i>'


def sent_mark(generated_at: float | None = None) -> str:
    """A hidden marker carrying the server's clock (``time.time()``, s; default: now) when the
    newest token before it was generated, so a browser on the same machine can measure how far
    the page lags behind generation (``scripts/stream_latency.py`` reads the last one)."""
    stamp = time.time() if generated_at is None else generated_at
    return f'<i hidden class="sv-sent" data-t="{stamp:.3f}"></i>'


def stream_head() -> str:
    """The start of a streamed token panel: the legend and the panel's opening tag, which
    :func:`stream_tail` closes. Between them go rounds (:func:`render_round`) and
    :func:`sent_mark` markers, each update the previous one plus what is new."""
    return legend_html() + PANEL_OPEN


def stream_tail(generated_at: float | None = None) -> str:
    """What ends a streamed panel: the last :func:`sent_mark`, :data:`DONE_MARK` and the closing tag."""
    return sent_mark(generated_at) + DONE_MARK + "</div>"


def end_line(words: str) -> str:
    """The line a live run's token panel ends on, under its last token, where the eye is (the
    status under the charts says the same): ``words``, plain text (escaped here), e.g. "Done ·
    64 tokens · the 64-token limit"."""
    return f'<div class="sv-end" role="status">{html.escape(words)}</div>'


def stage_panel(stage: str) -> str:
    """The token panel before a run's first token: what the run is doing now (loading, warming up,
    timing plain decoding n of 3, with the time left once known), where the eye already is. The
    stage is text from outside the code (a model's name): escaped."""
    return (stream_head() + f'<div class="sv-stage" role="status" aria-live="polite">{html.escape(stage)}</div>'
            + sent_mark() + "</div>")


def wrap_output(body: str, done: bool = False, generated_at: float | None = None) -> str:
    """Legend plus a whole token panel holding ``body`` (rendered rounds), in the same shape as a
    streamed one (:func:`stream_head`): a :func:`sent_mark` after the tokens and, when ``done``,
    :data:`DONE_MARK`; for a replay, a saved trace and the empty panel before a run."""
    return stream_head() + body + (stream_tail(generated_at) if done else sent_mark(generated_at) + "</div>")


# ----------------------------------------------------------------------------- numbers
def fmt_figure(x, spec=".2f", none="—"):
    return none if x is None else format(x, spec)


def _speedup_verdict(a: RunAnalysis, no_baseline: str = "measuring…") -> str:
    """The measured speedup with its range (:func:`specviz.figures.speedup.format_speedup`), and how it was
    measured; ``no_baseline``: the words for a speculative run without a plain baseline (yet)."""
    if a.speedup is None:
        return no_baseline if a.k and a.plain_tokens_per_s is None else "—"
    doubt = a.speedup_doubt
    if doubt:  # a figure we cannot trust is not a headline: words only, no number
        return as_text(speedup_shown(a.speedup, a.speedup_low, a.speedup_high, doubt))
    text = format_speedup(a.speedup, a.speedup_low, a.speedup_high)
    low, high = a.speedup_low or a.speedup, a.speedup_high or a.speedup
    if low < 1 <= high:
        verdict = f"**{text}**: no clear difference from plain decoding (its range includes 1×)"
    elif a.speedup >= 1:
        verdict = f"**{text}** faster than plain decoding"
    else:
        verdict = f"**{text} — a slowdown** (plain decoding is {1 / a.speedup:.2f}× faster)"
    runs = f"the median of {a.plain_samples} timed plain runs" if (a.plain_samples or 1) > 1 else "one timed plain run"
    how = f"this run's tokens/s ÷ plain decoding's over as many tokens ({runs})"
    if low == high:
        how += "; no range: one plain run and too few passes say nothing about how far off it may be"
    else:
        how += ("; range: the slowest and the fastest plain run and this run's pass-to-pass variation (about two "
                "standard errors)" + (", under 0.01× here" if text == f"{a.speedup:.2f}×" else ""))
    return f"{verdict}  ({how})"


def _plain_row(a: RunAnalysis) -> str:
    if a.plain_tokens_per_s is None:
        return "—"
    covered = ""
    if a.plain_tokens is not None and a.plain_tokens < a.emitted:
        covered = f"; it stopped at end-of-text after {a.plain_tokens} tokens, so it is compared per token"
    return (f"{a.plain_tokens_per_s:.1f}  (same target, prompt and settings, timed here over this run's {a.emitted} "
            f"tokens; one step {a.plain_step_ms:.1f} ms{covered})")


def _shape_row(a: RunAnalysis) -> tuple[str, str]:
    if a.tree_rounds:
        return ("draft shape", f"a tree: up to {a.tree_branching_max} children at a node (B) and {a.tree_nodes_max} "
                               f"nodes per pass (N), in {a.tree_rounds} of {a.target_passes} passes")
    return ("draft shape", f"a chain of up to K = {a.k} drafts per pass" if a.k else "none (plain decoding)")


def diagnostics_markdown(d) -> str:
    """The run's diagnostics as a table (:func:`specviz.diagnose.diagnostics.describe`: zero-accept share,
    full and conditional acceptance by position, accepted lengths, each rule's expected tokens per
    pass on these passes with the range the top-10 tokens leave open, the K an engine would pick,
    the cliff), or "" for none (``d``: a :class:`specviz.diagnose.diagnostics.RunDiagnostics` or None)."""
    if d is None or not any(d.accepted_length_histogram):
        return ""
    rows = describe(d.to_dict())
    return ("**Diagnostics** (the units engines report; the rules replayed on this run's recorded passes)\n\n"
            "| diagnostic | value |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows))


def summary_markdown(a: RunAnalysis, status: str, notes: list[str] | None = None,
                     no_baseline: str = "measuring…", diagnostics=None) -> str:
    """The summary table of a run: every figure from its :class:`~specviz.figures.analysis.RunAnalysis`,
    each with what it is and how it was measured (the speedup with its range,
    :func:`specviz.figures.speedup.format_speedup`), then the health notes (one sentence each, from
    :func:`specviz.figures.analysis.health_notes`, or ``notes`` if given; shown as text). A tree run says
    it was a tree (B, N) and that the theory rows are a chain's.

    ``diagnostics``: the run's :class:`specviz.diagnose.diagnostics.RunDiagnostics`, shown after the table
    (:func:`diagnostics_markdown`); ``status``: the first line, Markdown (anything from outside in
    it already :func:`as_text`);
    ``no_baseline``: what the speedup row says when there is no plain baseline (a live run's is
    being measured; a loaded trace may have none: :data:`NO_TRACE_BASELINE`)."""
    counts = a.counts
    chain_only = " — a chain's formula, not a tree's (see below)" if a.tree_rounds else ""
    # What holds still first: tokens per pass and α do not depend on how busy the machine is; the
    # speedup does, and carries its range.
    rows = [
        ("tokens per target pass", f"**{a.tokens_per_pass:.2f}**  (the same on any machine; theory "
                                   f"(1 − α^(K+1))/(1 − α): {fmt_figure(a.predicted_tokens_per_pass)}; on the actual "
                                   f"draft lengths: {fmt_figure(a.predicted_tokens_per_pass_actual_drafts)}{chain_only})"),
        ("per-token α (accepted ÷ tested)", f"**{fmt_figure(a.alpha, '.3f')}**  ({a.accepted}/{a.tested} tested: the α "
                                            "of every closed form, the same on any machine)"),
        ("measured speedup", _speedup_verdict(a, no_baseline)),
        _shape_row(a),
        ("acceptance rate (accepted ÷ proposed)", f"{fmt_figure(a.acceptance_rate, '.3f')}  ({a.accepted}/{a.proposed} "
                                                  "drafts reached the output: what engines report; below α, since "
                                                  "drafts after a rejection are never tested and count as lost)"),
        ("target passes", f"{a.target_passes}"),
        ("tokens: accepted / resampled / bonus / plain",
         f"{counts['accepted']} / {counts['resampled']} / {counts['bonus']} / {counts['plain']}"),
        ("speculative tokens/s", f"{a.tokens_per_s:.1f}  ({a.emitted} tokens in {a.wall_s:.2f} s, prefill included)"),
        ("plain decoding tokens/s", _plain_row(a)),
        ("cost ratio c (draft step ÷ plain step)", fmt_figure(a.cost_ratio_c, ".3f")),
        ("verify cost v (verify pass ÷ plain step)", fmt_figure(a.verify_cost_v)),
        ("theoretical speedup", f"{fmt_figure(a.theoretical_speedup)}×  = (1 − α^(K+1)) / ((1 − α)(K·c + v)); on the "
                                f"actual draft lengths {fmt_figure(a.theoretical_speedup_actual_drafts)}×{chain_only}"),
    ]
    if a.speedup_doubt:  # c, v and the theory divide by the same doubted plain step
        rows[-3:] = [(name, f"{NOT_MEASURABLE} (divided by the doubted plain step above)") for name, _ in rows[-3:]]
    table = "| measure | value |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows)
    notes = health_notes(a) if notes is None else notes
    doubt = a.speedup_doubt
    notes = [n for n in notes if n != doubt]  # the speedup row says it already
    text = "\n".join(f"- ⚠ {as_text(note)}" for note in notes)
    extra = diagnostics_markdown(diagnostics)
    return (f"{status}\n\n{table}" + (f"\n\n{extra}" if extra else "")
            + (f"\n\n**What the figures say**\n\n{text}" if notes else ""))


# ----------------------------------------------------------------------------- the inspector
def _code(token_id: int, text: str) -> str:
    # An HTML code element, not a Markdown code span: a span shows its content's escapes verbatim.
    return f"<code>{as_text(token_label(text, token_id))}</code>"


def _inspector_head(round_: Round, slot: int) -> str:
    """The first line of the inspector: which pass, which token, and what the pass drafted."""
    n = round_.index + 1
    if not round_.drafted:
        head = f"**Pass {n}**: nothing was drafted; plain target step."
    elif is_tree_round(round_):
        head = (f"**Verify pass {n}**, token {slot + 1} of the {len(round_.emitted)} it produced. It verified a draft "
                f"tree of {len(round_.drafted)} nodes, {draft_depth(round_)} deep; the accepted path is "
                f"{round_.n_accepted} node{'s' if round_.n_accepted != 1 else ''} long.")
    else:
        head = (f"**Verify pass {n}**, token {slot + 1} of the {len(round_.emitted)} it produced "
                f"({round_.n_accepted} of {len(round_.drafted)} drafts accepted).")
    if round_.root_from_prefill:
        head += (" The first token's distribution came from the prompt's prefill pass: the target reads the "
                 "whole prompt once, as `generate()` does" + (", and this pass scored the drafts." if round_.drafted
                                                              else ", so this round needed no pass of its own."))
    return head


def _ratio(d) -> str:
    """min(1, p_target / p_draft) with its numbers, each to :func:`~specviz.ui.teach.beats.fmt`'s
    significant figures: "0.0000 / 0.0004 = 0.0021" told nothing about a token the target all but
    ruled out."""
    return (f"min(1, p_target / p_draft) = **{fmt(d.accept_prob)}** "
            f"(p_target / p_draft = {fmt(d.p_target)} / {fmt(d.p_draft)})")


#: The class of what no engine logs (u, p_draft, p_target, a rejected draft, the residual): greyed out
#: when the Run tab's "What an engine would have logged" switch puts ``sv-engine-log`` on the page's
#: root (draw/styles.py, ENGINE_CSS).
UNLOGGED = "sv-unlogged"


def unlogged(markdown: str) -> str:
    """``markdown`` (the page's own, already escaped where it quotes outside text) marked as what no
    engine's counters tell, so the engine-log switch greys it out."""
    return f'<span class="{UNLOGGED}">{markdown}</span>'


def inspector_markdown(round_: Round, slot: int) -> str:
    """The story of one decision: the emitted token at ``slot`` of ``round_`` with the numbers that
    decided it. A resampled token and the struck-through draft rejected in its place tell one
    story (the rejection, then the residual). The words follow the round: a chain's bonus token
    came after every draft was accepted, a tree's after the accepted path reached a leaf, and a
    pass that drafted nothing is a plain target step.

    Raises:
        IndexError: if ``slot`` is not a slot of the round.
    """
    tok = round_.emitted[slot]
    tok = dataclasses.replace(tok, text=emitted_piece(tok))  # named, where the stream shows nothing
    head = _inspector_head(round_, slot)
    d = round_.drafted_for(slot)
    if tok.kind == ACCEPTED and d is not None:
        return (f"{head}\n\n**Accepted draft token** {_code(d.id, d.text)}\n\n"
                f"- {unlogged(f'p_draft = {fmt(d.p_draft)}, p_target = {fmt(d.p_target)}')}\n"
                f"- {unlogged(f'acceptance probability {_ratio(d)}')}\n"
                f"- {unlogged(f'uniform draw u = {fmt(d.uniform)} < {fmt(d.accept_prob)}')} → **accepted**")
    if tok.kind == RESAMPLED and d is not None:
        story = (f"{head}\n\n{unlogged(f'**Rejected draft token** {_code(d.id, d.text)}')}\n\n"
                 f"- {unlogged(f'p_draft = {fmt(d.p_draft)}, p_target = {fmt(d.p_target)}')}\n"
                 f"- {unlogged(f'acceptance probability {_ratio(d)}')}\n"
                 f"- {unlogged(f'uniform draw u = {fmt(d.uniform)} ≥ {fmt(d.accept_prob)}')} → **rejected**; the "
                 "drafts after it are discarded untested\n\n"
                 f"**Resampled** {_code(tok.id, tok.text)} "
                 + unlogged("from the residual normalize(max(0, p_target − p_draft))"
                            + ("" if tok.p_source is None else f": residual probability {fmt(tok.p_source)} "
                                                               f"(p_target = {fmt(tok.p_target)})")))
        return story + ("." if tok.p_source is not None else "")
    if tok.kind == BONUS:
        if is_tree_round(round_):
            why = (f"the accepted path reached a leaf of the draft tree (depth {round_.n_accepted}), so the verify "
                   "pass already holds the target's distribution after it")
        else:
            why = (f"all {len(round_.drafted)} drafts were accepted, so the verify pass already holds the target's "
                   "distribution after them")
        return (f"{head}\n\n**Bonus token** {_code(tok.id, tok.text)}: {why}; one more token is drawn from it for "
                f"free. {unlogged(f'p_target = {fmt(tok.p_target)}.')}")
    return (f"{head}\n\n**Plain target step** {_code(tok.id, tok.text)}: the target drew its token directly. "
            f"{unlogged(f'p_target = {fmt(tok.p_target)}.')}")


def round_tree_html(round_: Round) -> str:
    """One round drawn as a token tree: from the committed context, each drafted node under its
    parent; the accepted path in the accepted colour, rejected (tested) nodes struck through,
    untested nodes greyed, and the resampled or bonus token at the end of the path. A chain is a
    tree with one branch, so it draws as a straight line."""
    children: dict[int, list[int]] = {}
    for i, token in enumerate(round_.drafted):
        parent = token.parent if token.parent is not None else i - 1
        children.setdefault(parent, []).append(i)
    last = round_.emitted[-1] if round_.emitted else None
    tail = ""
    if last is not None and last.kind in (RESAMPLED, BONUS, PLAIN):
        tail = (f'<li><span class="sv-tok sv-{last.kind}" title="{kind_label(last.kind, round_)}">'
                f'{as_text(token_label(emitted_piece(last), last.id))}</span> <i>({last.kind})</i></li>')

    def node_html(i: int) -> str:
        token = round_.drafted[i]
        label = as_text(token_label(token.text, token.id))
        facts = f"accept prob {token.accept_prob:.3f}, u {token.uniform:.3f}"
        if token.accepted:
            item = f'<span class="sv-tok sv-accepted" title="{facts}">{label}</span>'
        elif token.tested:
            item = f'<s class="sv-rejected" title="{facts}">{label}</s>'
        else:
            item = f'<span class="sv-untested" title="never tested">{label}</span>'
        kids = children.get(i, [])
        inner = "".join(node_html(c) for c in kids)
        if token.accepted and not any(round_.drafted[c].accepted for c in kids):
            inner += tail  # the path ends here: the target's own token follows
        return f"<li>{item}{f'<ul>{inner}</ul>' if inner else ''}</li>"

    roots = "".join(node_html(i) for i in children.get(-1, []))
    if not any(t.accepted for t in round_.drafted):
        roots += tail
    return (f'<div class="sv-tree"><b>Verify pass {round_.index + 1} as a tree</b> '
            f'({len(round_.drafted)} drafted nodes, {round_.n_accepted} accepted)<ul><li><i>context</i><ul>{roots}'
            "</ul></li></ul></div>")
