"""How much memory a target and its drafter take together, known before anything loads.

A drafter spec says what it loads: a draft model (its parameters, :func:`specviz.models.memory.model_parameters`),
a learned head (its safetensors header), a copy of the target (the int8 copy, its kind's
``copy_bytes``) or nothing (prompt lookup, early exit). Public mode refuses a pair that would not fit
(:func:`specviz.run.request.pin_public_device`) and a ZeroGPU request asks for time by its size.
"""

from __future__ import annotations

import torch

from specviz.drafters import drafter_kind
from specviz.models.memory import HEADROOM, bytes_per_parameter, model_layers, model_parameters, safetensors_parameters

__all__ = ["drafter_layers", "drafter_parameters", "pair_bytes", "pair_fits"]


def drafter_parameters(spec: str, target: str) -> int | None:
    """Parameters a drafter loads besides the target: a draft model's (:func:`model_parameters`),
    a learned head's (its safetensors header), 0 for drafters that load nothing (prompt lookup,
    early exit: the target's own layers); None when unknown. A copy of the target (int8) is
    counted by :func:`pair_bytes`, from its kind's ``copy_bytes``."""
    kind = drafter_kind(spec)
    if kind.parameter == "model_name":
        return model_parameters(spec)
    if not kind.needs_model:
        return 0
    from specviz.drafters.eagle import shipped_head_dir

    directory = spec.partition(":")[2]
    try:
        directory = directory or shipped_head_dir(target)
    except ValueError:
        return None
    return safetensors_parameters(directory)


def drafter_layers(spec: str, target: str) -> int | None:
    """Decoder layers one draft step runs: a draft model's (:func:`model_layers`), a learned
    head's (its directory's config, 1 for an EAGLE head); None for drafters without layers of
    their own (prompt lookup; early exit runs the target's first N) or when unknown."""
    kind = drafter_kind(spec)
    if kind.parameter == "model_name":
        return model_layers(spec)
    if not kind.needs_model:
        return None
    from specviz.drafters.eagle import shipped_head_dir

    try:
        return model_layers(spec.partition(":")[2] or str(shipped_head_dir(target)))
    except ValueError:
        return None


def pair_bytes(target: str, draft: str, dtype: str | torch.dtype) -> int | None:
    """Bytes of a target and its drafter's weights in ``dtype``, before either loads.

    ``(target parameters + draft parameters) × bytes_per_parameter(dtype)``, plus ``copy_bytes``
    per target parameter for a drafter that copies the target (the int8 copy is quantized from a
    float32 deep copy: 4). None when a count is unknown (:func:`model_parameters`).

    Args:
        target: the target's name (offline name, directory or hub id).
        draft: the normalised drafter spec.
        dtype: the pair's dtype (not ``"auto"``).
    """
    target_parameters = model_parameters(target)
    draft_parameters = drafter_parameters(draft, target)
    if target_parameters is None or draft_parameters is None:
        return None
    copy = drafter_kind(draft).copy_bytes * target_parameters
    return int((target_parameters + draft_parameters) * bytes_per_parameter(dtype) + copy)


def pair_fits(target: str, draft: str, dtype: str | torch.dtype, free_bytes: int | None) -> bool:
    """Whether a pair's :func:`pair_bytes` times :data:`HEADROOM` fits in ``free_bytes`` (the
    memory models may fill on the device, e.g. :func:`memory_budget`). True when either is
    unknown: loading finds out then."""
    needed = pair_bytes(target, draft, dtype)
    return needed is None or free_bytes is None or needed * HEADROOM <= free_bytes
