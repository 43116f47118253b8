"""specviz — watch speculative sampling happen on a real language model.

The Gradio UI. This is the only module that imports gradio; everything it shows comes from the
``specviz`` engine (models, drafters, the speculative loop, traces, theory and charts).

Run ``python app.py`` and open the printed URL. The first start prepares the offline models
(a minute, with progress in the terminal); later starts take seconds.
"""

from __future__ import annotations

import html
import logging
import os
import time

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

from specviz import charts, models, theory  # noqa: E402
from specviz.engine import ContextLengthError, Generation  # noqa: E402
from specviz.lossless import first_token_experiment  # noqa: E402
from specviz.sampling import NonFiniteLogitsError, SamplingConfig  # noqa: E402
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

DRAFTERS = [
    ("Prompt lookup (n-gram match in the context)", "ngram"),
    ("Draft model (give its id below)", "model"),
    ("Self-draft: int8 copy of the target (teaching)", "int8"),
    ("Self-draft: first N layers of the target (teaching)", "early-exit"),
    ("None: plain decoding of the target", "none"),
]
DRAFTER_NOTES = {
    "ngram": "Copies the tokens that followed an earlier occurrence of the last few tokens. Costs almost "
             "nothing, so on copy-heavy prompts (fix typos, reformat CSV → JSON) it is the one drafter that "
             "pays off on a CPU; on free text it rarely finds a match.",
    "model": "A smaller language model with the same tokenizer. Pays off on a GPU with a big target "
             "(e.g. 135M → 1.7B); on this CPU a draft is rarely cheap enough relative to a 135M target.",
    "int8": "The target itself, quantized to int8 (CPU only). It agrees with the target often "
            "(α ≈ 0.5–0.9) but costs 50–100% of a target step, so it shows high α *without* a speedup.",
    "early-exit": "The target's first N layers feeding its output head, with no training: it almost never "
                  "agrees with the target (α ≈ 0). The 'poorly aligned draft' case: every pass is wasted.",
    "none": "No drafting: the target decodes one token per forward pass. Useful to compare.",
}

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


def summary_markdown(spec_stats, plain_stats, k: int, c, verify_cost, status: str) -> str:
    alpha, alpha_hat = spec_stats.alpha, spec_stats.alpha_hat
    speedup = (spec_stats.tokens_per_s / plain_stats.tokens_per_s) if plain_stats and plain_stats.tokens_per_s else None
    theo = None
    if alpha_hat is not None and c is not None:
        theo = theory.expected_speedup(alpha_hat, k, c, verify_cost or 1.0)
    expected_tpp = theory.expected_tokens_per_pass(alpha_hat, k) if alpha_hat is not None else None
    if speedup is None:
        verdict = ""
    elif speedup >= 1:
        verdict = f"**{speedup:.2f}× faster** than plain decoding"
    else:
        verdict = f"**{speedup:.2f}× — a slowdown** (plain decoding is {1 / speedup:.2f}× faster)"
    counts = spec_stats.counts
    rows = [
        ("acceptance rate α", f"{_fmt(alpha, '.3f')}  ({spec_stats.accepted}/{spec_stats.proposed} proposed)"),
        ("per-test acceptance α̂", f"{_fmt(alpha_hat, '.3f')}  ({spec_stats.accepted}/{spec_stats.tested} tested; "
                                  "drafts after a rejection are never tested — the theory uses α̂)"),
        ("tokens per target pass", f"{spec_stats.tokens_per_pass:.2f}  (theory for α̂: {_fmt(expected_tpp)})"),
        ("target passes", f"{spec_stats.target_passes}"),
        ("tokens: accepted / resampled / bonus / plain",
         f"{counts['accepted']} / {counts['resampled']} / {counts['bonus']} / {counts['plain']}"),
        ("speculative tokens/s", f"{spec_stats.tokens_per_s:.1f}  ({spec_stats.emitted} tokens in {spec_stats.wall_s:.2f} s)"),
        ("plain decoding tokens/s", "measuring…" if plain_stats is None else
         f"{plain_stats.tokens_per_s:.1f}  ({plain_stats.emitted} tokens in {plain_stats.wall_s:.2f} s)"),
        ("measured speedup", verdict or "—"),
        ("theoretical speedup", f"{_fmt(theo)}×  from α̂, c = {_fmt(c, '.3f')}, verify cost = {_fmt(verify_cost)} steps"),
    ]
    table = "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
    return f"{status}\n\n{table}"


# ----------------------------------------------------------------------------- callbacks
def _drafter_spec(drafter: str, draft_model: str, early_exit_layers: int) -> str:
    if drafter == "model":
        if not draft_model.strip():
            raise gr.Error("Choose a draft model: give its hub id or local directory, or pick another drafter.")
        return draft_model.strip()
    if drafter == "early-exit":
        return f"early-exit:{int(early_exit_layers)}"
    return drafter


def _validate(prompt, k, temperature, top_k, top_p, max_new_tokens, seed):
    if not prompt or not prompt.strip():
        raise gr.Error("The prompt is empty: type something or pick an example.")
    if not 1 <= int(k) <= 16:
        raise gr.Error("Lookahead K must be between 1 and 16.")
    try:
        sampling = SamplingConfig(float(temperature), int(top_k or 0), float(top_p))
    except ValueError as err:
        raise gr.Error(str(err)) from None
    if not 1 <= int(max_new_tokens) <= 1024:
        raise gr.Error("Max new tokens must be between 1 and 1024.")
    if seed is None or int(seed) < 0:
        raise gr.Error("The seed must be a non-negative integer.")
    return sampling


def _load(target_id: str, spec: str, device: str, dtype: str, progress):
    def report(fraction, message):
        progress(fraction, desc=message)

    try:
        target = models.load_model(target_id.strip(), device=device, dtype=dtype, progress=report)
        drafter = models.build_drafter(spec, target, device=device, dtype=dtype, progress=report)
    except models.IncompatiblePairError as err:
        raise gr.Error(f"These models cannot be paired: {err}") from None
    except (models.ModelLoadError, ValueError, OSError) as err:
        raise gr.Error(str(err)) from None
    return target, drafter


_warmed: set = set()


def _warm_up(target, drafter, prompt_ids, sampling):
    """One short run per model pair before timing anything (first calls allocate and compile)."""
    key = (id(target.model), id(drafter))
    if key in _warmed:
        return
    Generation(target.model, prompt_ids[-16:], None, sampling=sampling, max_new_tokens=4,
               vocab_size=getattr(drafter, "vocab_size", None)).run()
    if drafter is not None:
        Generation(target.model, prompt_ids[-16:], drafter, k=2, sampling=sampling, max_new_tokens=4,
                   vocab_size=drafter.vocab_size).run()
    _warmed.add(key)


CHART_INTERVAL_S = 1.0  # the browser lags behind if Plotly redraws on every round
# Token updates resend the whole panel (tens of kB for a few hundred tokens with their hover
# text); coalescing rounds that finish within this interval keeps the browser and the server's
# event loop from competing with generation on a small CPU. The final update is always sent.
TOKEN_INTERVAL_S = 0.25


@gpu
def run_demo(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k, top_p,
             max_new_tokens, seed, chat, device, dtype, baselines, progress=gr.Progress()):
    """Stream a speculative run: (tokens HTML, summary, α chart, tokens/pass chart, speedup chart, state)."""
    sampling = _validate(prompt, k, temperature, top_k, top_p, max_new_tokens, seed)
    k, max_new_tokens, seed = int(k), int(max_new_tokens), int(seed)
    spec = _drafter_spec(drafter_kind, draft_model, early_exit_layers)
    target, drafter = _load(target_id, spec, device, dtype, progress)

    if chat and not target.has_chat_template:
        gr.Warning(f"{target.name} has no chat template: using the prompt as plain text.")
        chat = False
    prompt_ids = target.encode(prompt, chat=bool(chat))
    vocab = drafter.vocab_size if drafter is not None else target.vocab_size
    eos = set(target.eos_token_ids)
    common = dict(sampling=sampling, max_new_tokens=max_new_tokens, seed=seed, eos_token_ids=tuple(eos),
                  vocab_size=vocab, decode=target.decode)

    empty = charts.alpha_figure([]), charts.tokens_per_pass_figure([], k), charts.speedup_figure([], None)
    status = f"Warming up {target.name}" + (f" with {drafter.name}" if drafter else "") + "…"
    yield wrap_output(""), status, *empty, baselines

    try:
        _warm_up(target, drafter, prompt_ids, sampling)
        # The baseline: plain decoding of the same target, same prompt and settings, timed here.
        key = repr((target.source, str(target.device), str(target.dtype), prompt_ids, sampling, max_new_tokens, seed))
        plain_stats = baselines.get(key)
        if plain_stats is None:
            plain = Generation(target.model, prompt_ids, None, **common)
            last = 0.0
            for _ in plain:
                if time.perf_counter() - last > 0.5:
                    last = time.perf_counter()
                    yield (wrap_output(""), f"Measuring plain decoding of the target for the speedup baseline: "
                           f"{len(plain.tokens)}/{max_new_tokens} tokens…", *[gr.skip()] * 3, baselines)
            plain_stats = plain.stats()
            baselines = {**baselines, key: plain_stats}
    except (NonFiniteLogitsError, ContextLengthError, ValueError) as err:
        raise gr.Error(str(err)) from None

    run = Generation(target.model, prompt_ids, drafter, k=k, **common)
    chunks: list[str] = []
    points: list[dict] = []
    last_chart = last_tokens = 0.0
    label = f"{target.name} ← {drafter.name}" if drafter else f"{target.name}, plain decoding"
    try:
        for round_ in run:
            generated_at = time.time()
            chunks.append(render_round(round_, eos))
            stats = run.stats()
            if stats.wall_s > 0:
                points.append({"t": stats.wall_s, "speedup": stats.tokens_per_s / plain_stats.tokens_per_s})
            done = run.finish_reason is not None
            if done or time.perf_counter() - last_chart > CHART_INTERVAL_S:
                last_chart = last_tokens = time.perf_counter()
                c, verify_cost = _costs(run, plain_stats, k)
                theo = (theory.expected_speedup(stats.alpha_hat, k, c, verify_cost)
                        if stats.alpha_hat is not None and c is not None else None)
                figures = (charts.alpha_figure(run.rounds), charts.tokens_per_pass_figure(run.rounds, k),
                           charts.speedup_figure(points, theo))
                status = (f"**Done** ({run.finish_reason}) · {label}" if done
                          else f"Generating · {label} · {len(run.tokens)}/{max_new_tokens} tokens")
                yield (wrap_output("".join(chunks), done, generated_at),
                       summary_markdown(stats, plain_stats, k, c, verify_cost, status), *figures, baselines)
            elif time.perf_counter() - last_tokens > TOKEN_INTERVAL_S:
                last_tokens = time.perf_counter()
                yield wrap_output("".join(chunks), generated_at=generated_at), gr.skip(), *[gr.skip()] * 3, baselines
    except (NonFiniteLogitsError, ValueError) as err:
        # Keep what was generated on screen; say why it stopped.
        stats = run.stats()
        c, verify_cost = _costs(run, plain_stats, k)
        yield (wrap_output("".join(chunks)),
               summary_markdown(stats, plain_stats, k, c, verify_cost, f"**Stopped:** {_escape(str(err))}"),
               charts.alpha_figure(run.rounds), charts.tokens_per_pass_figure(run.rounds, k),
               charts.speedup_figure(points, None), baselines)
        raise gr.Error(str(err)) from None


def _costs(run: Generation, plain_stats, k: int) -> tuple[float | None, float | None]:
    """(c, verify cost) of a run, each relative to one plain decoding step of the target (ms/ms)."""
    if plain_stats is None or not plain_stats.target_passes or not run.rounds:
        return None, None
    step_ms = plain_stats.wall_s * 1e3 / plain_stats.target_passes
    stats = run.stats()
    if stats.draft_step_ms is not None:
        c = stats.draft_step_ms / step_ms
    else:  # prompt lookup: its per-round lookup time, spread over the K positions it may fill
        c = sum(r.draft_ms for r in run.rounds) / len(run.rounds) / k / step_ms
    return c, (stats.verify_ms or step_ms) / step_ms


@gpu
def run_lossless(prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k, top_p,
                 seed, chat, device, dtype, n_draws, progress=gr.Progress()):
    """The "Is it lossless?" panel: first-token histograms, speculative vs direct, against p_target."""
    sampling = _validate(prompt, k, temperature, top_k, top_p, 1, seed)
    if drafter_kind == "none":
        raise gr.Error("Pick a drafter: with plain decoding there is nothing to compare.")
    spec = _drafter_spec(drafter_kind, draft_model, early_exit_layers)
    target, drafter = _load(target_id, spec, device, dtype, progress)
    if chat and not target.has_chat_template:
        chat = False
    prompt_ids = target.encode(prompt, chat=bool(chat))
    progress(0.5, desc=f"Drawing {int(n_draws)} first tokens each way…")
    t0 = time.perf_counter()
    try:
        report = first_token_experiment(target.model, drafter, prompt_ids, sampling, n=int(n_draws), seed=int(seed),
                                        vocab_size=drafter.vocab_size)
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

**The charts.** *Acceptance rate α* is accepted ÷ proposed draft tokens, per pass and as a running mean.
*Tokens per target pass* is how many tokens each verify pass produced (1 to K+1); if every draft token were
accepted independently with probability α it would follow the drawn theoretical distribution, with mean
(1 − α^(K+1)) / (1 − α). *Speedup* divides the speculative run's tokens/s by the tokens/s of plain decoding of
the same target on the same prompt and settings, timed here just before; the dashed line is the theory
(1 − α^(K+1)) / ((1 − α)(K·c + v)) with c the measured draft step cost and v the verify pass cost, both in plain
target steps. On a CPU with a 135M target a draft model is rarely cheap enough; prompt lookup is, on prompts
that copy text.
"""


def build_demo() -> gr.Blocks:
    """The whole UI (no model is loaded until Run is pressed)."""
    with gr.Blocks(title="specviz — speculative sampling, live") as demo:
        baselines = gr.State({})
        gr.Markdown(
            "# specviz — speculative sampling, live\n"
            "A drafter proposes **K** tokens, the target verifies them in **one** forward pass, and the output is "
            "distributed exactly as the target's own. Every token below is coloured by how it was produced."
        )
        with gr.Row():
            with gr.Column(scale=1, min_width=340):
                preset = gr.Dropdown(list(PRESETS), value=DEFAULT_PRESET, label="Model pair")
                target_id = gr.Textbox(PRESETS[DEFAULT_PRESET]["target"], label="Target model",
                                       info="Offline name (smollm2-135m-instruct, gemma-3-270m), hub id or local directory")
                drafter_kind = gr.Dropdown(DRAFTERS, value="ngram", label="Drafter")
                draft_model = gr.Textbox("", label="Draft model", visible=False,
                                         info="Hub id or local directory; must share the target's tokenizer")
                early_exit_layers = gr.Slider(1, 16, value=4, step=1, label="Early-exit draft: first N layers",
                                              visible=False)
                drafter_note = gr.Markdown(DRAFTER_NOTES["ngram"])
                prompt = gr.Textbox(EXAMPLES[0][0], label="Prompt", lines=6, elem_id="sv-prompt")
                chat = gr.Checkbox(True, label="Chat prompt (apply the target's chat template)")
                with gr.Row():
                    k = gr.Slider(1, 16, value=4, step=1, label="Lookahead K")
                    temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)")
                with gr.Row():
                    top_k = gr.Number(0, precision=0, minimum=0, label="Top-k (0 = off)")
                    top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
                with gr.Row():
                    max_new_tokens = gr.Slider(1, 512, value=96, step=1, label="Max new tokens", elem_id="sv-max-new")
                    seed = gr.Number(0, precision=0, minimum=0, label="Seed")
                with gr.Accordion("Device", open=False):
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
            tpp_plot = gr.Plot(charts.tokens_per_pass_figure([], 4), label="Tokens per target pass", show_label=False, elem_id="sv-tpp")
            speedup_plot = gr.Plot(charts.speedup_figure([], None), label="Speedup vs plain decoding",
                                   show_label=False, elem_id="sv-speedup")
        with gr.Accordion("Is it lossless?", open=False):
            gr.Markdown("Draws the **first token** many times for the current prompt and settings, with speculative "
                        "sampling and directly from the target, reusing one draft and one target forward pass "
                        "(only the random draws differ), and compares both histograms with p_target.")
            with gr.Row():
                n_draws = gr.Slider(500, 20000, value=4000, step=500, label="Draws of each kind")
                lossless_btn = gr.Button("Run the check")
            lossless_plot = gr.Plot(label="First-token histograms", elem_id="sv-lossless")
            lossless_text = gr.Markdown()
        with gr.Accordion("How it works", open=False):
            gr.Markdown(HOW_IT_WORKS)

        preset.change(apply_preset, preset, [target_id, drafter_kind, draft_model, chat, drafter_note])
        drafter_kind.change(on_drafter_change, drafter_kind, [draft_model, early_exit_layers, drafter_note])
        inputs = [prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k, top_p,
                  max_new_tokens, seed, chat, device, dtype]
        run_event = run_btn.click(run_demo, inputs + [baselines],
                                  [tokens_html, summary, alpha_plot, tpp_plot, speedup_plot, baselines],
                                  api_name="run", concurrency_limit=1)
        stop_btn.click(None, cancels=[run_event])
        lossless_btn.click(run_lossless,
                           [prompt, target_id, drafter_kind, draft_model, early_exit_layers, k, temperature, top_k,
                            top_p, seed, chat, device, dtype, n_draws],
                           [lossless_plot, lossless_text], api_name="lossless", concurrency_limit=1)
    return demo


demo = build_demo()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # First start only: convert the default offline model once, logging its progress (later
    # starts find it cached).
    models.prepare_offline(PRESETS[DEFAULT_PRESET]["target"])
    demo.queue().launch(css=CSS)
