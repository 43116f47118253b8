"""The app's own path on a CUDA machine, for :mod:`scripts.gpu_check`: what a ZeroGPU Space does
with the public presets, on random weights at a preset's shape.

* **app placement**: a checkpoint saved to disk (random weights at SmolLM2-135M's shape, a word
  tokenizer) loaded by :func:`specviz.models.loading.load_model` onto ``cuda``, the routine
  :func:`specviz.ui.serve.placement.place_at_import` calls on a Space (read on the CPU, then placed from
  the calling thread); the model's parameters must all be on the device.
* **layer step**: a synchronised batch-1 eager decode step of that model, divided by its layers:
  the figure :mod:`specviz.ui.serve.gpu_budget` reserves with (``SPECVIZ_LAYER_STEP_S``), printed beside
  the uncalibrated default.
* **app job, public mode**: a Run through the page's job function (:func:`specviz.ui.tabs.run_stream.run_work`
  inside :func:`specviz.ui.serve.gpu.run_job`) with the public policy, and the reservation the page would
  request (:func:`specviz.ui.serve.gpu_budget.request_duration`, and what ZeroGPU would charge for it)
  beside the seconds the job took. It needs gradio (the page's modules import it), which the lent
  GPU image lacks unless its wheels travel: it runs with ``--app-job`` only (else SKIP).

Printing is this script's output; the library logs.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

#: SmolLM2-135M-Instruct's architecture (the Space's offline preset and the hub pair's draft).
SMOLLM2_135M = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
                "tie_word_embeddings": True, "max_position_embeddings": 8192}
PROMPT = "the cat sat on the mat and the dog sat on the log " * 4
WORDS = sorted(set(PROMPT.split()))


def _word_tokenizer(directory: Path) -> None:
    """A word-level tokenizer over :data:`PROMPT`'s words, saved beside the model (no hub, no file
    from elsewhere: the device machine has neither)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(directory)


def save_checkpoint(directory: Path, fields: dict, dtype: torch.dtype) -> Path:
    """A random model from ``fields`` saved as safetensors in ``dtype``, with a word tokenizer."""
    from scripts.gpu_check import random_model

    random_model(fields, dtype, torch.device("cpu"), 0).save_pretrained(directory)
    _word_tokenizer(directory)
    return directory


def placement_check(directory: Path, device: torch.device, dtype: torch.dtype):
    """``(passed, observed, figures)`` of loading ``directory`` onto ``device`` as the Space does."""
    from specviz.models import loading as models

    models.clear_cache()
    t0 = time.perf_counter()
    loaded = models.load_model(str(directory), device=str(device), dtype=str(dtype).removeprefix("torch."))
    seconds = time.perf_counter() - t0
    places = {p.device.type for p in loaded.model.parameters()}
    return (places == {device.type}, f"parameters on {sorted(places)} after {seconds:.2f} s",
            {"load_s": seconds, "devices": sorted(places)})


def layer_step(directory: Path, device: torch.device, dtype: torch.dtype, steps: int = 32):
    """Seconds per decoder layer of a synchronised batch-1 eager step of the loaded model."""
    from transformers import DynamicCache

    from specviz.models import loading as models
    from specviz.core import phaseclock
    from specviz.core.kvcache import run_pass

    loaded = models.load_model(str(directory), device=str(device), dtype=str(dtype).removeprefix("torch."))
    model, layers = loaded.model, loaded.model.config.num_hidden_layers
    ids = torch.tensor(loaded.tokenizer.encode(PROMPT), device=device)
    times = []
    with torch.no_grad():
        cache = DynamicCache(config=model.config)  # run_pass passes it the way this transformers takes it
        token = run_pass(model, cache, ids, 1)[-1:].argmax(-1)
        for _ in range(steps):
            phaseclock.synchronize(device)
            t0 = time.perf_counter()
            token = run_pass(model, cache, token, 1)[-1:].argmax(-1)
            phaseclock.synchronize(device)
            times.append(time.perf_counter() - t0)
    step = sorted(times)[len(times) // 2]
    return step / layers, step


def job_check(directory: Path, device: torch.device, dtype: torch.dtype, dry_run: bool = False,
              with_page: bool = False):
    """``(passed or None, observed, figures)`` of one public-mode Run through the page's job; on
    the CPU (``dry_run``) only its errors count: the reservation models a GPU."""
    if not with_page:
        return None, "not asked for: --app-job (needs gradio, which the page's modules import)", None
    from specviz.run.request import validate_request
    from specviz.ui.serve import gpu
    from specviz.ui.serve import gpu_budget
    from specviz.ui.tabs import run_stream
    from specviz.ui.serve import settings

    policy = settings.PUBLIC_POLICY
    request = validate_request(prompt=PROMPT, target=str(directory), draft="ngram", k=4, temperature=0.0, top_k=0,
                               top_p=1.0, max_new_tokens=min(64, policy.limits.max_new_tokens), seed=0, chat=False,
                               device=device.type, dtype=str(dtype).removeprefix("torch."), limits=policy.limits)
    cap = gpu_budget.cap_s(True, policy.max_run_s)
    reserved = gpu_budget.request_duration(request, gpu_budget.baseline_timed(request, {}), cap)
    job = gpu.Job(run_stream.run_work, (request, {}, True), duration_s=reserved, enforce_deadline=True)
    t0 = time.perf_counter()
    records = list(gpu.run_job(job))
    took = time.perf_counter() - t0
    errors = [r.value for r in records if r.kind == "error"]
    charged = gpu_budget.charged_s(reserved)
    observed = (f"took {took:.1f} s; reserved {reserved} s (ZeroGPU charges {charged:.0f} s, cap {cap:.0f} s)"
                + (f"; error {errors[0]}" if errors else ""))
    within = dry_run or (took <= reserved and charged <= cap)
    return (not errors and within, observed,
            {"took_s": took, "reserved_s": reserved, "charged_s": charged, "cap_s": cap})


def app_checks(device: torch.device, dry_run: bool, checked, with_page: bool = False):
    """The three checks above, as :class:`scripts.gpu_check.Check` s (``checked``: its ``_checked``;
    ``with_page``: run the page's job, which imports gradio; else that check is a SKIP)."""
    from scripts.gpu_check import TINY_WIDTHS

    from specviz.ui.serve.gpu_budget import DEFAULT_LAYER_STEP_S

    dtype = torch.float32 if dry_run else torch.bfloat16
    fields = {**SMOLLM2_135M, **(TINY_WIDTHS if dry_run else {}), "vocab_size": 512 if dry_run else 49152}
    with tempfile.TemporaryDirectory(prefix="gpu_check_app_") as tmp:
        directory = save_checkpoint(Path(tmp) / "model", fields, dtype)
        yield checked("app placement", f"every parameter on {device.type}",
                      lambda: placement_check(directory, device, dtype))

        def step():
            per_layer, whole = layer_step(directory, device, dtype)
            return (per_layer > 0, f"SPECVIZ_LAYER_STEP_S={per_layer:.2e} (a step {whole * 1e3:.2f} ms over "
                    f"{fields['num_hidden_layers']} layers; default {DEFAULT_LAYER_STEP_S:.1e})",
                    {"layer_step_s": per_layer, "step_s": whole})

        yield checked("layer step", "a positive figure to set on the Space", step)
        yield checked("app job, public mode", "no error; the run within its reservation, the charge within the cap",
                      lambda: job_check(directory, device, dtype, dry_run, with_page))
