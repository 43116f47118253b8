"""How much memory a model pair takes and how much a device has, known before anything loads.

* Sizes: a checkpoint's parameter count is read from its safetensors headers
  (:func:`safetensors_parameters`: shapes only, no weights), or, for the presets' hub models
  before any download, from :data:`MODEL_SHAPES` (a pair with its drafter is sized by
  :mod:`specviz.run.pair_sizing`, which knows the drafter kinds).
* Devices: :func:`device_free_bytes` (``psutil`` on the CPU, ``torch.cuda.mem_get_info`` on
  CUDA) and :func:`memory_budget`, the share of it the model cache may fill
  (:data:`CACHE_FRACTION`).

:mod:`specviz.models.loading`' cache sizes its budget and evicts before a load with these, and public
mode (:func:`specviz.run.request.pin_public_device`) refuses a pair that would not fit.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from specviz.models.offline import OFFLINE_MODELS, cache_dir, is_repo_id

__all__ = ["CACHE_FRACTION", "HEADROOM", "MODEL_SHAPES", "ModelShape", "bytes_per_parameter", "device_free_bytes",
           "fixed_mmap_threshold", "memory_budget", "model_layers", "model_parameters",
           "safetensors_parameters"]

#: The share of a device's free memory (plus what the cache already holds there) the model cache
#: fills when ``SPECVIZ_MAX_MODEL_BYTES`` is unset: the rest is for the KV caches, activations,
#: the allocator's slack and, on the CPU, everything else the process and the machine run.
CACHE_FRACTION = 0.7
#: A pair's weights times this is what it needs to run: KV caches, activations and logits on top
#: of the weights (a margin chosen, not measured: a 1,280-token KV cache of Qwen2.5-7B in
#: bfloat16 is 73 MB next to 15 GB of weights).
HEADROOM = 1.2


@dataclass(frozen=True)
class ModelShape:
    """What a model's memory and speed depend on, known without its weights.

    Attributes:
        parameters: unique parameters (tied embeddings counted once), as its safetensors hold them.
        layers: decoder layers (``config.num_hidden_layers``).
    """

    parameters: int
    layers: int


#: The presets' models by hub id (an offline model by its ``hub_id``), so that a pair can be
#: checked before anything is downloaded. Counted from each model's published config
#: (tests/test_memory.py builds every one on the meta device and counts again); SmolLM2-135M's
#: count is also what its converted safetensors copy holds.
MODEL_SHAPES: dict[str, ModelShape] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": ModelShape(134_515_008, 30),
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": ModelShape(1_711_376_384, 24),
    "Qwen/Qwen2.5-0.5B-Instruct": ModelShape(494_032_768, 24),
    "Qwen/Qwen2.5-7B-Instruct": ModelShape(7_615_616_512, 28),
    "google/gemma-3-270m": ModelShape(268_098_176, 18),
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": ModelShape(494_032_768, 24),
    "Qwen/Qwen2.5-Coder-1.5B-Instruct": ModelShape(1_543_714_304, 28),
    # The offline pair's GGUF files carry an untied lm_head (output.weight), so their converted
    # copies hold more parameters than the hub's tied checkpoints: counted from those copies.
    "qwen2.5-coder-0.5b-instruct": ModelShape(630_167_424, 24),
    "qwen2.5-coder-1.5b-instruct": ModelShape(1_777_088_000, 28),
}


# --------------------------------------------------------------------------- sizes
def bytes_per_parameter(dtype: str | torch.dtype) -> float:
    """Bytes of one parameter in ``dtype`` (``"float32"``: 4, ``"bfloat16"`` / ``"float16"``: 2,
    ``"int4"``: 2, since an int4 model is read in bfloat16 and converted, and its embedding table
    stays bfloat16; its linear layers then hold 0.625 bytes a weight).

    Raises:
        ValueError: for a name that is none of these (resolve ``"auto"`` first).
    """
    if isinstance(dtype, torch.dtype):
        return dtype.itemsize
    if dtype == "int4":
        return 2
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"unknown dtype {dtype!r}: use float32, bfloat16, float16 or int4")
    return getattr(torch, dtype).itemsize


def safetensors_parameters(directory: str | Path) -> int | None:
    """Elements of every tensor in a checkpoint directory's ``*.safetensors`` files (all shards),
    read from their headers only (``safetensors.safe_open``: no weight is read). A tied lm_head is
    not saved, so the count is the model's unique parameters. None when the directory holds no
    safetensors file."""
    from safetensors import safe_open

    files = sorted(Path(directory).expanduser().glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            names = handle.keys()  # a safetensors handle, not a dict: it lists its tensors' names
            total += sum(math.prod(handle.get_slice(name).get_shape()) for name in names)
    return total


def _local_dir(name: str) -> Path | None:
    """Where ``name``'s weights already are on disk: a prepared offline copy, a directory, or a
    cached hub snapshot; None when they are not here (nothing is downloaded or prepared)."""
    if name in OFFLINE_MODELS:
        path = cache_dir() / "models" / name
        return path if (path / "config.json").is_file() else None
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if is_repo_id(name):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
        return Path(cached).parent if isinstance(cached, str) else None
    return None


def _known(name: str) -> ModelShape | None:
    if name in MODEL_SHAPES:
        return MODEL_SHAPES[name]
    return MODEL_SHAPES.get(OFFLINE_MODELS[name].hub_id if name in OFFLINE_MODELS else name)


#: Parameter counts read from checkpoints' headers, by model name: read once per process. On a
#: ZeroGPU Space the hub-cache files they came from are deleted at launch (``spaces`` packs the
#: placed tensors and removes the blobs they were mapped from), so public mode must never read
#: them again: :func:`specviz.ui.serve.placement.place_at_import` counts every public model here first.
_COUNTED: dict[str, int] = {}


def model_parameters(name: str) -> int | None:
    """A model's parameter count before it loads: its safetensors headers where its weights are on
    disk (:func:`safetensors_parameters`, remembered for the process: a second call reads no
    file), else :data:`MODEL_SHAPES`; None when neither knows. Weight files that vanished since
    (a Space's packing deletes them) count as not on disk."""
    if name in _COUNTED:
        return _COUNTED[name]
    local = _local_dir(name)
    try:
        counted = safetensors_parameters(local) if local is not None else None
    except OSError:  # a snapshot's symlink whose blob ZeroGPU removed after packing
        counted = None
    if counted is not None:
        _COUNTED[name] = counted
        return counted
    known = _known(name)
    return known.parameters if known is not None else None


def model_layers(name: str) -> int | None:
    """A model's decoder layers before it loads: ``num_hidden_layers`` of its config.json on disk
    (the text config's, for a model that nests one), else :data:`MODEL_SHAPES`; None otherwise."""
    local = _local_dir(name)
    if local is not None and (local / "config.json").is_file():
        config = json.loads((local / "config.json").read_text(encoding="utf-8"))
        layers = config.get("num_hidden_layers", config.get("text_config", {}).get("num_hidden_layers"))
        if isinstance(layers, int):
            return layers
    known = _known(name)
    return known.layers if known is not None else None


# --------------------------------------------------------------------------- devices
#: A whole card of the RTX PRO 6000 Blackwell that ZeroGPU runs now (``spaces/zero/configs.json``).
ZERO_GPU_CARD_MEMORY = 101973950464
#: A ZeroGPU slice's memory when the Space does not say: ``size="large"``, the default, is half a
#: card (48 GB; ``xlarge``, a whole card, costs twice the quota). ``spaces.config``'s own default
#: (an H200 MIG slice, 74.6 GB) is older than that hardware.
ZERO_GPU_MEMORY = ZERO_GPU_CARD_MEMORY // 2


def on_zero_gpu() -> bool:
    """Whether this process runs on a ZeroGPU Space: the one answer the app, the model cache and
    the GPU entry point share. ``spaces.config.Config.zero_gpu`` where ``spaces`` is importable
    (it reads ``SPACES_ZERO_GPU`` once, when ``spaces`` is imported, and decides how ``spaces.GPU``
    behaves, so the app must agree with it), else ``SPACES_ZERO_GPU`` itself, read as
    ``spaces.config`` reads it ("1", "t" or "true", any case)."""
    try:
        # Importing spaces imports neither torch nor gradio; on a Space app.py has imported it
        # first, so this finds it loaded.
        from spaces.config import Config
    except ImportError:
        return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")
    return bool(Config.zero_gpu)


def zero_gpu_memory(env=None) -> int:
    """The bytes of a ZeroGPU slice: ``ZEROGPU_CUDA_TOTAL_MEMORY`` less ``ZEROGPU_CUDA_RESERVED_MEMORY``
    (as ``spaces.config`` reads them), :data:`ZERO_GPU_MEMORY` where unset or unreadable."""
    env = os.environ if env is None else env
    try:
        total = int(env.get("ZEROGPU_CUDA_TOTAL_MEMORY", ZERO_GPU_MEMORY))
        reserved = int(env.get("ZEROGPU_CUDA_RESERVED_MEMORY", 0))
    except ValueError:
        total, reserved = ZERO_GPU_MEMORY, 0
    return max(0, total - reserved)


def device_free_bytes(device: str | torch.device) -> int:
    """Free memory of a device in bytes: on the CPU what ``psutil`` calls available (free plus
    reclaimable caches), on CUDA ``torch.cuda.mem_get_info``'s free bytes (which ZeroGPU answers
    in its main process too, from its configured card), falling back to the card's total memory
    where that query fails. On a ZeroGPU Space (``SPACES_ZERO_GPU`` set) CUDA is emulated in the
    main process and the card is the Space's alone, so CUDA is never asked: the card's memory as
    ZeroGPU declares it (``ZEROGPU_CUDA_TOTAL_MEMORY``, :data:`ZERO_GPU_MEMORY` by default) less
    its reserved part.

    Raises:
        ValueError: for a device that is neither cpu nor cuda.
    """
    device = torch.device(device)
    if device.type == "cuda" and on_zero_gpu():
        return zero_gpu_memory()
    if device.type == "cpu":
        import psutil

        return int(psutil.virtual_memory().available)
    if device.type != "cuda":
        raise ValueError(f"unknown device {device}: use cpu or cuda")
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        return int(torch.cuda.mem_get_info(index)[0])
    except RuntimeError:
        return int(torch.cuda.get_device_properties(index).total_memory)


def memory_budget(device: str | torch.device, held: int = 0, fraction: float = CACHE_FRACTION) -> int:
    """Bytes the model cache may fill on ``device``: ``fraction × (free + held)``, where ``held``
    is what the cache already holds there (it would be free again if evicted)."""
    return int(fraction * (device_free_bytes(device) + held))


def fixed_mmap_threshold(nbytes: int = 4 << 20) -> bool:
    """Make glibc serve buffers of ``nbytes`` and more from mmap, returned to the system when freed.

    By default glibc raises its mmap threshold to the size of the largest buffer freed so far, so
    after the first export (a 5 MB charts page, built and copied a few times) later ones stay in
    its heap: the server's resident memory grew by about 2 MB per export up to a plateau near
    300 MB (scripts/export_disk.py, BENCHMARKS.md). A fixed threshold stops that. False where
    there is no glibc (nothing changes)."""
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(-3, nbytes))  # -3: M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False
