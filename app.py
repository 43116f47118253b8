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
from types import SimpleNamespace

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
import torch  # noqa: E402

from specviz import charts, models, playground, theory  # noqa: E402
from specviz.analysis import PlainBaseline, RunAnalysis, analyse, health_notes, running_speedup  # noqa: E402
from specviz.drafters import DRAFTER_KINDS  # noqa: E402
from specviz.engine import ContextLengthError  # noqa: E402
from specviz.lossless import first_token_experiment, lossless_notes  # noqa: E402
from specviz.request import (  # noqa: E402
    DEFAULT_LIMITS,
    RequestError,
    RunRequest,
    check_public_models,
    public_mode,
    public_policy,
    to_float,
    to_int,
    validate_request,
)
from specviz.runner import load_pair, make_generation, plain_baseline, saved_trace, warm_up  # noqa: E402
from specviz.sampling import NonFiniteLogitsError  # noqa: E402
from specviz.sweep import alpha_trend, sweep, sweep_requests, write_csv  # noqa: E402
from specviz.trace import rounds_csv, token_label, trace_from_dict, trace_to_dict  # noqa: E402
from specviz.view import (  # noqa: E402
    CSS,
    _escape,
    _fmt,
    inspector_markdown,
    legend_html,
    round_tree_html,
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
             max_new_tokens, seed, chat, device, dtype, public: bool = False, branches=1,
             tree_nodes=None) -> RunRequest:
    """The page's (or an API caller's) values as a validated request, or a gr.Error saying which is wrong.

    In public mode the tighter public limits apply and only the presets' models are allowed; this
    check comes before anything loads, so nothing is downloaded or read for a refused name."""
    try:
        request = validate_request(
            prompt=prompt, target=target_id, draft=_drafter_spec(drafter_kind, draft_model, early_exit_layers),
            k=k, temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed,
            chat=chat, device=device, dtype=dtype, limits=PUBLIC_POLICY.limits if public else DEFAULT_LIMITS,
            branches=1 if branches in (None, "") else branches,
            tree_nodes=None if tree_nodes in (None, "", 0, 0.0, "0") else tree_nodes)
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
    warm_up(target, drafter, prompt_ids, request.k, request.sampling, once=True, branches=request.branches,
            tree_nodes=request.tree_nodes)
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
    notes = state.get("notes", []) + health_notes(analysis, lookup=state["lookup"],
                                                  low_precision_greedy=state["low_precision_greedy"])
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
            state["notes"] = list(run.notes)
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
             max_new_tokens, seed, chat, device, dtype, branches=1, tree_nodes=0, baselines=None,
             progress=gr.Progress(), *, public: bool | None = None):
    """Stream a speculative run: (tokens HTML, summary, five charts, baselines, run state, replay slider).

    ``branches``/``tree_nodes``: the draft tree's B and N (B = 1 drafts chains; N = 0 is the default
    budget). ``public``: public mode (bound by build_demo; None reads the module's PUBLIC)."""
    public = _is_public(public)
    request = _request(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k,
                       top_p, max_new_tokens, seed, chat, device, dtype, public=public, branches=branches,
                       tree_nodes=tree_nodes)
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
                          request.seed, branches=request.branches, tree_nodes=request.tree_nodes)
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
                 seed, chat, device, dtype, n_draws, control=False, progress=gr.Progress(), *,
                 public: bool | None = None):
    """The "Is it lossless?" panel: first-token histograms, speculative vs direct, against p_target.

    ``temperature`` is the check's own (the page sends its "Check's temperature", default 1);
    ``control`` true runs the broken accept-every-draft method, which the test should reject.
    ``public``: public mode (bound by build_demo; None reads the module's PUBLIC): caps the draws."""
    public = _is_public(public)
    request = _request(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k,
                       top_p, 1, seed, chat, device, dtype, public=public)
    try:
        n_draws = to_int("draws", n_draws, 100, PUBLIC_POLICY.max_draws if public else 100_000)
        control = "accept_all" if _flag_value("control", control) else "none"
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
                                        seed=request.seed, vocab_size=drafter.vocab_size, control=control)
    except (NonFiniteLogitsError, ValueError) as err:
        hint = (" Pick the int8 or early-exit self-draft, whose first token always has a draft distribution."
                if "proposes nothing" in str(err) else "")
        raise gr.Error(_sentence(str(err)) + hint) from None
    labels = [token_label(target.decode([t]) if t >= 0 else "", t) for t in report.token_ids]
    fig = charts.lossless_figure(labels, report.p_target, report.freq_speculative, report.freq_direct)
    text = (
        f"**{report.n} draws each** in {time.perf_counter() - t0:.1f} s at temperature "
        f"{request.sampling.temperature:g}, draft: {report.draft_label} "
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
    notes = lossless_notes(report, request.sampling.temperature, lookup=request.draft == "ngram")
    if notes:
        text += "\n\n" + "\n\n".join(f"**Note.** {note}" for note in notes)
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
        return inspector_markdown(round_, slot), charts.inspector_figure(round_, slot), round_tree_html(round_)
    except (AttributeError, TypeError, ValueError, IndexError, KeyError):
        return INSPECTOR_HINT, gr.skip(), gr.skip()


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


def last_run_figures(state) -> dict | None:
    """The finished run's figures (``RunAnalysis.scalars()``), for the Playground's "load" button."""
    if not isinstance(state, dict) or not state.get("rounds"):
        return None
    rounds = state["rounds"]
    return analyse(rounds, state["k"], rounds[-1].elapsed_s, state["prefill_ms"], state["baseline"]).scalars()


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


def _flag_value(name: str, value) -> bool:
    """A checkbox value as sent by the page or an API caller (true/false, 1/0, None = false)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, (int, str)) and str(value).strip().lower() in ("1", "0", "true", "false"):
        return str(value).strip().lower() in ("1", "true")
    raise RequestError(f"{name} must be true or false, got {value!r}")


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
    """The whole UI (no model is loaded until Run is pressed): the Run tab (its settings, its
    outputs, the lossless check, then its events) and the teaching tabs (``_teach_tabs``).

    ``public`` (default: ``SPECVIZ_PUBLIC``, read at import): public mode. The model fields are
    read-only (only the presets run), the Device accordion is hidden, the sliders stop at the
    public caps, and the callbacks get ``public=True`` bound, so /run and /lossless enforce the
    same limits as the page."""
    limits = PUBLIC_POLICY.limits if public else DEFAULT_LIMITS
    ui = SimpleNamespace()  # the Run tab's components, by name, for the event wiring
    with gr.Blocks(title="specviz — speculative sampling, live") as demo:
        ui.baselines = gr.State({})
        gr.Markdown(
            "# specviz — speculative sampling, live\n"
            "A drafter proposes **K** tokens, the target verifies them in **one** forward pass, and the output is "
            "distributed exactly as the target's own. Every token below is coloured by how it was produced."
        )
        if public:
            gr.Markdown(f"*Public demo: pick a model pair from the presets; runs are capped at "
                        f"{limits.max_new_tokens} new tokens, K ≤ {limits.max_k} and "
                        f"{PUBLIC_POLICY.max_run_s:g} s. Run it locally for any model.*")
        run_tab = _open_run_tab()  # the Run tab: everything up to _teach_tabs goes in it
        with gr.Row():
            with gr.Column(scale=1, min_width=340):
                _run_settings(ui, limits, public)
            with gr.Column(scale=2):
                _run_outputs(ui)
        _run_charts_and_replay(ui)
        _lossless_panel(ui, public)
        with gr.Accordion("How it works", open=False):
            gr.Markdown(HOW_IT_WORKS)
        _wire_run_tab(ui, run_tab, public)
    return demo


#: The Run tab's controls the teaching tabs read (their lessons set them, their experiments use them).
TEACH_INPUTS = ("prompt", "target_id", "drafter_kind", "draft_model", "early_exit_layers", "k", "temperature",
                "top_k", "top_p", "seed", "chat", "device", "dtype", "max_new_tokens", "check_temperature", "control")


def _run_settings(ui, limits, public: bool) -> None:
    """The Run tab's left column: model pair, drafter, prompt and sampling settings, Run and Stop."""
    ui.preset = gr.Dropdown(list(PRESETS), value=DEFAULT_PRESET, label="Model pair")
    ui.target_id = gr.Textbox(PRESETS[DEFAULT_PRESET]["target"], label="Target model", interactive=not public,
                              info="Set by the model pair above" if public else
                              "Offline name (smollm2-135m-instruct, gemma-3-270m), hub id or local directory")
    ui.drafter_kind = gr.Dropdown(DRAFTERS, value="ngram", label="Drafter")
    ui.draft_model = gr.Textbox("", label="Draft model", visible=False, interactive=not public,
                                info="Set by the model pair above" if public else
                                "Hub id or local directory; must share the target's tokenizer")
    ui.early_exit_layers = gr.Slider(1, 16, value=4, step=1, label="Early-exit draft: first N layers",
                                     visible=False)
    ui.drafter_note = gr.Markdown(DRAFTER_NOTES["ngram"])
    ui.prompt = gr.Textbox(EXAMPLES[0][0], label="Prompt", lines=6, elem_id="sv-prompt")
    ui.chat = gr.Checkbox(True, label="Chat prompt (apply the target's chat template)")
    with gr.Row():
        ui.k = gr.Slider(1, limits.max_k, value=4, step=1, label="Lookahead K")
        ui.temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)")
    with gr.Row():
        ui.branches = gr.Slider(1, limits.max_branches, value=1, step=1, label="Tree branches B (1 = chain)",
                                info="Up to B candidate continuations per node, verified in one pass",
                                elem_id="sv-branches")
        ui.tree_nodes = gr.Number(0, precision=0, minimum=0, label="Tree node budget N (0 = auto)",
                                  elem_id="sv-tree-nodes")
    with gr.Row():
        ui.top_k = gr.Number(0, precision=0, minimum=0, label="Top-k (0 = off)")
        ui.top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
    with gr.Row():
        ui.max_new_tokens = gr.Slider(1, min(512, limits.max_new_tokens), value=96, step=1,
                                      label="Max new tokens", elem_id="sv-max-new")
        ui.seed = gr.Number(0, precision=0, minimum=0, label="Seed")
    with gr.Accordion("Device", open=False, visible=not public):
        ui.device = gr.Dropdown(["auto", "cpu", "cuda"], value="auto", label="Device")
        ui.dtype = gr.Dropdown(["auto", "float32", "bfloat16", "float16"], value="auto", label="Dtype",
                               info="auto: bf16 on GPUs and CPUs that run it natively, else fp32")
    with gr.Row():
        ui.run_btn = gr.Button("Run", variant="primary")
        ui.stop_btn = gr.Button("Stop", variant="stop")
    gr.Examples(EXAMPLES, [ui.prompt, ui.chat], label="Example prompts", example_labels=EXAMPLE_LABELS)


def _run_outputs(ui) -> None:
    """The Run tab's right column: the token stream, the summary and the token inspector."""
    ui.tokens_html = gr.HTML(wrap_output(""), js_on_load=TOKENS_JS, elem_id="sv-tokens")
    ui.summary = gr.Markdown("Press **Run**.", elem_id="sv-summary", elem_classes=["sv-status"])
    with gr.Accordion("Token inspector: why was this token emitted?", open=True):
        ui.inspector_md = gr.Markdown(INSPECTOR_HINT, elem_id="sv-inspector")
        ui.inspector_plot = gr.Plot(label="Distributions behind the decision", show_label=False,
                                    elem_id="sv-inspector-plot")
        ui.inspector_tree = gr.HTML("", elem_id="sv-inspector-tree")


def _run_charts_and_replay(ui) -> None:
    """The Run tab's five charts, then replay, export and saved traces."""
    with gr.Row():
        ui.alpha_plot = gr.Plot(charts.alpha_figure([]), label="Acceptance", show_label=False, elem_id="sv-alpha")
        ui.tpp_plot = gr.Plot(charts.tokens_per_pass_figure([], 4, None), label="Tokens per target pass",
                              show_label=False, elem_id="sv-tpp")
        ui.speedup_plot = gr.Plot(charts.speedup_figure([], None), label="Speedup vs plain decoding",
                                  show_label=False, elem_id="sv-speedup")
    with gr.Row():
        ui.position_plot = gr.Plot(charts.per_position_figure(None), label="Acceptance by draft position",
                                   show_label=False, elem_id="sv-positions")
        ui.time_plot = gr.Plot(charts.time_split_figure(None), label="Time per round", show_label=False,
                               elem_id="sv-time")
    with gr.Accordion("Replay, export and saved traces", open=False):
        gr.Markdown("Go back over the run pass by pass: tokens, summary and charts as they stood after pass r. "
                    "Export the run (trace JSON, rounds CSV, charts HTML), or load a saved trace (from here or "
                    "`python -m specviz run --trace FILE`) to replay it without the models.")
        with gr.Row():
            ui.replay_back = gr.Button("◀ pass", size="sm", min_width=80)
            ui.replay_slider = gr.Slider(0, 1, value=0, step=1, label="After pass", elem_id="sv-replay")
            ui.replay_next = gr.Button("pass ▶", size="sm", min_width=80)
        with gr.Row():
            ui.export_btn = gr.Button("Export this run", elem_id="sv-export")
            ui.export_files = gr.File(label="Exported files", file_count="multiple", interactive=False,
                                      elem_id="sv-export-files")
            ui.trace_file = gr.File(label="Load a saved trace (.json)", file_types=[".json"], type="filepath",
                                    elem_id="sv-load")


def _lossless_panel(ui, public: bool) -> None:
    """The "Is it lossless?" accordion: the check's own temperature, draws and control case."""
    with gr.Accordion("Is it lossless?", open=False):
        gr.Markdown("Draws the **first token** many times for the current prompt and settings, with speculative "
                    "sampling and directly from the target, reusing one draft and one target forward pass "
                    "(only the random draws differ), and compares both histograms with p_target.")
        with gr.Row():
            ui.n_draws = gr.Slider(500, PUBLIC_POLICY.max_draws if public else 20000, value=4000, step=500,
                                   label="Draws of each kind")
            ui.check_temperature = gr.Slider(0.0, 2.0, value=1.0, step=0.05, label="Check's temperature",
                                             info="1 samples the model's own distribution; at 0 there is "
                                                  "nothing to sample", elem_id="sv-check-temperature")
            ui.control = gr.Checkbox(False, label="Control: accept every draft token (broken; should fail)",
                                     elem_id="sv-check-control")
            ui.lossless_btn = gr.Button("Run the check")
        gr.Markdown(LOSSLESS_FORMULA, latex_delimiters=LATEX)
        ui.lossless_plot = gr.Plot(label="First-token histograms", elem_id="sv-lossless")
        ui.lossless_text = gr.Markdown()


def _wire_run_tab(ui, run_tab, public: bool) -> None:
    """The Run tab's events: the generation (one queue slot), Stop, the lossless check, and the
    model-free views (inspector, replay, export, load), which never wait behind a generation."""
    ui.preset.change(apply_preset, ui.preset, [ui.target_id, ui.drafter_kind, ui.draft_model, ui.chat,
                                               ui.drafter_note])
    ui.drafter_kind.change(on_drafter_change, ui.drafter_kind, [ui.draft_model, ui.early_exit_layers, ui.drafter_note])
    inputs = [ui.prompt, ui.target_id, ui.drafter_kind, ui.draft_model, ui.early_exit_layers, ui.k, ui.temperature,
              ui.top_k, ui.top_p, ui.max_new_tokens, ui.seed, ui.chat, ui.device, ui.dtype]
    ui.run_state = gr.State({})
    view = [ui.tokens_html, ui.summary, ui.alpha_plot, ui.tpp_plot, ui.speedup_plot, ui.position_plot, ui.time_plot]
    run_event = ui.run_btn.click(functools.partial(run_demo, public=public),
                                 inputs + [ui.branches, ui.tree_nodes, ui.baselines],
                                 view + [ui.baselines, ui.run_state, ui.replay_slider],
                                 api_name="run", concurrency_id="generation", concurrency_limit=1,
                                 # Raw values reach the callback, which validates them itself: a
                                 # component's own preprocessing would answer a bad API value with
                                 # gradio's generic error instead of the setting's message.
                                 preprocess=False)
    ui.stop_btn.click(None, cancels=[run_event])
    ui.lossless_btn.click(functools.partial(run_lossless, public=public),
                          [ui.prompt, ui.target_id, ui.drafter_kind, ui.draft_model, ui.early_exit_layers, ui.k,
                           ui.check_temperature, ui.top_k, ui.top_p, ui.seed, ui.chat, ui.device, ui.dtype,
                           ui.n_draws, ui.control],
                          [ui.lossless_plot, ui.lossless_text], api_name="lossless", concurrency_id="generation",
                          concurrency_limit=1, preprocess=False)
    # Model-free views never wait behind a generation.
    free = dict(concurrency_limit=None, show_progress="hidden")
    ui.tokens_html.click(inspect_token, ui.run_state, [ui.inspector_md, ui.inspector_plot, ui.inspector_tree],
                         api_name=False, **free)
    ui.replay_slider.release(replay, [ui.replay_slider, ui.run_state], view, api_name="replay", preprocess=False, **free)
    for button, delta in ((ui.replay_back, -1), (ui.replay_next, 1)):
        button.click(functools.partial(step_replay, delta=delta), [ui.replay_slider, ui.run_state], ui.replay_slider,
                     api_name=False, **free).then(replay, [ui.replay_slider, ui.run_state], view, api_name=False, **free)
    ui.export_btn.click(export_run, ui.run_state, ui.export_files, api_name="export", **free)
    ui.trace_file.upload(load_trace, ui.trace_file, view + [ui.run_state, ui.replay_slider], api_name="load_trace",
                         **free)
    # last_analysis: the last real run's figures, for the Playground's "load" button; the Run
    # tab fills it when a run ends, the Experiments tab with its last row.
    last_analysis = _teach_tabs(run_tab, {name: getattr(ui, name) for name in TEACH_INPUTS}, public)
    run_event.then(last_run_figures, ui.run_state, last_analysis, api_name=False, **free)


# =============================================================================== teaching tabs
# Issue 10 ("Explore the method"): the Playground, Experiments, Drafters side by side, Lessons and
# The maths tabs. Everything here is appended after the Run page's code and hooked into
# build_demo with two lines (_open_run_tab at the top of the Run page, _teach_tabs at the end), so
# the Run page's own code is not re-indented. The library work lives in specviz.playground,
# specviz.sweep, specviz.lossless and specviz.charts; these are thin callbacks over it.

LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]
LOSSLESS_FORMULA = (r"Why it should pass: a token $x$ comes out accepted with probability "
                    r"$\min(p_\text{draft}(x), p_\text{target}(x))$ and resampled with probability "
                    r"$\max(0, p_\text{target}(x) - p_\text{draft}(x))$; the two sum to $p_\text{target}(x)$ "
                    r"(derivation in **The maths** tab). The control case skips the test, so its first token "
                    r"follows $p_\text{draft}$ and the check should fail.")
SWEEP_DEFAULTS = {"temperature": "0 0.3 0.7 1.0 1.5", "k": "1 2 3 4 6 8", "draft": "ngram int8 early-exit:4 none"}
SWEEP_LABELS = {"Temperature": "temperature", "Lookahead K": "k", "Drafter": "draft"}
FREE_TEXT_PROMPT = EXAMPLES[3][0]
PUBLIC_MAX_SETTINGS = 6  # a public experiment runs at most this many settings (each a run and a baseline)


class _RunTab:
    """The Tabs block and its open "Run" tab, entered by :func:`_open_run_tab` and closed by
    :func:`_teach_tabs` (entering the contexts by hand keeps build_demo's run page unindented)."""

    def __init__(self):
        self.tabs = gr.Tabs(selected="run")
        self.tabs.__enter__()
        self.tab = gr.Tab("Run", id="run")
        self.tab.__enter__()
        # A lesson's "what to notice" shows here, above the controls it set.
        self.lesson_note = gr.Markdown(visible=False, elem_id="sv-lesson-note")


def _open_run_tab() -> _RunTab:
    """Open the page's tabs and the "Run" tab; everything built until :func:`_teach_tabs` goes in it."""
    return _RunTab()


def _float(name, value, lo, hi, lo_open=False) -> float:
    try:
        return to_float(name, value, lo, hi, lo_open=lo_open)
    except RequestError as err:
        raise gr.Error(_sentence(str(err))) from None


def _int(name, value, lo, hi) -> int:
    try:
        return to_int(name, value, lo, hi)
    except RequestError as err:
        raise gr.Error(_sentence(str(err))) from None


# ----------------------------------------------------------------------------- playground
PG_ALPHAS = [i / 40 for i in range(41)]
PG_KS = list(range(1, playground.BEST_K_MAX + 1))
PG_CS = [i / 40 for i in range(41)]  # c from 0 to 1: a draft from free to as dear as the target


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
        f"speedup **{cf.best_speedup:.3f}×** (searched over K = 1…{playground.BEST_K_MAX})\n\n"
        f"Ceiling at this K (every draft accepted, α = 1): (K + 1)/(K·c + v) = {cf.ceiling:.3f}×"
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


def playground_update(alpha, k, c, v, map_axes, rounds, seed):
    """Every playground output from the sliders: (figures, map, Monte-Carlo text, Monte-Carlo chart).

    Model-free and instant; values are validated here (API callers skip the sliders' limits)."""
    alpha = _float("per-token α", alpha, 0.0, 1.0)
    k = _int("lookahead K", k, 1, playground.BEST_K_MAX)
    c = _float("cost ratio c", c, 0.0, 10.0)
    v = _float("verify cost v", v, 0.0, 10.0, lo_open=True)
    if map_axes not in ("α and K", "α and c"):
        raise gr.Error(f"The map is over 'α and K' or 'α and c', got {map_axes!r}.")
    rounds = _int("passes per simulated run", rounds, 1, 1000)
    seed = _int("seed", seed, 0, 2**31 - 1)
    cf = playground.closed_form(alpha, k, c, v)
    if map_axes == "α and c":
        z = playground.speedup_grid(PG_ALPHAS, cs=PG_CS, k=k, v=v)
        fig = charts.playground_map_figure(PG_ALPHAS, PG_CS, z, "c", point=(alpha, c),
                                           title=f"Expected speedup over (α, c) at K = {k}, v = {v:.2f} · red: slowdown")
    else:
        z = playground.speedup_grid(PG_ALPHAS, ks=PG_KS, c=c, v=v)
        fig = charts.playground_map_figure(PG_ALPHAS, PG_KS, z, "K", point=(alpha, k),
                                           title=f"Expected speedup over (α, K) at c = {c:.3f}, v = {v:.2f} · red: slowdown")
    mc = playground.monte_carlo(alpha, k, c, v, rounds=rounds, runs=max(1, 40_000 // rounds), seed=seed)
    mc_fig = charts.monte_carlo_figure(list(mc.counts), theory.tokens_per_pass_distribution(alpha, k),
                                       mc.tokens_per_pass, cf.tokens_per_pass)
    return playground_figures_markdown(cf), fig, monte_carlo_markdown(mc, cf), mc_fig


def analysis_for_playground(state):
    """The last real run's α, K, c and v as slider updates, plus a line saying where they came from.

    ``state`` is the ``last_analysis`` State: a :class:`~specviz.analysis.RunAnalysis`, its
    ``scalars()`` dict, or a sweep row (the Experiments tab fills it; the Run tab's callback is
    meant to fill it too). Raises gr.Error when there is no run with a measured α and c."""
    scalars = state.scalars() if isinstance(state, RunAnalysis) else state if isinstance(state, dict) else None
    point = playground.from_analysis(scalars)
    if point is None:
        raise gr.Error("No real run with a measured α and c yet: run a generation with a drafter (or an experiment), "
                       "then load its figures.")
    k = min(point["k"], playground.BEST_K_MAX)
    note = (f"Loaded from the last real run: per-token α = {point['alpha']:.3f} (accepted ÷ tested), K = {k}, "
            f"c = {point['c']:.3f} and v = {point['v']:.3f} (measured against plain decoding). "
            "Now ask what if: halve c, or raise α.")
    return (gr.update(value=round(point["alpha"], 2)), gr.update(value=k), gr.update(value=round(point["c"], 3)),
            gr.update(value=round(min(max(point["v"], 0.5), 3.0), 2)), note)


def _playground_tab(last_analysis):
    """The what-if playground: sliders, the closed form with its formulas, the map and a Monte-Carlo."""
    gr.Markdown("### What if? The closed form, live\nMove α, K, c and v and watch the expected tokens per pass and "
                "the expected speedup (Leviathan et al. 2023, eq. 1 and Theorem 3.8). No model runs here.")
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            alpha = gr.Slider(0.0, 1.0, value=0.7, step=0.01, label="per-token α (chance a tested draft is accepted)",
                              elem_id="sv-pg-alpha")
            k = gr.Slider(1, playground.BEST_K_MAX, value=4, step=1, label="lookahead K (drafts per round)",
                          elem_id="sv-pg-k")
            c = gr.Slider(0.0, 1.5, value=0.05, step=0.005, label="cost ratio c (one draft step ÷ one plain step)",
                          elem_id="sv-pg-c")
            v = gr.Slider(0.5, 3.0, value=1.0, step=0.01, label="verify cost v (one verify pass ÷ one plain step)",
                          elem_id="sv-pg-v")
            map_axes = gr.Radio(["α and K", "α and c"], value="α and K", label="Map over")
            with gr.Row():
                rounds = gr.Slider(1, 200, value=24, step=1, label="passes per simulated run")
                seed = gr.Number(0, precision=0, minimum=0, label="simulation seed")
            load_btn = gr.Button("Load α, c, v of the last real run")
            load_note = gr.Markdown()
            # Pure and instant: the first figures are computed while the page is built.
            first = playground_update(0.7, 4, 0.05, 1.0, "α and K", 24, 0)
            figures = gr.Markdown(first[0], latex_delimiters=LATEX, elem_id="sv-pg-figures")
        with gr.Column(scale=2):
            map_plot = gr.Plot(first[1], show_label=False, elem_id="sv-pg-map")
            with gr.Row():
                mc_plot = gr.Plot(first[3], show_label=False, elem_id="sv-pg-mc")
                mc_text = gr.Markdown(first[2], elem_id="sv-pg-mc-text")
    gr.Markdown(PLAYGROUND_NOTES, latex_delimiters=LATEX)
    inputs = [alpha, k, c, v, map_axes, rounds, seed]
    outputs = [figures, map_plot, mc_text, mc_plot]
    # Model-free: its own queue with no limit, so it never waits behind a generation.
    shared = dict(concurrency_id="playground", concurrency_limit=None, preprocess=False)
    # One listener for every control, "always_last": a drag fires many changes, and separate listeners
    # running at once could answer out of order and leave a stale figure on screen.
    gr.on([control.change for control in inputs], playground_update, inputs, outputs, api_name="playground",
          show_progress="hidden", trigger_mode="always_last", **shared)
    load_btn.click(analysis_for_playground, last_analysis, [alpha, k, c, v, load_note],
                   api_name="playground_load_run", **shared)
    return inputs, outputs


PLAYGROUND_NOTES = r"""
**Reading the map.** Each cell is the expected speedup $S$ at that α and K (or c); red cells are slower than plain
decoding, the black line is $S = 1$. With a cheap draft (small c) the best K grows with α: more drafts pay only if
they are likely to be accepted. With a dear draft the whole map turns red: even $\alpha = 1$ gives at most
$(K+1)/(Kc+v)$.

**Why simulate?** The closed form is an expectation. A real run of a few dozen verify passes is one draw from the
process the Monte-Carlo repeats thousands of times, so a measured tokens per pass a little off the formula is noise,
not a bug; the spread in the table says how much to expect.
"""


# ----------------------------------------------------------------------------- experiments
def _sweep_values(parameter: str, text) -> list[str]:
    """The values typed for a sweep, split on commas and spaces (validated by specviz.sweep)."""
    if not isinstance(text, str) or not text.replace(",", " ").split():
        raise gr.Error(f"Type the {parameter} values to sweep, e.g. {SWEEP_DEFAULTS[parameter]}.")
    return text.replace(",", " ").split()


def _sweep_table(rows: list[dict], parameter: str) -> list[list]:
    def f(x, spec=".3f"):
        return "—" if x is None else format(x, spec)

    return [[str(r[parameter]), f(r["alpha"]), f(r["acceptance_rate"]), f(r["tokens_per_pass"]),
             f(r["predicted_tokens_per_pass"]), f(r["speedup"]), f(r["theoretical_speedup"]), f(r["cost_ratio_c"]),
             f(r["verify_cost_v"]), f(r["tokens_per_s"], ".1f")] for r in rows]


SWEEP_HEADERS = ["setting", "per-token α (accepted ÷ tested)", "acceptance rate (accepted ÷ proposed)",
                 "tokens per pass", "theory (1−α^(K+1))/(1−α)", "speedup (measured)",
                 "theory speedup", "c", "v", "tokens/s"]


def _sweep_plan(parameter, values_text, max_new_tokens, run_values, public, replace=None):
    """The validated requests of a sweep from the Experiments controls and the Run tab's values."""
    parameter = SWEEP_LABELS.get(parameter, parameter)
    if parameter not in SWEEP_DEFAULTS:
        raise gr.Error(f"Sweep one of {', '.join(SWEEP_LABELS)}, got {parameter!r}.")
    values = replace if replace is not None else _sweep_values(parameter, values_text)
    if public and len(values) > PUBLIC_MAX_SETTINGS:
        raise gr.Error(f"Public mode: at most {PUBLIC_MAX_SETTINGS} settings per experiment, got {len(values)}.")
    limits = PUBLIC_POLICY.limits if public else DEFAULT_LIMITS
    tokens = _int("tokens per setting", max_new_tokens, 1, limits.max_new_tokens)
    (prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k, top_p, seed, chat,
     device, dtype) = run_values
    base = _request(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k, top_p,
                    tokens, seed, chat, device, dtype, public=public)
    try:
        requests = sweep_requests(base, parameter, values, limits=limits)
        if public:
            for r in requests:
                check_public_models(r.target, r.draft, PUBLIC_TARGETS, PUBLIC_DRAFTS)
    except RequestError as err:
        raise gr.Error(_sentence(str(err))) from None
    return parameter, requests


def _sweep_steps(requests, progress):
    """specviz.sweep's steps, with loading errors as one clear gr.Error line."""
    def report(fraction, message):
        progress(fraction, desc=message)

    try:
        yield from sweep(requests, progress=report)
    except models.IncompatiblePairError as err:
        raise gr.Error(f"These models cannot be paired: {err}") from None
    except (models.ModelLoadError, NonFiniteLogitsError, ContextLengthError, ValueError, OSError) as err:
        raise gr.Error(_sentence(str(err))) from None


@gpu
def run_sweep_ui(parameter, values_text, max_new_tokens, prompt, target_id, drafter_kind, draft_model,
                 early_exit_layers, k, temperature, top_k, top_p, seed, chat, device, dtype, last_analysis,
                 progress=gr.Progress(), *, public: bool | None = None):
    """Stream an experiment: (status, table, α chart, tokens/pass chart, speedup chart, CSV file, last_analysis).

    The status line updates a few times a second; the table and charts when a setting finishes; the
    CSV (written with specviz.sweep.write_csv) after each finished setting, so a stopped sweep keeps
    what it measured."""
    public = _is_public(public)
    parameter, requests = _sweep_plan(parameter, values_text, max_new_tokens,
                                      (prompt, target_id, drafter_kind, draft_model, early_exit_layers, k,
                                       temperature, top_k, top_p, seed, chat, device, dtype), public)
    rows: list[dict] = []
    last = 0.0
    empty = [charts.sweep_figure([], parameter, m) for m in ("alpha", "tokens_per_pass", "speedup")]
    yield f"Starting: {len(requests)} settings of {parameter}…", [], *empty, None, last_analysis
    for step in _sweep_steps(requests, progress):
        if step.row is None:
            if time.perf_counter() - last > 0.3:
                last = time.perf_counter()
                yield f"Running {step.message}…", *[gr.skip()] * 5, last_analysis
            continue
        rows.append(step.row)
        last_analysis = step.row
        path = os.path.join(tempfile.mkdtemp(prefix="specviz-sweep-"), f"sweep-{parameter}.csv")
        with open(path, "w", encoding="utf-8", newline="") as out:
            write_csv(rows, out)
        status = (f"**Done**: {len(rows)} settings of {parameter}. {alpha_trend(rows, parameter)}"
                  if len(rows) == len(requests) else
                  f"Finished {len(rows)}/{len(requests)} settings…")
        yield (status, _sweep_table(rows, parameter),
               *[charts.sweep_figure(rows, parameter, m) for m in ("alpha", "tokens_per_pass", "speedup")],
               path, last_analysis)


def _experiments_tab(run, last_analysis, public: bool) -> None:
    """One click sweeps temperature, K or the drafter for the Run tab's prompt, target and settings."""
    gr.Markdown(
        "### Experiments: vary one setting, hold the rest\nUses the **Run** tab's prompt, target, drafter and "
        "settings, and changes one of them. Each setting runs speculatively and then as plain decoding of the same "
        "target (the speedup's yardstick), after a warm-up, so every speedup is measured. The dashed lines are the "
        "closed forms at each point's measured α, c and v. Expect per-token α to fall as temperature rises on free "
        "text (the target's distribution spreads out, so a guess matches it less often); prompt lookup on free text "
        "tests few drafts, so its α there rests on few samples.\n\n"
        r"Theory per point: $E[N] = \frac{1-\alpha^{K+1}}{1-\alpha}$ tokens per pass and "
        r"$S = \frac{E[N]}{Kc + v}$, with that setting's measured per-token $\alpha$, cost ratio $c$ and verify "
        r"cost $v$.", latex_delimiters=LATEX)
    with gr.Row():
        parameter = gr.Radio(list(SWEEP_LABELS), value="Temperature", label="Sweep", elem_id="sv-exp-param")
        values = gr.Textbox(SWEEP_DEFAULTS["temperature"], label="Values (spaces or commas)", elem_id="sv-exp-values")
        limits = PUBLIC_POLICY.limits if public else DEFAULT_LIMITS
        tokens = gr.Slider(1, min(256, limits.max_new_tokens), value=48, step=1, label="Tokens per setting",
                           elem_id="sv-exp-tokens")
    with gr.Row():
        start = gr.Button("Run the experiment", variant="primary", elem_id="sv-exp-run")
        stop = gr.Button("Stop", variant="stop", elem_id="sv-exp-stop")
    status = gr.Markdown("Press **Run the experiment**.", elem_id="sv-exp-status")
    table = gr.Dataframe(headers=SWEEP_HEADERS, interactive=False, wrap=True, elem_id="sv-exp-table")
    with gr.Row():
        plots = [gr.Plot(charts.sweep_figure([], "temperature", m), show_label=False, elem_id=f"sv-exp-{m}")
                 for m in ("alpha", "tokens_per_pass", "speedup")]
    csv_file = gr.File(label="Results as CSV", elem_id="sv-exp-csv")
    parameter.change(lambda p: SWEEP_DEFAULTS[SWEEP_LABELS[p]], parameter, values, api_name=False,
                     concurrency_id="playground", concurrency_limit=None)
    inputs = [parameter, values, tokens] + [run[name] for name in RUN_VALUE_NAMES] + [last_analysis]
    event = start.click(functools.partial(run_sweep_ui, public=public), inputs,
                        [status, table, *plots, csv_file, last_analysis], api_name="sweep",
                        concurrency_id="generation", concurrency_limit=1, preprocess=False)
    stop.click(None, cancels=[event])


RUN_VALUE_NAMES = ("prompt", "target_id", "drafter_kind", "draft_model", "early_exit_layers", "k", "temperature",
                   "top_k", "top_p", "seed", "chat", "device", "dtype")


# ----------------------------------------------------------------------------- side by side
SIDE_BY_SIDE = {"Prompt lookup": "ngram", "Draft model (Run tab's)": "model", "int8 self-draft": "int8",
                "Early-exit self-draft": "early-exit", "None (plain decoding)": "none"}


def side_by_side_html(rows_runs: list[tuple[dict, object]], eos: set[int]) -> str:
    """One coloured output per drafter, one above the other, each headed by its figures."""
    def f(x, spec=".2f"):
        return "—" if x is None else format(x, spec)

    blocks = [legend_html()]
    for row, run in rows_runs:
        speed = ("the baseline itself (plain decoding)" if row["draft"] == "none" else
                 f"speedup <b>{f(row['speedup'])}×</b> (measured ÷ plain decoding; theory "
                 f"{f(row['theoretical_speedup'])}×)")
        head = (f"<b>{_escape(row['drafter'])}</b> · per-token α <b>{f(row['alpha'], '.3f')}</b> (accepted ÷ tested, "
                f"{row['accepted']}/{row['tested']}) · <b>{row['tokens_per_pass']:.2f}</b> tokens per pass · {speed}")
        body = render_rounds(run.rounds, eos)
        blocks.append(f'<div class="sv-sbs" data-draft="{_escape(row["draft"])}" style="margin:10px 0 4px">{head}</div>'
                      f'<div class="sv-out">{body}</div>')
    return "".join(blocks)


@gpu
def run_side_by_side(drafters, max_new_tokens, prompt, target_id, drafter_kind, draft_model, early_exit_layers, k,
                     temperature, top_k, top_p, seed, chat, device, dtype, progress=gr.Progress(), *,
                     public: bool | None = None):
    """Stream the same prompt and settings run with each chosen drafter: (HTML, status)."""
    public = _is_public(public)
    if not isinstance(drafters, list) or not drafters:
        raise gr.Error("Tick at least one drafter to compare.")
    try:
        specs = [_drafter_spec(SIDE_BY_SIDE.get(d, d), draft_model, early_exit_layers) for d in drafters]
    except RequestError as err:
        raise gr.Error(_sentence(str(err))) from None
    _, requests = _sweep_plan("draft", "", max_new_tokens, (prompt, target_id, drafter_kind, draft_model,
                              early_exit_layers, k, temperature, top_k, top_p, seed, chat, device, dtype),
                              public, replace=specs)
    done: list[tuple[dict, object]] = []
    eos: set[int] = set()
    last = 0.0
    for step in _sweep_steps(requests, progress):
        if step.row is not None:
            target, _ = load_pair(requests[step.index].target, "none", requests[step.index].device,
                                  requests[step.index].dtype)
            eos = set(target.eos_token_ids)
            done.append((step.row, step.run))
            yield side_by_side_html(done, eos), f"Finished {len(done)}/{len(requests)} drafters."
        elif time.perf_counter() - last > 0.3:
            last = time.perf_counter()
            yield gr.skip(), f"Running {step.message}…"
    yield side_by_side_html(done, eos), f"**Done**: {len(done)} drafters, same prompt and settings."


def _side_by_side_tab(run, public: bool) -> None:
    gr.Markdown("### Drafters side by side\nThe Run tab's prompt and settings, run once with each drafter. The "
                "colours are the Run tab's (green accepted, orange resampled, blue bonus, grey plain). Same target, "
                "same seed: what changes is how many tokens each verify pass yields and what that costs. At "
                "temperature 0 in float32 the texts agree exactly; in bfloat16 (what *auto* picks on this kind of "
                "CPU) one batched verify pass can round a near-tie differently from a one-token step, so the texts "
                "may part ways at such a token.")
    with gr.Row():
        chosen = gr.CheckboxGroup(list(SIDE_BY_SIDE), value=["Prompt lookup", "int8 self-draft",
                                                             "Early-exit self-draft", "None (plain decoding)"],
                                  label="Drafters", elem_id="sv-sbs-drafters")
        tokens = gr.Slider(1, 256, value=48, step=1, label="Tokens each")
    with gr.Row():
        start = gr.Button("Run side by side", variant="primary")
        stop = gr.Button("Stop", variant="stop")
    status = gr.Markdown(elem_id="sv-sbs-status")
    out = gr.HTML(elem_id="sv-sbs-out")
    inputs = [chosen, tokens] + [run[name] for name in RUN_VALUE_NAMES]
    event = start.click(functools.partial(run_side_by_side, public=public), inputs, [out, status],
                        api_name="side_by_side", concurrency_id="generation", concurrency_limit=1,
                        preprocess=False)
    stop.click(None, cancels=[event])


# ----------------------------------------------------------------------------- lessons
#: One-click scenarios: the Run tab's settings they set, and what to notice (one or two sentences).
LESSONS = {
    "Copy-heavy vs free text (prompt lookup)": dict(
        prompt=EXAMPLES[0][0], chat=True, drafter_kind="ngram", k=4, temperature=0.0, max_new_tokens=96,
        note="Press **Run**: on this typo-fixing prompt prompt lookup copies long runs (green and blue tokens, more "
             "than 2 tokens per pass, a real speedup). Then pick the *poem* example and run again: there is nothing "
             "to copy, most passes are grey plain steps, and the speedup drops to about 1×."),
    "Temperature 0 vs 1.5": dict(
        prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="int8", k=4, temperature=0.0, max_new_tokens=48,
        note="Press **Run** at temperature 0 and note the per-token α; set the temperature to 1.5 and run again: the "
             "target's distribution spreads out, the int8 draft's guesses match it less often, and α falls. The "
             "**Experiments** tab sweeps it in one click."),
    "A good draft that is too slow (int8 on a CPU)": dict(
        prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="int8", k=4, temperature=0.0, max_new_tokens=48,
        note="Press **Run**: α is high (the int8 copy agrees with the target most of the time), yet the speedup is "
             "below 1, because one draft step costs a large fraction of a target step (c), so a round costs K·c + v "
             "steps. Load its α, c and v in the **Playground** and halve c."),
    "A misaligned draft (early exit)": dict(
        prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="early-exit", early_exit_layers=4, k=4, temperature=0.0,
        max_new_tokens=48,
        note="Press **Run**: the target's first 4 layers almost never guess its token (α near 0), so nearly every "
             "pass yields one resampled token and the drafting is pure cost: a slowdown."),
    "Lossless check at T = 1": dict(
        prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="int8", k=4, temperature=1.0, max_new_tokens=48,
        check_temperature=1.0, control=False,
        note="Open **Is it lossless?** below and press **Run the check**: at T = 1 both the accepted and the resampled "
             "branch are exercised, and the speculative histogram matches p_target (p-value not tiny). Then tick "
             "*accept every draft token* and run it again: the broken method fails with a tiny p-value."),
}
LESSON_FIELDS = ("prompt", "chat", "drafter_kind", "early_exit_layers", "k", "temperature", "max_new_tokens",
                 "check_temperature", "control")


def apply_lesson(name: str):
    """Updates for the Run tab's controls, its lesson note and the selected tab (the Run tab)."""
    if name not in LESSONS:
        raise gr.Error(f"Unknown lesson {name!r}.")
    lesson = LESSONS[name]
    updates = [gr.update(value=lesson[f]) if f in lesson else gr.skip() for f in LESSON_FIELDS]
    note = gr.update(value=f"**Lesson: {name}.** {lesson['note']}", visible=True)
    return (*updates, note, gr.Tabs(selected="run"))


def _lessons_tab(run_tab: _RunTab, run) -> None:
    gr.Markdown("### Lessons\nEach button sets up the **Run** tab for one scenario and says what to notice there.")
    targets = [run[f] for f in LESSON_FIELDS] + [run_tab.lesson_note, run_tab.tabs]
    for name, lesson in LESSONS.items():
        with gr.Row():
            button = gr.Button(name, scale=1, min_width=280)
            gr.Markdown(lesson["note"].replace("Press **Run**: ", "").replace("Press **Run** ", ""), scale=3)
        button.click(functools.partial(apply_lesson, name), None, targets, api_name=False,
                     concurrency_id="playground", concurrency_limit=None)


# ----------------------------------------------------------------------------- the maths
MATHS = r"""
### The method, step by step (Chen et al. 2023; Leviathan et al. 2023)

A drafter proposes $K$ tokens $\tilde x_1, \dots, \tilde x_K$, each drawn from its own distribution $p_\text{draft}$.
The target scores all of them in **one verify pass**, which gives $p_\text{target}$ at every drafted position. Left to
right, draft token $x$ is accepted with probability

$$\min\left(1, \frac{p_\text{target}(x)}{p_\text{draft}(x)}\right).$$

At the first rejection the rest of the block is dropped and one token is drawn from the **residual**

$$r(x) = \frac{\max(0,\ p_\text{target}(x) - p_\text{draft}(x))}{\sum_y \max(0,\ p_\text{target}(y) - p_\text{draft}(y))}.$$

If all $K$ are accepted, the verify pass already holds the next distribution: one **bonus** token comes free.

### Why the output is exactly the target's

Take one position. The draft proposes $x$ with probability $p_\text{draft}(x)$ and keeps it with probability
$\min(1, p_\text{target}(x)/p_\text{draft}(x))$, so $x$ comes out of the accept branch with probability

$$p_\text{draft}(x)\cdot\min\left(1, \frac{p_\text{target}(x)}{p_\text{draft}(x)}\right) = \min(p_\text{draft}(x),\ p_\text{target}(x)).$$

A rejection happens with probability $\beta = 1 - \sum_y \min(p_\text{draft}(y), p_\text{target}(y)) = \sum_y \max(0,\ p_\text{target}(y) - p_\text{draft}(y))$,
and then $x$ is drawn from the residual, so the reject branch gives $x$ with probability
$\beta \cdot r(x) = \max(0,\ p_\text{target}(x) - p_\text{draft}(x))$: exactly the mass the accept branch missed. The two add up:

$$\min(p_\text{draft}, p_\text{target}) + \max(0,\ p_\text{target} - p_\text{draft}) = p_\text{target}.$$

The drafter decides how fast the text comes, never which text. The **Is it lossless?** panel on the Run tab checks this by
drawing the first token thousands of times; its control case (accept every draft token) shows what a broken rule looks like.

### How many tokens per pass, and how much faster

If each tested draft is accepted independently with probability $\alpha$ (the **per-token α** = accepted ÷ tested,
not the acceptance rate = accepted ÷ proposed), a pass emits $n \le K$ tokens with probability $\alpha^{n-1}(1-\alpha)$
and $K+1$ with probability $\alpha^K$, so

$$E[\text{tokens per pass}] = 1 + \alpha + \dots + \alpha^K = \frac{1-\alpha^{K+1}}{1-\alpha}.$$

A round costs $K$ draft steps of $c$ plain target steps each and one verify pass of $v$ plain steps, so the expected
speedup over plain decoding is

$$S = \frac{1-\alpha^{K+1}}{(1-\alpha)(Kc + v)},$$

which is Leviathan et al.'s Theorem 3.8 with $v = 1$. The **Playground** tab lets you move each symbol.

*Sources:* C. Chen, S. Borgeaud, G. Irving, J.-B. Lespiau, L. Sifre, J. Jumper (2023), *Accelerating Large Language
Model Decoding with Speculative Sampling*, arXiv:2302.01318. Y. Leviathan, M. Kalman, Y. Matias (2023), *Fast Inference
from Transformers via Speculative Decoding*, ICML 2023.
"""


def _teach_tabs(run_tab: _RunTab, run: dict, public: bool):
    """Close the Run tab, add the teaching tabs, close the page's tabs.

    Args:
        run_tab: what :func:`_open_run_tab` returned.
        run: the Run tab's components by name (:data:`RUN_VALUE_NAMES`, plus ``max_new_tokens``,
            ``check_temperature`` and ``control`` of the lossless check), read by the experiments
            and set by the lessons.
        public: public mode (bound into the model callbacks, as build_demo does for /run).

    Returns:
        The ``last_analysis`` State: the last real run's figures (a RunAnalysis or its
        ``scalars()``). The Experiments tab fills it; the Run tab's callback should fill it too,
        so that the Playground's "Load α, c, v of the last real run" reads the run just made.
    """
    # Made before the Run tab closes: a State among the Tabs' children would shift the tab labels.
    last_analysis = gr.State(None)
    run_tab.tab.__exit__(None, None, None)
    with gr.Tab("Playground", id="playground"):
        _playground_tab(last_analysis)
    with gr.Tab("Experiments", id="experiments"):
        _experiments_tab(run, last_analysis, public)
    with gr.Tab("Drafters side by side", id="side_by_side"):
        _side_by_side_tab(run, public)
    with gr.Tab("Lessons", id="lessons"):
        _lessons_tab(run_tab, run)
    with gr.Tab("The maths", id="maths"):
        gr.Markdown(MATHS, latex_delimiters=LATEX, elem_id="sv-maths")
    run_tab.tabs.__exit__(None, None, None)
    return last_analysis


demo = build_demo()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # First start only: convert the default offline model once, logging its progress (later
    # starts find it cached).
    models.prepare_offline(PRESETS[DEFAULT_PRESET]["target"])
    demo.queue(max_size=QUEUE_SIZE).launch(css=CSS)
