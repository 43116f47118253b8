"""What a pair takes and a device has, known before anything loads (``specviz.models.memory``): the
presets' shapes agree with their configs, a checkpoint's size comes from its safetensors header,
and a pair fits or not by parameters × bytes per parameter × headroom."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama

from specviz.models import memory
from specviz.run import pair_sizing
from specviz.models.memory import MODEL_SHAPES
from specviz.run.pair_sizing import pair_bytes, pair_fits

#: The presets' published configs (the fields a parameter count depends on).
CONFIGS = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": ("llama", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                                          num_hidden_layers=30, num_attention_heads=9,
                                                          num_key_value_heads=3, tie_word_embeddings=True)),
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": ("llama", dict(vocab_size=49152, hidden_size=2048, intermediate_size=8192,
                                                          num_hidden_layers=24, num_attention_heads=32,
                                                          num_key_value_heads=32, tie_word_embeddings=True)),
    "Qwen/Qwen2.5-0.5B-Instruct": ("qwen2", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                                 num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                                                 tie_word_embeddings=True)),
    "Qwen/Qwen2.5-7B-Instruct": ("qwen2", dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                                               num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                                               tie_word_embeddings=False)),
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": ("qwen2", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                                       num_hidden_layers=24, num_attention_heads=14,
                                                       num_key_value_heads=2, tie_word_embeddings=True)),
    "Qwen/Qwen2.5-Coder-1.5B-Instruct": ("qwen2", dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                                                       num_hidden_layers=28, num_attention_heads=12,
                                                       num_key_value_heads=2, tie_word_embeddings=True)),
    # the offline GGUF copies: the same shapes with the lm_head untied
    "qwen2.5-coder-0.5b-instruct": ("qwen2", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                                  num_hidden_layers=24, num_attention_heads=14,
                                                  num_key_value_heads=2, tie_word_embeddings=False)),
    "qwen2.5-coder-1.5b-instruct": ("qwen2", dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                                                  num_hidden_layers=28, num_attention_heads=12,
                                                  num_key_value_heads=2, tie_word_embeddings=False)),
    "google/gemma-3-270m": ("gemma3_text", dict(vocab_size=262144, hidden_size=640, intermediate_size=2048,
                                                num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1,
                                                head_dim=256, tie_word_embeddings=True)),
}


@pytest.mark.parametrize("hub_id", list(CONFIGS))
def test_each_presets_shape_is_what_its_config_builds(hub_id):
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, fields = CONFIGS[hub_id]
    config = AutoConfig.for_model(model_type, **fields)
    with torch.device("meta"):  # shapes only: no memory, milliseconds
        model = AutoModelForCausalLM.from_config(config)
    unique = {id(p): p for p in model.parameters()}.values()  # a tied lm_head counted once
    assert MODEL_SHAPES[hub_id] == memory.ModelShape(sum(p.numel() for p in unique), fields["num_hidden_layers"])


def test_a_checkpoints_parameters_come_from_its_safetensors_header(tmp_path):
    model = tiny_llama(0)
    model.save_pretrained(tmp_path)
    assert memory.safetensors_parameters(tmp_path) == sum(p.numel() for p in model.parameters())
    assert memory.model_parameters(str(tmp_path)) == sum(p.numel() for p in model.parameters())
    assert memory.model_layers(str(tmp_path)) == 2
    assert memory.safetensors_parameters(tmp_path / "nowhere") is None


def test_the_presets_are_known_before_any_download():
    assert memory.model_parameters("Qwen/Qwen2.5-7B-Instruct") == 7_615_616_512
    assert memory.model_layers("HuggingFaceTB/SmolLM2-1.7B-Instruct") == 24
    assert memory.model_layers("gemma-3-270m") == 18  # an offline name by its hub id
    assert memory.model_parameters("someone/unknown-model") is None
    assert pair_sizing.drafter_layers("eagle", "smollm2-135m-instruct") == 1  # the shipped head's config
    assert pair_sizing.drafter_layers("ngram", "smollm2-135m-instruct") is None


def test_a_pairs_bytes_are_its_parameters_times_the_dtypes_bytes():
    qwen = 7_615_616_512 + 494_032_768
    assert pair_bytes("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "bfloat16") == 2 * qwen
    assert pair_bytes("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "float32") == 4 * qwen
    smol = memory.model_parameters("smollm2-135m-instruct")
    assert pair_bytes("smollm2-135m-instruct", "ngram", "float32") == 4 * smol
    assert pair_bytes("smollm2-135m-instruct", "early-exit:4", "bfloat16") == 2 * smol  # the target's own layers
    # The int8 copy is quantized from a float32 deep copy of the target: 4 more bytes per parameter at its peak.
    assert pair_bytes("smollm2-135m-instruct", "int8", "bfloat16") == 6 * smol
    assert pair_bytes("someone/unknown-model", "ngram", "float32") is None


def test_a_pair_fits_with_headroom_or_is_refused():
    needed = pair_bytes("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "bfloat16")
    assert pair_fits("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "bfloat16", 48 << 30)
    assert not pair_fits("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "bfloat16", needed)  # no headroom
    assert not pair_fits("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "float32", 24 << 30)
    assert pair_fits("someone/unknown-model", "ngram", "float32", 1)  # unknown: loading finds out
    assert pair_fits("Qwen/Qwen2.5-7B-Instruct", "ngram", "float32", None)


def test_bytes_per_parameter():
    assert [memory.bytes_per_parameter(d) for d in ("float32", "bfloat16", "float16", torch.float16)] == [4, 2, 2, 2]
    with pytest.raises(ValueError, match="unknown dtype"):
        memory.bytes_per_parameter("auto")


def test_the_budget_is_a_share_of_free_plus_held_memory(monkeypatch):
    monkeypatch.setattr(memory, "device_free_bytes", lambda device: 1000)
    assert memory.memory_budget("cpu") == 700 and memory.memory_budget("cpu", held=1000) == 1400
