"""How long a generation asks ZeroGPU for: seconds estimated from the request, before the call.

ZeroGPU takes a callable ``duration`` (``spaces.GPU(duration=fn)``, called with the decorated
function's arguments) and charges the visitor's daily quota for the seconds it reserves; a call
reserved at 120 s is refused once a visitor's quota drops below 120 s, however short the run. So
the page asks for what this request can take, bounded:

* a step of batch-1 eager decoding on a GPU is launch-bound, about :data:`LAYER_STEP_S` per
  decoder layer (:func:`specviz.figures.theory.launch_bound_cost_ratio`, /work/shared/GPU.md); a draft
  step of a model with ``draft_layers`` costs that many layers, prompt lookup none;
* a speculative run's worst case is α = 0: every pass emits one token and costs K draft steps and
  one verify pass, ``tokens × (K·draft_layers + target_layers) × LAYER_STEP_S``;
* a baseline that must be timed is plain decoding about twice over (one full run, then short
  ones: :func:`specviz.run.baseline.measure_baseline`), the warm-up a few tokens of both;
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
import os

from specviz.models import memory
from specviz.run import pair_sizing
from specviz.drafters import drafter_kind
from specviz.core.records import effective_k
from specviz.run.runner import WARMUP_TOKENS

#: Seconds one decoder layer adds to a batch-1 eager step on a GPU when nothing calibrated it
#: (launch-bound: ~10 kernels per layer at ~10 µs each plus transformers' Python, ~0.2-0.4 ms;
#: rounded up so the estimate errs long). ``SPECVIZ_LAYER_STEP_S`` overrides it with a measured
#: figure: ``python -m scripts.gpu_check`` prints the one it measures (:func:`layer_step_s`).
DEFAULT_LAYER_STEP_S = 0.6e-3
#: Kept for callers that read the constant: the uncalibrated figure.
LAYER_STEP_S = DEFAULT_LAYER_STEP_S
#: Prompt tokens one prefill pass covers for the cost of one decode step (a launch-bound pass
#: costs about the same for a short prompt; a long one becomes compute-bound).
PREFILL_TOKENS_PER_STEP = 256
#: Characters per token assumed for a prompt not yet encoded (English BPE averages ~4: 3 errs long).
CHARS_PER_TOKEN = 3
#: Seconds of one lossless-check draw after its two forward passes (sampling on the device).
DRAW_S = 1e-3
#: Bytes per second a pair loads at inside a job (disk or hub cache → GPU), and the fixed part of
#: a load (tokenizer, config, building the modules), for a pair not yet in the model cache.
LOAD_BYTES_PER_S = 1.0e9
LOAD_FIXED_S = 3.0
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


def layer_step_s(env=None) -> float:
    """Seconds per decoder layer of a batch-1 step: ``SPECVIZ_LAYER_STEP_S`` where it is a positive
    number (a device run's calibration), else :data:`DEFAULT_LAYER_STEP_S`."""
    env = os.environ if env is None else env
    try:
        value = float(env.get("SPECVIZ_LAYER_STEP_S", ""))
    except ValueError:
        return DEFAULT_LAYER_STEP_S
    return value if math.isfinite(value) and value > 0 else DEFAULT_LAYER_STEP_S


def prompt_tokens(prompt: str) -> int:
    """Tokens a prompt is assumed to take before it is encoded (:data:`CHARS_PER_TOKEN`)."""
    return math.ceil(len(prompt or "") / CHARS_PER_TOKEN)


def prefill_steps(tokens: int) -> float:
    """What a prefill pass over ``tokens`` prompt tokens costs beyond the decode step it stands
    for (it gives the first token's logits), in decode steps."""
    return max(0, int(tokens)) / PREFILL_TOKENS_PER_STEP


def load_seconds(request) -> float:
    """Seconds the job spends loading the request's pair: 0 when both are in the model cache (on a
    Space: placed at import and moved into the worker at its start, :data:`FIXED_S`), else their
    bytes (:func:`specviz.run.pair_sizing.pair_bytes`, a 1 GB guess when unknown) over
    :data:`LOAD_BYTES_PER_S` plus :data:`LOAD_FIXED_S`."""
    from specviz.models import loading as models

    dtype = request.dtype if request.dtype != "auto" else "bfloat16"
    names = [request.target] + ([request.draft] if drafter_kind(request.draft).parameter == "model_name" else [])
    if all(models.peek_cached(name, request.device, request.dtype) is not None for name in names):
        return 0.0
    nbytes = pair_sizing.pair_bytes(request.target, request.draft, dtype) or 1e9
    return LOAD_FIXED_S + nbytes / LOAD_BYTES_PER_S


def baseline_timed(request, baselines) -> bool:
    """Whether the Run job will time a fresh baseline: the job reuses a visitor's stored one only
    when :func:`specviz.run.runner.baseline_key` of the prepared run is among ``baselines``' keys
    (:func:`specviz.run.baseline.measure_baseline` is skipped then). That key holds the prompt's token
    ids, so it is computed here the same way when the target is already in the model cache (its
    tokenizer encodes the prompt, nothing loads); when it is not, the job loads it and no key can
    be known yet: timed (the estimate errs long)."""
    if not baselines:
        return True
    from types import SimpleNamespace

    from specviz.models import loading as models
    from specviz.run.runner import baseline_key, encode_prompt

    target = models.peek_cached(request.target, request.device, request.dtype)
    if target is None:
        return True
    ids, _ = encode_prompt(target, request.prompt, request.chat)
    return baseline_key(SimpleNamespace(request=request, target=target, prompt_ids=ids)) not in baselines


def step_layers(target: str, draft: str) -> tuple[int, int]:
    """(target layers, layers of one draft step) before anything loads: the configs' layer counts
    (:func:`specviz.models.memory.model_layers`, :func:`specviz.run.pair_sizing.drafter_layers`), :data:`UNKNOWN_LAYERS`
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
        return target_layers, pair_sizing.drafter_layers(draft, target) or UNKNOWN_LAYERS
    return target_layers, 0  # lookup, suffix, recycling, plain decoding: no layers of its own


def run_seconds(max_new_tokens: int, k: int, target_layers: int, draft_layers: int, baseline: bool,
                prompt: int = 0) -> float:
    """Worst-case GPU seconds of one run (α = 0), warm-up and, with ``baseline``, the timed plain
    decoding included; :data:`FIXED_S` and loading not included.

    Args:
        max_new_tokens: the run's token limit.
        k: lookahead K (0: plain decoding).
        target_layers, draft_layers: decoder layers of a target step and of one draft step.
        baseline: whether plain decoding must be timed (:func:`baseline_timed`).
        prompt: the prompt's tokens: each generation (the run, and each baseline sample) begins
            with a prefill of both models (:func:`prefill_steps`).
    """
    layer_s = layer_step_s()
    step = target_layers * layer_s
    per_token = (k * draft_layers + target_layers) * layer_s if k > 0 else step
    tokens = max(0, int(max_new_tokens))
    prefill = prefill_steps(prompt)
    seconds = (tokens + WARMUP_TOKENS) * per_token + prefill * (target_layers + draft_layers) * layer_s
    if baseline:  # one full sample, then short ones (measure_baseline): about two runs, two prefills
        seconds += (2 * tokens + WARMUP_TOKENS) * step + 2 * prefill * step
    return seconds


def replay_seconds(request, target_layers: int) -> float:
    """What the oracle drafter adds before its runs (0 for every other kind): the recording of the
    target's own output, plain decoding of the run's tokens and of the warm-up's, with its prefill
    (:func:`specviz.run.runner.record_for_oracle`)."""
    if not drafter_kind(request.draft).replays:
        return 0.0
    steps = request.max_new_tokens + WARMUP_TOKENS + prefill_steps(prompt_tokens(request.prompt))
    return steps * target_layers * layer_step_s()


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
    """:func:`duration_s` of one :class:`specviz.run.request.RunRequest` (its target, drafter, K, token
    limit and prompt; ``baseline``: plain decoding must be timed, :func:`baseline_timed`), its
    pair's load (:func:`load_seconds`) included."""
    target_layers, draft_layers = step_layers(request.target, request.draft)
    k = effective_k(request.k, not request.plain)
    seconds = run_seconds(request.max_new_tokens, k, target_layers, draft_layers, baseline,
                          prompt_tokens(request.prompt)) + replay_seconds(request, target_layers)
    return duration_s(seconds + load_seconds(request), cap)


def sweep_duration(requests, cap: float) -> int:
    """:func:`duration_s` of a sweep or side by side: each request's run and its timed baseline,
    and each distinct pair's load."""
    total = 0.0
    loads = {}
    for r in requests:
        target_layers, draft_layers = step_layers(r.target, r.draft)
        total += run_seconds(r.max_new_tokens, effective_k(r.k, not r.plain), target_layers, draft_layers, True,
                             prompt_tokens(r.prompt)) + replay_seconds(r, target_layers)
        loads[(r.target, r.draft)] = load_seconds(r)
    return duration_s(total + sum(loads.values()), cap)


def draws_seconds(n_draws: int, target_layers: int, draft_layers: int, prompt: int = 0) -> float:
    """GPU seconds of the lossless check (:func:`specviz.ui.teach.lossless.first_token_experiment`):
    one forward pass of the target and one draft proposal over the prompt's ``prompt`` tokens,
    computed once, then ``n_draws`` draws each way (:data:`DRAW_S` each); loading not included."""
    passes = (1 + prefill_steps(prompt)) * (target_layers + draft_layers) * layer_step_s()
    return passes + 2 * max(0, int(n_draws)) * DRAW_S


def draws_duration(request, n_draws: int, cap: float) -> int:
    """:func:`duration_s` of the lossless check of ``request`` with ``n_draws`` draws each way
    (:func:`draws_seconds`), the pair's load (:func:`load_seconds`) included."""
    target_layers, draft_layers = step_layers(request.target, request.draft)
    seconds = draws_seconds(n_draws, target_layers, draft_layers, prompt_tokens(request.prompt))
    return duration_s(seconds + load_seconds(request), cap)
