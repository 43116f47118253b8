"""Tiny random language models for tests: built from a config in milliseconds, no hub, no files.

Every builder is seeded and returns a float32 model in eval mode, so a test gets the same weights on
every run and on every machine. The models are untrained: their text is noise, but they are real
transformers causal LMs with a real KV cache, which is what the speculative loop has to get right.
"""

from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM

__all__ = ["CHATML", "assert_cache_holds", "bpe_tokenizer", "fresh_kv", "noisy_copy", "tiny_llama", "with_vocab_width"]

#: A minimal ChatML template (SmolLM2 and Qwen use this format).
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_llama(
    seed: int,
    vocab_size: int = 256,
    max_position_embeddings: int = 512,
    lm_head_scale: float = 1.0,
) -> LlamaForCausalLM:
    """A 2-layer Llama (hidden 64, 4 heads, 2 KV heads) with seeded random weights.

    Args:
        seed: seed of the weight initialisation (the global RNG is left as it was).
        vocab_size: width of the embedding and of the lm_head (tokens).
        max_position_embeddings: the context length the config declares (tokens).
        lm_head_scale: multiplies the lm_head weights; > 1 makes next-token distributions peakier
            (random init gives nearly uniform ones, which hide sampling faults).

    Returns:
        The model, float32, eval mode, on the CPU.
    """
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model = model.float().eval()
    if lm_head_scale != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(lm_head_scale)
    return model


def noisy_copy(model: LlamaForCausalLM, seed: int, scale: float) -> LlamaForCausalLM:
    """A copy of ``model`` with Gaussian noise of std ``scale`` added to every weight.

    A draft that agrees with the target on some tokens and not on others, so runs mix accepted
    prefixes of every length with rejections (the case cache rollback has to get right).
    """
    noisy = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in noisy.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * scale)
    return noisy.eval()


def with_vocab_width(model: LlamaForCausalLM, vocab_size: int) -> LlamaForCausalLM:
    """The same model with its embedding and lm_head padded or cut to ``vocab_size`` rows.

    Shared rows are copied, so on ids below both widths the two models are identical (the
    situation of two checkpoints that share a tokenizer but pad their vocabularies differently);
    extra rows keep seeded random values.
    """
    config = copy.deepcopy(model.config)
    config.vocab_size = vocab_size
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(vocab_size)
        resized = LlamaForCausalLM(config).float().eval()
    state = model.state_dict()
    with torch.no_grad():
        for name, parameter in resized.state_dict().items():
            source = state[name]
            rows = min(source.shape[0], parameter.shape[0])
            if source.shape[1:] != parameter.shape[1:]:
                raise ValueError(f"{name}: {tuple(source.shape)} vs {tuple(parameter.shape)}")
            parameter[:rows].copy_(source[:rows])
    return resized


def bpe_tokenizer(corpus: list[str], chat: bool, vocab_size: int):
    """A byte-level BPE tokenizer trained on ``corpus`` in milliseconds, with ChatML special tokens
    (EOS ``<|im_end|>``) and, if ``chat``, the :data:`CHATML` template. Two corpora give two
    tokenizers that disagree, which is what the incompatible-pair tests need."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", bos_token="<|im_start|>")
    if chat:
        fast.chat_template = CHATML
    return fast


def fresh_kv(model, ids: list[int]):
    """The KV cache (a transformers ``DynamicCache``) a fresh prefill of ``ids`` produces."""
    from transformers import DynamicCache

    from specviz.core.kvcache import cache_argument

    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), **cache_argument(model, cache), use_cache=True)
    return cache


def assert_cache_holds(cache, model, ids: list[int]) -> None:
    """``cache`` holds exactly ``ids``: same length and the keys/values a fresh prefill gives."""
    assert cache.get_seq_length() == len(ids)
    if not ids:
        return
    for layer, ref in zip(cache.layers, fresh_kv(model, ids).layers):
        assert layer.keys.shape == ref.keys.shape
        torch.testing.assert_close(layer.keys, ref.keys, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(layer.values, ref.values, atol=1e-4, rtol=1e-4)
