"""The Playground tab: move α, K, c and v and watch the closed form (Leviathan et al. 2023), a map
of the expected speedup and a Monte-Carlo of the acceptance process; no model runs. Its callbacks
are /playground and /playground_load_run."""

from __future__ import annotations

import gradio as gr

from specviz.figures import theory
from specviz.figures.analysis import RunAnalysis
from specviz.run.request import to_float, to_int
from specviz.ui.context import PageContext
from specviz.ui.draw import charts
from specviz.ui.draw.tab_views import monte_carlo_markdown, playground_figures_markdown
from specviz.ui.prose import LATEX, prose
from specviz.ui.share import copy_link
from specviz.ui.teach import link_query, playground
from specviz.ui.serve.user_errors import refused, user_errors

PG_ALPHAS = [i / 40 for i in range(41)]
PG_KS = list(range(1, playground.BEST_K_MAX + 1))
PG_CS = [i / 40 for i in range(41)]  # c from 0 to 1: a draft from free to as dear as the target
C_RANGE = link_query.PLAYGROUND_RANGES["c"][1:3]  # the c slider's range
V_RANGE = link_query.PLAYGROUND_RANGES["v"][1:3]  # the v slider's


def _checked(alpha, k, c, v, map_axes, rounds, seed) -> tuple:
    with user_errors():
        values = (to_float("per-token α", alpha, 0.0, 1.0), to_int("lookahead K", k, 1, playground.BEST_K_MAX),
                  to_float("cost ratio c", c, 0.0, 10.0), to_float("verify cost v", v, 0.0, 10.0, lo_open=True))
        if map_axes not in ("α and K", "α and c"):
            raise refused(f"The map is over 'α and K' or 'α and c', got {map_axes!r}.")
        return (*values, map_axes, to_int("passes per simulated run", rounds, 1, 1000),
                to_int("seed", seed, 0, 2**31 - 1))


def playground_update(alpha, k, c, v, map_axes, rounds, seed):
    """Every playground output from the sliders: (figures, map, Monte-Carlo text, Monte-Carlo chart).

    Model-free and instant; values are validated here (API callers skip the sliders' limits)."""
    alpha, k, c, v, map_axes, rounds, seed = _checked(alpha, k, c, v, map_axes, rounds, seed)
    cf = playground.closed_form(alpha, k, c, v)
    if map_axes == "α and c":
        z = playground.speedup_grid(PG_ALPHAS, cs=PG_CS, k=k, v=v)
        title = f"Expected speedup over (α, c) at K = {k}, v = {v:.2f} · red: slowdown"
        fig = charts.playground_map_figure(PG_ALPHAS, PG_CS, z, "c", point=(alpha, c), title=title)
    else:
        z = playground.speedup_grid(PG_ALPHAS, ks=PG_KS, c=c, v=v)
        title = f"Expected speedup over (α, K) at c = {c:.3f}, v = {v:.2f} · red: slowdown"
        fig = charts.playground_map_figure(PG_ALPHAS, PG_KS, z, "K", point=(alpha, k), title=title)
    mc = playground.monte_carlo(alpha, k, c, v, rounds=rounds, runs=max(1, 40_000 // rounds), seed=seed)
    mc_fig = charts.monte_carlo_figure(list(mc.counts), theory.tokens_per_pass_distribution(alpha, k),
                                       mc.tokens_per_pass, cf.tokens_per_pass)
    return playground_figures_markdown(cf), fig, monte_carlo_markdown(mc, cf), mc_fig


#: The sliders' values when the page opens (a link sets some of them; the rest stay these).
SLIDER_DEFAULTS = {"alpha": 0.7, "k": 4, "c": 0.05, "v": 1.0}
#: The map's axes, simulated passes and seed when the page opens.
OPENING = ("α and K", 24, 0)
#: The Playground's panels that follow the sliders, by name (what :func:`linked_panels` returns).
PANELS = ("figures_api", "map", "mc_text", "mc_plot", "figures")


def linked_panels(values: dict) -> dict:
    """Every panel the sliders drive, by :data:`PANELS` name, for a classroom link's slider
    ``values`` (the others at :data:`SLIDER_DEFAULTS`, the map and simulation as the page opens):
    the closed form, the map, the Monte-Carlo table and chart. A link sets them with its sliders
    in one update (:mod:`specviz.ui.links`), so no panel shows the opening values beside the
    link's (the map's title said c = 0.050 and the table 1.907× under a c = 0.2 link)."""
    a, k, c, v = (values.get(name, default) for name, default in SLIDER_DEFAULTS.items())
    figures_api, map_fig, mc_text, mc_fig = playground_update(a, k, c, v, *OPENING)
    return {"figures_api": figures_api, "map": map_fig, "mc_text": mc_text, "mc_plot": mc_fig,
            "figures": shown_figures(a, k, c, v, False)}


def analysis_for_playground(state):
    """The last real run's α, K, c and v as slider updates, plus a line saying where they came from.

    ``state`` is the ``last_analysis`` State: a :class:`~specviz.figures.analysis.RunAnalysis`, its
    ``scalars()`` dict, or a sweep row (the Experiments tab fills it; the Run tab's callback is
    meant to fill it too). Raises gr.Error when there is no run with a measured α and c."""
    scalars = state.scalars() if isinstance(state, RunAnalysis) else state if isinstance(state, dict) else None
    point = playground.from_analysis(scalars)
    if point is None:
        raise refused("No real run with a measured α and c yet: run a generation with a drafter (or an experiment), "
                       "then load its figures.")
    k = min(point["k"], playground.BEST_K_MAX)
    c, v = min(max(point["c"], 0.0), C_RANGE[1]), min(max(point["v"], V_RANGE[0]), V_RANGE[1])
    note = (f"Loaded from the last real run: per-token α = {point['alpha']:.3f} (accepted ÷ tested), K = {k}, "
            f"c = {point['c']:.3f} and v = {point['v']:.3f} (measured against plain decoding). "
            "Now ask what if: halve c, or raise α.")
    # A measured value beyond a slider's range is said, never clamped silently.
    for name, measured, shown, (lo, hi) in (("K", point["k"], k, (1, playground.BEST_K_MAX)),
                                           ("c", point["c"], c, C_RANGE), ("v", point["v"], v, V_RANGE)):
        if measured != shown:
            note += f" **The measured {name} = {measured:.3g} is outside the slider's {lo:g}–{hi:g}: set to {shown:g}.**"
    return (gr.update(value=round(point["alpha"], 2)), gr.update(value=k), gr.update(value=round(c, 3)),
            gr.update(value=round(v, 2)), note)


BEST_K_HIDDEN = ("**Best K**: hidden until you guess it. Which K gives the largest speedup at this α, c and v? "
                 "Type your guess below and press **Reveal**, or press **Just show it**.")


def shown_figures(alpha, k, c, v, revealed) -> str:
    """The closed-form figures as the page shows them: a headline (E[N] and the speedup to two
    decimals), then :func:`~specviz.ui.draw.tab_views.playground_figures_markdown`, with its best-K
    paragraph hidden until the learner has guessed or asked to see it (``revealed``)."""
    try:
        cf = playground.closed_form(float(alpha), int(k), float(c), float(v))
    except (TypeError, ValueError):
        return gr.skip()
    paragraphs = playground_figures_markdown(cf).split("\n\n")
    if not revealed:
        paragraphs = [BEST_K_HIDDEN if p.startswith("**Best K**") else p for p in paragraphs]
    headline = (f"**{cf.tokens_per_pass:.2f}** expected tokens per pass · "
                f"**{cf.speedup:.2f}×** expected speedup")
    return "\n\n".join([headline, *paragraphs])


def score_guess(guess, alpha, c, v) -> str:
    """How good a guessed best K is: its expected speedup against the best one's (Leviathan et
    al. 2023, Theorem 3.8, searched over K = 1…16 by :func:`specviz.ui.teach.playground.best_k`).

    Raises:
        gr.Error: if the guess is not a whole number in 1…16."""
    with user_errors():
        guess = to_int("your guess of the best K", guess, 1, playground.BEST_K_MAX)
        alpha, c, v = float(alpha), float(c), float(v)
    best, best_speedup = playground.best_k(alpha, c, v)
    mine = theory.expected_speedup(alpha, guess, c, v)
    share = mine / best_speedup if best_speedup > 0 else 1.0
    if guess == best:
        verdict = "**Spot on.**"
    elif share >= 0.97:
        verdict = "**Close enough** to make no real difference."
    else:
        verdict = "**Off**: the speedup is flat near its best, but not that flat."
    return (f"{verdict} Your K = {guess} gives {mine:.3f}× against the best {best_speedup:.3f}× at K = {best}: "
            f"{share:.0%} of the best speedup, {abs(guess - best)} away.")


def _prediction(alpha, k, c, v, figures) -> None:
    """The guess of the best K, its score, and the events that reveal it in ``figures``."""
    revealed = gr.State(False)
    with gr.Row(equal_height=True):
        # No minimum on the box: an empty one shows 0, which would be marked invalid before any guess.
        guess = gr.Number(None, precision=0, label=f"Your guess of the best K (1…{playground.BEST_K_MAX})",
                          elem_id="sv-pg-guess", min_width=120)
        reveal = gr.Button("Reveal", size="sm", elem_id="sv-pg-reveal", min_width=80)
        show = gr.Button("Just show it", size="sm", elem_id="sv-pg-show", min_width=80)
    score = gr.Markdown(elem_id="sv-pg-score")
    free = dict(api_name=False, concurrency_id="playground", concurrency_limit=None, show_progress="hidden")
    values = [alpha, k, c, v, revealed]
    reveal.click(lambda g, a, c_, v_: (score_guess(g, a, c_, v_), True), [guess, alpha, c, v], [score, revealed],
                 **free).success(shown_figures, values, figures, **free)
    show.click(lambda: True, None, revealed, **free).then(shown_figures, values, figures, **free)
    # A verdict answers the α, c and v it was given: a new one clears it and hides the best K again
    # (a best K the learner asked to see without guessing stays shown, following the sliders).
    gr.on([alpha.change, c.change, v.change], forget_verdict, [score, revealed], [score, revealed], **free).then(
        shown_figures, values, figures, **free)
    return revealed


def forget_verdict(score: str = "", revealed: bool = False) -> tuple[str, bool]:
    """α, c or v changed: no verdict (the score, ``revealed``). After a guess's verdict the best K
    is hidden again, so the learner can guess anew; one shown without a guess ("Show") stays."""
    return "", bool(revealed) and not score


def build(ctx: PageContext) -> None:
    """The sliders, the closed form with its formulas, the map and a Monte-Carlo, and their events."""
    gr.Markdown("### What if? The closed form, live\nMove α, K, c and v and watch the expected tokens per pass and "
                "the expected speedup (Leviathan et al. 2023, eq. 1 and Theorem 3.8). No model runs here.")
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            alpha, k, c, v = _sliders()
            map_axes = gr.Radio(["α and K", "α and c"], value=OPENING[0], label="Map over")
            with gr.Row():
                rounds = gr.Slider(1, 200, value=OPENING[1], step=1, label="passes per simulated run")
                seed = gr.Number(OPENING[2], precision=0, minimum=0, label="simulation seed")
            load_btn = gr.Button("Load α, c, v of the last real run")
            load_note = gr.Markdown()
            copy_link("Copy link", "sv-pg-copy", link_query.playground_link, [alpha, k, c, v])
            # Pure and instant: the first figures are computed while the page is built.
            first = playground_update(*SLIDER_DEFAULTS.values(), *OPENING)
            # The /playground endpoint's figures (all of them); the page shows them through
            # shown_figures, which keeps the best K back until the learner has guessed.
            figures_api = gr.Markdown(first[0], visible=False)
            figures = gr.Markdown(shown_figures(*SLIDER_DEFAULTS.values(), False), latex_delimiters=LATEX,
                                  elem_id="sv-pg-figures")
            revealed = _prediction(alpha, k, c, v, figures)
        with gr.Column(scale=2, min_width=300):
            map_plot = gr.Plot(first[1], show_label=False, elem_id="sv-pg-map")
            with gr.Row():
                mc_plot = gr.Plot(first[3], show_label=False, elem_id="sv-pg-mc")
                mc_text = gr.Markdown(first[2], elem_id="sv-pg-mc-text")
    gr.Markdown(prose("playground_notes"), latex_delimiters=LATEX)
    ctx.playground.update(alpha=alpha, k=k, c=c, v=v)
    ctx.playground_panels = (linked_panels, dict(zip(PANELS, (figures_api, map_plot, mc_text, mc_plot, figures),
                                                     strict=True)))
    inputs = [alpha, k, c, v, map_axes, rounds, seed]
    # Model-free: its own queue with no limit, so it never waits behind a generation.
    shared = dict(concurrency_id="playground", concurrency_limit=None, preprocess=False)
    # One listener for every control, "always_last": a drag fires many changes, and separate listeners
    # running at once could answer out of order and leave a stale figure on screen. It listens to
    # the visitor's own input only: an update that sets several sliders at once (a classroom link,
    # "Load α, c, v") fired it while only some had their new values, and its answer, computed
    # from a mix of new and old values, landed last (the map said c = 0.050 under a
    # c = 0.2 link). Those updates redraw the panels themselves, once every slider is set.
    outputs = [figures_api, map_plot, mc_text, mc_plot]
    gr.on([control.input for control in inputs], playground_update, inputs, outputs, api_name="playground",
          show_progress="hidden", trigger_mode="always_last", **shared
          ).then(shown_figures, [alpha, k, c, v, revealed], figures, api_name=False, show_progress="hidden", **shared)
    load_btn.click(analysis_for_playground, ctx.last_analysis, [alpha, k, c, v, load_note],
                   api_name="playground_load_run", **shared
                   ).success(playground_update, inputs, outputs, api_name=False, show_progress="hidden", **shared
                             ).then(shown_figures, [alpha, k, c, v, revealed], figures, api_name=False,
                                    show_progress="hidden", **shared)


def _sliders() -> tuple:
    """α, K, c and v, over :data:`specviz.ui.teach.link_query.PLAYGROUND_RANGES` (a link's values fit them)."""
    r = link_query.PLAYGROUND_RANGES
    alpha = gr.Slider(*r["alpha"][1:3], value=SLIDER_DEFAULTS["alpha"], step=0.01, label="per-token α (chance a tested draft is accepted)",
                      elem_id="sv-pg-alpha")
    k = gr.Slider(*r["k"][1:3], value=SLIDER_DEFAULTS["k"], step=1, label="lookahead K (drafts per round)", elem_id="sv-pg-k")
    c = gr.Slider(*r["c"][1:3], value=SLIDER_DEFAULTS["c"], step=0.005, label="cost ratio c (one draft step ÷ one plain step)",
                  elem_id="sv-pg-c")
    v = gr.Slider(*r["v"][1:3], value=SLIDER_DEFAULTS["v"], step=0.01, label="verify cost v (one verify pass ÷ one plain step)",
                  elem_id="sv-pg-v")
    return alpha, k, c, v
