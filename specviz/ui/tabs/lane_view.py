"""The engines tab's lane (/llamacpp_lane): the Run tab's prompt and pair in specviz and in llama.cpp,
in this process, side by side; and what to run in llama.cpp, vLLM and SGLang for the same settings.

One pair, two implementations, opposite answers: each engine's own decode rate, speedup, acceptance,
tokens per pass, c and v (:mod:`specviz.run.llamacpp_lane`), and one sentence each from the closed
form at its own costs saying why it wins or loses. llama.cpp runs only where specviz has the pair's
GGUF files (the offline Qwen2.5-Coder pair) and xllamacpp is installed; otherwise the panel says
what is missing. Not in public mode: it runs several generations on the server's CPU.
"""

from __future__ import annotations

import re

import gradio as gr

from specviz.engine_logs.recipes import engine_commands
from specviz.ui.draw.escape import as_text
from specviz.ui.serve import gpu
from specviz.ui.serve.feature import Feature, Plan
from specviz.ui.serve.fields import SHARED, request_from, spread
from specviz.ui.serve.user_errors import refused, user_errors
from specviz.ui.tabs.run_stream import load_and_encode

#: What the lane answers with in words when it cannot run here.
PUBLIC_REFUSAL = ("The llama.cpp lane runs several generations on the machine that serves this page, so a public demo "
                  "does not offer it: run specviz on your own machine (README) to compare the two engines.")
INTRO = ("**One pair, two implementations.** The Run tab's prompt and model pair, run once with specviz's exact rule "
         "and then in **llama.cpp** in this process (plain, draft model with greedy and with probabilistic "
         "drafting, n-gram lookup), each engine's own figures side by side. The same weights can win in one and lose "
         "in the other: the closed form with each engine's own c and v says why. Needs the offline Qwen2.5-Coder "
         "pair (its GGUF files) and `pip install xllamacpp`; a run takes a few minutes on a CPU.")


def _xllamacpp_installed() -> bool:
    """Whether xllamacpp can be found (without importing it: the page is being built)."""
    import importlib.util

    return importlib.util.find_spec("xllamacpp") is not None


def lane_status(public: bool) -> str:
    """The lane's status line as the page opens: what this server lacks to run it, in the words
    its refusal would use (:func:`plan_lane`), or, where it can run, the pair to pick in the Run
    tab first (checked on Run: it is the Run tab's choice; the default pair has no GGUF files). A
    newcomer met each refusal only as a pop-up that went away."""
    from specviz.run.llamacpp_lane import INSTALL_HINT

    if public:
        return PUBLIC_REFUSAL
    if not _xllamacpp_installed():
        return f"**Not available on this server yet.** {INSTALL_HINT}"
    from specviz.ui.serve.settings import PAIR_TARGET, PRESETS

    pair = next(label for label, preset in PRESETS.items() if preset["target"] == PAIR_TARGET)
    return (f"It runs the Run tab's model pair: pick **{as_text(pair)}** there first (llama.cpp reads GGUF files, "
            "which specviz keeps for that pair only).")


@spread(SHARED)
def run_lane(values, progress=gr.Progress(), *, public: bool | None = None):
    """Stream specviz's run and llama.cpp's beside it for the Run tab's settings: (table, status)
    updates (:data:`LANE`)."""
    yield from LANE.stream(values, public, progress=progress)


def plan_lane(values: dict, public: bool | None) -> Plan:
    """/llamacpp_lane's plan: the Run tab's request, refused in public mode, without xllamacpp, or
    for a pair whose GGUF files specviz does not have."""
    from specviz.models.offline import OFFLINE_MODELS
    from specviz.run.llamacpp_lane import import_xllamacpp

    if public:
        raise refused(PUBLIC_REFUSAL)
    request = request_from({**values, "max_new_tokens": values.get("max_new_tokens") or 96}, False)
    try:
        import_xllamacpp()
    except ImportError as err:
        raise refused(str(err)) from None
    spec = OFFLINE_MODELS.get(request.target)
    if spec is None or not spec.keep_gguf:
        raise refused(f"llama.cpp reads GGUF files, and specviz keeps them only for the offline Qwen2.5-Coder pair, "
                      f"not for {as_text(request.target)}: pick that pair in the Run tab.")
    return Plan((request,), 900)


def lane_work(ctx: "gpu.JobContext", request):
    """Load the pair, run specviz's exact run with its plain baseline, then llama.cpp's modes: (the
    table in Markdown, status) updates."""
    from specviz.run import llamacpp_lane

    yield gr.skip(), "Loading the pair for specviz…"
    prepared = load_and_encode(request, ctx, warn=ctx.warn)
    with user_errors():
        target_gguf, draft_gguf = llamacpp_lane.gguf_files(prepared)
    yield gr.skip(), "specviz: warming up, one speculative run, then plain decoding timed for its speedup…"
    with prepared.in_use():  # no other load evicts the pair while it runs
        rows = [llamacpp_lane.specviz_row(prepared)]
    if ctx.should_end():
        yield lane_markdown(rows), "**Stopped** after specviz's run."
        return
    yield lane_markdown(rows), "llama.cpp: loading the same pair from its GGUF files and running each mode…"
    rows += llamacpp_lane.llamacpp_rows(target_gguf, draft_gguf, request.prompt, k=request.k,
                                        temperature=request.sampling.temperature,
                                        max_tokens=request.max_new_tokens, seed=request.seed)
    yield lane_markdown(rows), f"**Done**: one prompt, {len(rows)} runs, two engines."


def lane_markdown(rows: list[dict]) -> str:
    """The lane's rows as a table (each engine's figures, in the same units) and its sentences."""
    def f(x, spec=".2f"):
        return "–" if x is None else format(x, spec)

    head = ("| engine | mode | decode tokens/s | speedup over its own plain | accepted ÷ drafted | α | tokens per pass "
            "| c | v |\n|---|---|---|---|---|---|---|---|---|")
    body = [f"| {r['engine']} | {as_text(r['mode'])} | {f(r.get('decode_tokens_per_s'), '.1f')} | "
            f"{f(r.get('decode_speedup')) + '×' if r.get('decode_speedup') is not None else '–'} | "
            f"{f(r.get('acceptance'), '.3f')} | {f(r.get('alpha'))} | {f(r.get('tokens_per_pass'))} | "
            f"{f(r.get('c'))} | {f(r.get('v'))} |" for r in rows]
    why = [f"- {as_text(r['why'])}" for r in rows if r.get("why")]
    plain = rows[0].get("plain_decode_tokens_per_s") if rows else None
    note = (f"\n\nspecviz's plain decoding: {plain:.1f} tokens/s. Every rate is the tokens after the first ÷ the time "
            "after the prompt's pass (llama.cpp's own predicted_per_second); each engine's speedup is over its own "
            "plain decoding on the same machine." if plain else "")
    return "\n".join([head, *body]) + note + ("\n\n**Why**\n\n" + "\n".join(why) if why else "")


def fenced(text: str) -> str:
    """``text`` as a Markdown code block, shown character for character (entities and markup
    included: a code block turns nothing into an element): the request carries the visitor's
    prompt, so its fence is longer than any run of backticks in it, and a line break in it (JSON
    writes none) ends as a space."""
    text = " ".join(str(text).splitlines())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def commands_markdown(values: dict) -> str:
    """What to run in llama.cpp, vLLM and SGLang for the Run tab's settings, and what to import
    after (:func:`specviz.engine_logs.recipes.engine_commands`); model-free."""
    from specviz.drafters import drafter_kind
    from specviz.models.offline import OFFLINE_MODELS, gguf_path

    request = request_from({**values, "max_new_tokens": values.get("max_new_tokens") or 96}, False)
    kind = drafter_kind(request.draft)
    model_draft = kind.parameter == "model_name"

    def hub(name):
        return OFFLINE_MODELS[name].hub_id if name in OFFLINE_MODELS else (name if "/" in name else None)

    target_gguf, draft_gguf = gguf_path(request.target), gguf_path(request.draft) if model_draft else None
    lines = []
    for c in engine_commands(hub(request.target), hub(request.draft) if model_draft else None, request.k,
                             request.sampling.temperature, target_gguf=str(target_gguf) if target_gguf else None,
                             draft_gguf=str(draft_gguf) if draft_gguf else None, lookup=kind.lookup, threads=1):
        if c.missing:
            lines.append(f"**{c.engine}**: {as_text(c.missing)}")
        else:
            lines.append(f"**{c.engine}**\n\n```bash\n{c.command}\n```\nthen send\n\n{fenced(c.request)}\n"
                         f"then: {as_text(c.bring_back)}")
    return "\n\n".join(lines)


@spread(SHARED)
def show_commands(values, *, public: bool | None = None):
    """The commands for the Run tab's settings (:func:`commands_markdown`)."""
    return commands_markdown(values)


def build_panel(ctx, public: bool) -> None:
    """The lane's accordion in the engines tab: its intro, Run and Stop, the table, and the
    commands for the Run tab's settings."""
    import functools

    with gr.Accordion("One pair, two engines: specviz beside llama.cpp", open=False, elem_id="sv-lane-panel"):
        gr.Markdown(INTRO)
        with gr.Row():
            start = gr.Button("Run the Run tab's prompt in both", variant="primary", elem_id="sv-lane-run")
            stop = gr.Button("Stop", variant="stop")
            commands = gr.Button("What to run in an engine", elem_id="sv-lane-commands")
        status = gr.Markdown(lane_status(public), elem_id="sv-lane-status")
        table = gr.Markdown(elem_id="sv-lane-table")
        recipe = gr.Markdown(elem_id="sv-lane-recipes")
    LANE.wire(start.click, functools.partial(run_lane, public=public), ctx.run_inputs(SHARED), [table, status], public,
              stop=stop)
    commands.click(functools.partial(show_commands, public=public), ctx.run_inputs(SHARED), recipe,
                   api_name="engine_commands", concurrency_id="playground", concurrency_limit=None,
                   show_progress="hidden")


#: specviz beside llama.cpp (/llamacpp_lane), declared once (:mod:`specviz.ui.serve.feature`).
LANE = Feature("llamacpp_lane", lane_work, plan_lane)
