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

The estimate is capped (:func:`duration_s`: the public time limit in public mode, else
:data:`PRIVATE_CAP_S`) and floored at :data:`MIN_S`; the worker's deadline
(:func:`deadline_s`) is :data:`MARGIN_S` earlier, so a run ends cleanly, its tokens kept, before
ZeroGPU would kill it.
"""

from __future__ import annotations

import math

from .. import memory
from ..drafters import drafter_kind
from ..request import effective_k
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


def duration_s(seconds: float, cap: float) -> int:
    """The reservation for work estimated at ``seconds`` (:data:`FIXED_S` added): whole seconds
    between :data:`MIN_S` and ``cap`` (a NaN estimate asks for the cap)."""
    if not math.isfinite(seconds):
        return int(cap)
    return int(min(cap, max(MIN_S, math.ceil(FIXED_S + seconds))))


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
    k = effective_k(request.k, not request.plain)
    return duration_s(run_seconds(request.max_new_tokens, k, target_layers, draft_layers, baseline), cap)


def sweep_duration(requests, cap: float) -> int:
    """:func:`duration_s` of a sweep or side by side: each request's run and its timed baseline."""
    total = 0.0
    for r in requests:
        target_layers, draft_layers = step_layers(r.target, r.draft)
        total += run_seconds(r.max_new_tokens, effective_k(r.k, not r.plain), target_layers, draft_layers, True)
    return duration_s(total, cap)


def draws_duration(request, n_draws: int, cap: float) -> int:
    """:func:`duration_s` of the lossless check: ``n_draws`` first tokens drawn each way, each a
    draft step and a verify pass (:func:`specviz.ui.teach.lossless.first_token_experiment`)."""
    target_layers, draft_layers = step_layers(request.target, request.draft)
    seconds = 2 * max(0, int(n_draws)) * (target_layers + draft_layers) * LAYER_STEP_S
    return duration_s(seconds, cap)
