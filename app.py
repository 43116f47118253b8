"""specviz — watch speculative sampling happen on a real language model.

The Gradio UI. This is the only module that imports gradio; everything it shows comes from the
``specviz`` engine (models, drafters, the speculative loop, traces, theory and charts).

Run ``python app.py`` and open the printed URL. The first start prepares the offline models
(a minute, with progress in the terminal); later starts take seconds.
"""

from __future__ import annotations

import functools
import html
import logging
import os
import time

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

from specviz import charts, models  # noqa: E402
from specviz.analysis import RunAnalysis, measured_speedup  # noqa: E402
from specviz.drafters import DRAFTER_KINDS  # noqa: E402
from specviz.engine import ContextLengthError  # noqa: E402
from specviz.lossless import first_token_experiment  # noqa: E402
from specviz.request import (  # noqa: E402
    DEFAULT_LIMITS,
    RequestError,
    RunRequest,
    check_public_models,
    public_mode,
    public_policy,
    to_int,
    validate_request,
)
from specviz.runner import load_pair, make_generation, plain_baseline, warm_up  # noqa: E402
from specviz.sampling import NonFiniteLogitsError  # noqa: E402
from specviz.trace import ACCEPTED, BONUS, PLAIN, RESAMPLED, Round  # noqa: E402


try:  # ZeroGPU on Hugging Face Spaces: hold a GPU only while generating.
    import spaces

    gpu = spaces.GPU(duration=120)
except ImportError:  # anywhere else this is a no-op

    def gpu(fn):
        return fn


# ------------------------------------------------------------------------------------- presets
PRESETS = {
    "SmolLM2-135M-Instruct · offline": dict(target="smollm2-135m-instruct", drafter="ngram", draft_model="", chat=True),
    "Gemma-3-270M (base) · offline": dict(target="gemma-3-270m", drafter="ngram", draft_model="", chat=False),
    "SmolLM2-135M → SmolLM2-1.7B-Instruct · hub, GPU": dict(
        target="HuggingFaceTB/SmolLM2-1.7B-Instruct", drafter="model",
        draft_model="HuggingFaceTB/SmolLM2-135M-Instruct", chat=True),
    "Qwen2.5-0.5B → Qwen2.5-7B-Instruct · hub, GPU": dict(
        target="Qwen/Qwen2.5-7B-Instruct", drafter="model", draft_model="Qwen/Qwen2.5-0.5B-Instruct", chat=True),
}
DEFAULT_PRESET = next(iter(PRESETS))

logger = logging.getLogger("specviz.app")

# Public mode (SPECVIZ_PUBLIC=1, what a Space sets): only the presets' models, tighter limits, a
# wall-time cap per run, and no machine-only controls. `build_demo(public=...)` builds the page for
# either mode and binds the same flag into its callbacks (functools.partial), so the page and the
# Gradio API (/run, /lossless) enforce the same policy; a callback called directly without
# `public=` reads the module-level PUBLIC at call time (tests may monkeypatch it, or pass public=True).
PUBLIC = public_mode()
PUBLIC_POLICY = public_policy()
PUBLIC_TARGETS = frozenset(p["target"] for p in PRESETS.values())
PUBLIC_DRAFTS = frozenset(p["draft_model"] for p in PRESETS.values() if p["drafter"] == "model")

DRAFTERS = [(kind.label, kind.spec) for kind in DRAFTER_KINDS.values()]
DRAFTER_NOTES = {spec: kind.note for spec, kind in DRAFTER_KINDS.items()}

EXAMPLES = [
    ["Fix the typos in this text and change nothing else:\n\nTeh quick brown fox jumsp over the lazy dog. "
     "It was a sunny day and teh fox was vrey happy to be outside in the feild. Teh dog, however, did not "
     "care about the fox at all and kept sleeping under teh old oak tree.", True],
    ["Convert this CSV to a JSON list of objects:\n\nname,age,city\nAlice,34,Paris\nBob,29,Berlin\n"
     "Carol,41,Madrid\nDave,25,Lisbon\nEve,38,Vienna", True],
    ["Rename the variable `x` to `total` in this code and return the code:\n\n"
     "def add_all(values):\n    x = 0\n    for v in values:\n        x = x + v\n    return x\n", True],
    ["Write a short poem about a lighthouse keeper.", True],
    ["The history of the printing press begins", False],
]

EXAMPLE_LABELS = ["Fix typos (copy-heavy)", "CSV → JSON (copy-heavy)", "Rename a variable (copy-heavy)",
                  "A poem (free text)", "Continue plain text (free text, no chat)"]

KIND_LABELS = {
    ACCEPTED: "accepted draft token",
    RESAMPLED: "resampled at the first rejection",
    BONUS: "bonus token (all K accepted)",
    PLAIN: "plain target step (nothing drafted)",
}

CSS = """
.sv-out { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 15px; line-height: 1.9;
          white-space: pre-wrap; word-break: break-word; padding: 10px; min-height: 120px;
          border: 1px solid var(--border-color-primary); border-radius: 8px; }
.sv-tok { border-radius: 3px; padding: 1px 0; }
.sv-accepted { background: #2e9e5b2e; border-bottom: 2px solid #2e9e5b; }
.sv-resampled { background: #e8833a38; border-bottom: 2px solid #e8833a; }
.sv-bonus { background: #3b6fd833; border-bottom: 2px solid #3b6fd8; }
.sv-plain { background: #8c8c8c22; border-bottom: 2px solid #8c8c8c; }
.sv-rejected { color: #d64545; text-decoration: line-through; font-size: 0.85em; opacity: 0.9; }
.sv-special { color: #777; font-size: 0.8em; }
.sv-legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin-bottom: 6px; font-size: 0.9em; }
.sv-legend > span { white-space: nowrap; }
.sv-status { font-size: 0.95em; }
"""


# ----------------------------------------------------------------------------- token rendering
def _escape(text: str) -> str:
    return html.escape(text, quote=True)


def _token_title(kind: str, round_: Round, i: int) -> str:
    tok = round_.emitted[i]
    parts = [f"{KIND_LABELS[kind]} · pass {round_.index + 1}", f"p_target = {tok.p_target:.3f}"]
    if kind == ACCEPTED and i < len(round_.drafted):
        d = round_.drafted[i]
        parts += [f"p_draft = {d.p_draft:.3f}", f"accept prob min(1, p_target/p_draft) = {d.accept_prob:.3f}",
                  f"uniform draw u = {d.uniform:.3f} < accept prob"]
    if kind == RESAMPLED and i < len(round_.drafted):
        d = round_.drafted[i]
        parts += [f"rejected draft '{d.text}': p_draft = {d.p_draft:.3f}, p_target = {d.p_target:.3f}, "
                  f"accept prob = {d.accept_prob:.3f}, u = {d.uniform:.3f}",
                  "resampled from normalize(max(0, p_target − p_draft))"]
    return _escape("\n".join(parts))


def render_round(round_: Round, eos_ids: set[int]) -> str:
    """HTML for one round's emitted tokens (rejected draft struck through before a resampled token)."""
    out = []
    for i, tok in enumerate(round_.emitted):
        title = _token_title(tok.kind, round_, i)
        if tok.kind == RESAMPLED and tok.rejected_text is not None:
            out.append(f'<s class="sv-rejected" title="{title}">{_escape(tok.rejected_text) or "∅"}</s>')
        text = tok.text
        if not text and tok.id in eos_ids:
            text_html = '<span class="sv-special">⟨eos⟩</span>'
        else:
            text_html = _escape(text)
        out.append(f'<span class="sv-tok sv-{tok.kind}" title="{title}">{text_html}</span>')
    return "".join(out)


def legend_html() -> str:
    return (
        '<div class="sv-legend">'
        '<span><span class="sv-tok sv-accepted">accepted</span> draft token passed min(1, p_target/p_draft)</span>'
        '<span><s class="sv-rejected">rejected</s><span class="sv-tok sv-resampled">resampled</span> '
        'first rejection, redrawn from max(0, p_target − p_draft)</span>'
        '<span><span class="sv-tok sv-bonus">bonus</span> all K accepted: one more from the target</span>'
        '<span><span class="sv-tok sv-plain">plain</span> target step with nothing drafted</span>'
        "<span>Hover a token for its probabilities.</span></div>"
    )


def wrap_output(body: str, done: bool = False, generated_at: float | None = None) -> str:
    """Legend plus the token panel. ``data-sent`` is the server's clock (``time.time()``, s) when
    the newest token in ``body`` was generated (default: now), so a browser on the same machine
    can measure how far the page lags behind generation (``scripts/stream_latency.py``)."""
    stamp = time.time() if generated_at is None else generated_at
    return (legend_html() + f'<div class="sv-out" data-sent="{stamp:.3f}" data-done="{int(done)}">'
            f'{body or "<i>output appears here</i>"}</div>')


# ----------------------------------------------------------------------------- numbers
def _fmt(x, spec=".2f", none="—"):
    return none if x is None else format(x, spec)


def summary_markdown(a: RunAnalysis, status: str) -> str:
    """The summary table of a run: every figure from its :class:`~specviz.analysis.RunAnalysis`,
    each with what it is and how it was measured."""
    speedup = a.speedup
    if speedup is None:
        verdict = "measuring…" if a.k and a.plain_tokens_per_s is None else "—"
    elif speedup >= 1:
        verdict = f"**{speedup:.2f}× faster** than plain decoding"
    else:
        verdict = f"**{speedup:.2f}× — a slowdown** (plain decoding is {1 / speedup:.2f}× faster)"
    counts = a.counts
    rows = [
        ("acceptance rate (accepted ÷ proposed)", f"{_fmt(a.acceptance_rate, '.3f')}  ({a.accepted}/{a.proposed} "
                                                  "draft tokens reached the output)"),
        ("per-token α (accepted ÷ tested)", f"{_fmt(a.alpha, '.3f')}  ({a.accepted}/{a.tested} tested; drafts after "
                                            "a rejection are never tested — the theory's α)"),
        ("tokens per target pass", f"{a.tokens_per_pass:.2f}  (theory (1 − α^(K+1))/(1 − α): "
                                   f"{_fmt(a.predicted_tokens_per_pass)}; on the actual draft lengths: "
                                   f"{_fmt(a.predicted_tokens_per_pass_actual_drafts)})"),
        ("target passes", f"{a.target_passes}"),
        ("tokens: accepted / resampled / bonus / plain",
         f"{counts['accepted']} / {counts['resampled']} / {counts['bonus']} / {counts['plain']}"),
        ("speculative tokens/s", f"{a.tokens_per_s:.1f}  ({a.emitted} tokens in {a.wall_s:.2f} s, prefill included)"),
        ("plain decoding tokens/s", "—" if a.plain_tokens_per_s is None else
         f"{a.plain_tokens_per_s:.1f}  (same target, prompt and settings, timed here; one step "
         f"{a.plain_step_ms:.1f} ms)"),
        ("measured speedup", verdict),
        ("cost ratio c (draft step ÷ plain step)", _fmt(a.cost_ratio_c, ".3f")),
        ("verify cost v (verify pass ÷ plain step)", _fmt(a.verify_cost_v)),
        ("theoretical speedup", f"{_fmt(a.theoretical_speedup)}×  = (1 − α^(K+1)) / ((1 − α)(K·c + v)); on the "
                                f"actual draft lengths {_fmt(a.theoretical_speedup_actual_drafts)}×"),
    ]
    table = "| measure | value |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows)
    return f"{status}\n\n{table}"


# ----------------------------------------------------------------------------- callbacks
def _drafter_spec(drafter_kind, draft_model, early_exit_layers) -> str:
    """The drafter spec from the page's three controls (menu, model id, layer count)."""
    if drafter_kind not in DRAFTER_KINDS:
        raise RequestError(f"the drafter must be one of {', '.join(DRAFTER_KINDS)}, got {drafter_kind!r}")
    if drafter_kind == "model":
        if not isinstance(draft_model, str) or not draft_model.strip():
            raise RequestError("choose a draft model: give its hub id or local directory, or pick another drafter")
        return draft_model.strip()
    if drafter_kind == "early-exit":
        return f"early-exit:{to_int('early-exit layers', early_exit_layers, 1, 256)}"
    return drafter_kind


def _is_public(public: bool | None) -> bool:
    """A callback's mode: the flag build_demo bound into it, else the module's PUBLIC (read now)."""
    return PUBLIC if public is None else bool(public)


def _request(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k, top_p,
             max_new_tokens, seed, chat, device, dtype, public: bool = False) -> RunRequest:
    """The page's (or an API caller's) values as a validated request, or a gr.Error saying which is wrong.

    In public mode the tighter public limits apply and only the presets' models are allowed; this
    check comes before anything loads, so nothing is downloaded or read for a refused name."""
    try:
        request = validate_request(
            prompt=prompt, target=target_id, draft=_drafter_spec(drafter_kind, draft_model, early_exit_layers),
            k=k, temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed,
            chat=chat, device=device, dtype=dtype, limits=PUBLIC_POLICY.limits if public else DEFAULT_LIMITS)
        if public:
            check_public_models(request.target, request.draft, PUBLIC_TARGETS, PUBLIC_DRAFTS)
        return request
    except RequestError as err:
        raise gr.Error(_sentence(str(err))) from None


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _load(request: RunRequest, progress):
    """(target, drafter) for a request, with loading progress on the page; gr.Error if it fails."""
    def report(fraction, message):
        progress(fraction, desc=message)

    try:
        return load_pair(request.target, request.draft, request.device, request.dtype, report)
    except models.IncompatiblePairError as err:
        raise gr.Error(f"These models cannot be paired: {err}") from None
    except (models.ModelLoadError, ValueError, OSError) as err:
        raise gr.Error(_sentence(str(err))) from None


def _encode(target, request: RunRequest) -> list[int]:
    chat = request.chat
    if chat and not target.has_chat_template:
        gr.Warning(f"{target.name} has no chat template: using the prompt as plain text.")
        chat = False
    return target.encode(request.prompt, chat=chat)


CHART_INTERVAL_S = 1.0  # the browser lags behind if Plotly redraws on every round
# Token updates resend the whole panel (tens of kB for a few hundred tokens with their hover
# text); coalescing rounds that finish within this interval keeps the browser and the server's
# event loop from competing with generation on a small CPU. The final update is always sent.
TOKEN_INTERVAL_S = 0.25


def _figures(run, analysis: RunAnalysis, points: list[dict]):
    return (charts.alpha_figure(run.rounds), charts.tokens_per_pass_figure(run.rounds, analysis.k, analysis.alpha),
            charts.speedup_figure(points, analysis.theoretical_speedup))


def _measure_baseline(target, drafter, prompt_ids, request: RunRequest, baselines: dict):
    """Warm up once per pair, then the plain baseline of these settings (measured here, or reused
    from this visitor's earlier run): yields progress lines, returns (baseline, baselines)."""
    warm_up(target, drafter, prompt_ids, request.k, request.sampling, once=True)
    key = repr((target.source, str(target.device), str(target.dtype), prompt_ids, request.sampling,
                request.max_new_tokens, request.seed))
    if key in baselines:
        return baselines[key], baselines
    plain = make_generation(target, None, prompt_ids, request.k, request.sampling, request.max_new_tokens,
                            request.seed)
    last = 0.0
    for _ in plain:
        if time.perf_counter() - last > 0.5:
            last = time.perf_counter()
            yield (f"Measuring plain decoding of the target for the speedup baseline: "
                   f"{len(plain.tokens)}/{request.max_new_tokens} tokens…")
    baseline = plain_baseline(plain)
    return baseline, {**baselines, key: baseline}


def _log_run(request: RunRequest, label: str, analysis: RunAnalysis, outcome: str) -> None:
    """One log line per finished run: the pair, the settings and the summary figures."""
    s = request.sampling
    logger.info("run %s · %s | target=%s draft=%s K=%d T=%g top_k=%d top_p=%g max_new=%d seed=%d chat=%s "
                "device=%s dtype=%s | tokens=%d alpha=%s tokens/s=%.1f speedup=%s",
                outcome, label, request.target, request.draft, request.k, s.temperature, s.top_k, s.top_p,
                request.max_new_tokens, request.seed, request.chat, request.device, request.dtype,
                analysis.emitted, _fmt(analysis.alpha, ".3f", "n/a"), analysis.tokens_per_s,
                _fmt(analysis.speedup, ".2f", "n/a"))


def _stream(run, target, request: RunRequest, baseline, label: str, baselines: dict,
            max_run_s: float | None = None):
    """Run the speculative generation, yielding the page's outputs: tokens often, charts and the
    summary about once a second, and everything at the end. With ``max_run_s`` (public mode) a
    run whose generation time passes it stops there: its tokens stay on screen, the status says
    so, and no error is raised."""
    eos = set(target.eos_token_ids)
    chunks: list[str] = []
    points: list[dict] = []
    last_chart = last_tokens = 0.0
    try:
        for round_ in run:
            generated_at = time.time()
            chunks.append(render_round(round_, eos))
            speedup = measured_speedup(run.tokens_per_s, baseline.tokens_per_s if baseline else None)
            if speedup is not None:
                points.append({"t": run.elapsed_s, "speedup": speedup})
            done = run.finish_reason is not None
            over = not done and max_run_s is not None and run.elapsed_s > max_run_s
            if done or over or time.perf_counter() - last_chart > CHART_INTERVAL_S:
                last_chart = last_tokens = time.perf_counter()
                analysis = run.analysis(baseline)
                if done:
                    status = f"**Done** ({run.finish_reason}) · {label}"
                elif over:
                    status = (f"**Stopped** at the public time limit of {max_run_s:g} s · {label} · "
                              f"{len(run.tokens)}/{request.max_new_tokens} tokens")
                else:
                    status = f"Generating · {label} · {len(run.tokens)}/{request.max_new_tokens} tokens"
                if done or over:
                    _log_run(request, label, analysis, run.finish_reason or "time-limit")
                yield (wrap_output("".join(chunks), done or over, generated_at), summary_markdown(analysis, status),
                       *_figures(run, analysis, points), baselines)
                if over:
                    break
            elif time.perf_counter() - last_tokens > TOKEN_INTERVAL_S:
                last_tokens = time.perf_counter()
                yield wrap_output("".join(chunks), generated_at=generated_at), *[gr.skip()] * 4, baselines
    except (NonFiniteLogitsError, ValueError) as err:
        # Keep what was generated on screen; say why it stopped.
        analysis = run.analysis(baseline)
        yield (wrap_output("".join(chunks)), summary_markdown(analysis, f"**Stopped:** {_escape(str(err))}"),
               *_figures(run, analysis, points), baselines)
        raise gr.Error(str(err)) from None


@gpu
def run_demo(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k, top_p,
             max_new_tokens, seed, chat, device, dtype, baselines, progress=gr.Progress(), *,
             public: bool | None = None):
    """Stream a speculative run: (tokens HTML, summary, α chart, tokens/pass chart, speedup chart, state).

    ``public``: public mode (bound by build_demo; None reads the module's PUBLIC)."""
    public = _is_public(public)
    request = _request(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k,
                       top_p, max_new_tokens, seed, chat, device, dtype, public=public)
    baselines = baselines if isinstance(baselines, dict) else {}
    target, drafter = _load(request, progress)
    prompt_ids = _encode(target, request)
    empty = (charts.alpha_figure([]), charts.tokens_per_pass_figure([], request.k, None),
             charts.speedup_figure([], None))
    label = f"{target.name} ← {drafter.name}" if drafter else f"{target.name}, plain decoding"
    yield wrap_output(""), f"Warming up {label}…", *empty, baselines
    try:
        steps = _measure_baseline(target, drafter, prompt_ids, request, baselines)
        while True:
            try:
                line = next(steps)
            except StopIteration as finished:
                baseline, baselines = finished.value
                break
            yield wrap_output(""), line, *[gr.skip()] * 3, baselines
    except (NonFiniteLogitsError, ContextLengthError, ValueError) as err:
        raise gr.Error(str(err)) from None
    run = make_generation(target, drafter, prompt_ids, request.k, request.sampling, request.max_new_tokens,
                          request.seed)
    yield from _stream(run, target, request, baseline, label, baselines,
                       max_run_s=PUBLIC_POLICY.max_run_s if public else None)


@gpu
def run_lossless(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k, top_p,
                 seed, chat, device, dtype, n_draws, progress=gr.Progress(), *, public: bool | None = None):
    """The "Is it lossless?" panel: first-token histograms, speculative vs direct, against p_target.

    ``public``: public mode (bound by build_demo; None reads the module's PUBLIC): caps the draws."""
    public = _is_public(public)
    request = _request(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k,
                       top_p, 1, seed, chat, device, dtype, public=public)
    try:
        n_draws = to_int("draws", n_draws, 100, PUBLIC_POLICY.max_draws if public else 100_000)
    except RequestError as err:
        raise gr.Error(_sentence(str(err))) from None
    if request.plain:
        raise gr.Error("Pick a drafter: with plain decoding there is nothing to compare.")
    target, drafter = _load(request, progress)
    prompt_ids = _encode(target, request)
    progress(0.5, desc=f"Drawing {n_draws} first tokens each way…")
    t0 = time.perf_counter()
    try:
        report = first_token_experiment(target.model, drafter, prompt_ids, request.sampling, n=n_draws,
                                        seed=request.seed, vocab_size=drafter.vocab_size)
    except (NonFiniteLogitsError, ValueError) as err:
        raise gr.Error(str(err)) from None
    labels = [repr(target.decode([t])) if t >= 0 else "(all other tokens)" for t in report.token_ids]
    fig = charts.lossless_figure(labels, report.p_target, report.freq_speculative, report.freq_direct)
    text = (
        f"**{report.n} draws each** in {time.perf_counter() - t0:.1f} s, draft: {report.draft_label} "
        f"(its token was accepted in {report.acceptance_rate:.0%} of draws).\n\n"
        f"| | total-variation distance to p_target | chi-square p-value |\n|---|---|---|\n"
        f"| speculative sampling | {report.tv_speculative:.4f} | {report.p_value_speculative:.3f} |\n"
        f"| direct target sampling | {report.tv_direct:.4f} | {report.p_value_direct:.3f} |\n\n"
        "How to read it: if speculative sampling is exact, its distance to p_target is about as small as "
        "direct sampling's (both are only sampling noise, shrinking like 1/√N), and its p-value is not tiny "
        "(below 0.01 in most repeats would mean the two distributions differ)."
    )
    return fig, text


def apply_preset(name: str):
    p = PRESETS[name]
    return (gr.update(value=p["target"]), gr.update(value=p["drafter"]),
            gr.update(value=p["draft_model"], visible=p["drafter"] == "model"), gr.update(value=p["chat"]),
            DRAFTER_NOTES[p["drafter"]])


def on_drafter_change(kind: str):
    return (gr.update(visible=kind == "model"), gr.update(visible=kind == "early-exit"), DRAFTER_NOTES[kind])


HOW_IT_WORKS = """
**Speculative sampling** (Chen et al. 2023; Leviathan et al. 2023). Decoding one token from a language model
costs one full forward pass, and that pass costs about the same for 1 token as for a handful: the weights are
read once either way. So a cheap **drafter** guesses the next **K** tokens (the lookahead), and the expensive
**target** checks all of them in **one verify pass**, which gives its own distribution p_target at every
drafted position.

Walking left to right, draft token x is **accepted** with probability min(1, p_target(x) / p_draft(x)). At the
first rejection the rest of the block is thrown away and one token is **resampled** from the **residual
distribution** normalize(max(0, p_target − p_draft)). If all K survive, the target's distribution after them is
already computed, so one **bonus** token is sampled for free. Accepting with min(p_draft, p_target) and topping
up with exactly the missing mass max(0, p_target − p_draft) makes every emitted token distributed exactly as the
target alone would produce it: the drafter changes the speed, never the text's distribution.

**The figures.** Two acceptance figures, and they differ: the *acceptance rate* is accepted ÷ proposed draft
tokens (how much of the drafting reached the output); the *per-token α* is accepted ÷ *tested* drafts (a round
stops testing at its first rejection, so the drafts after it were never tested). The closed forms use the
per-token α. *Tokens per target pass* is how many tokens each verify pass produced (1 to K+1); if every draft
token were accepted independently with probability α it would follow the drawn theoretical distribution, with
mean (1 − α^(K+1)) / (1 − α). *Speedup* divides the speculative run's tokens/s by the tokens/s of plain decoding of
the same target on the same prompt and settings, timed here just before; the dashed line is the theory
(1 − α^(K+1)) / ((1 − α)(K·c + v)) with c = one draft step ÷ one plain step and v = one verify pass ÷ one plain
step, both measured. On a CPU with a 135M target a draft model is rarely cheap enough; prompt lookup is, on prompts
that copy text.
"""


def build_demo(public: bool = PUBLIC) -> gr.Blocks:
    """The whole UI (no model is loaded until Run is pressed).

    ``public`` (default: ``SPECVIZ_PUBLIC``, read at import): public mode. The model fields are
    read-only (only the presets run), the Device accordion is hidden, the sliders stop at the
    public caps, and the callbacks get ``public=True`` bound, so /run and /lossless enforce the
    same limits as the page."""
    limits = PUBLIC_POLICY.limits if public else DEFAULT_LIMITS
    with gr.Blocks(title="specviz — speculative sampling, live") as demo:
        baselines = gr.State({})
        gr.Markdown(
            "# specviz — speculative sampling, live\n"
            "A drafter proposes **K** tokens, the target verifies them in **one** forward pass, and the output is "
            "distributed exactly as the target's own. Every token below is coloured by how it was produced."
        )
        if public:
            gr.Markdown(f"*Public demo: pick a model pair from the presets; runs are capped at "
                        f"{limits.max_new_tokens} new tokens, K ≤ {limits.max_k} and "
                        f"{PUBLIC_POLICY.max_run_s:g} s. Run it locally for any model.*")
        with gr.Row():
            with gr.Column(scale=1, min_width=340):
                preset = gr.Dropdown(list(PRESETS), value=DEFAULT_PRESET, label="Model pair")
                target_id = gr.Textbox(PRESETS[DEFAULT_PRESET]["target"], label="Target model", interactive=not public,
                                       info="Set by the model pair above" if public else
                                       "Offline name (smollm2-135m-instruct, gemma-3-270m), hub id or local directory")
                drafter_kind = gr.Dropdown(DRAFTERS, value="ngram", label="Drafter")
                draft_model = gr.Textbox("", label="Draft model", visible=False, interactive=not public,
                                         info="Set by the model pair above" if public else
                                         "Hub id or local directory; must share the target's tokenizer")
                early_exit_layers = gr.Slider(1, 16, value=4, step=1, label="Early-exit draft: first N layers",
                                              visible=False)
                drafter_note = gr.Markdown(DRAFTER_NOTES["ngram"])
                prompt = gr.Textbox(EXAMPLES[0][0], label="Prompt", lines=6, elem_id="sv-prompt")
                chat = gr.Checkbox(True, label="Chat prompt (apply the target's chat template)")
                with gr.Row():
                    k = gr.Slider(1, limits.max_k, value=4, step=1, label="Lookahead K")
                    temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)")
                with gr.Row():
                    top_k = gr.Number(0, precision=0, minimum=0, label="Top-k (0 = off)")
                    top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
                with gr.Row():
                    max_new_tokens = gr.Slider(1, min(512, limits.max_new_tokens), value=96, step=1,
                                               label="Max new tokens", elem_id="sv-max-new")
                    seed = gr.Number(0, precision=0, minimum=0, label="Seed")
                with gr.Accordion("Device", open=False, visible=not public):
                    device = gr.Dropdown(["auto", "cpu", "cuda"], value="auto", label="Device")
                    dtype = gr.Dropdown(["auto", "float32", "bfloat16", "float16"], value="auto", label="Dtype",
                                        info="auto: bf16 on GPUs and CPUs that run it natively, else fp32")
                with gr.Row():
                    run_btn = gr.Button("Run", variant="primary")
                    stop_btn = gr.Button("Stop", variant="stop")
                gr.Examples(EXAMPLES, [prompt, chat], label="Example prompts", example_labels=EXAMPLE_LABELS)
            with gr.Column(scale=2):
                tokens_html = gr.HTML(wrap_output(""), js_on_load=None, elem_id="sv-tokens")
                summary = gr.Markdown("Press **Run**.", elem_id="sv-summary", elem_classes=["sv-status"])
        with gr.Row():
            alpha_plot = gr.Plot(charts.alpha_figure([]), label="Acceptance rate α", show_label=False, elem_id="sv-alpha")
            tpp_plot = gr.Plot(charts.tokens_per_pass_figure([], 4, None), label="Tokens per target pass", show_label=False, elem_id="sv-tpp")
            speedup_plot = gr.Plot(charts.speedup_figure([], None), label="Speedup vs plain decoding",
                                   show_label=False, elem_id="sv-speedup")
        with gr.Accordion("Is it lossless?", open=False):
            gr.Markdown("Draws the **first token** many times for the current prompt and settings, with speculative "
                        "sampling and directly from the target, reusing one draft and one target forward pass "
                        "(only the random draws differ), and compares both histograms with p_target.")
            with gr.Row():
                n_draws = gr.Slider(500, PUBLIC_POLICY.max_draws if public else 20000, value=4000, step=500,
                                    label="Draws of each kind")
                lossless_btn = gr.Button("Run the check")
            lossless_plot = gr.Plot(label="First-token histograms", elem_id="sv-lossless")
            lossless_text = gr.Markdown()
        with gr.Accordion("How it works", open=False):
            gr.Markdown(HOW_IT_WORKS)

        preset.change(apply_preset, preset, [target_id, drafter_kind, draft_model, chat, drafter_note])
        drafter_kind.change(on_drafter_change, drafter_kind, [draft_model, early_exit_layers, drafter_note])
        inputs = [prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k, top_p,
                  max_new_tokens, seed, chat, device, dtype]
        run_event = run_btn.click(functools.partial(run_demo, public=public), inputs + [baselines],
                                  [tokens_html, summary, alpha_plot, tpp_plot, speedup_plot, baselines],
                                  api_name="run", concurrency_limit=1,
                                  # Raw values reach the callback, which validates them itself: a
                                  # component's own preprocessing would answer a bad API value with
                                  # gradio's generic error instead of the setting's message.
                                  preprocess=False)
        stop_btn.click(None, cancels=[run_event])
        lossless_btn.click(functools.partial(run_lossless, public=public),
                           [prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k,
                            top_p, seed, chat, device, dtype, n_draws],
                           [lossless_plot, lossless_text], api_name="lossless", concurrency_limit=1,
                           preprocess=False)
    return demo


demo = build_demo()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # First start only: convert the default offline model once, logging its progress (later
    # starts find it cached).
    models.prepare_offline(PRESETS[DEFAULT_PRESET]["target"])
    demo.queue().launch(css=CSS)
