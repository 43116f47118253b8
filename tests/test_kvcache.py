"""The KV caches (specviz/core/kvcache.py): the keyword that hands a cache to a forward pass, the
transformers floor, and the static cache whose fixed-shape passes give the dynamic path's outputs.

The keyword tests are the ones to run on the oldest transformers this code claims (5.17: its
forwards take ``past_key_values`` and swallow ``cache=`` into ``**kwargs``); they fail there if
any forward call names the keyword by hand.
"""

from __future__ import annotations

import pytest
import torch
from helpers import noisy_copy, tiny_llama
from torch import nn

from specviz.drafters import ModelDrafter, PromptLookupDrafter
from specviz.core.engine import Generation, keep_cache_positions, tree_attention_inputs
from specviz.core.kvcache import (
    TRANSFORMERS_FLOOR,
    PaddedStaticCache,
    cache_argument,
    check_transformers,
    run_pass,
)
from specviz.core.sampling import SamplingConfig

VOCAB = 256
GREEDY = SamplingConfig(temperature=0.0)
SAMPLED = SamplingConfig(temperature=1.0)
PROMPT = [200, 1, 2, 3, 200, 1, 2, 3, 200]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --------------------------------------------------------------------------- the keyword
class _BeforeTheRename(nn.Module):
    """The shape of transformers 5.17–5.23 forwards: ``past_key_values`` plus ``**kwargs``."""

    def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):
        return past_key_values


class _AfterTheRename(nn.Module):
    """The shape of transformers 5.24 forwards: ``cache`` plus ``**kwargs``."""

    def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs):
        return cache


class _NoCache(nn.Module):
    def forward(self, x, **kwargs):
        return x


def test_the_cache_keyword_is_the_one_the_forward_names():
    cache = object()
    assert cache_argument(_BeforeTheRename(), cache) == {"past_key_values": cache}
    assert cache_argument(_AfterTheRename(), cache) == {"cache": cache}
    assert _BeforeTheRename()(**cache_argument(_BeforeTheRename(), cache)) is cache  # not lost in **kwargs
    assert _AfterTheRename()(**cache_argument(_AfterTheRename(), cache)) is cache
    with pytest.raises(TypeError, match="neither cache nor past_key_values"):
        cache_argument(_NoCache(), cache)


def test_a_forward_through_the_keyword_fills_the_callers_cache():
    """The installed transformers' Llama and its decoder layer (what the EAGLE head calls) keep the
    keys and values in *our* cache: on a transformers whose keyword differs from the one passed, the
    model would build a private cache and ours would stay empty."""
    from transformers import DynamicCache

    from specviz.drafters.eagle import EagleHead

    model = tiny_llama(0)
    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([PROMPT]), **cache_argument(model, cache), use_cache=True)
    assert cache.get_seq_length() == len(PROMPT)
    head, head_cache = EagleHead(model), DynamicCache()
    hidden = model.config.hidden_size
    with torch.inference_mode():
        head(torch.zeros(1, 5, hidden), torch.tensor([PROMPT[:5]]), torch.arange(5).view(1, -1), cache=head_cache)
    assert head_cache.get_seq_length() == 5


def test_a_transformers_below_the_floor_is_refused_with_one_sentence(monkeypatch):
    check_transformers("5.17.0")
    check_transformers("5.24.0")
    with pytest.raises(RuntimeError) as err:
        check_transformers("5.16.2")
    message = str(err.value)
    assert "5.16.2" in message and TRANSFORMERS_FLOOR in message and "pip install" in message
    assert "\n" not in message and message.count(". ") == 0

    import transformers

    from specviz.models.loading import ModelLoadError, load_model

    monkeypatch.setattr(transformers, "__version__", "5.3.0")
    with pytest.raises(ModelLoadError, match="transformers 5.3.0 is older than"):
        load_model("smollm2-135m-instruct", device="cpu", dtype="float32")  # refused before anything loads


# --------------------------------------------------------------------------- static passes
def _static(model, max_len: int, width: int):
    return PaddedStaticCache.create(model, max_len, width)


def test_padded_static_passes_give_the_dynamic_logits_and_keep_the_path():
    """Prefill, then passes of 1..width real tokens (padded to the width), a crop, a tree pass and
    a kept tree path: the real rows' logits equal the dynamic cache's, and so do the logits after
    the path was kept (the static cache keeps it in place)."""
    from transformers import DynamicCache

    model = tiny_llama(0, lm_head_scale=8.0)
    static, dynamic = _static(model, 64, 5), DynamicCache()

    def both(ids, keep, tree=None):
        with torch.inference_mode():
            ids = torch.tensor(ids)
            a = run_pass(model, static, ids, keep, tree)
            b = run_pass(model, dynamic, ids, keep, tree)
        assert a.shape == b.shape == (keep, VOCAB)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        assert static.get_seq_length() == dynamic.get_seq_length()

    both(PROMPT, 1)
    both([7], 1)
    both([8, 9, 10], 3)
    both([11, 12, 13, 14, 15], 2)  # exactly the width: no padding
    static.crop(len(PROMPT) + 2)
    dynamic.crop(-(dynamic.get_seq_length() - len(PROMPT) - 2))
    both([21, 22], 2)
    parents = [-1, 0, 0, 1]
    cached = static.get_seq_length()
    tree = tree_attention_inputs(parents, cached, 1, torch.float32, torch.device("cpu"))
    both([30, 31, 32, 33, 34], 5, tree)
    keep = list(range(cached + 1)) + [cached + 1 + node for node in (0, 2)]  # the pending token, nodes 0 and 2
    static.keep_positions(keep)
    keep_cache_positions(dynamic, torch.tensor(keep))
    both([40], 1)
    with pytest.raises(ValueError, match="5 positions wide"):
        run_pass(model, static, torch.arange(6), 1)


def _run(target, drafter, sampling, cache, branches=1, tokens=24, seed=3):
    return Generation(target, PROMPT, drafter, k=4, sampling=sampling, max_new_tokens=tokens, seed=seed,
                      branches=branches, cache=cache).run()


@pytest.fixture(scope="module")
def noisy(target):
    return noisy_copy(target, seed=5, scale=0.003)


@pytest.mark.parametrize("branches", [1, 3], ids=["chain", "tree"])
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "seeded-t1"])
@pytest.mark.parametrize("kind", ["noisy", "self", "lookup"])
def test_static_cache_runs_equal_dynamic_runs(target, noisy, kind, sampling, branches, monkeypatch):
    """Token for token and verdict for verdict, greedy and seeded sampling, chains and trees: the
    static path is the dynamic path with fixed shapes. With the target as its own draft every
    round is fully accepted, so the static draft feeds the round's two pending tokens as two
    one-token passes: one more draft step, counted. The noisy draft's greedy tree accepts a
    sibling, whose path the static cache keeps in place."""
    def drafter():
        if kind == "lookup":
            return PromptLookupDrafter(VOCAB)
        return ModelDrafter(target if kind == "self" else noisy, VOCAB)

    kept = []
    static_class = type(PaddedStaticCache.create(target, 8, 1))
    keep_positions = static_class.keep_positions
    monkeypatch.setattr(static_class, "keep_positions", lambda self, keep: kept.append(keep) or keep_positions(self, keep))
    dynamic = _run(target, drafter(), sampling, "dynamic", branches)
    static = _run(target, drafter(), sampling, "static", branches)
    assert bool(kept) == (kind == "noisy" and sampling is GREEDY and branches > 1)
    assert static.notes == dynamic.notes == []
    assert static.token_ids == dynamic.token_ids
    assert [t.kind for t in static.tokens] == [t.kind for t in dynamic.tokens]
    extra = [s.draft_steps - d.draft_steps for s, d in zip(static.rounds, dynamic.rounds)]
    assert set(extra) <= {0, 1}
    if kind == "self":
        assert sum(extra) > 0
    if sampling is GREEDY:
        plain = _run(target, None, GREEDY, "static")
        assert plain.token_ids == static.token_ids


def test_static_passes_have_one_shape_after_the_prefill(target, noisy):
    """Every target pass after the prefill feeds 1 + N positions with a mask over all the cache's
    slots; every draft pass after its prefill feeds one token."""
    shapes = {"target": [], "draft": []}

    def record(role):
        def hook(module, args, kwargs):
            mask = kwargs.get("attention_mask")
            shapes[role].append((kwargs["input_ids"].shape[1], None if mask is None else tuple(mask.shape)))
        return hook

    handles = [target.register_forward_pre_hook(record("target"), with_kwargs=True),
               noisy.register_forward_pre_hook(record("draft"), with_kwargs=True)]
    try:
        gen = _run(target, ModelDrafter(noisy, VOCAB), SAMPLED, "static", branches=2, tokens=20)
    finally:
        for handle in handles:
            handle.remove()
    width, slots = 1 + 8, len(PROMPT) + 20 + 1 + 8  # N = 2·K for a tree; the cache: prompt, tokens, one pass
    assert shapes["target"][0] == (len(PROMPT), (1, 1, len(PROMPT), slots))
    assert set(shapes["target"][1:]) == {(width, (1, 1, width, slots))}
    assert len(shapes["target"]) == 1 + sum(1 for r in gen.rounds if r.drafted or not r.root_from_prefill)
    assert shapes["draft"][0][0] == len(PROMPT) - 1 and {s[0] for s in shapes["draft"][1:]} == {1}


def test_a_model_whose_attention_takes_no_mask_runs_dynamic_with_a_note():
    model = tiny_llama(0, lm_head_scale=8.0)
    model.config.layer_types = ["sliding_attention", "full_attention"]
    gen = _run(model, PromptLookupDrafter(VOCAB), GREEDY, "static", tokens=12)
    assert len(gen.notes) == 1 and "static cache" in gen.notes[0] and "dynamic" in gen.notes[0]
    assert not isinstance(gen._cache, PaddedStaticCache)
    assert gen.token_ids == _run(model, None, GREEDY, "dynamic", tokens=12).token_ids


def test_an_unknown_cache_kind_is_refused(target):
    with pytest.raises(ValueError, match="dynamic, static"):
        _run(target, None, GREEDY, "paged")


def test_the_cache_kind_is_a_validated_setting_that_reaches_the_run(target):
    from types import SimpleNamespace

    from specviz.run.request import RequestError, validate_request
    from specviz.run.runner import PreparedRun

    settings = {"prompt": "x", "target": "t", "draft": "ngram", "k": 4, "temperature": 0, "top_k": 0,
                "top_p": 1.0, "max_new_tokens": 8, "seed": 0}
    assert validate_request(**settings).cache == "dynamic"
    request = validate_request(**settings, cache=" Static ")
    assert request.cache == "static"
    with pytest.raises(RequestError, match="KV cache must be one of dynamic, static"):
        validate_request(**settings, cache="paged")
    loaded = SimpleNamespace(model=target, eos_token_ids=(), vocab_size=VOCAB, logits_width=VOCAB)
    prepared = PreparedRun(request, loaded, PromptLookupDrafter(VOCAB), PROMPT, frozenset(), "pair")
    assert prepared.generation(decode=False).cache == prepared.generation(False, decode=False).cache == "static"
