"""Self-drafts: drafts made from the target model itself, with no second checkpoint.

Both are teaching cases rather than speedups (see ``DRAFTER_KINDS`` in :mod:`specviz.drafters.registry`),
and both draft through a :class:`~specviz.drafters.draft_model.ModelDrafter`:

* :func:`int8_draft`: a dynamically int8-quantized copy of the target. Well aligned with the
  target, but on a CPU each of its steps costs 50-100% of a target step.
* :func:`early_exit_draft`: the target's first N decoder layers, sharing the target's weights.
  Free in memory, but untrained for this it agrees with the target on a few percent of tokens.

The int8 copies are kept per target (a :class:`~specviz.models.loading.LoadedModel`) in a weak cache:
a copy dies with its target, and :mod:`specviz.models.loading`' model cache drops it explicitly
(:func:`drop_int8`) when it evicts the target, and counts its bytes against the cache's limit
(:func:`int8_copy`). This module imports nothing from :mod:`specviz.models.loading` (which imports it):
``target`` below is a :class:`specviz.models.loading.LoadedModel`, used through its ``model``,
``device`` and ``name`` attributes only.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
import warnings
import weakref

import torch

__all__ = ["clear_int8", "drop_int8", "early_exit_draft", "int8_copy", "int8_draft", "num_layers"]

logger = logging.getLogger(__name__)

_LOCK = threading.RLock()
# LoadedModel -> its int8 copy; LoadedModel compares by identity, so this keys one loaded instance.
_INT8: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# --------------------------------------------------------------------------- int8 copies
def int8_draft(target) -> torch.nn.Module:
    """A dynamically int8-quantized copy of the target (all ``nn.Linear`` layers, lm_head included).

    Built from a float32 deep copy with ``torch.ao.quantization.quantize_dynamic``; embeddings and
    norms stay float32. Cached per target: later calls return the same module until the target is
    evicted from the model cache (or garbage). The copy costs about a quarter of the float32
    weights in memory plus the float embedding.

    Raises:
        ValueError: if the target is on CUDA (PyTorch's dynamic int8 kernels are CPU-only).
    """
    if target.device.type != "cpu":
        raise ValueError(
            f"the int8 draft needs the target on the CPU (PyTorch's dynamic int8 kernels are CPU-only); "
            f"the target is on {target.device}"
        )
    with _LOCK:
        cached = _INT8.get(target)
        if cached is not None:
            return cached
        t0 = time.perf_counter()
        clone = copy.deepcopy(target.model).float().eval()
        with warnings.catch_warnings():
            # torch marks torch.ao.quantization deprecated in favour of torchao, which is not a
            # dependency; the API still works in the pinned torch.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", UserWarning)
            quantized = torch.ao.quantization.quantize_dynamic(
                clone, {torch.nn.Linear}, dtype=torch.qint8, inplace=True
            )
        quantized.eval()
        _INT8[target] = quantized
        logger.info("built int8 draft of %s in %.2f s", target.name, time.perf_counter() - t0)
        return quantized


def int8_copy(target) -> torch.nn.Module | None:
    """The int8 copy :func:`int8_draft` built for ``target``, or None; never builds one."""
    with _LOCK:
        return _INT8.get(target)


def drop_int8(target) -> None:
    """Forget ``target``'s int8 copy (freed once nothing else holds it)."""
    with _LOCK:
        _INT8.pop(target, None)


def clear_int8() -> None:
    """Forget every int8 copy."""
    with _LOCK:
        _INT8.clear()


# --------------------------------------------------------------------------- early exit
def num_layers(model: torch.nn.Module) -> int:
    """Number of decoder layers of a transformers causal LM (``config.num_hidden_layers``)."""
    return int(model.config.num_hidden_layers)


def early_exit_draft(target, n_layers: int) -> torch.nn.Module:
    """The target truncated to its first ``n_layers`` decoder layers, sharing the target's weights.

    The returned model is of the target's class, with a config copy whose ``num_hidden_layers``
    (and ``layer_types``, where present, e.g. Gemma3) is cut to ``n_layers``. Its embedding, first
    ``n_layers`` decoder layers, rotary embedding, final norm and lm_head *are* the target's
    modules: no weights are copied, and it is built on the meta device so construction costs
    milliseconds. It runs with its own fresh ``DynamicCache`` (layer indices 0..n-1 are the
    target's, which is fine since each model has its own cache). Nothing is cached here.

    Raises:
        ValueError: unless ``1 <= n_layers < number of target layers``, or if the architecture
            does not have the usual ``model.layers`` layout.
    """
    model = target.model
    total = num_layers(model)
    if not isinstance(n_layers, int) or not 1 <= n_layers < total:
        raise ValueError(f"early-exit needs 1 <= n_layers < {total} (the target's layer count), got {n_layers}")
    prefix = getattr(model, "base_model_prefix", "model")
    inner = getattr(model, prefix, None)
    if inner is None or not isinstance(getattr(inner, "layers", None), torch.nn.ModuleList):
        raise ValueError(f"early-exit drafts need a decoder with '{prefix}.layers'; {type(model).__name__} has none")

    config = copy.deepcopy(model.config)
    config.num_hidden_layers = n_layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types[:n_layers])
    # Meta device: the constructor's freshly initialised weights would be thrown away anyway.
    with torch.device("meta"):
        draft = type(model)(config)
    for child_name, _ in list(draft.named_children()):
        if child_name != prefix:
            setattr(draft, child_name, getattr(model, child_name))
    draft_inner = getattr(draft, prefix)
    for child_name, _ in list(draft_inner.named_children()):
        if child_name == "layers":
            draft_inner.layers = inner.layers[:n_layers]
        else:
            setattr(draft_inner, child_name, getattr(inner, child_name))
    leftover = [n for n, t in list(draft.named_parameters()) + list(draft.named_buffers()) if t.is_meta]
    if leftover:
        raise ValueError(f"could not share all of {type(model).__name__}'s modules for early exit: {leftover[:3]}")
    draft.generation_config = model.generation_config
    draft.eval()
    return draft
