"""The Run tab's "Is it lossless?" check (the /lossless endpoint): first-token histograms drawn
with speculative sampling and directly from the target, compared with p_target
(:func:`specviz.ui.teach.lossless.first_token_experiment`)."""

from __future__ import annotations

import functools
import time

import gradio as gr

from specviz.drafters import drafter_kind, real_draft_phrase
from specviz.run.request import to_int
from specviz.core.sampling import check_rule
from specviz.figures.trace import TokenPieces, token_label
from specviz.ui.serve import gpu
from specviz.ui.serve import gpu_budget
from specviz.ui.tabs import run_stream
from specviz.ui.serve import settings
from specviz.ui.draw import charts
from specviz.ui.draw.escape import as_text
from specviz.ui.serve.feature import Feature, Plan
from specviz.ui.serve.fields import SHARED, flag_value, request_from, spread
from specviz.ui.teach.lossless import (
    ACCEPT_ALL,
    REAL_VERIFY,
    first_token_experiment,
    lossless_notes,
)
from specviz.ui.serve.user_errors import refused, user_errors

PILOT_DRAWS = 100  # the fewest draws the check takes; in public mode, a pilot that times them


def _no_first_draft_hint(err: Exception, device="cpu") -> str:
    """What to pick when the drafter proposed no first token: the self-drafts that run with the
    target on ``device`` (:func:`specviz.drafters.real_draft_phrase`)."""
    return (f" Pick {real_draft_phrase(device)}, whose first token always has a draft distribution."
            if "proposes nothing" in str(err) else "")


def lossless_markdown(report, seconds: float, temperature: float, control: str, lookup: bool,
                      device="cpu") -> str:
    """The check's figures: total-variation distances and chi-square p-values, how to read them,
    and the experiment's own notes (:func:`specviz.ui.teach.lossless.lossless_notes`). ``seconds``: the draws'
    wall time; ``device``: the target's (the notes suggest only drafters that run there)."""
    text = (
        f"**{report.n} draws each** in {seconds:.1f} s at temperature "
        f"{temperature:g}, verification rule **{as_text(report.rule)}**"
        f"{' (a lossy control)' if not check_rule(report.rule).lossless else ''}, draft: {as_text(report.draft_label)} "
        f"(its token was accepted in {report.acceptance_rate:.0%} of draws"
        f"{'; control case: every draft token accepted' if control == 'accept_all' else ''}).\n\n"
        f"| | total-variation distance to p_target | chi-square p-value |\n|---|---|---|\n"
        f"| speculative sampling | {report.tv_speculative:.4f} | {report.p_value_speculative:.3f} |\n"
        f"| direct target sampling | {report.tv_direct:.4f} | {report.p_value_direct:.3f} |\n\n"
        "How to read it: if speculative sampling is exact, its distance to p_target is about as small as "
        "direct sampling's (both are only sampling noise, shrinking like 1/√N), and its p-value is not tiny "
        "(below 0.01 in most repeats would mean the two distributions differ). Tokens are labelled with their "
        "text (␣ a space, ↵ a newline, ∅ no text) and their id."
    )
    notes = lossless_notes(report, temperature, lookup=lookup, device=device)
    if notes:
        text += "\n\n" + "\n\n".join(f"**Note.** {as_text(note)}" for note in notes)
    return text


#: What the check's panel says once its prompt, models or temperature changed.
STALE = "Settings changed: run the check again."


def settings_changed(shown):
    """Clear the check's result when a setting it used changed (``shown``: its text on screen)."""
    if not shown or shown == STALE:
        return gr.skip(), gr.skip()
    return None, STALE


@spread(SHARED)
def run_lossless(values, n_draws=4000, control=False, progress=gr.Progress(), *, public: bool | None = None):
    """The "Is it lossless?" panel: first-token histograms, speculative vs direct, against p_target.

    ``temperature`` is the check's own (the page sends its "Check's temperature", default 1);
    ``control`` true runs the broken accept-every-draft method, which the test should reject.
    ``public``: public mode (bound by build_page; None reads the module's PUBLIC): caps the draws.
    Validated (:func:`plan_lossless`), then one GPU job (:func:`lossless_work`): the feature
    :data:`LOSSLESS`."""
    return LOSSLESS.result(values, n_draws, control, public, progress=progress)


def plan_lossless(values: dict, n_draws, control, public: bool | None) -> Plan:
    """/lossless's plan: the request and the draws validated (``gr.Error`` for a bad value, or for
    plain decoding: nothing to compare), reserved for :func:`specviz.ui.serve.gpu_budget.draws_duration`."""
    public = settings.is_public(public)
    request = request_from(values, public)
    with user_errors():
        n_draws = to_int("draws", n_draws, 100, settings.PUBLIC_POLICY.max_draws if public else 100_000)
        control = ACCEPT_ALL if flag_value("control", control) else REAL_VERIFY
    if request.plain:
        raise refused("Pick a drafter: with plain decoding there is nothing to compare.")
    duration = gpu_budget.draws_duration(request, n_draws, gpu_budget.cap_s(public, settings.PUBLIC_POLICY.max_run_s))
    return Plan((request, n_draws, control, public), duration)


def check(prepared, n_draws: int, control: str, started: float, max_run_s: float | None, progress,
          should_end=None):
    """:func:`run_lossless` once the pair is loaded: the draws (as many as fit in ``max_run_s``
    since ``started``), the histograms and the figures. ``should_end`` (the GPU job's deadline) is
    checked after the pilot's draws: past it, no more draws are made and the text says so."""
    request, target, drafter, prompt_ids = prepared.request, prepared.target, prepared.drafter, prepared.prompt_ids
    if max_run_s is not None and time.perf_counter() - started > max_run_s:
        return None, (f"**Stopped** at the public time limit of {max_run_s:g} s: loading the models took "
                      f"{time.perf_counter() - started:.1f} s, so no draws were made. Try again: they stay loaded.")

    def experiment(n):
        with user_errors(hint=functools.partial(_no_first_draft_hint, device=target.device)):
            return first_token_experiment(target.model, drafter, prompt_ids, request.sampling, n=n,
                                          seed=request.seed, vocab_size=drafter.vocab_size, control=control,
                                          rule=request.rule)

    asked, n_draws = n_draws, _draws_in_time(experiment, n_draws, started, max_run_s)
    if should_end is not None and should_end():
        return None, ("**Stopped** at the end of the GPU time reserved for the check: loading "
                      f"and the pilot draws took {time.perf_counter() - started:.1f} s, so no more draws were made. "
                      "Try again with fewer draws: the models stay loaded.")
    progress(0.5, desc=f"Drawing {n_draws} first tokens each way…")
    t0 = time.perf_counter()
    report = experiment(n_draws)
    labels = first_token_labels(target.tokenizer, report.token_ids)
    fig = charts.lossless_figure(labels, report.p_target, report.freq_speculative, report.freq_direct,
                                 p_draft=report.p_draft)
    text = lossless_markdown(report, time.perf_counter() - t0, request.sampling.temperature, control,
                             lookup=drafter_kind(request.draft).lookup, device=target.device)
    if n_draws < asked:
        text = (f"**Fewer draws**: {n_draws} of the {asked} asked for, to stay within the public time limit of "
                f"{max_run_s:g} s.\n\n{text}")
    return fig, text


def first_token_labels(tokenizer, token_ids: list[int]) -> list[str]:
    """The chart's label of each token (:func:`specviz.figures.trace.token_label`, id −1: every other
    token): its own piece (:class:`specviz.figures.trace.TokenPieces`), so a token that is part of a
    character shows its bytes (``<0xF0><0x9F>``), not the U+FFFD that decoding it alone gives."""
    pieces = TokenPieces(tokenizer)
    return [token_label(pieces(t) if t >= 0 else "", t) for t in token_ids]


def _draws_in_time(experiment, n_draws: int, started: float, max_run_s: float | None) -> int:
    """How many draws fit in what is left of the public time limit (all ``n_draws`` without one).

    Each draw is one verify step in Python (:func:`specviz.ui.teach.lossless.draw_first_tokens`), about a
    millisecond or more: a pilot of :data:`PILOT_DRAWS` times them, forward passes included, so
    the estimate errs on the short side; never fewer than the pilot's count."""
    if max_run_s is None or n_draws <= PILOT_DRAWS:
        return n_draws
    t0 = time.perf_counter()
    experiment(PILOT_DRAWS)
    per_draw = (time.perf_counter() - t0) / PILOT_DRAWS
    left = max_run_s - (time.perf_counter() - started)
    return max(PILOT_DRAWS, min(n_draws, int(left / per_draw)))


# ----------------------------------------------------------------------------- in the GPU job
def lossless_work(ctx: "gpu.JobContext", request, n_draws: int, control: str, public: bool):
    """The "Is it lossless?" check (/lossless): one ``(figure, Markdown)`` pair."""
    started = time.perf_counter()
    prepared = run_stream.load_and_encode(request, ctx, warn=ctx.warn)
    max_run_s = settings.PUBLIC_POLICY.max_run_s if public else None
    if ctx.enforced and (max_run_s is None or ctx.budget_s < max_run_s):  # the reservation's deadline is tighter
        max_run_s = ctx.budget_s
    if ctx.past_deadline():  # loading took the whole reservation: no draw may start
        yield None, (f"**Stopped** at the end of the GPU time reserved for the check ({ctx.budget_s:.0f} s): "
                     f"loading the models took {time.perf_counter() - started:.1f} s, so no draws were made. Try "
                     "again: they stay loaded.")
        return
    with prepared.in_use():  # no other load evicts the pair while it draws
        yield check(prepared, n_draws, control, started, max_run_s, ctx, should_end=ctx.past_deadline)


#: The "Is it lossless?" check (/lossless), declared once (:mod:`specviz.ui.serve.feature`).
LOSSLESS = Feature("lossless", lossless_work, plan_lossless)
