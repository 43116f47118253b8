"""The Run tab's model-free views of a run: the token inspector, the replay pass by pass, the
export (trace JSON, rounds CSV, charts HTML), loading a saved trace, and the figures the
Playground loads. None of them runs a model, so they never wait behind a generation."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import gradio as gr

from specviz.run.request import to_int
from specviz.figures.speedup import race_clock
from specviz.figures.trace import TraceError, load_trace_file, rounds_csv, trace_to_dict
from specviz.ui.serve import settings
from specviz.ui.serve import visitors
from specviz.ui.draw import charts, race
from specviz.ui.draw.escape import as_text
from specviz.ui.draw.export_page import charts_html
from specviz.ui.draw.run_views import inspector_markdown, round_tree_html, with_caption
from specviz.ui.serve.state import FIGURES, SHOWN_OUTPUTS, VIEW_OUTPUTS, RunState, RunUpdate
from specviz.ui.serve.user_errors import refused, sentence, user_errors

FIELD_PATH = re.compile(r"[a-z_]+(\[\d+\]|\.[a-z_]+)*: ")

INSPECTOR_HINT = ("Click any token above (or a struck-through rejected draft) to see the decision behind it: the "
                  "drafted token, p_draft, p_target, min(1, p_target/p_draft), the uniform draw and the verdict, "
                  "with the distributions it came from.")


def _has_rounds(state) -> bool:
    return isinstance(state, RunState) and bool(state.rounds)


def inspect_token(state, evt: gr.EventData):
    """The inspector for the clicked token (``evt`` carries its round and slot from the page's JS)."""
    try:
        r, slot = int(getattr(evt, "round")), int(getattr(evt, "slot"))
        round_ = state.rounds[r]
        return inspector_markdown(round_, slot), charts.inspector_figure(round_, slot), round_tree_html(round_)
    except (AttributeError, TypeError, ValueError, IndexError, KeyError):
        return INSPECTOR_HINT, gr.skip(), gr.skip()


def reset_inspector():
    """The inspector as before any click (a new run, a replayed pass or a loaded trace shows no
    earlier token's story)."""
    return INSPECTOR_HINT, None, ""


def replay(upto, state):
    """The run as it stood after pass ``upto``: tokens, summary and charts (no model runs)."""
    if not _has_rounds(state):
        raise refused("Nothing to replay yet: run something or load a saved trace.")
    with user_errors():
        upto = to_int("pass", upto, 0, len(state.rounds))
    n = len(state.rounds)
    return RunUpdate(state.view(upto, f"**Replay** · after pass {upto} of {n} · {as_text(state.label)}",
                                upto == n)).values(
        VIEW_OUTPUTS)


def race_view(state, first, last, upto=None):
    """The race lanes (:func:`specviz.ui.draw.race.race_figure`) of the run up to pass ``upto`` (None: every
    pass) against its plain baseline, passes ``first``…``last`` highlighted (1-based; one end alone
    runs to the start or the end; neither, or below 1: no highlight). Skips when there is no run;
    bad values are ignored."""
    if not _has_rounds(state):
        return gr.skip()
    n = len(state.rounds)
    try:
        n = min(max(int(upto), 0), n) if upto is not None else n
        ends = [int(x) if x not in (None, "") and int(x) >= 1 else None for x in (first, last)]
    except (TypeError, ValueError):
        ends = [None, None]
    start, plain_start, per_token = race_clock(state.rounds[:n], state.prefill_ms, state.baseline)
    lanes = race.race_lanes(state.rounds[:n], per_token, speculative_start_ms=start,
                            plain_start_ms=plain_start or 0.0)
    if ends == [None, None]:
        return race.race_figure(lanes)
    lo, hi = ends[0] or 1, ends[1] or n
    return race.race_figure(lanes, (min(lo, hi), max(lo, hi)))


def last_run_figures(state) -> dict | None:
    """The finished run's figures (``RunAnalysis.scalars()``), for the Playground's "load" button."""
    return state.analysis().scalars() if _has_rounds(state) else None


def step_replay(upto, state, delta: int):
    """The replay slider moved one pass back or forward (clamped to the run)."""
    n = len(state.rounds) if isinstance(state, RunState) else 0
    return gr.update(value=min(max(int(upto or 0) + delta, 0), n))


def _write(path: str, text: str) -> str:
    """Write ``text`` to ``path`` through a temporary file, so a second export of the same visitor
    at the same moment never serves a half-written file; returns ``path``."""
    staging = f"{path}.{os.getpid()}-{threading.get_ident()}.part"
    with open(staging, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(staging, path)
    return path


def export_run(state):
    """The run's trace (JSON), its rounds (CSV) and its charts (one self-contained HTML file),
    written into this visitor's export folder (:func:`specviz.ui.serve.visitors.export_folder`),
    overwriting the previous export: the disk used stays bounded however often one exports."""
    if not _has_rounds(state):
        raise refused("Nothing to export yet: run something first.")
    folder = visitors.export_folder()
    trace = json.dumps(trace_to_dict(state.rounds, **state.meta), ensure_ascii=False)
    return [_write(os.path.join(folder, "specviz-trace.json"), trace),
            _write(os.path.join(folder, "specviz-rounds.csv"), rounds_csv(state.rounds)),
            _write(os.path.join(folder, "specviz-charts.html"),
                   charts_html(state.view(None, "", True).figures(), state.label, state.meta))]


def _trace_problem(err: TraceError) -> str:
    """The loader's message as a sentence; one that begins with a field's path in the trace
    (``rounds[3].drafted[2].parent: …``) keeps the path as written."""
    text = str(err)
    return text.rstrip(".") + "." if FIELD_PATH.match(text) else sentence(text)


def load_trace(path, *, public: bool | None = None):
    """Load a saved trace (from the app's export or ``run --trace``) and show it at its last pass.

    The file is size-checked (:func:`specviz.ui.serve.settings.max_upload_bytes` of the mode), parsed and
    validated whole by :func:`specviz.figures.trace.load_trace_file`.

    Raises:
        gr.Error: no file, or one that is not a readable trace (too large, not JSON, malformed):
            one line naming the limit or the wrong field.
    """
    if not path or not isinstance(path, (str, os.PathLike)):
        raise refused("Choose a trace file (.json) first.")
    try:
        rounds, meta = load_trace_file(path, max_bytes=settings.max_upload_bytes(settings.is_public(public)))
    except TraceError as err:
        raise refused(f"Could not load that trace: {_trace_problem(err)}") from None
    with user_errors():
        state = RunState.from_rounds(rounds, meta)
    n = len(state.rounds)
    view = state.view(None, f"**Loaded** a saved trace · {n} passes · {as_text(state.label)}", True)
    return RunUpdate(view, state=state, slider=gr.update(maximum=max(n, 1), value=n)).values(SHOWN_OUTPUTS)


# ----------------------------------------------------------------------------- the page opens on a run
#: The recorded run the page opens on (a bundled trace, specviz/data/traces/README.md): the offline
#: same-family pair on code, where passes keep several tokens and some keep one.
RECORDED_RUN = "pair_code"
#: How long the recorded run takes to replay as the page opens, s, and in how many steps.
RECORDED_REPLAY_S, RECORDED_STEPS = 3.0, 10


def recorded_status(state: RunState) -> str:
    """The summary's status for the recorded run: what it is, the question to ask of it, and Run."""
    settings_ = state.meta.get("settings") or {}
    temperature = settings_.get("temperature")
    return (f"**A recorded run** of {as_text(state.label.removesuffix(' (saved trace)'))}"
            + (f" at T = {temperature:g}" if isinstance(temperature, (int, float)) else "")
            + f", recorded on {as_text(str(state.meta.get('device', '?')))} when this page was made: why did one "
            "pass keep four drafted tokens and another only one? Click a token to see its test. Then press "
            "**Run** to make your own.")


def recorded_caption(state: RunState) -> str:
    """The token box's first line for the recorded run: whose tokens these are and on which prompt,
    since the Run tab's own prompt and pair (what Run will use) are different ones."""
    settings_ = state.meta.get("settings") or {}
    prompt = " ".join(str(settings_.get("prompt", "")).split())
    prompt = prompt if len(prompt) <= 60 else prompt[:59].rstrip() + "…"
    return (f"A recorded run: {state.label.removesuffix(' (saved trace)')}"
            + (f", on “{prompt}”" if prompt else "") + ". Run makes your own from the prompt at left.")


def recorded_run(request: gr.Request = None):
    """As the page opens: the recorded run (:data:`RECORDED_RUN`) replayed pass by pass in about
    :data:`RECORDED_REPLAY_S` seconds, then whole, so the first thing a visitor sees is the method at
    work, with its colours and charts. Nothing is loaded or run (a saved trace). A page opened by a
    classroom link (any query) shows what the link asks for instead."""
    if request is not None and dict(getattr(request, "query_params", None) or {}):
        return
    path = Path(__file__).resolve().parents[2] / "data" / "traces" / f"{RECORDED_RUN}.json"
    rounds, meta = load_trace_file(str(path))
    state = RunState.from_rounds(rounds, meta)
    status, caption = recorded_status(state), recorded_caption(state)

    def view(upto, done, drawn=FIGURES):
        shown = state.view(upto, status, done, drawn=drawn)
        return shown._replace(tokens=with_caption(shown.tokens, caption))

    n = len(state.rounds)
    marks = sorted({max(1, round(n * i / RECORDED_STEPS)) for i in range(1, RECORDED_STEPS + 1)})
    for step, upto in enumerate(marks[:-1]):
        # The first update carries the tokens alone: drawing eight charts in the same update held
        # the first coloured tokens back by a second or more in the browser.
        yield RunUpdate(view(upto, False, drawn=() if step == 0 else FIGURES), state=state,
                        slider=gr.update(maximum=max(n, 1), value=upto)).values(SHOWN_OUTPUTS)
        time.sleep(RECORDED_REPLAY_S / RECORDED_STEPS)
    yield RunUpdate(view(None, True), state=state,
                    slider=gr.update(maximum=max(n, 1), value=n)).values(SHOWN_OUTPUTS)
