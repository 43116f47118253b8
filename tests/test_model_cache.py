"""The bounded model cache of ``specviz.models.loading``: LRU by count and bytes, eviction frees memory,
evicts before it loads (sizes from the safetensors headers), never the pair in use, and sizes its
budget from free memory when no limit is set.

Five tiny random Llama checkpoints (2 layers, hidden 64) with one small BPE tokenizer are saved to a
temporary directory once; each load from disk takes a fraction of a second.
"""

from __future__ import annotations

import gc
import logging
import weakref

import pytest
from helpers import bpe_tokenizer, tiny_llama

from specviz.models import memory
from specviz.models import loading as models
from specviz.drafters.registry import build_drafter
from specviz.models import selfdraft
from specviz.models.loading import (ModelCache, cache_info, clear_cache, estimate_bytes, in_use, load_model, module_bytes,
                            set_cache_limits)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CORPUS = ["The quick brown fox jumps over the lazy dog. Fix the typos in this sentence, please."] * 20


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("cache")
    tokenizer = bpe_tokenizer(CORPUS, chat=False, vocab_size=300)
    paths = []
    for seed in range(5):
        path = root / f"model{seed}"
        tiny_llama(seed, vocab_size=len(tokenizer)).save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths.append(str(path.resolve()))
    return paths


@pytest.fixture(autouse=True)
def two_model_cache():
    before = cache_info()
    clear_cache()
    set_cache_limits(max_models=2, max_bytes=1 << 40)
    yield
    clear_cache()
    set_cache_limits(max_models=before["max_models"], max_bytes=before["max_bytes"],
                     from_memory=before["max_bytes"] is None)


def _load(path: str):
    return load_model(path, device="cpu", dtype="float32")


def _cached_sources() -> list[str]:
    return [entry["source"] for entry in cache_info()["entries"]]


def test_only_the_two_most_recently_used_models_remain(checkpoints):
    loaded = [_load(path) for path in checkpoints]
    assert _cached_sources() == checkpoints[-2:]
    assert _load(checkpoints[-1]) is loaded[-1]  # still cached
    assert _load(checkpoints[0]) is not loaded[0]  # evicted: read again
    info = cache_info()
    assert info["models"] == 2 and info["max_models"] == 2
    assert info["bytes"] == sum(entry["bytes"] for entry in info["entries"])
    assert {entry["device"] for entry in info["entries"]} == {"cpu"}
    assert {entry["dtype"] for entry in info["entries"]} == {"float32"}


def test_using_an_entry_makes_it_the_most_recently_used(checkpoints):
    first = _load(checkpoints[0])
    _load(checkpoints[1])
    assert _load(checkpoints[0]) is first  # refreshes it: model 1 is now the oldest
    _load(checkpoints[2])
    assert _cached_sources() == [checkpoints[0], checkpoints[2]]
    assert _load(checkpoints[0]) is first


def test_the_byte_limit_evicts_too(checkpoints):
    size = module_bytes(_load(checkpoints[0]).model)
    assert cache_info()["entries"][0]["bytes"] == size > 0
    set_cache_limits(max_models=10, max_bytes=int(2.5 * size))
    for path in checkpoints[1:]:
        _load(path)
    assert _cached_sources() == checkpoints[-2:]
    assert cache_info()["bytes"] <= 2.5 * size


def test_the_newest_model_stays_even_if_it_alone_exceeds_the_byte_limit(checkpoints):
    set_cache_limits(max_bytes=1)
    _load(checkpoints[0])
    target = _load(checkpoints[1])
    assert _cached_sources() == [checkpoints[1]]
    assert _load(checkpoints[1]) is target


def test_an_evicted_model_is_freed(checkpoints):
    loaded = _load(checkpoints[0])
    model_ref = weakref.ref(loaded.model)
    int8_ref = weakref.ref(selfdraft.int8_draft(loaded))
    del loaded
    gc.collect()
    assert model_ref() is not None and int8_ref() is not None  # the cache holds both
    _load(checkpoints[1])
    _load(checkpoints[2])  # evicts model 0; eviction runs the garbage collector itself
    assert model_ref() is None and int8_ref() is None


def test_an_int8_copy_counts_against_the_byte_limit_and_goes_with_its_target(checkpoints):
    target = _load(checkpoints[0])
    size = cache_info()["entries"][0]["bytes"]
    build_drafter("int8", target)
    [entry] = cache_info()["entries"]
    assert 0 < entry["int8_bytes"] < size and entry["bytes"] == size + entry["int8_bytes"]

    other = _load(checkpoints[1])
    set_cache_limits(max_bytes=2 * size)  # two float models fit, not with the int8 copy as well
    assert _cached_sources() == [checkpoints[1]]
    assert selfdraft.int8_copy(target) is None
    assert _load(checkpoints[1]) is other


def test_warmed_starts_empty_and_dies_with_the_model(checkpoints):
    first = _load(checkpoints[0])
    assert first.warmed == set()
    first.warmed.add("ngram")
    assert _load(checkpoints[0]).warmed == {"ngram"}
    _load(checkpoints[1])
    _load(checkpoints[2])
    assert _load(checkpoints[0]).warmed == set()  # reloaded after eviction: warm up again
    assert first == first and first != _load(checkpoints[0])  # identity, not field values


def test_one_log_line_per_load_and_per_eviction(checkpoints, caplog):
    with caplog.at_level(logging.INFO, logger="specviz"):
        for path in checkpoints[:3]:
            _load(path)
        _load(checkpoints[2])  # a cache hit logs nothing
    lines = [r.getMessage() for r in caplog.records if r.name == "specviz.models.loading"]
    assert [line.split()[0] for line in lines] == ["loaded", "loaded", "evicted", "loaded"]  # room first
    assert checkpoints[0] in lines[2] and "MiB" in lines[2] and f"to make room for {checkpoints[2]}" in lines[2]


def test_clear_cache_empties_everything(checkpoints):
    target = _load(checkpoints[0])
    selfdraft.int8_draft(target)
    clear_cache()
    assert cache_info()["models"] == 0 and cache_info()["bytes"] == 0
    assert selfdraft.int8_copy(target) is None
    assert cache_info()["max_models"] == 2  # the limits stay


def test_limits_come_from_the_environment(monkeypatch, caplog):
    monkeypatch.setenv("SPECVIZ_MAX_MODELS", "3")
    monkeypatch.setenv("SPECVIZ_MAX_MODEL_BYTES", "1.5GiB")
    cache = ModelCache()
    assert (cache.max_models, cache.max_bytes) == (3, 3 << 29)
    monkeypatch.setenv("SPECVIZ_MAX_MODEL_BYTES", "512M")
    assert ModelCache().max_bytes == 512 << 20
    monkeypatch.setenv("SPECVIZ_MAX_MODELS", "zero")
    monkeypatch.setenv("SPECVIZ_MAX_MODEL_BYTES", "-1")
    with caplog.at_level(logging.WARNING, logger="specviz.models.loading"):
        cache = ModelCache()
    assert (cache.max_models, cache.max_bytes) == (models.DEFAULT_MAX_MODELS, None)
    assert "SPECVIZ_MAX_MODELS" in caplog.text and "SPECVIZ_MAX_MODEL_BYTES" in caplog.text
    monkeypatch.delenv("SPECVIZ_MAX_MODELS")
    monkeypatch.delenv("SPECVIZ_MAX_MODEL_BYTES")
    assert (ModelCache().max_models, ModelCache().max_bytes) == (4, None)  # None: sized from free memory


@pytest.mark.parametrize("limits", [{"max_models": 0}, {"max_bytes": -5}, {"max_models": 1.5}])
def test_bad_limits_are_refused(limits):
    with pytest.raises(ValueError, match="positive integers"):
        set_cache_limits(**limits)


def test_module_bytes_counts_tied_weights_once():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    unique = {id(t): t for t in list(model.parameters()) + list(model.buffers())}.values()
    assert module_bytes(model) == sum(t.numel() * t.element_size() for t in unique)


# ----------------------------------------------------------------------------- sized, evicting first, pinning
def test_without_a_limit_the_budget_is_a_share_of_free_memory(checkpoints, monkeypatch):
    set_cache_limits(from_memory=True)
    monkeypatch.setattr(memory, "device_free_bytes", lambda device: 10_000_000)
    assert cache_info()["max_bytes"] is None
    held = module_bytes(_load(checkpoints[0]).model)
    # What the cache holds counts as free: evicting it would free it.
    assert cache_info()["budgets"] == {"cpu": int(memory.CACHE_FRACTION * (10_000_000 + held))}
    monkeypatch.setattr(memory, "device_free_bytes", lambda device: 0)
    set_cache_limits(max_models=10)
    _load(checkpoints[1])  # 0.7 × (0 + both) holds one model: the older one goes
    assert _cached_sources() == [checkpoints[1]]


def test_free_memory_of_the_cpu_is_what_psutil_calls_available():
    import psutil

    free = memory.device_free_bytes("cpu")
    assert abs(free - psutil.virtual_memory().available) < 256 << 20 and free > 0


def test_a_size_is_estimated_from_the_safetensors_header_before_loading(checkpoints):
    estimate = estimate_bytes(checkpoints[0], "float32")
    size = module_bytes(_load(checkpoints[0]).model)
    buffers = sum(b.numel() * b.element_size() for b in _load(checkpoints[0]).model.buffers())
    assert estimate == size - buffers  # the parameters, as the header lists them; buffers are not saved
    assert estimate_bytes(checkpoints[0], "bfloat16") == estimate // 2
    assert estimate_bytes("not/a-model-anyone-has", "float32") is None  # unknown: no room made


def test_eviction_happens_before_the_load(checkpoints, monkeypatch):
    size = module_bytes(_load(checkpoints[0]).model)
    budget = int(2.5 * size)
    set_cache_limits(max_models=10, max_bytes=budget)
    first = weakref.ref(_load(checkpoints[0]).model)
    _load(checkpoints[1])
    seen = []
    read = models._read_model

    def spy(*args, **kwargs):
        gc.collect()
        seen.append((cache_info()["bytes"], first() is None))
        return read(*args, **kwargs)

    monkeypatch.setattr(models, "_read_model", spy)
    _load(checkpoints[2])
    [(held, freed)] = seen
    assert freed and held + size <= budget  # the old model was gone before the new one was read
    assert _cached_sources() == checkpoints[1:3]


def test_the_target_survives_its_draft_loading_and_the_pair_survives_a_run(checkpoints):
    set_cache_limits(max_models=10, max_bytes=1)  # every model alone is past the budget
    target = _load(checkpoints[0])
    drafter = build_drafter(checkpoints[1], target, device="cpu", dtype="float32")
    assert sorted(_cached_sources()) == checkpoints[:2]  # without the pin, the draft's load evicted the target
    with in_use(target, drafter.model):
        _load(checkpoints[2])
        assert sorted(_cached_sources()) == checkpoints[:3]
        assert {e["source"]: e["pins"] for e in cache_info()["entries"]} == {
            checkpoints[0]: 1, checkpoints[1]: 1, checkpoints[2]: 0}
    _load(checkpoints[3])  # the run is over: the pair may go now
    assert _cached_sources() == [checkpoints[3]]


def test_a_pinned_pair_outlives_the_count_limit(checkpoints):
    target, draft = _load(checkpoints[0]), _load(checkpoints[1])
    with in_use(target, draft):
        _load(checkpoints[2])
        _load(checkpoints[3])
        assert _cached_sources() == [checkpoints[0], checkpoints[1], checkpoints[3]]
    assert _load(checkpoints[0]) is target and _load(checkpoints[1]) is draft
