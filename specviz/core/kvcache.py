"""The models' KV caches: the keyword that hands a cache to a forward pass, the oldest transformers
this code runs with, and a static cache whose passes have fixed shapes.

* :func:`cache_argument`: transformers 5.24 renamed the forward keyword ``past_key_values`` to
  ``cache`` (``@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")``). On 5.17–5.23 the
  models' forwards take ``past_key_values`` plus ``**kwargs``, so a ``cache=`` keyword disappears
  into ``**kwargs``: the model builds a private cache each call and ours stays empty. The keyword
  is therefore chosen from the module's own forward signature, in this one place.
* :data:`TRANSFORMERS_FLOOR` and :func:`check_transformers`: the oldest release the suite has run
  against (5.17.0, the transformers of the GPU image this project is lent), checked when a model
  loads (:func:`specviz.models.loading.load_model`).
* :class:`PaddedStaticCache` and :func:`run_pass`: transformers' ``StaticCache`` (preallocated
  ``(1, kv_heads, max_len, head_dim)`` tensors written in place, the cache ``generate()`` uses
  with ``cache_implementation="static"`` and ``torch.compile``) with its length kept on the host,
  and passes of fixed shapes: every pass after the prefill feeds exactly ``width`` positions (the
  real tokens, then copies of the last one as padding), with an explicit additive attention mask
  over all ``max_len`` slots and explicit position ids. A pass of one shape, reading and writing
  the same tensors, is what a CUDA graph can capture once and replay (PyTorch, "CUDA Graphs";
  transformers' static-cache docs). Padding changes no real row: the padded positions come
  after the real ones and attention is causal (or the tree's mask), and the cache is cut back to
  the real tokens right after the pass, so the padding's keys are stale slots the next pass
  overwrites.

Static passes need an attention that takes an arbitrary 4D mask, as trees do
(:func:`specviz.core.engine.tree_attention_blocker`): sliding-window layers and flash-attention kernels
cannot, and there the engine stays with the dynamic cache.
"""

from __future__ import annotations

import functools
import inspect

import torch

__all__ = ["CACHE_KINDS", "TRANSFORMERS_FLOOR", "PaddedStaticCache", "cache_argument", "check_transformers",
           "run_pass"]

#: The oldest transformers release specviz runs with (the lent GPU image carries 5.17.0; the
#: suite's KV-cache and greedy-equality tests were run against it).
TRANSFORMERS_FLOOR = "5.17"

#: The KV caches a run may use: ``"dynamic"`` (transformers' ``DynamicCache``, tensors that grow
#: with each pass: the default) and ``"static"`` (:class:`PaddedStaticCache`, fixed shapes).
CACHE_KINDS = ("dynamic", "static")


def check_transformers(version: str | None = None) -> None:
    """Refuse a transformers older than :data:`TRANSFORMERS_FLOOR`.

    Args:
        version: the version to check (default: the installed ``transformers.__version__``).

    Raises:
        RuntimeError: one sentence naming the version found, the floor and the command that
            upgrades it.
    """
    from packaging.version import Version

    if version is None:
        import transformers

        version = transformers.__version__
    if Version(version) < Version(TRANSFORMERS_FLOOR):
        raise RuntimeError(f"transformers {version} is older than {TRANSFORMERS_FLOOR}, the oldest release specviz "
                           f"runs with: upgrade it with pip install 'transformers>={TRANSFORMERS_FLOOR},<6'")


@functools.lru_cache(maxsize=256)
def _cache_keyword(forward) -> str:
    parameters = inspect.signature(forward).parameters
    for name in ("cache", "past_key_values"):
        if name in parameters:
            return name
    raise TypeError(f"{getattr(forward, '__qualname__', forward)} takes neither cache nor past_key_values: "
                    "it cannot be handed a KV cache")


def cache_argument(module: torch.nn.Module, cache) -> dict:
    """The keyword argument that hands ``cache`` to ``module``'s forward: ``{"cache": cache}`` on
    transformers >= 5.24, ``{"past_key_values": cache}`` before (see the module docstring).

    Read from the forward of the module's class (an instance's ``forward`` may be a
    ``torch.compile`` wrapper), once per class.

    Raises:
        TypeError: for a forward that names neither keyword (a cache would vanish into ``**kwargs``).
    """
    return {_cache_keyword(type(module).forward): cache}


class PaddedStaticCache:
    """transformers' ``StaticCache`` with its length on the host, for passes of fixed shapes.

    Built by :meth:`create` (a subclass of the installed ``StaticCache``, made once). The
    length is a Python int, so reading it never waits for the device (transformers' own
    ``StaticLayer`` keeps a device tensor, whose reading is a host sync); each layer's device
    length follows it whenever it changes (:meth:`crop`).

    Attributes:
        length: positions the cache holds (tokens).
        max_len: slots per layer (tokens): every pass attends over all of them.
        width: positions of every pass after the prefill (real tokens plus padding).
    """

    @staticmethod
    def create(model: torch.nn.Module, max_len: int, width: int):
        """An empty static cache for ``model`` of ``max_len`` slots, passes ``width`` wide.

        Raises:
            ValueError: for ``width < 1`` or ``max_len < width``, or a model with layers that are
                not full attention (sliding windows, linear attention).
        """
        if width < 1 or max_len < width:
            raise ValueError(f"a static cache needs 1 <= width <= max_len, got width {width}, max_len {max_len}")
        cache = _static_class()(config=model.config, max_cache_len=max_len)
        from transformers.cache_utils import StaticLayer

        if any(type(layer) is not StaticLayer for layer in cache.layers):
            raise ValueError(f"{type(model).__name__} has layers that are not full attention: no static cache")
        cache.length, cache.max_len, cache.width = 0, max_len, width
        return cache


@functools.lru_cache(maxsize=1)
def _static_class() -> type:
    """The subclass of the installed transformers' ``StaticCache`` that :class:`PaddedStaticCache`
    describes (made on first use: importing this module loads no transformers)."""
    from transformers import StaticCache

    class _Padded(StaticCache, PaddedStaticCache):
        def get_seq_length(self, layer_idx: int = 0) -> int:
            return self.length

        def crop(self, max_length: int) -> None:
            """Keep the first ``max_length`` positions (a negative count drops that many, as
            ``Cache.crop`` does); the stale slots are overwritten by later passes."""
            length = self.length + max_length if max_length < 0 else min(max_length, self.length)
            self.length = max(length, 0)
            with torch.inference_mode():  # the layers' tensors were made in inference mode
                for layer in self.layers:
                    if layer.is_initialized:
                        layer.cumulative_length.fill_(self.length)  # a kernel argument: no host sync

        def keep_positions(self, keep: list[int]) -> None:
            """Keep the positions ``keep`` (increasing), in that order, in place (a tree's
            accepted path): the slots stay where they are, so a replayed graph still finds them."""
            start = next((i for i, p in enumerate(keep) if p != i), len(keep))
            if start < len(keep):
                device = self.layers[0].keys.device
                source = torch.tensor(keep[start:], dtype=torch.long, device=device)
                with torch.inference_mode():
                    for layer in self.layers:
                        layer.keys[:, :, start : len(keep)] = layer.keys.index_select(2, source)
                        layer.values[:, :, start : len(keep)] = layer.values.index_select(2, source)
            self.crop(len(keep))

    _Padded.__name__ = _Padded.__qualname__ = "PaddedStaticCache"
    return _Padded


def _static_inputs(cache, ids: torch.Tensor, dtype: torch.dtype, tree) -> tuple[dict, int]:
    """The inputs of one static pass over ``ids`` ``(n,)`` and the pass's width.

    After the prefill the pass is ``cache.width`` wide: the real ids, then copies of the last as
    padding, the padding at the last real position. Row ``i`` may attend to slots ``<= length + i``
    (causal; stale slots beyond are blocked), or, with ``tree = (mask, positions)`` from
    :func:`specviz.core.engine.tree_attention_inputs`, the real rows take the tree's mask.
    """
    n, length = ids.shape[0], cache.length
    width = n if length == 0 and n > cache.width else cache.width  # the prefill: its own length
    if n > width:
        raise ValueError(f"a static pass is {width} positions wide; {n} were fed")
    device = ids.device
    rows = torch.arange(width, device=device)
    allowed = torch.arange(cache.max_len, device=device).view(1, -1) <= (rows + length).view(-1, 1)
    mask = torch.zeros(width, cache.max_len, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    positions = (rows + length).clamp(max=length + n - 1).view(1, -1)
    if tree is not None:
        tree_mask, tree_positions = tree
        mask[:n, : length + n] = tree_mask[0, 0]
        positions = torch.cat([tree_positions, tree_positions[:, -1:].expand(1, width - n)], dim=1)
    padded = torch.cat([ids, ids[-1:].expand(width - n)])
    return {"input_ids": padded.view(1, -1), "attention_mask": mask.view(1, 1, width, -1),
            "position_ids": positions}, width


def run_pass(model: torch.nn.Module, cache, ids: torch.Tensor, keep: int, tree=None) -> torch.Tensor:
    """One forward pass of ``model`` over ``ids`` that extends ``cache``; the logits of the last
    ``keep`` fed positions.

    Args:
        model: a transformers causal LM.
        cache: a ``DynamicCache`` or a :class:`PaddedStaticCache` (fixed-shape passes, see the
            module docstring).
        ids: ``(n,)`` int64 token ids on the model's device.
        keep: how many of the last fed positions' logits to return (``1 <= keep <= n``).
        tree: optional ``(mask, position_ids)`` of a draft tree (:func:`specviz.core.engine.tree_attention_inputs`,
            mask ``(1, 1, n, cached + n)``); None feeds the ids causally.

    Returns:
        ``(keep, W)`` logits in the model's dtype (W its logits width). The cache holds ``n`` more
        positions.

    Raises:
        ValueError: for a static cache fed more than its width after the prefill.
    """
    argument = cache_argument(model, cache)
    if not isinstance(cache, PaddedStaticCache):
        extra = {} if tree is None else {"attention_mask": tree[0], "position_ids": tree[1]}
        out = model(input_ids=ids.view(1, -1), **argument, use_cache=True, logits_to_keep=keep, **extra)
        return out.logits[0]
    n, before = ids.shape[0], cache.length
    inputs, width = _static_inputs(cache, ids, model.dtype, tree)
    out = model(**inputs, **argument, use_cache=True, logits_to_keep=width if width > n else keep)
    cache.length = before + width  # what the layers wrote; the padding is dropped next
    if width > n:
        cache.crop(before + n)
        return out.logits[0, n - keep : n]
    return out.logits[0]
