"""Page-only views nothing outside the page needs: the playground's closed-form and Monte-Carlo
Markdown, the experiments' table rows, and the side-by-side tab's coloured outputs."""

from __future__ import annotations

from specviz.diagnose.ceiling import gap_phrase
from specviz.figures.speedup import NOT_MEASURABLE, format_speedup, speedup_doubts
from specviz.ui.teach import playground
from specviz.ui.draw.escape import as_text
from specviz.ui.draw.run_views import legend_html, render_rounds


def _f(x, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def _speedup(row: dict) -> str:
    """A row's measured speedup with its range, as the Run tab writes it (:func:`specviz.figures.speedup.format_speedup`)."""
    return "—" if row.get("speedup") is None else format_speedup(row["speedup"], row.get("speedup_low"),
                                                                 row.get("speedup_high"))


def playground_figures_markdown(cf: playground.ClosedForm) -> str:
    """The playground's closed-form figures, each with its formula and the numbers put in."""
    a, k, c, v = cf.alpha, cf.k, cf.c, cf.v
    verdict = "a **slowdown**" if cf.speedup < 1 else "faster than plain decoding"
    return (
        f"**Expected tokens per verify pass** E[N] = **{cf.tokens_per_pass:.3f}**\n\n"
        f"$$E[N] = \\frac{{1-\\alpha^{{K+1}}}}{{1-\\alpha}} = \\frac{{1-{a:.2f}^{{{k + 1}}}}}{{1-{a:.2f}}}$$\n\n"
        f"**Cost of one round** K·c + v = **{cf.round_cost:.3f}** plain target steps "
        f"({k} draft steps of c = {c:.3f}, one verify pass of v = {v:.3f})\n\n"
        f"**Expected speedup** S = **{cf.speedup:.3f}×** ({verdict})\n\n"
        f"$$S = \\frac{{E[N]}}{{K c + v}} = \\frac{{{cf.tokens_per_pass:.3f}}}{{{k}\\cdot{c:.3f} + {v:.3f}}}$$\n\n"
        f"**Best K** for α = {a:.2f}, c = {c:.3f}, v = {v:.3f}: **K = {cf.best_k}**, "
        f"speedup **{cf.best_speedup:.3f}×** at the best K (searched over K = 1…{playground.BEST_K_MAX}). "
        "The search holds v constant across K, while a real verify pass of K + 1 positions costs more as K grows, "
        "so a large best K is optimistic.\n\n"
        f"Ceiling at this K = {k} (every draft accepted, α = 1): (K + 1)/(K·c + v) = {cf.ceiling:.3f}×"
    )


def monte_carlo_markdown(mc: playground.MonteCarlo, cf: playground.ClosedForm) -> str:
    """The simulation's figures next to the closed form's, with their spread."""
    lo, hi = mc.spread(mc.run_tokens_per_pass)
    slo, shi = mc.spread(mc.run_speedup)
    return (
        f"**Monte-Carlo**: {mc.runs:,} simulated runs of {mc.rounds} verify passes; each draft accepted "
        f"independently with probability α = {mc.alpha:.2f}, a pass stops at its first rejection (seed {mc.seed}).\n\n"
        f"| | simulated | closed form |\n|---|---|---|\n"
        f"| tokens per pass (mean ± standard error) | {mc.tokens_per_pass:.3f} ± {mc.tokens_per_pass_se:.3f} | "
        f"{cf.tokens_per_pass:.3f} |\n"
        f"| speedup = tokens per pass ÷ (K·c + v) | {mc.speedup:.3f}× | {cf.speedup:.3f}× |\n"
        f"| one run of {mc.rounds} passes: middle 90% of tokens per pass | {lo:.2f} – {hi:.2f} | |\n"
        f"| one run of {mc.rounds} passes: middle 90% of speedup | {slo:.2f}× – {shi:.2f}× | |\n\n"
        "A real run of a few dozen passes lands anywhere in that spread; the closed form is its mean."
    )


SWEEP_HEADERS = ["setting", "per-token α (accepted ÷ tested)", "acceptance rate (accepted ÷ proposed)",
                 "tokens per pass", "theory (1−α^(K+1))/(1−α)", "speedup (measured)",
                 "theory speedup", "c", "v", "tokens/s"]


def sweep_table(rows: list[dict], parameter: str) -> list[list]:
    """The experiment's rows (:mod:`specviz.run.sweep`) as the table's cells, columns as :data:`SWEEP_HEADERS`.
    A speedup :func:`specviz.run.sweep.speedup_doubts` doubts shows as "not measurable now: …", no figure."""
    doubts = speedup_doubts(rows)
    return [[str(r[parameter]), _f(r["alpha"]), _f(r["acceptance_rate"]), _f(r["tokens_per_pass"]),
             _f(r["predicted_tokens_per_pass"]), f"{NOT_MEASURABLE}: {doubt}" if doubt else _speedup(r),
             _f(r["theoretical_speedup"]), _f(r["cost_ratio_c"]), _f(r["verify_cost_v"]), _f(r["tokens_per_s"], ".1f")]
            for r, doubt in zip(rows, doubts)]


def greedy_texts_note(rows: list[dict], dtype: str) -> str:
    """A sentence on greedy runs whose texts differ, for the status under the rows (``rows``: sweep
    rows, each with its ``temperature`` and ``text``; ``dtype``: the runs' requested Dtype): at
    temperature 0 speculative sampling's text is plain decoding's in exact arithmetic, so texts
    that differ beside the word "lossless" need the reason, reduced precision. "" when
    the texts agree, a run sampled, or the Dtype was float32 (where they must agree)."""
    texts = [r.get("text") for r in rows]
    if len(rows) < 2 or None in texts or len(set(texts)) == 1 or dtype == "float32":
        return ""
    if any(r.get("temperature") != 0 for r in rows):
        return ""
    return ("At temperature 0 these texts are not all the same. Speculative sampling is lossless: in exact "
            "arithmetic each writes plain decoding's greedy text. In reduced precision (Dtype *auto* picks "
            "bfloat16 on a CPU that runs it natively) one batched verify pass over several positions can round "
            "a near-tie between two tokens differently from a one-token step, and from that token on the texts "
            "part ways; in float32 they agree.")


def side_by_side_html(rows_runs: list[tuple[dict, object]], eos: set[int]) -> str:
    """One coloured output per drafter, one above the other, each headed by its figures.

    ``rows_runs``: (sweep row, its Generation) per drafter (a Generation without a drafter is plain
    decoding, the baseline); ``eos``: the target's end-of-sequence ids."""
    blocks = [legend_html(clickable=False)]
    doubts = speedup_doubts([row for row, _ in rows_runs])
    # The oracle (the target's own output replayed) is the ceiling: every other drafter says its gap to it.
    oracle = next((row for row, run in rows_runs if getattr(run.drafter, "replays_target", False)), None)
    for (row, run), doubt in zip(rows_runs, doubts):
        if run.drafter is None:
            speed = "the baseline itself (plain decoding)"
        elif doubt:
            speed = f"speedup {NOT_MEASURABLE}: {as_text(doubt)}"
        else:
            speed = (f"speedup <b>{as_text(_speedup(row))}</b> (measured ÷ plain decoding, with its range; theory "
                     f"{_f(row['theoretical_speedup'], '.2f')}×)")
        head = (f"<b>{as_text(row['drafter'])}</b> · per-token α <b>{_f(row['alpha'])}</b> (accepted ÷ tested, "
                f"{row['accepted']}/{row['tested']}) · <b>{row['tokens_per_pass']:.2f}</b> tokens per pass · {speed}")
        if oracle is not None and run.drafter is not None and row is not oracle:
            head += f" · {as_text(gap_phrase(row, oracle))}"
        body = render_rounds(run.rounds, eos, clickable=False)
        blocks.append(f'<div class="sv-sbs" data-draft="{as_text(row["draft"])}">{head}</div>'
                      f'<div class="sv-out">{body}</div>')
    return "".join(blocks)
