"""The Run tab: model pair, drafter, prompt and sampling settings; the token stream, summary and
inspector; the five charts and the three of the run's diagnostics; replay, export and saved traces; the "Is it lossless?" check; and
their events. The callbacks live in :mod:`.run_stream`, :mod:`.replay` and :mod:`.lossless_check`."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import gradio as gr

from specviz.drafters import DRAFTER_KINDS, for_device
from specviz.core.rules import RULE_CHOICES
from specviz.ui.tabs import dial_view
from specviz.ui.serve import placement
from specviz.ui.serve import settings
from specviz.ui.serve import visitors
from specviz.ui.context import PageContext
from specviz.ui.draw import charts, diagnostic_charts, race
from specviz.ui.draw.twin_charts import numbers_hide_markdown, twin_figure
from specviz.ui.draw.run_views import wrap_output
from specviz.ui.draw.scripts import script
from specviz.ui.serve.fields import NAMES, SHARED, request_from, spec_fields
from specviz.ui.tabs.lossless_check import LOSSLESS, run_lossless, settings_changed
from specviz.ui.tabs.numbers_hide import numbers_hide_view
from specviz.ui.prose import LATEX, prose
from specviz.ui.tabs.replay import (INSPECTOR_HINT, export_run, inspect_token, last_run_figures, load_trace, race_view,
                                    recorded_run, replay, reset_inspector, step_replay)
from specviz.ui.tabs.run_stream import RUN, run_demo, stop_run
from specviz.ui.serve.settings import DEFAULT_PRESET, DRAFTER_NOTES, EXAMPLE_LABELS, EXAMPLES, PAIR_PROMPTS, PRESETS
from specviz.ui.serve.state import RUN_OUTPUTS, SHOWN_OUTPUTS, VIEW_OUTPUTS, RunView


#: The token panel's script (``js_on_load``): a token's click or Enter opens the inspector, the box
#: follows the newest tokens, the page is marked while tokens stream (``draw/js/tokens.js``).
TOKENS_JS = script("tokens")
#: Marks the verify passes from…to in the token panel, as race_view does in the race lanes.
STRETCH_JS = script("stretch")
#: The inspector just opened on a token: brought into view if it is not.
INSPECTOR_IN_VIEW_JS = script("inspector_in_view")
#: The "What an engine would have logged" switch: greys out what no engine's counters tell.
ENGINE_LOG_JS = script("engine_log")

#: Model-free views never wait behind a generation.
FREE = dict(concurrency_limit=None, show_progress="hidden")


# A model pair chosen: its target, drafter, draft model, chat flag and the drafter's note. (No
# docstring: gradio would show it as the /apply_preset endpoint's description, which had none.)
def apply_preset(name: str):
    p = PRESETS[name]
    return (gr.update(value=p["target"]), gr.update(value=p["drafter"]),
            gr.update(value=p["draft_model"], visible=DRAFTER_KINDS[p["drafter"]].parameter == "model_name"),
            gr.update(value=p["chat"]),
            settings.preset_note(name),
            gr.update(value=p["prompt"]) if p.get("prompt") else gr.skip())


# A drafter chosen: show the controls it needs, and its note (no docstring, as above).
def on_drafter_change(kind: str):
    parameter = DRAFTER_KINDS[kind].parameter
    return (gr.update(visible=parameter == "model_name"), gr.update(visible=parameter == "layers"),
            DRAFTER_NOTES[kind])


def check_run(*values, public: bool) -> None:
    """The Run button's settings (raw, one per :data:`specviz.ui.serve.fields.NAMES`) checked before
    anything on the page changes: a bad one raises the ``gr.Error`` the run itself would
    (:func:`specviz.ui.serve.fields.request_from`), shown as a toast, every output left as it was."""
    request_from(dict(zip(NAMES, values)), public)


def empty_race():
    """The race before a run has any pass: no lanes (Run pressed; the last run's lanes go)."""
    return race.race_figure(race.race_lanes([], None))


def pair_note(kind: str, target: str, draft_model: str) -> str:
    """The drafter's note and, for one with layers of its own, what it costs on a GPU
    (:func:`specviz.ui.serve.settings.gpu_cost_sentence`): follows :func:`on_drafter_change`."""
    if kind not in DRAFTER_KINDS:
        return gr.skip()
    draft = draft_model if DRAFTER_KINDS[kind].parameter == "model_name" else kind
    cost = settings.gpu_cost_sentence(str(target or "").strip(), str(draft or "").strip() or kind)
    return DRAFTER_NOTES[kind] + (f" {cost}" if cost else "")


def on_device_change(device: str, kind: str):
    """The Device menu changed: the Drafter menu offers the kinds that run there, and a chosen
    kind that does not is replaced by its stand-in, said in one line (a toast)."""
    where = settings.target_device(device)
    menu = settings.drafter_menu(where)
    if kind not in DRAFTER_KINDS or DRAFTER_KINDS[kind].runs_on(where):
        return gr.update(choices=menu), gr.skip()
    stand_in, sentence = for_device(kind, where)
    gr.Info(sentence)
    fields = spec_fields(stand_in)
    layers = fields.get("early_exit_layers")
    return (gr.update(choices=menu, value=fields["drafter_kind"]),
            gr.skip() if layers is None else gr.update(value=layers))


def build(ctx: PageContext) -> None:
    """The Run tab's components and events; fills ``ctx.inputs``."""
    c = SimpleNamespace()
    with gr.Row(elem_id="sv-run-row"):  # on a phone the two columns stack (styles.PHONE_CSS)
        with gr.Column(scale=1, min_width=340):
            _settings(c, settings.limits(ctx.public), ctx.public)
        # The token box has a fixed height and the charts follow it, so a long run stays on one screen.
        with gr.Column(scale=2):
            _outputs(c)
    _charts_and_replay(c)
    _numbers_hide_panel(c)
    _lossless_panel(c, ctx.public)
    dial = dial_view.build_panel(ctx.public)
    with gr.Accordion("How it works", open=False):
        gr.Markdown(prose("how_it_works"))
    ctx.inputs.update({name: getattr(c, name) for name in NAMES + ("check_temperature", "control")})
    _wire(c, ctx)
    dial_view.wire(dial, ctx)


def _settings(c, limits, public: bool) -> None:
    """The left column's first screen: the prompt and its examples, Run and Stop and the run's status
    line, the model pair, the drafter, K and the temperature; every other setting behind one
    "More settings" (:func:`_more_settings`)."""
    c.prompt = gr.Textbox(EXAMPLES[0][0], label="Prompt", lines=6, elem_id="sv-prompt")
    # The prompt and Run first, the model pair and every other setting under them: Run under every
    # setting was 2,470 px down on a phone, and under the model pair 890 px down on a 1366 × 768
    # projector, below its first screen.
    with gr.Row():
        c.run_btn = gr.Button("Run", variant="primary", elem_id="sv-run-btn")
        c.stop_btn = gr.Button("Stop", variant="stop")
    # The run's own line: the queue's words, and a refusal's pill here rather than on every output.
    c.run_status = gr.Markdown("", elem_id="sv-run-status")
    c.preset = gr.Dropdown(settings.preset_names(public), value=DEFAULT_PRESET, label="Model pair")
    c.drafter_kind = gr.Dropdown(settings.drafter_menu(settings.server_device(), public), value="ngram",
                                 label="Drafter")
    c.drafter_note = gr.Markdown(DRAFTER_NOTES["ngram"])
    with gr.Row():
        c.k = gr.Slider(1, limits.max_k, value=4, step=1, label="Lookahead K",
                        info=settings.capped_info("K", limits.max_k, public), elem_id="sv-k")
        c.temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)",
                                  elem_id="sv-temperature")
    with gr.Accordion("More settings", open=False, elem_id="sv-more-settings"):
        _more_settings(c, limits, public)


def _more_settings(c, limits, public: bool) -> None:
    """Behind "More settings": the models by name, the chat template, the tree shape, the rule, the
    filters, the length and the seed, the device and dtype, the example prompts, and the engine-log
    view of the tokens."""
    c.target_id = gr.Textbox(PRESETS[DEFAULT_PRESET]["target"], label="Target model", interactive=not public,
                             info="Set by the model pair" if public else
                             "Offline name (smollm2-135m-instruct, qwen2.5-coder-1.5b-instruct, …), hub id or "
                             "local directory")
    c.draft_model = gr.Textbox("", label="Draft model", visible=False, interactive=not public,
                               info="Set by the model pair" if public else
                               "Hub id or local directory; must share the target's tokenizer")
    c.early_exit_layers = gr.Slider(1, 16, value=4, step=1, label="Early-exit draft: first N layers", visible=False)
    c.chat = gr.Checkbox(True, label="Chat prompt (apply the target's chat template)")
    with gr.Row():
        c.max_new_tokens = gr.Slider(1, min(512, limits.max_new_tokens), value=96, step=1,
                                     label="Max new tokens", elem_id="sv-max-new",
                                     info=settings.capped_info("length", limits.max_new_tokens, public))
        c.seed = gr.Number(0, precision=0, minimum=0, label="Seed")
    with gr.Row():
        c.branches = gr.Slider(1, limits.max_branches, value=1, step=1, label="Tree branches B (1 = chain)",
                               info="Up to B candidate continuations per node, verified in one pass",
                               elem_id="sv-branches")
        c.tree_nodes = gr.Number(0, precision=0, minimum=0, label="Tree node budget N (0 = auto)",
                                 elem_id="sv-tree-nodes")
    c.rule = gr.Dropdown(list(RULE_CHOICES), value="full",
                         label="Verification rule", elem_id="sv-rule",
                         info="The same drafts, judged by the rule an engine ships: α differs, the exact rules' "
                              "output does not (relaxed top-k is a lossy control)")
    with gr.Row():
        c.top_k = gr.Number(0, precision=0, minimum=0, label="Top-k (0 = off)")
        c.top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
    with gr.Row(visible=not public):
        c.device = gr.Dropdown(["auto", "cpu", "cuda"], value="auto", label="Device", visible=not public)
        c.dtype = gr.Dropdown(["auto", "float32", "bfloat16", "float16", "int4"], value="auto", label="Dtype",
                              visible=not public,
                              info="auto: bf16 on GPUs and CPUs that run it natively, else fp32; int4: every linear "
                                   "layer as int4 blocks (CPU)")
    gr.Examples(EXAMPLES, [c.prompt, c.chat], label="Example prompts", example_labels=EXAMPLE_LABELS)
    gr.Examples([[prompt, chat, temperature] for prompt, chat, temperature, _ in PAIR_PROMPTS],
                [c.prompt, c.chat, c.temperature], label="The same-family pair's prompts",
                example_labels=[label for *_, label in PAIR_PROMPTS])
    # The switch greys the tokens and the inspector above it and the charts below.
    c.engine_log = gr.Checkbox(False, label="What an engine would have logged", elem_id="sv-engine-log",
                               info="Grey out what no engine's counters tell: u, p_draft, p_target, the "
                                    "rejected drafts and the residuals (vLLM #19993, SGLang #34814)")


def _outputs(c) -> None:
    """The right column: the token stream (a fixed-height box), the token inspector right under it
    (a click answers where the visitor is looking, under six charts and the summary
    it opened 1,800 px below the tokens), the three main charts, the summary and the engine-log
    switch."""
    c.tokens_html = gr.HTML(wrap_output(""), js_on_load=TOKENS_JS, elem_id="sv-tokens")
    with gr.Accordion("Token inspector: why was this token emitted?", open=True, elem_id="sv-inspector-panel"):
        c.inspector_md = gr.Markdown(INSPECTOR_HINT, elem_id="sv-inspector")
        c.inspector_plot = gr.Plot(label="Distributions behind the decision", show_label=False,
                                   elem_id="sv-inspector-plot")
        c.inspector_tree = gr.HTML("", elem_id="sv-inspector-tree")
    _main_charts(c)
    c.summary = gr.Markdown("Press **Run**.", elem_id="sv-summary", elem_classes=["sv-status"])


def _main_charts(c) -> None:
    """Acceptance, tokens per pass and the speedup, right under the token box."""
    with gr.Row():
        c.alpha_plot = gr.Plot(charts.alpha_figure([]), label="Acceptance", show_label=False, elem_id="sv-alpha")
        c.tpp_plot = gr.Plot(charts.tokens_per_pass_figure([], 4, None), label="Tokens per target pass",
                             show_label=False, elem_id="sv-tpp")
        c.speedup_plot = gr.Plot(charts.speedup_figure([], None), label="Speedup vs plain decoding",
                                 show_label=False, elem_id="sv-speedup")


def _charts_and_replay(c) -> None:
    """Every other figure behind its own section, each saying what to read in it; then replay,
    export and saved traces."""
    with gr.Accordion("Where each pass's time goes, and which draft positions fail", open=False,
                      elem_id="sv-time-panel"):
        gr.Markdown("Left: how often the drafted token at each position was kept. Right: each pass's time, "
                    "drafting against verifying.")
        with gr.Row():
            c.position_plot = gr.Plot(charts.per_position_figure(None), label="Acceptance by draft position",
                                      show_label=False, elem_id="sv-positions")
            c.time_plot = gr.Plot(charts.time_split_figure(None), label="Time per round", show_label=False,
                                  elem_id="sv-time")
    with gr.Accordion("The same passes under engines' rules, accepted lengths, calibration", open=False,
                      elem_id="sv-rules-panel"):
        gr.Markdown("What the drafts of this very run would have given under each verification rule; how many "
                    "drafts each pass kept; and whether the draft's confidence matched how often it was kept.")
        with gr.Row():
            c.rules_plot = gr.Plot(diagnostic_charts.rules_figure(None), label="Same passes, four rules",
                                   show_label=False, elem_id="sv-rules")
            c.lengths_plot = gr.Plot(diagnostic_charts.accepted_length_figure(None),
                                     label="Accepted drafts per pass", show_label=False, elem_id="sv-lengths")
            c.calibration_plot = gr.Plot(diagnostic_charts.calibration_figure(None), label="Calibration",
                                         show_label=False, elem_id="sv-calibration")
    with gr.Accordion("The race: this run against plain decoding, pass by pass", open=False, elem_id="sv-race-panel"):
        c.race_plot = gr.Plot(empty_race(), label="Race", show_label=False, elem_id="sv-race")
        with gr.Row():
            c.race_from = gr.Number(None, precision=0, label="Highlight from pass", elem_id="sv-race-from")
            c.race_to = gr.Number(None, precision=0, label="to pass", elem_id="sv-race-to")
    with gr.Accordion("Replay, export and saved traces", open=False):
        gr.Markdown("Go back over the run pass by pass: tokens, summary and charts as they stood after pass r. "
                    "Export the run (trace JSON, rounds CSV, charts HTML), or load a saved trace (from here or "
                    "`python -m specviz run --trace FILE`) to replay it without the models.")
        with gr.Row():
            c.replay_back = gr.Button("◀ pass", size="sm", min_width=80, elem_id="sv-replay-back")
            c.replay_slider = gr.Slider(0, 1, value=0, step=1, label="After pass", elem_id="sv-replay")
            c.replay_next = gr.Button("pass ▶", size="sm", min_width=80, elem_id="sv-replay-next")
        with gr.Row():
            c.export_btn = gr.Button("Export this run", elem_id="sv-export")
            c.export_files = gr.File(label="Exported files", file_count="multiple", interactive=False,
                                     elem_id="sv-export-files")
            c.trace_file = gr.File(label="Load a saved trace (.json)", file_types=[".json"], type="filepath",
                                   elem_id="sv-load")


def _numbers_hide_panel(c) -> None:
    """"What the numbers hide": the run beside its synthetic twin, its health checks, the oracle's
    ceiling and the lessons in the run's numbers (:mod:`.numbers_hide`), filled when a run ends."""
    with gr.Accordion("What the numbers hide: the synthetic twin, health checks, the ceiling", open=False,
                      elem_id="sv-numbers-panel"):
        c.numbers_md = gr.Markdown(numbers_hide_markdown(None, None, None, []), elem_id="sv-numbers")
        c.twin_plot = gr.Plot(twin_figure(None), label="The run beside its synthetic twin", show_label=False,
                              elem_id="sv-twin")


def _lossless_panel(c, public: bool) -> None:
    """The "Is it lossless?" accordion: the check's own temperature, draws and control case."""
    with gr.Accordion("Is it lossless?", open=False, elem_id="sv-lossless-panel"):
        gr.Markdown("Draws the **first token** many times for the current prompt and settings, with speculative "
                    "sampling and directly from the target, reusing one draft and one target forward pass "
                    "(only the random draws differ), and compares both histograms with p_target.")
        with gr.Row():
            c.n_draws = gr.Slider(500, settings.PUBLIC_POLICY.max_draws if public else 20000, value=4000, step=500,
                                  label="Draws of each kind", elem_id="sv-check-draws")
            c.check_temperature = gr.Slider(0.0, 2.0, value=1.0, step=0.05, label="Check's temperature",
                                            info="1 samples the model's own distribution; at 0 there is "
                                                 "nothing to sample", elem_id="sv-check-temperature")
            c.control = gr.Checkbox(False, label="Control: accept every draft token (broken; should fail)",
                                    elem_id="sv-check-control")
            c.lossless_btn = gr.Button("Run the check")
        c.lossless_status = gr.Markdown("", elem_id="sv-check-status")
        gr.Markdown(prose("lossless_formula"), latex_delimiters=LATEX)
        c.lossless_plot = gr.Plot(label="First-token histograms", show_label=False, elem_id="sv-lossless")
        c.lossless_text = gr.Markdown(elem_id="sv-lossless-text")


def _wire(c, ctx: PageContext) -> None:
    """The events: the generation (one queue slot), Stop, the lossless check, and the model-free
    views (inspector, replay, export, load), which never wait behind a generation."""
    c.preset.change(apply_preset, c.preset, [c.target_id, c.drafter_kind, c.draft_model, c.chat, c.drafter_note,
                                             c.prompt])
    c.drafter_kind.change(on_drafter_change, c.drafter_kind, [c.draft_model, c.early_exit_layers, c.drafter_note]).then(
        pair_note, [c.drafter_kind, c.target_id, c.draft_model], c.drafter_note, api_name=False, **FREE)
    c.device.change(on_device_change, [c.device, c.drafter_kind], [c.drafter_kind, c.early_exit_layers],
                    api_name=False, **FREE)
    baselines = gr.State({})  # this visitor's measured plain baselines, by settings
    run_state = ctx.run_state = gr.State(None)  # this visitor's RunState (the Watch tab reads it too)
    out = _outputs_by_name(c, baselines, run_state)
    view = out(VIEW_OUTPUTS)
    # Stop cancels the run and sets the status from the run as it stood (the generator cannot: it is cancelled).
    run_event = RUN.wire(_checked_run_click(c, ctx), functools.partial(run_demo, public=ctx.public),
                         ctx.run_inputs(NAMES) + [baselines], out(RUN_OUTPUTS), ctx.public, stop=c.stop_btn,
                         on_stop=(stop_run, run_state, out(SHOWN_OUTPUTS)), status=c.run_status)
    placement.show_problem(c.summary)  # on ZeroGPU: nothing placed at import is said here
    inspector = [c.inspector_md, c.inspector_plot, c.inspector_tree]
    for setting in (c.prompt, c.target_id, c.drafter_kind, c.draft_model, c.check_temperature, c.chat, c.rule):
        setting.change(settings_changed, c.lossless_text, [c.lossless_plot, c.lossless_text], api_name=False,
                       **FREE)
    # The check's own temperature stands in for the run's.
    lossless_inputs = [c.check_temperature if name == "temperature" else c_ for name, c_ in
                       zip(SHARED, ctx.run_inputs(SHARED))] + [c.n_draws, c.control]
    LOSSLESS.wire(c.lossless_btn.click, functools.partial(run_lossless, public=ctx.public), lossless_inputs,
                  [c.lossless_plot, c.lossless_text], ctx.public, status=c.lossless_status)
    c.tokens_html.click(inspect_token, run_state, [c.inspector_md, c.inspector_plot, c.inspector_tree],
                        api_name=False, **FREE).then(None, None, None, js=INSPECTOR_IN_VIEW_JS, api_name=False)
    replayed = [c.replay_slider.release(replay, [c.replay_slider, run_state], view, api_name="replay",
                                        preprocess=False, **FREE)]
    # A replayed pass shows nothing after it: the inspector starts over.
    c.replay_slider.release(reset_inspector, None, inspector, api_name=False, **FREE)
    for button, delta in ((c.replay_back, -1), (c.replay_next, 1)):
        replayed.append(button.click(functools.partial(step_replay, delta=delta), [c.replay_slider, run_state],
                                     c.replay_slider, api_name=False, **FREE).then(
            replay, [c.replay_slider, run_state], view, api_name=False, **FREE))
        button.click(reset_inspector, None, inspector, api_name=False, **FREE)
    c.export_btn.click(export_run, run_state, c.export_files, api_name="export", **FREE)
    c.engine_log.change(None, c.engine_log, None, js=ENGINE_LOG_JS, api_name=False)
    loaded = c.trace_file.upload(functools.partial(load_trace, public=ctx.public), c.trace_file,
                                 out(SHOWN_OUTPUTS), api_name="load_trace", **FREE)
    c.trace_file.upload(reset_inspector, None, inspector, api_name=False, **FREE)
    run_event.then(last_run_figures, run_state, ctx.last_analysis, api_name=False, **FREE)
    for event in (run_event, loaded):
        event.then(numbers_hide_view, run_state, [c.twin_plot, c.numbers_md], api_name=False, **FREE)
    ctx.run_done = run_event  # a lesson's note follows a finished run (lessons_tab)
    ctx.recorded = (recorded_run, out(SHOWN_OUTPUTS))  # the page opens on a recorded run (page.py)
    ctx.run_outputs = {**dict(zip((*RunView._fields, "state"), out((*RunView._fields, "state")), strict=True)),
                       "race": c.race_plot, "inspector": c.inspector_md, "inspector_plot": c.inspector_plot,
                       "inspector_tree": c.inspector_tree}
    _wire_race(c, run_state, [run_event, loaded], replayed)


def _checked_run_click(c, ctx: PageContext):
    """The Run button's listener for :meth:`specviz.ui.serve.feature.Feature.wire`: one model-free
    step before the run, so the run's stage reaches the token box one round trip after the press
    (each chained event is one more: five of them took a quarter of a second on a quiet machine).
    The step does, in order: the generation's own first step (the queue's words, public mode's
    check), the settings checked (:func:`check_run`: a refusal is a toast and every output stays
    as it was; in public mode the press's hold on the visitor's one generation goes with it), the
    inspector and the race cleared. The run follows it, so the cleared race can never arrive
    after the new run's lanes (two events of one click run in no fixed order; on a busy machine
    the clearing came second)."""
    inspector = [c.inspector_md, c.inspector_plot, c.inspector_tree]

    def click(fn, inputs, outputs, **kwargs):
        if inputs is not None or isinstance(outputs, (list, tuple)):  # wired without the Run tab's status line
            raise TypeError("the Run button's first step is generation_click's check(request) -> status")

        def before_run(request: gr.Request, *values):
            words = fn(request)  # the queue's words; public mode's refusal raises here
            try:
                check_run(*values, public=ctx.public)
            except Exception:
                if ctx.public:
                    visitors.release_claim(request)
                raise
            return words, *reset_inspector(), empty_race()

        # A refusal marks the status line only (gradio marks a failed event's outputs otherwise):
        # the inspector and the race stay as they were.
        return c.run_btn.click(before_run, ctx.run_inputs(NAMES), [outputs, *inspector, c.race_plot],
                               preprocess=False, show_progress_on=outputs, **kwargs)

    return click


def _outputs_by_name(c, baselines, run_state):
    """The Run tab's output components by the names of :data:`specviz.ui.serve.state.RUN_OUTPUTS`: a
    function from a tuple of names to the event's outputs list."""
    by_name = {**RunView(tokens=c.tokens_html, summary=c.summary, alpha=c.alpha_plot, tokens_per_pass=c.tpp_plot,
                         speedup=c.speedup_plot, positions=c.position_plot, time=c.time_plot,
                         rules=c.rules_plot, lengths=c.lengths_plot, calibration=c.calibration_plot)._asdict(),
               "baselines": baselines, "state": run_state, "slider": c.replay_slider}
    return lambda names: [by_name[name] for name in names]


def _wire_race(c, run_state, whole, replayed) -> None:
    """The race lanes follow the run's end and a loaded trace (``whole``: every pass) and the
    replay (``replayed``: up to the slider's pass); the stretch's passes are highlighted there and
    in the token panel."""
    race_inputs = [run_state, c.race_from, c.race_to, c.replay_slider]
    every_pass = functools.partial(race_view, upto=None)
    for events, fn, inputs in ((whole, every_pass, [run_state, c.race_from, c.race_to]),
                               (replayed, race_view, race_inputs)):
        for event in events:
            event.then(fn, inputs, c.race_plot, api_name=False, **FREE).then(
                None, [c.race_from, c.race_to], None, js=STRETCH_JS, api_name=False)
    gr.on([c.race_from.change, c.race_to.change], race_view, race_inputs, c.race_plot, api_name=False,
          trigger_mode="always_last", **FREE).then(None, [c.race_from, c.race_to], None, js=STRETCH_JS,
                                                   api_name=False)
