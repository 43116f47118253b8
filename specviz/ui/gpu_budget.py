"""How long a generation asks ZeroGPU for: seconds estimated from the request, before the call.

ZeroGPU takes a callable ``duration`` (``spaces.GPU(duration=fn)``, called with the decorated
function's arguments) and charges the visitor's daily quota for the seconds it reserves; a call
reserved at 120 s is refused once a visitor's quota drops below 120 s, however short the run. So
the page asks for what this request can take, bounded:

* a step of batch-1 eager decoding on a GPU is launch-bound, about :data:`LAYER_STEP_S` per
  decoder layer (:func:`specviz.theory.launch_bound_cost_ratio`, /work/shared/GPU.md); a draft
  step of a model with ``draft_layers`` costs that many layers, prompt lookup none;
* a speculative run's worst case is α = 0: every pass emits one token and costs K draft steps and
  one verify pass, ``tokens × (K·draft_layers + target_layers) × LAYER_STEP_S``;
* a baseline that must be timed is plain decoding about twice over (one full run, then short
  ones: :func:`specviz.baseline.measure_baseline`), the warm-up a few tokens of both;
* :data:`FIXED_S` for the worker's start, the models' move onto the GPU and first kernels.

ZeroGPU charges more than it is asked for: ``spaces`` multiplies the requested seconds by its
card's ``duration_factor`` (``spaces/zero/client.py: get_duration_seconds``; 1.5 on the RTX PRO
6000 ZeroGPU runs now, half a card by default) before checking them against the visitor's quota.
So the estimate is capped where the *charge* meets the cap (:func:`duration_s`: the public time
limit in public mode, else :data:`PRIVATE_CAP_S`, divided by :func:`duration_factor`) and floored
at :data:`MIN_S`; the worker's deadline
(:func:`deadline_s`) is :data:`MARGIN_S` earlier, so a run ends cleanly, its tokens kept, before
ZeroGPU would kill it.
"""

from __future__ import annotations

import functools
import json
import math

from .. import memory
from ..drafters import drafter_kind
from ..runner import WARMUP_TOKENS

#: Seconds one decoder layer adds to a batch-1 eager step on a GPU (launch-bound: ~10 kernels per
#: layer at ~10 µs each, plus Python), rounded up so the estimate errs long.
LAYER_STEP_S = 1.5e-3
#: Layers assumed for a model whose config is not known before it loads.
UNKNOWN_LAYERS = 32
#: Seconds every call costs before its first token (worker fork, models onto the GPU, first kernels).
FIXED_S = 8.0
#: The shortest reservation asked for.
MIN_S = 10.0
#: The longest reservation outside public mode (ZeroGPU's usual ceiling for one call).
PRIVATE_CAP_S = 120.0
#: How much earlier than the reservation the worker's deadline falls.
MARGIN_S = 4.0


def step_layers(target: str, draft: str) -> tuple[int, int]:
    """(target layers, layers of one draft step) before anything loads: the configs' layer counts
    (:func:`specviz.memory.model_layers`, :func:`specviz.memory.drafter_layers`), :data:`UNKNOWN_LAYERS`
    for an unknown model; a drafter without layers of its own
    (lookup, suffix, recycling, plain decoding) counts 0, early exit ``N`` its N layers and the
    int8 self-draft the target's."""
    target_layers = memory.model_layers(target) or UNKNOWN_LAYERS
    kind = drafter_kind(draft)
    if kind.copy_bytes:  # the int8 self-draft: the target itself, quantized: its layers again
        return target_layers, target_layers
    if kind.parameter == "layers":  # early exit: the target's first N layers
        layers = draft.partition(":")[2]
        return target_layers, int(layers) if layers.isdigit() else target_layers // 2
    if kind.needs_model:
        return target_layers, memory.drafter_layers(draft, target) or UNKNOWN_LAYERS
    return target_layers, 0  # lookup, suffix, recycling, plain decoding: no layers of its own


def run_seconds(max_new_tokens: int, k: int, target_layers: int, draft_layers: int, baseline: bool) -> float:
    """Worst-case GPU seconds of one run (α = 0), warm-up and, with ``baseline``, the timed plain
    decoding included; :data:`FIXED_S` not included.

    Args:
        max_new_tokens: the run's token limit.
        k: lookahead K (0: plain decoding).
        target_layers, draft_layers: decoder layers of a target step and of one draft step.
        baseline: whether plain decoding must be timed (not reused from the visitor's earlier run).
    """
    step = target_layers * LAYER_STEP_S
    per_token = (k * draft_layers + target_layers) * LAYER_STEP_S if k > 0 else step
    tokens = max(0, int(max_new_tokens))
    seconds = (tokens + WARMUP_TOKENS) * per_token
    if baseline:
        seconds += (2 * tokens + WARMUP_TOKENS) * step
    return seconds


#: ``duration_factor`` assumed where ``spaces``' card table cannot be read (the RTX PRO 6000's).
DEFAULT_DURATION_FACTOR = 1.5


@functools.cache
def duration_factor() -> float:
    """What ZeroGPU multiplies a requested duration by before charging it: the largest
    ``duration_factor`` of the cards in the installed ``spaces`` package's ``zero/configs.json``
    (1.0 for the H200, 1.5 for the RTX PRO 6000; the largest, since the main process cannot tell
    which card its worker will get), :data:`DEFAULT_DURATION_FACTOR` without ``spaces``. Never
    below 1. Read once per process."""
    try:
        from importlib.resources import files

        cards = json.loads(files("spaces.zero").joinpath("configs.json").read_text())
        factor = max(float(card["duration_factor"]) for card in cards)
    except Exception:  # spaces not installed, or its table moved: assume today's card
        factor = DEFAULT_DURATION_FACTOR
    return max(1.0, factor)


def duration_s(seconds: float, cap: float) -> int:
    """The reservation to request for work estimated at ``seconds`` (:data:`FIXED_S` added): whole
    seconds, at least :data:`MIN_S`, and small enough that ZeroGPU's charge (the request times
    :func:`duration_factor`) stays within ``cap`` (a NaN estimate asks for that most)."""
    most = max(MIN_S, math.floor(cap / duration_factor()))
    if not math.isfinite(seconds):
        return int(most)
    return int(min(most, max(MIN_S, math.ceil(FIXED_S + seconds))))


def charged_s(duration: float) -> float:
    """The seconds ZeroGPU charges the visitor's quota for a request of ``duration``."""
    return duration * duration_factor()


def cap_s(public: bool, max_run_s: float) -> float:
    """The longest reservation of a mode: the public time limit ``max_run_s``, else
    :data:`PRIVATE_CAP_S` (never below :data:`MIN_S`)."""
    return max(MIN_S, float(max_run_s) if public else PRIVATE_CAP_S)


def deadline_s(duration: float) -> float:
    """Seconds after the call starts at which the worker ends its loop (what was generated kept):
    :data:`MARGIN_S` before ``duration``, and never before half of it."""
    return max(duration / 2, duration - MARGIN_S)


def request_duration(request, baseline: bool, cap: float) -> int:
    """:func:`duration_s` of one :class:`specviz.request.RunRequest` (its target, drafter, K and
    token limit; ``baseline``: plain decoding must be timed)."""
    target_layers, draft_layers = step_layers(request.target, request.draft)
    k = 0 if request.plain else request.k
    return duration_s(run_seconds(request.max_new_tokens, k, target_layers, draft_layers, baseline), cap)


def sweep_duration(requests, cap: float) -> int:
    """:func:`duration_s` of a sweep or side by side: each request's run and its timed baseline."""
    total = 0.0
    for r in requests:
        target_layers, draft_layers = step_layers(r.target, r.draft)
        total += run_seconds(r.max_new_tokens, 0 if r.plain else r.k, target_layers, draft_layers, True)
    return duration_s(total, cap)


def draws_duration(request, n_draws: int, cap: float) -> int:
    """:func:`duration_s` of the lossless check: ``n_draws`` first tokens drawn each way, each a
    draft step and a verify pass (:func:`specviz.ui.teach.lossless.first_token_experiment`)."""
    target_layers, draft_layers = step_layers(request.target, request.draft)
    seconds = 2 * max(0, int(n_draws)) * (target_layers + draft_layers) * LAYER_STEP_S
    return duration_s(seconds, cap)
