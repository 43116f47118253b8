"""A ZeroGPU Space on this CPU machine, with the real ``spaces`` package (0.51) and its CUDA
emulation on: what :mod:`tests.test_zerogpu_real` runs the app under.

``spaces`` reads its configuration at import (``SPACES_ZERO_GPU``, the device API's URL), and its
emulation patches torch for the whole process, so every scenario runs in a fresh Python
(:func:`run_driver` → ``python -m tests.zerogpu_driver SCENARIO``) that prints one JSON line.

What is stubbed, and only that:

* the CUDA attributes a CPU build of torch lacks and ``spaces`` reads at import
  (:func:`install_cuda_stubs`: ``torch.version.cuda``, ``torch._C._cuda_init``, a picklable
  ``torch.cuda._is_in_bad_fork``);
* the device API (``SPACES_ZERO_DEVICE_API_URL`` points at a port nothing listens on; the driver
  replaces ``spaces.zero.client.schedule``/``allow``/``release``/``startup_report`` where a
  scenario calls the GPU, as the ZeroGPU scheduler would answer);
* in the forked worker, the two steps that need a real card (``torch.init`` and ``torch.move``:
  the driver's stand-ins restore the packed tensors on the CPU).

The forked-worker mode (``worker`` scenario, :func:`spaces_env`, :mod:`tests.test_zerogpu_worker`)
runs :func:`specviz.ui.serve.gpu.run_job` through ``spaces``' real generator wrapper
(``spaces.zero.wrappers.generator_function_wrapper``): it forks its worker, pickles the job in and
each record out, reuses the idle worker for the next job, and turns a dead worker into "GPU task
aborted". Stubbed there, and only that:

* ``spaces.zero.client.schedule``, ``allow`` and ``release`` (and ``startup_report``, which
  ``launch()`` calls when the scenario serves a page through gradio's queue) (the device API,
  unreachable): the
  driver's ``_Scheduler`` answers as ZeroGPU's scheduler does, one card, idle, so the wrapper
  reuses its worker, and SIGKILLs the worker once the charged reservation
  (``client.get_duration_seconds``, the real one) runs out unless released first: the platform's
  abort, which the deadline must beat;
* in the worker, ``spaces.zero.torch.init`` (``.cuda()`` on a tensor) and ``spaces.zero.torch.move``
  (the placed tensors onto the card): both need a real card, and these jobs place nothing, so they
  are no-ops (``torch.unpatch`` and the rest of the worker's start-up run as they are);
* the jobs are the driver's small module-level work functions, not a model's run: the wrapper,
  the pickling, the worker's reuse and the page's Stop, Forget and deadline are what is tested.

The models are tiny random Llamas (2 layers, hidden 64, SmolLM2's 49,152-token vocabulary and its
tokenizer) laid out where the app looks: the presets' hub ids as a Hugging Face hub cache
(``HF_HOME/hub/models--org--name/snapshots/<rev>/``, blobs symlinked as the hub writes them, which
is what ``spaces``' packing deletes) and the offline SmolLM2 as a prepared specviz cache.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: Where the real offline SmolLM2's tokenizer lies (prepared once per machine).
TOKENIZER_SOURCE = pathlib.Path.home() / ".cache" / "specviz" / "models" / "smollm2-135m-instruct"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
#: The presets' hub models laid out in the fake hub cache (the Qwen pair is left out: not cached,
#: so not placed, as on a Space whose preload list missed it).
HUB_MODELS = ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct")
REVISION = "0" * 40
#: The offline presets' models, laid out as prepared copies.
OFFLINE_NAMES = ("smollm2-135m-instruct", "gemma-3-270m")


def install_cuda_stubs() -> None:
    """The CUDA attributes ``spaces`` reads that a CPU build of torch lacks (call before
    ``import spaces``): a CUDA version, a low-level init that ``spaces`` replaces with a raise,
    and a ``_is_in_bad_fork`` that pickles by reference (``spaces`` asks it in a forked pool)."""
    import torch

    torch.version.cuda = "12.4"
    if not hasattr(torch._C, "_cuda_init"):
        torch._C._cuda_init = _no_cuda_init
    torch.cuda._is_in_bad_fork = _not_in_bad_fork


def _no_cuda_init() -> None:
    raise RuntimeError("real CUDA init reached (no GPU in this harness)")


def _not_in_bad_fork() -> bool:
    return False


def _tiny_model(directory: pathlib.Path, seed: int) -> None:
    """A random 2-layer Llama with SmolLM2's vocabulary and tokenizer, saved as bfloat16 safetensors."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    # bfloat16 on disk, as the presets' checkpoints are: loaded in bfloat16 the tensors stay mapped
    # from the file, which is what ZeroGPU's packing then deletes.
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(directory)
    for name in TOKENIZER_FILES:
        if (TOKENIZER_SOURCE / name).is_file():
            shutil.copy(TOKENIZER_SOURCE / name, directory / name)


def _as_hub_repo(built: pathlib.Path) -> None:
    """Rewrite a tiny build's files as the presets' hub repos ship theirs (SmolLM2's and Qwen2.5's
    listings on the hub): a BPE tokenizer's ``vocab.json`` and ``merges.txt`` beside its
    ``tokenizer.json``, the chat template inside ``tokenizer_config.json`` (no
    ``chat_template.jinja``), a ``special_tokens_map.json``, a model card and ``.gitattributes``.
    The loader meets every file a repo holds, so what it opens among them is observed
    (:class:`OpenedFiles`), not assumed."""
    tokenizer = json.loads((built / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((built / "tokenizer_config.json").read_text(encoding="utf-8"))
    template = built / "chat_template.jinja"
    if template.is_file():
        config["chat_template"] = template.read_text(encoding="utf-8")
        template.unlink()
    config["tokenizer_class"] = "GPT2Tokenizer"
    (built / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (built / "vocab.json").write_text(json.dumps(tokenizer["model"]["vocab"]), encoding="utf-8")
    merges = ["#version: 0.2"] + [" ".join(m) if isinstance(m, list) else m for m in tokenizer["model"]["merges"]]
    (built / "merges.txt").write_text("\n".join(merges) + "\n", encoding="utf-8")
    special = {key: config[key] for key in ("bos_token", "eos_token", "unk_token", "pad_token") if key in config}
    (built / "special_tokens_map.json").write_text(json.dumps(special, indent=2), encoding="utf-8")
    (built / "README.md").write_text("---\nlicense: apache-2.0\n---\n# A tiny random Llama\n", encoding="utf-8")
    (built / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n", encoding="utf-8")


class OpenedFiles:
    """The files opened in ``folders`` while entered (Linux inotify's ``IN_OPEN``: every open by
    this process or another, from Python or from a library's own code, such as tokenizers' and
    safetensors' Rust readers). A file opened through a symlink counts in its target's folder
    (watch a hub cache's ``blobs/``). :attr:`opened` holds the paths once exited.

    Raises:
        OSError: inotify is not available (not Linux)."""

    IN_OPEN = 0x20

    def __init__(self, folders) -> None:
        self.folders = [pathlib.Path(f) for f in folders]
        self.opened: set[pathlib.Path] = set()

    def __enter__(self) -> OpenedFiles:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.watches = {}
        for folder in self.folders:
            wd = libc.inotify_add_watch(self.fd, str(folder).encode(), self.IN_OPEN)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder}")
            self.watches[wd] = folder
        return self

    def __exit__(self, *exc) -> None:
        import struct

        try:
            while True:
                try:
                    data = os.read(self.fd, 1 << 16)
                except BlockingIOError:
                    break
                at = 0
                while at < len(data):  # struct inotify_event: int wd; uint32 mask, cookie, len; char name[len]
                    wd, _mask, _cookie, length = struct.unpack_from("iIII", data, at)
                    name = data[at + 16:at + 16 + length].rstrip(b"\0").decode()
                    at += 16 + length
                    if name:
                        self.opened.add(self.watches[wd] / name)
        finally:
            os.close(self.fd)


def snapshot_files_opened(hub: pathlib.Path, opened: set[pathlib.Path]) -> dict[str, list[str]]:
    """By hub repo id, the names of its snapshot's files whose content is among ``opened``."""
    result = {}
    for repo in sorted(hub.glob("models--*")):
        snapshot = next((repo / "snapshots").iterdir())
        names = [entry.name for entry in snapshot.iterdir() if entry.resolve() in opened]
        result[repo.name.removeprefix("models--").replace("--", "/")] = sorted(names)
    return result


def _as_hub_cache(hub: pathlib.Path, repo_id: str, built: pathlib.Path) -> pathlib.Path:
    """Lay ``built``'s files out as huggingface_hub does: content in ``blobs/``, the snapshot's
    files symlinks to them, ``refs/main`` naming the revision."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    for i, file in enumerate(sorted(built.iterdir())):
        blob = repo / "blobs" / f"{i:040d}"
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


def build_caches(root: pathlib.Path) -> dict:
    """Lay the tiny models out under ``root`` (a hub cache and a specviz cache) and return the
    environment a driver runs with: ZeroGPU's emulation on, its device API unreachable, public
    mode, everything offline."""
    hub = root / "hf" / "hub"
    for seed, repo_id in enumerate(HUB_MODELS):
        built = root / "build" / repo_id.replace("/", "--")
        _tiny_model(built, seed)
        _as_hub_repo(built)
        _as_hub_cache(hub, repo_id, built)
    for seed, name in enumerate(OFFLINE_NAMES, start=len(HUB_MODELS)):  # prepared as prepare_offline leaves them
        offline = root / "specviz" / "models" / name
        _tiny_model(offline, seed)
        (offline / "specviz-prepared.json").write_text('{"source": "tests", "converted_by": "specviz"}\n')
    return {
        **spaces_env(root), "HF_HOME": str(root / "hf"), "HF_HUB_CACHE": str(hub),
        "SPECVIZ_CACHE": str(root / "specviz"),
        "ZEROGPU_MMAP_AUTOPRUNE_PATTERN": str(hub / "models--*" / "blobs" / "*"), "SPECVIZ_PUBLIC": "1",
    }


def spaces_env(root: pathlib.Path) -> dict:
    """The environment of a driver that needs no models (the forked-worker mode): ZeroGPU's
    emulation on, its device API unreachable, its offload folder under ``root``, everything offline."""
    return {
        "SPACES_ZERO_GPU": "true", "SPACES_ZERO_DEVICE_API_URL": "http://127.0.0.1:9/",
        "ZEROGPU_OFFLOAD_DIR": str(root / "zerogpu"), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
        "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
    }


def unplaceable_env(root: pathlib.Path) -> dict:
    """:func:`spaces_env` for a public-mode Space where no public model can be placed at import:
    its hub cache empty (a preload list that missed every model) and the offline models' cache
    unwritable (its folder's parent is a file), so every load fails at once."""
    (root / "hf" / "hub").mkdir(parents=True, exist_ok=True)
    (root / "not-a-folder").write_text("")
    return {**spaces_env(root), "HF_HOME": str(root / "hf"), "HF_HUB_CACHE": str(root / "hf" / "hub"),
            "SPECVIZ_CACHE": str(root / "not-a-folder" / "specviz"), "SPECVIZ_PUBLIC": "1"}


def run_driver(scenario: str, env: dict, timeout: float = 120) -> dict:
    """Run ``tests/zerogpu_driver.py SCENARIO`` in a fresh Python with ``env`` and return the JSON
    it printed last (AssertionError with its output when it printed none)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SPACES_", "ZEROGPU_"))}
    full.update(env)
    out = subprocess.run([sys.executable, "-m", "tests.zerogpu_driver", scenario], cwd=ROOT, env=full,
                         capture_output=True, text=True, timeout=timeout, check=False)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"driver {scenario} printed no result (rc {out.returncode}):\n"
                         f"{out.stdout[-3000:]}\n{out.stderr[-6000:]}")
