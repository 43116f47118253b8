"""Files that are well formed but useless or hostile: a head whose
frequent-token list is degenerate, a config too large or too deeply nested to read, a training
checkpoint with a nested history, a non-number optimiser setting, random RNG bytes, NaN or
negative optimiser moments, teacher data that is one token repeated, and a training run whose
weights turn NaN. Each is refused in one line naming the file and what is wrong; no NaN head is
ever written."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch
from helpers import bpe_tokenizer, tiny_llama
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from specviz.drafters.eagle import HEAD_FILE, MAX_CONFIG_BYTES, EagleHead, load_head, save_head
from specviz.models.loading import LoadedModel
from specviz.train.train_draft import (
    DATA_FILE,
    STATE_FILE,
    TrainConfig,
    load_prompts,
    load_state,
    save_state,
    save_teacher_data,
    train,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# The tiny target, a valid head to spoil and the one-line check: the hostile-file tests' own.
from test_files_on_load import VOCAB, _one_line, head_dir, target  # noqa: E402, F401  (fixtures)


def _set_frequent_ids(directory, ids) -> None:
    state = load_file(str(directory / HEAD_FILE))
    state["frequent_ids"] = torch.tensor(ids, dtype=torch.long)
    save_file(state, str(directory / HEAD_FILE))


# --------------------------------------------------------------------------- heads
USELESS_HEADS = {
    "one token repeated": ([5] * 40, ["5", "repeat"]),
    "a duplicate among others": ([1, 2, 2, 3, 7], ["token id 2", "repeat"]),
    "a single token": ([5], ["1 distinct token", "at least 2"]),
}


@pytest.mark.parametrize("case", list(USELESS_HEADS))
def test_a_head_with_a_degenerate_token_list_is_refused_naming_the_file(target, head_dir, case):
    ids, words = USELESS_HEADS[case]
    _set_frequent_ids(head_dir, ids)
    with pytest.raises(ValueError) as err:
        load_head(head_dir, target)
    line = _one_line(err)
    assert str(head_dir / HEAD_FILE) in line and "frequent_ids" in line and all(w in line for w in words), line


def test_a_head_whose_layer_weight_is_infinite_is_refused(target, head_dir):
    state = load_file(str(head_dir / HEAD_FILE))
    state["layer.mlp.up_proj.weight"][0, 0] = float("inf")
    save_file(state, str(head_dir / HEAD_FILE))
    with pytest.raises(ValueError) as err:
        load_head(head_dir, target)
    assert "layer.mlp.up_proj.weight" in _one_line(err) and "infinite" in str(err.value)


def test_a_huge_config_is_refused_by_its_size_before_it_is_read(head_dir, target, monkeypatch):
    """A sparse 300 MiB config.json: refused from os.stat, without one byte read."""
    config = head_dir / "config.json"
    with open(config, "r+b") as f:
        f.truncate(300 * 2**20)
    read = []
    original = type(config).read_text
    monkeypatch.setattr(type(config), "read_text", lambda self, *a, **k: read.append(self) or original(self, *a, **k))
    monkeypatch.setattr(type(config), "read_bytes", lambda self: read.append(self) or b"")
    with pytest.raises(ValueError) as err:
        load_head(head_dir, target)
    line = _one_line(err)
    assert str(config) in line and "300 MiB" in line and f"{MAX_CONFIG_BYTES // 2**20} MiB" in line, line
    assert config not in read


def test_a_deeply_nested_config_is_refused_naming_its_depth(head_dir, target):
    (head_dir / "config.json").write_text("[" * 50_000 + "]" * 50_000)
    with pytest.raises(ValueError) as err:
        load_head(head_dir, target)
    line = _one_line(err)
    assert str(head_dir / "config.json") in line and "nested deeper than" in line, line


def test_an_intact_head_with_a_few_distinct_tokens_still_loads(target, head_dir):
    assert load_head(head_dir, target).frequent_ids.tolist() == [0, 4, 9]


# --------------------------------------------------------------------------- checkpoints
@pytest.fixture
def checkpoint(target, tmp_path):
    head = EagleHead(target)
    optimizer = torch.optim.AdamW(head.parameters(), lr=1e-3)
    head(torch.randn(1, 3, 64), torch.tensor([[1, 2, 3]]), torch.arange(3).view(1, -1)).sum().backward()
    optimizer.step()
    return save_state(tmp_path / STATE_FILE, optimizer, 7, [{"step": 7, "loss": 1.5}], "tiny")


def _rewrite(path, change) -> None:
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - a handle
    change(tensors, meta)
    save_file(tensors, str(path), metadata=meta)


def _groups_with(meta, **setting) -> None:
    groups = json.loads(meta["param_groups"])
    groups[0].update(setting)
    meta["param_groups"] = json.dumps(groups)


CHECKPOINT_DAMAGE = {
    "a deeply nested history": (lambda t, m: m.update(history="[" * 100_000 + "]" * 100_000),
                                ["history", "nested deeper than"]),
    "a non-number learning rate": (lambda t, m: _groups_with(m, lr="fast"), ["lr", "'fast'"]),
    "a non-number beta": (lambda t, m: _groups_with(m, betas=[0.9, "x"]), ["betas"]),
    "an infinite eps": (lambda t, m: _groups_with(m, eps=float("inf")), ["eps"]),
    "random RNG bytes": (lambda t, m: t.update(rng=torch.randint(0, 256, t["rng"].shape, dtype=torch.uint8,
                                                                 generator=torch.Generator().manual_seed(1))),
                         ["RNG state"]),
    "a NaN first moment": (lambda t, m: t["optimizer.0.exp_avg"].fill_(float("nan")),
                           ["optimizer.0.exp_avg", "NaN"]),
    "a NaN step count": (lambda t, m: t["optimizer.0.step"].fill_(float("nan")), ["optimizer.0.step"]),
    "a negative second moment": (lambda t, m: t["optimizer.1.exp_avg_sq"].fill_(-1.0),
                                 ["optimizer.1.exp_avg_sq", "negative"]),
}


@pytest.mark.parametrize("case", list(CHECKPOINT_DAMAGE))
def test_a_hostile_checkpoint_is_refused_in_one_line_naming_the_file(checkpoint, case):
    damage, words = CHECKPOINT_DAMAGE[case]
    _rewrite(checkpoint, damage)
    with pytest.raises(ValueError) as err:
        load_state(checkpoint, "tiny")
    line = _one_line(err)
    assert str(checkpoint) in line and all(w in line for w in words), line


def test_an_intact_checkpoint_still_loads(checkpoint):
    assert load_state(checkpoint, "tiny")["step"] == 7


# --------------------------------------------------------------------------- teacher data and training
def test_teacher_data_that_is_one_token_repeated_is_refused_before_the_model_loads(tmp_path):
    """"tiny" is no model the loader knows: reaching the load would raise ModelLoadError instead."""
    g = torch.Generator().manual_seed(0)
    sequences = [([1, 2, 7, 7, 7, 7], 2), ([3, 7, 7, 7], 1)]
    data = {"target": "tiny", "sequences": sequences, "frequent_ids": torch.tensor([7]),
            "features": [torch.randn(len(ids), 64, generator=g).half() for ids, _ in sequences]}
    path = save_teacher_data(data, tmp_path / DATA_FILE)
    with pytest.raises(ValueError) as err:
        train(TrainConfig(target="tiny", out=str(tmp_path / "out"), data=str(path)))
    line = _one_line(err)
    assert str(path) in line and "1 distinct token" in line and "7" in line, line


@pytest.fixture(scope="module")
def tiny_loaded():
    tokenizer = bpe_tokenizer(load_prompts()[:60], chat=True, vocab_size=300)
    model = tiny_llama(0, vocab_size=len(tokenizer), lm_head_scale=12.0)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return LoadedModel(model, tokenizer, "tiny", "tiny", torch.device("cpu"), torch.float32)


def test_training_that_turns_nan_stops_and_writes_no_head(tiny_loaded, tmp_path, monkeypatch):
    import specviz.train.train_draft as train_draft

    real = train_draft.rollout_loss

    def poisoned(*args, **kwargs):
        loss, figures = real(*args, **kwargs)
        return loss * float("nan"), figures

    monkeypatch.setattr(train_draft, "rollout_loss", poisoned)
    cfg = TrainConfig(target="tiny", out=str(tmp_path), tokens=200, steps=3, rollout=1, batch=2, vocab=50,
                      max_new_tokens=16, gen_batch=16, max_len=48, checkpoint_every=1)
    started = time.perf_counter()
    with pytest.raises(ValueError) as err:
        train(cfg, tiny_loaded)
    line = _one_line(err)
    assert "NaN" in line and "step 1" in line and str(tmp_path) in line, line
    assert not (tmp_path / HEAD_FILE).exists() and not (tmp_path / "checkpoint" / HEAD_FILE).exists()
    assert time.perf_counter() - started < 120


def test_save_head_refuses_non_finite_weights(target, tmp_path):
    head = EagleHead(target, torch.tensor([0, 4, 9]))
    with torch.no_grad():
        head.fuse.weight[0, 0] = float("nan")
    with pytest.raises(ValueError) as err:
        save_head(head, tmp_path / "nan-head")
    assert "fuse.weight" in _one_line(err) and not (tmp_path / "nan-head" / HEAD_FILE).exists()
    assert not os.path.exists(tmp_path / "nan-head" / "config.json")
