"""The "Bring your engine's numbers" tab: a file from vLLM, SGLang, llama.cpp or mlx-lm (JSON, JSONL,
a log or a metrics scrape), read by :func:`specviz.engine_logs.read_engine_file`, drawn with the Run
tab's charts (:mod:`.draw.engine_views`, :mod:`.draw.engine_counts`): tokens per pass, accepted
drafts per pass in the engines' units with the zero-accept share, full and conditional acceptance
by position, and the closed form at the visitor's stated c and v; the table of figures with the
engine field and the conversion of each; and the text coloured as far as the engine can tell.

Its callback is /import_engine; a changed engine choice reads the file again, a changed c or v
redraws the closed form and the K an engine would pick. No model runs.
"""

from __future__ import annotations

import functools
import os

import gradio as gr

from specviz.engine_logs import ENGINES, EngineFileError, ImportedRun, read_engine_file
from specviz.run.request import RequestError, to_float
from specviz.ui.serve import settings
from specviz.ui.context import PageContext
from specviz.ui.draw import charts, diagnostic_charts
from specviz.ui.draw.engine_counts import engine_figures
from specviz.ui.draw.engine_views import (ENGINE_NAMES, closed_form_figure, engine_charts, engine_summary_markdown,
                                engine_tokens_html, figures_markdown, imported_alpha)
from specviz.ui.serve.user_errors import refused, sentence
from specviz.ui.tabs import lane_view

#: The engine menu: guess from the file, or one engine by name.
GUESS = "guess"
ENGINE_CHOICES = [("Guess from the file", GUESS)] + [(ENGINE_NAMES[name], name) for name in ENGINES]
#: An engine file's size at most (bytes): a long run's per-step JSONL is far below it. The
#: server's own upload limit (``launch(max_file_size=…)``, :func:`specviz.ui.serve.settings.max_upload_bytes`)
#: refuses larger uploads before they are stored, when it is the smaller.
MAX_ENGINE_FILE_BYTES = 8 * 2**20
#: The stated costs when the page opens: a small draft model, a verify pass as dear as a step.
DEFAULT_C, DEFAULT_V = 0.05, 1.0
#: The charts' note before a file is read.
WAITING = "waiting for an engine's file…"
#: What /import_engine says of itself in the API's description.
API_DESCRIPTION = ("Read one engine's file (vLLM, SGLang, llama.cpp, mlx-lm; engine 'guess' or its name) at the stated "
                   "c and v: the summary, the figures table, the coloured text and the four charts.")
#: Model-free views never wait behind a generation.
FREE = dict(concurrency_limit=None, show_progress="hidden")

INTRO = ("Run speculative decoding in an engine? Drop the file it wrote here: **vLLM**'s per-request metrics "
         "(`--per-request-spec-decode-metrics detailed`) or its Prometheus scrape, **SGLang**'s response or "
         "server stats, **llama.cpp** server's `timings` or its log, **mlx-lm**'s streamed tokens. specviz reads "
         "it in its own units (÷ tested vs ÷ drafted, bonus in or out, counts clipped at the stop token, per "
         "run or cumulative) and draws it with the Run tab's charts. No engine logs the draws u, p_draft or "
         "p_target: what the file cannot tell is marked unknown, never guessed.")


def _costs(c, v) -> tuple[float, float]:
    try:
        return to_float("cost ratio c", c, 0.0, 10.0), to_float("verify cost v", v, 0.0, 10.0, lo_open=True)
    except RequestError as err:
        raise refused(sentence(str(err))) from None


def _read(path, engine, public: bool) -> ImportedRun:
    """The uploaded file, size-checked, decoded and read by the engine's importer."""
    if not path or not isinstance(path, (str, os.PathLike)):
        raise refused("Choose an engine's file first.")
    if engine not in (GUESS, *ENGINES):
        raise refused(f"The engine must be one of {', '.join((GUESS, *ENGINES))}, got {str(engine)[:40]!r}.")
    limit = min(MAX_ENGINE_FILE_BYTES, settings.max_upload_bytes(settings.is_public(public)))
    try:
        size = os.path.getsize(path)
        if size > limit:
            raise refused(f"That file is {size / 2**20:.1f} MB; an engine's file may be at most "
                          f"{limit / 2**20:g} MB here.")
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError:
        raise refused("That file is not UTF-8 text: engines write JSON, JSONL, logs or metrics as text.") from None
    except OSError:
        raise refused("That file could not be read; upload it again.") from None
    try:
        return read_engine_file(text, os.path.basename(str(path)), None if engine == GUESS else engine)
    except EngineFileError as err:
        raise refused(str(err)) from None


def _views(run: ImportedRun, c: float, v: float) -> tuple:
    try:
        figures = engine_figures(run, c, v)
    except ValueError as err:
        raise refused(f"The file's counts cannot be drawn: {err}.") from None
    return (engine_summary_markdown(run, figures, c, v), figures_markdown(run), engine_tokens_html(run),
            *engine_charts(run, figures, c, v))


def import_engine(path, engine, c, v, *, public: bool | None = None):
    """Read an engine's file and draw it: (the imported run, summary, figures table, coloured
    text, tokens per pass, accepted drafts per pass, acceptance by position, closed form).

    ``engine``: "guess" or one of :data:`specviz.engine_logs.ENGINES`; ``c`` and ``v``: the stated
    cost ratio (draft step ÷ target step, in [0, 10]) and verify cost (verify pass ÷ target step,
    in (0, 10]), for the closed form and the K an engine would pick.

    Raises:
        gr.Error: no file, one too large or not UTF-8, the importer's one sentence
            (:class:`specviz.engine_logs.EngineFileError`), counts that contradict each other, or c or
            v out of range.
    """
    c, v = _costs(c, v)
    run = _read(path, engine, public)
    return (run, *_views(run, c, v))


def reread(path, engine, c, v, *, public: bool | None = None):
    """Another engine chosen: the file read again as that engine's (:func:`import_engine`); nothing
    before a file is there."""
    if not path:
        return (gr.skip(),) * 8
    return import_engine(path, engine, c, v, public=public)


def redraw_costs(run, c, v):
    """The stated c or v changed: the summary (the K an engine would pick) and the closed form again;
    skipped before a file is read or while a value is out of range."""
    if not isinstance(run, ImportedRun):
        return gr.skip(), gr.skip()
    try:
        c, v = _costs(c, v)
        figures = engine_figures(run, c, v)
    except (gr.Error, ValueError):
        return gr.skip(), gr.skip()
    return (engine_summary_markdown(run, figures, c, v),
            closed_form_figure(imported_alpha(run, figures), figures.k, c, v))


def build(ctx: PageContext) -> None:
    """The tab's components and events."""
    gr.Markdown(INTRO)
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            # Any file name: engines' logs and scrapes come as .log, .txt, .prom, .sse, .out or none;
            # what matters is the text, which the importer judges.
            upload = gr.File(label="An engine's file (JSON, JSONL, a log, a metrics scrape, a recorded stream)",
                             type="filepath", elem_id="sv-engine-file")
            engine = gr.Dropdown(ENGINE_CHOICES, value=GUESS, label="Engine", elem_id="sv-engine-name")
            with gr.Row():
                c = gr.Number(DEFAULT_C, minimum=0, maximum=10, label="c: draft step ÷ target step",
                              elem_id="sv-engine-c")
                v = gr.Number(DEFAULT_V, minimum=0, maximum=10, label="v: verify pass ÷ target step",
                              elem_id="sv-engine-v")
        with gr.Column(scale=2):
            summary = gr.Markdown("Drop an engine's file on the left.", elem_id="sv-engine-summary")
            tokens = gr.HTML("", elem_id="sv-engine-tokens")
    with gr.Row():
        tpp = gr.Plot(charts.tokens_per_pass_figure([], 4, None), show_label=False, elem_id="sv-engine-tpp")
        lengths = gr.Plot(diagnostic_charts.accepted_length_figure(None), show_label=False,
                          elem_id="sv-engine-lengths")
    with gr.Row():
        positions = gr.Plot(charts.per_position_figure(None), show_label=False, elem_id="sv-engine-positions")
        closed = gr.Plot(closed_form_figure(None, 4, DEFAULT_C, DEFAULT_V, WAITING), show_label=False,
                         elem_id="sv-engine-closed")
    table = gr.Markdown("", elem_id="sv-engine-figures")
    state = gr.State(None)
    outputs = [state, summary, table, tokens, tpp, lengths, positions, closed]
    inputs = [upload, engine, c, v]
    upload.upload(functools.partial(import_engine, public=ctx.public), inputs, outputs, api_name="import_engine",
                  api_description=API_DESCRIPTION, **FREE)
    engine.change(functools.partial(reread, public=ctx.public), inputs, outputs, api_name=False, **FREE)
    gr.on([c.change, v.change], redraw_costs, [state, c, v], [summary, closed], api_name=False,
          trigger_mode="always_last", **FREE)
    lane_view.build_panel(ctx, ctx.public)
