"""specviz — watch speculative sampling happen on a real language model.

The Gradio UI. This is the only module that imports gradio; everything it shows comes from the
``specviz`` engine (models, drafters, the speculative loop, traces, theory and charts).

Run ``python app.py`` and open the printed URL. The first start prepares the offline models
(a minute, with progress in the terminal); later starts take seconds.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
import time

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
import torch  # noqa: E402

from specviz import charts, models  # noqa: E402
from specviz.analysis import PlainBaseline, RunAnalysis, analyse, health_notes, running_speedup  # noqa: E402
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
from specviz.runner import load_pair, make_generation, plain_baseline, saved_trace, warm_up  # noqa: E402
from specviz.sampling import NonFiniteLogitsError  # noqa: E402
from specviz.trace import rounds_csv, trace_from_dict, trace_to_dict  # noqa: E402
from specviz.view import (  # noqa: E402
    CSS,
    _escape,
    _fmt,
    inspector_markdown,
    render_round,
    render_rounds,
    summary_markdown,
    wrap_output,
)


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


def public_models(cuda: bool) -> tuple[frozenset, frozenset]:
    """(targets, draft models) public mode lets a visitor run: the offline presets always, the hub
    presets only on a CUDA machine (on a CPU Space they would download gigabytes for runs that
    cannot finish in the time limit)."""
    allowed = [p for p in PRESETS.values() if cuda or p["target"] in models.OFFLINE_MODELS]
    return (frozenset(p["target"] for p in allowed),
            frozenset(p["draft_model"] for p in allowed if p["drafter"] == "model"))


PUBLIC_TARGETS, PUBLIC_DRAFTS = public_models(cuda=torch.cuda.is_available())

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


#: Visitors waiting in the queue at most; generations run one at a time (``concurrency_id``
#: "generation": one model computation saturates a small CPU or one GPU), model-free views at once.
QUEUE_SIZE = 32
CHART_INTERVAL_S = 1.0  # the browser lags behind if Plotly redraws on every round
# Token updates resend the whole panel (tens of kB for a few hundred tokens with their hover
# text); coalescing rounds that finish within this interval keeps the browser and the server's
# event loop from competing with generation on a small CPU. The final update is always sent.
TOKEN_INTERVAL_S = 0.25


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


def _new_state(request: RunRequest, target, drafter, label: str) -> dict:
    """Per-visitor run state (plain data in a gr.State): what the stream, the inspector, the replay
    and the export share. ``html`` caches each round's rendered tokens."""
    low_precision = str(target.dtype) in ("torch.bfloat16", "torch.float16")
    return {"rounds": [], "html": [], "k": request.k if drafter is not None else 0, "prefill_ms": 0.0,
            "baseline": None, "eos": sorted(target.eos_token_ids), "label": label,
            "lookup": request.draft == "ngram", "low_precision_greedy": low_precision and request.sampling.greedy,
            "meta": {}}


def _view(state: dict, upto: int | None, status: str, done: bool, generated_at: float | None = None) -> tuple:
    """(tokens HTML, summary, the five charts) of a run as it stood after ``upto`` rounds (None: all)."""
    rounds = state["rounds"][:upto]
    baseline = state["baseline"]
    analysis = analyse(rounds, state["k"], rounds[-1].elapsed_s if rounds else 0.0, state["prefill_ms"], baseline)
    notes = health_notes(analysis, lookup=state["lookup"], low_precision_greedy=state["low_precision_greedy"])
    figures = (charts.alpha_figure(rounds), charts.tokens_per_pass_figure(rounds, state["k"], analysis.alpha),
               charts.speedup_figure(running_speedup(rounds, baseline), analysis.theoretical_speedup),
               charts.per_position_figure(analysis), charts.time_split_figure(analysis))
    html_body = wrap_output("".join(state["html"][: len(rounds)]), done, generated_at)
    return (html_body, summary_markdown(analysis, status, notes), *figures)


def _waiting_view(k: int) -> tuple:
    return (charts.alpha_figure([]), charts.tokens_per_pass_figure([], k, None), charts.speedup_figure([], None),
            charts.per_position_figure(None), charts.time_split_figure(None))


SKIP_VIEW = 7  # outputs of _view


def _stream(run, request: RunRequest, state: dict, baselines: dict, trace_of, max_run_s: float | None = None):
    """Run the speculative generation, yielding the page's outputs: tokens often, charts and the
    summary about once a second, and everything at the end. Every round yields (skipped outputs
    in between), so Stop ends the run within one round. With ``max_run_s`` (public mode) a run
    whose generation time passes it stops there: its tokens stay on screen, the status says so,
    and no error is raised."""
    eos = set(state["eos"])
    last_chart = last_tokens = 0.0
    label = state["label"]
    try:
        for round_ in run:
            generated_at = time.time()
            state["rounds"].append(round_)
            state["html"].append(render_round(round_, eos))
            state["prefill_ms"] = run.prefill_ms
            done = run.finish_reason is not None
            over = not done and max_run_s is not None and run.elapsed_s > max_run_s
            if done or over or time.perf_counter() - last_chart > CHART_INTERVAL_S:
                last_chart = last_tokens = time.perf_counter()
                state["meta"] = trace_of(run)
                if done:
                    status = f"**Done** ({run.finish_reason}) · {label}"
                elif over:
                    status = (f"**Stopped** at the public time limit of {max_run_s:g} s · {label} · "
                              f"{len(run.tokens)}/{request.max_new_tokens} tokens")
                else:
                    status = f"Generating · {label} · {len(run.tokens)}/{request.max_new_tokens} tokens"
                view = _view(state, None, status, done or over, generated_at)
                end = done or over
                if end:
                    _log_run(request, label, run.analysis(state["baseline"]), run.finish_reason or "time-limit")
                slider = gr.update(maximum=len(state["rounds"]), value=len(state["rounds"])) if end else gr.skip()
                yield (*view, baselines, state, slider)
                if over:
                    break
            elif time.perf_counter() - last_tokens > TOKEN_INTERVAL_S:
                last_tokens = time.perf_counter()
                body = wrap_output("".join(state["html"]), generated_at=generated_at)
                yield body, *[gr.skip()] * (SKIP_VIEW - 1), baselines, state, gr.skip()
            else:
                yield *[gr.skip()] * SKIP_VIEW, baselines, state, gr.skip()
    except (NonFiniteLogitsError, ValueError) as err:
        # Keep what was generated on screen; say why it stopped.
        view = _view(state, None, f"**Stopped:** {_escape(str(err))}", True)
        yield (*view, baselines, state, gr.update(maximum=len(state["rounds"]), value=len(state["rounds"])))
        raise gr.Error(str(err)) from None


@gpu
def run_demo(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k, top_p,
             max_new_tokens, seed, chat, device, dtype, baselines, progress=gr.Progress(), *,
             public: bool | None = None):
    """Stream a speculative run: (tokens HTML, summary, five charts, baselines, run state, replay slider).

    ``public``: public mode (bound by build_demo; None reads the module's PUBLIC)."""
    public = _is_public(public)
    request = _request(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k,
                       top_p, max_new_tokens, seed, chat, device, dtype, public=public)
    baselines = baselines if isinstance(baselines, dict) else {}
    target, drafter = _load(request, progress)
    prompt_ids = _encode(target, request)
    label = f"{target.name} ← {drafter.name}" if drafter else f"{target.name}, plain decoding"
    state = _new_state(request, target, drafter, label)
    yield wrap_output(""), f"Warming up {label}…", *_waiting_view(request.k), baselines, state, gr.skip()
    try:
        steps = _measure_baseline(target, drafter, prompt_ids, request, baselines)
        while True:
            try:
                line = next(steps)
            except StopIteration as finished:
                state["baseline"], baselines = finished.value
                break
            yield wrap_output(""), line, *[gr.skip()] * (SKIP_VIEW - 2), baselines, state, gr.skip()
    except (NonFiniteLogitsError, ContextLengthError, ValueError) as err:
        raise gr.Error(str(err)) from None
    run = make_generation(target, drafter, prompt_ids, request.k, request.sampling, request.max_new_tokens,
                          request.seed)
    trace_of = functools.partial(_trace_meta, request=request, target=target, drafter=drafter,
                                 baseline=state["baseline"])
    yield from _stream(run, request, state, baselines, trace_of,
                       max_run_s=PUBLIC_POLICY.max_run_s if public else None)


def _trace_meta(run, request, target, drafter, baseline) -> dict:
    meta = saved_trace(run, request, target, drafter, baseline)
    del meta["rounds"]
    return meta


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


# ----------------------------------------------------------------------------- inspector, replay, export
INSPECTOR_HINT = ("Click any token above (or a struck-through rejected draft) to see the decision behind it: the "
                  "drafted token, p_draft, p_target, min(1, p_target/p_draft), the uniform draw and the verdict, "
                  "with the distributions it came from.")


def inspect_token(state, evt: gr.EventData):
    """The inspector for the clicked token (``evt`` carries its round and slot from the page's JS)."""
    try:
        r, slot = int(getattr(evt, "round")), int(getattr(evt, "slot"))
        round_ = state["rounds"][r]
        return inspector_markdown(round_, slot), charts.inspector_figure(round_, slot)
    except (AttributeError, TypeError, ValueError, IndexError, KeyError):
        return INSPECTOR_HINT, gr.skip()


def replay(upto, state):
    """The run as it stood after pass ``upto``: tokens, summary and charts (no model runs)."""
    if not isinstance(state, dict) or not state.get("rounds"):
        raise gr.Error("Nothing to replay yet: run something or load a saved trace.")
    try:
        upto = to_int("pass", upto, 0, len(state["rounds"]))
    except RequestError as err:
        raise gr.Error(_sentence(str(err))) from None
    n = len(state["rounds"])
    status = f"**Replay** · after pass {upto} of {n} · {state['label']}"
    return _view(state, upto, status, upto == n)


def step_replay(upto, state, delta: int):
    """The replay slider moved one pass back or forward (clamped to the run)."""
    n = len(state["rounds"]) if isinstance(state, dict) else 0
    return gr.update(value=min(max(int(upto or 0) + delta, 0), n))


def export_run(state):
    """The run's trace (JSON), its rounds (CSV) and its charts (one self-contained HTML file)."""
    if not isinstance(state, dict) or not state.get("rounds"):
        raise gr.Error("Nothing to export yet: run something first.")
    folder = tempfile.mkdtemp(prefix="specviz-export-")
    trace_path = os.path.join(folder, "specviz-trace.json")
    with open(trace_path, "w", encoding="utf-8") as f:
        json.dump(trace_to_dict(state["rounds"], **state["meta"]), f, ensure_ascii=False)
    csv_path = os.path.join(folder, "specviz-rounds.csv")
    with open(csv_path, "w", encoding="utf-8", newline="") as f:
        f.write(rounds_csv(state["rounds"]))
    charts_path = os.path.join(folder, "specviz-charts.html")
    figures = _view(state, None, "", True)[2:]
    with open(charts_path, "w", encoding="utf-8") as f:
        f.write("<html><head><meta charset='utf-8'><title>specviz charts</title></head><body>")
        for i, fig in enumerate(figures):
            f.write(fig.to_html(full_html=False, include_plotlyjs=i == 0))
        f.write("</body></html>")
    return [trace_path, csv_path, charts_path]


def state_from_trace(data: dict) -> dict:
    """A run state (for the inspector and the replay) from a saved trace's data.

    Raises:
        ValueError: if it is not a trace this version can read (the message says why).
    """
    rounds, meta = trace_from_dict(data)
    eos = set(meta.get("eos_token_ids") or [])
    base = meta.get("baseline")
    settings = meta.get("settings") or {}
    label = f"{meta.get('target', '?')} ← {meta.get('drafter') or 'plain decoding'} (saved trace)"
    return {"rounds": rounds, "html": [render_round(r, eos) for r in rounds], "k": int(meta.get("k") or 0),
            "prefill_ms": float(meta.get("prefill_ms") or 0.0),
            "baseline": PlainBaseline(**base) if base else None, "eos": sorted(eos), "label": label,
            "lookup": settings.get("draft") == "ngram",
            "low_precision_greedy": meta.get("dtype") in ("bfloat16", "float16") and not settings.get("temperature"),
            "meta": meta}


def load_trace(path):
    """Load a saved trace (from the app's export or ``run --trace``) and show it at its last pass."""
    if not path:
        raise gr.Error("Choose a trace file (.json) first.")
    try:
        with open(path, encoding="utf-8") as f:
            state = state_from_trace(json.load(f))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise gr.Error(f"Could not read that file as JSON: {err}") from None
    except ValueError as err:
        raise gr.Error(_sentence(str(err))) from None
    n = len(state["rounds"])
    view = _view(state, None, f"**Loaded** a saved trace · {n} passes · {state['label']}", True)
    return (*view, state, gr.update(maximum=max(n, 1), value=n))


TOKENS_JS = """
element.addEventListener('click', (event) => {
  const token = event.target.closest('[data-r]');
  if (!token) return;
  trigger('click', {round: Number(token.dataset.r), slot: Number(token.dataset.i),
                    rejected: token.dataset.rej === '1'});
});
"""


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
                tokens_html = gr.HTML(wrap_output(""), js_on_load=TOKENS_JS, elem_id="sv-tokens")
                summary = gr.Markdown("Press **Run**.", elem_id="sv-summary", elem_classes=["sv-status"])
                with gr.Accordion("Token inspector: why was this token emitted?", open=True):
                    inspector_md = gr.Markdown(INSPECTOR_HINT, elem_id="sv-inspector")
                    inspector_plot = gr.Plot(label="Distributions behind the decision", show_label=False,
                                             elem_id="sv-inspector-plot")
        with gr.Row():
            alpha_plot = gr.Plot(charts.alpha_figure([]), label="Acceptance", show_label=False, elem_id="sv-alpha")
            tpp_plot = gr.Plot(charts.tokens_per_pass_figure([], 4, None), label="Tokens per target pass",
                               show_label=False, elem_id="sv-tpp")
            speedup_plot = gr.Plot(charts.speedup_figure([], None), label="Speedup vs plain decoding",
                                   show_label=False, elem_id="sv-speedup")
        with gr.Row():
            position_plot = gr.Plot(charts.per_position_figure(None), label="Acceptance by draft position",
                                    show_label=False, elem_id="sv-positions")
            time_plot = gr.Plot(charts.time_split_figure(None), label="Time per round", show_label=False,
                                elem_id="sv-time")
        with gr.Accordion("Replay, export and saved traces", open=False):
            gr.Markdown("Go back over the run pass by pass: tokens, summary and charts as they stood after pass r. "
                        "Export the run (trace JSON, rounds CSV, charts HTML), or load a saved trace (from here or "
                        "`python -m specviz run --trace FILE`) to replay it without the models.")
            with gr.Row():
                replay_back = gr.Button("◀ pass", size="sm", min_width=80)
                replay_slider = gr.Slider(0, 1, value=0, step=1, label="After pass", elem_id="sv-replay")
                replay_next = gr.Button("pass ▶", size="sm", min_width=80)
            with gr.Row():
                export_btn = gr.Button("Export this run", elem_id="sv-export")
                export_files = gr.File(label="Exported files", file_count="multiple", interactive=False,
                                       elem_id="sv-export-files")
                trace_file = gr.File(label="Load a saved trace (.json)", file_types=[".json"], type="filepath",
                                     elem_id="sv-load")
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
        run_state = gr.State({})
        view = [tokens_html, summary, alpha_plot, tpp_plot, speedup_plot, position_plot, time_plot]
        run_event = run_btn.click(functools.partial(run_demo, public=public), inputs + [baselines],
                                  view + [baselines, run_state, replay_slider],
                                  api_name="run", concurrency_id="generation", concurrency_limit=1,
                                  # Raw values reach the callback, which validates them itself: a
                                  # component's own preprocessing would answer a bad API value with
                                  # gradio's generic error instead of the setting's message.
                                  preprocess=False)
        stop_btn.click(None, cancels=[run_event])
        lossless_btn.click(functools.partial(run_lossless, public=public),
                           [prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k,
                            top_p, seed, chat, device, dtype, n_draws],
                           [lossless_plot, lossless_text], api_name="lossless", concurrency_id="generation",
                           concurrency_limit=1, preprocess=False)
        # Model-free views never wait behind a generation.
        free = dict(concurrency_limit=None, show_progress="hidden")
        tokens_html.click(inspect_token, run_state, [inspector_md, inspector_plot], api_name=False, **free)
        replay_slider.release(replay, [replay_slider, run_state], view, api_name="replay", preprocess=False, **free)
        for button, delta in ((replay_back, -1), (replay_next, 1)):
            button.click(functools.partial(step_replay, delta=delta), [replay_slider, run_state], replay_slider,
                         api_name=False, **free).then(replay, [replay_slider, run_state], view, api_name=False, **free)
        export_btn.click(export_run, run_state, export_files, api_name="export", **free)
        trace_file.upload(load_trace, trace_file, view + [run_state, replay_slider], api_name="load_trace", **free)
    return demo


demo = build_demo()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # First start only: convert the default offline model once, logging its progress (later
    # starts find it cached).
    models.prepare_offline(PRESETS[DEFAULT_PRESET]["target"])
    demo.queue(max_size=QUEUE_SIZE).launch(css=CSS)
