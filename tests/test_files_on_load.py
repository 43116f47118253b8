"""Files stay data: a head directory (``--draft eagle:DIR``), a teacher-data file
(``train-draft --data``) and a training checkpoint (``--resume``) are read without pickle and
checked on load; each broken kind gets one line that names the file and what is wrong, and a
pickle whose ``__reduce__`` would run code is refused without running it."""

from __future__ import annotations

import json
import os
import pickle
import shutil

import pytest
import torch
from helpers import tiny_llama

from specviz.cli import main
from specviz.drafters.eagle import (
    HEAD_FILE,
    EagleHead,
    load_head,
    save_head,
    shipped_head_dir,
)
from specviz.models.offline import cache_dir
from specviz.train.train_draft import (
    DATA_FILE,
    STATE_FILE,
    TrainConfig,
    load_state,
    load_teacher_data,
    save_state,
    save_teacher_data,
    train,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 32


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0, vocab_size=VOCAB)


@pytest.fixture
def head_dir(target, tmp_path):
    save_head(EagleHead(target, torch.tensor([0, 4, 9])), tmp_path / "head", {"target": "tiny"})
    return tmp_path / "head"


def _one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def _rewrite_weights(directory, change) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(str(directory / HEAD_FILE))
    change(state)
    save_file(state, str(directory / HEAD_FILE))


def _rewrite_config(directory, change) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))


def _truncate(path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


HEAD_DAMAGE = {
    "truncated weights": (lambda d: _truncate(d / HEAD_FILE), [HEAD_FILE, "not a readable safetensors file"]),
    "weights that are JSON": (lambda d: (d / HEAD_FILE).write_text('{"fuse.weight": [1, 2]}'),
                              [HEAD_FILE, "it is JSON text"]),
    "empty weights": (lambda d: (d / HEAD_FILE).write_bytes(b""), [HEAD_FILE, "it is empty"]),
    "a config of other sizes": (lambda d: _rewrite_config(d, lambda c: c.update(intermediate_size=96)),
                                ["config.json", "intermediate_size 96 (the target's 128)", "made for 'tiny'"]),
    "a config of another width": (lambda d: _rewrite_config(d, lambda c: c.update(hidden_size=32)),
                                  ["config.json", "hidden_size 32 (the target's 64)"]),
    "a config that is not JSON": (lambda d: (d / "config.json").write_text("{nope"), ["config.json", "JSON"]),
    "a config of a newer format": (lambda d: _rewrite_config(d, lambda c: c["eagle"].update(format=2)),
                                   ["config.json", "format 2"]),
    "a config without its eagle section": (lambda d: _rewrite_config(d, lambda c: c.pop("eagle")),
                                           ["config.json", "no \"eagle\" section"]),
    "one layer weight missing": (lambda d: _rewrite_weights(d, lambda s: s.pop("layer.mlp.down_proj.weight")),
                                 [HEAD_FILE, "lacks 1 of the head's 11 tensors", "layer.mlp.down_proj.weight"]),
    "every layer weight missing": (lambda d: _rewrite_weights(d, lambda s: [s.pop(k) for k in list(s)
                                                                            if k.startswith("layer.")]),
                                   [HEAD_FILE, "lacks 9 of the head's 11 tensors"]),
    "the fuse missing": (lambda d: _rewrite_weights(d, lambda s: s.pop("fuse.weight")), [HEAD_FILE, "fuse.weight"]),
    "a weight of another shape": (lambda d: _rewrite_weights(d, lambda s: s.update(
        {"fuse.weight": torch.zeros(64, 64)})), [HEAD_FILE, "fuse.weight is F32 [64, 64]", "[64, 128]"]),
    "a tensor it does not have": (lambda d: _rewrite_weights(d, lambda s: s.update(extra=torch.zeros(2))),
                                  [HEAD_FILE, "tensors a head does not have (extra)"]),
    "NaN weights": (lambda d: _rewrite_weights(d, lambda s: s["fuse.weight"].fill_(float("nan"))),
                    [HEAD_FILE, "NaN or infinite"]),
    "a token id beyond the vocabulary": (lambda d: _rewrite_weights(d, lambda s: s.update(
        frequent_ids=torch.tensor([3, VOCAB + 5]))), [HEAD_FILE, f"token id {VOCAB + 5}"]),
    "a negative token id": (lambda d: _rewrite_weights(d, lambda s: s.update(frequent_ids=torch.tensor([-1, 3]))),
                            [HEAD_FILE, "token id -1"]),
    "float token ids": (lambda d: _rewrite_weights(d, lambda s: s.update(frequent_ids=torch.tensor([1.0, 3.0]))),
                        [HEAD_FILE, "frequent_ids is F32"]),
}


@pytest.mark.parametrize("case", list(HEAD_DAMAGE))
def test_a_broken_head_directory_is_refused_with_one_line_naming_the_file(target, head_dir, case):
    damage, words = HEAD_DAMAGE[case]
    damage(head_dir)
    with pytest.raises(ValueError) as err:
        load_head(head_dir, target)
    line = _one_line(err)
    assert str(head_dir) in line and all(w in line for w in words), line


def test_an_intact_head_still_loads(target, head_dir):
    head = load_head(head_dir, target)
    assert head.meta["target"] == "tiny" and head.frequent_ids.tolist() == [0, 4, 9]


@pytest.mark.skipif(not (cache_dir() / "models" / "smollm2-135m-instruct" / "specviz-prepared.json").is_file(),
                    reason="run `python -m specviz prepare smollm2-135m-instruct` first")
def test_the_command_line_says_what_is_wrong_with_a_head_in_one_line(tmp_path, capsys):
    """The shipped head copied, its weights cut short, then replaced by a pickle: one line each."""
    head_dir = shutil.copytree(shipped_head_dir("smollm2-135m-instruct"), tmp_path / "head")
    for damage, words in ((_truncate, "not a readable safetensors file"), (lambda p: p.write_bytes(b"\x80\x04K\x01."),
                                                                            "pickle")):
        damage(head_dir / HEAD_FILE)
        assert main(["run", "--target", "smollm2-135m-instruct", "--draft", f"eagle:{head_dir}", "--max-new-tokens",
                     "2", "--prompt", "Hi"]) == 1
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("specviz: error: "), err
        assert str(head_dir / HEAD_FILE) in err and words in err, err


# --------------------------------------------------------------------------- training files
class _MakesADirectory:
    """A pickle payload: unpickling it calls ``os.makedirs(path)``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.makedirs, (self.path,)


def _payload(path, marker) -> None:
    with open(path, "wb") as f:
        pickle.dump({"target": "tiny", "sequences": [], "x": _MakesADirectory(marker)}, f)
    assert not marker.exists()


def test_a_pickle_given_as_teacher_data_is_refused_and_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "pwned"
    evil = tmp_path / "data.pt"
    _payload(evil, marker)
    code = main(["train-draft", "--target", "tiny", "--out", str(tmp_path / "out"), "--data", str(evil)])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err.count("\n") == 0 and str(evil) in err and "pickle" in err, err
    assert not marker.exists()
    pickle.loads(evil.read_bytes())  # the control: unpickling this file does run its code
    assert marker.exists()


def test_a_pickle_checkpoint_or_data_cache_on_resume_is_refused_and_runs_nothing(tmp_path, capsys):
    out, marker = tmp_path / "out", tmp_path / "pwned"
    (out / "checkpoint").mkdir(parents=True)
    _payload(out / "checkpoint" / STATE_FILE, marker)  # a pickle under the new name
    assert main(["train-draft", "--target", "tiny", "--out", str(out), "--resume"]) == 1
    err = capsys.readouterr().err.strip()
    assert STATE_FILE in err and "pickle" in err and err.count("\n") == 0, err
    os.remove(out / "checkpoint" / STATE_FILE)
    _payload(out / "checkpoint" / "state.pt", marker)  # what an older version wrote
    assert main(["train-draft", "--target", "tiny", "--out", str(out), "--resume"]) == 1
    err = capsys.readouterr().err.strip()
    assert "state.pt" in err and "not read" in err, err
    _payload(out / "teacher_data.pt", marker)
    assert main(["train-draft", "--target", "tiny", "--out", str(out), "--resume"]) == 1
    assert "teacher_data.pt" in capsys.readouterr().err
    assert not marker.exists()


def _data(hidden: int = 64) -> dict:
    g = torch.Generator().manual_seed(0)
    sequences = [([1, 2, 3, 4, 5], 2), ([6, 7, 8], 1)]
    return {"target": "tiny", "sequences": sequences,
            "features": [torch.randn(len(ids), hidden, generator=g).half() for ids, _ in sequences],
            "frequent_ids": torch.tensor([1, 2, 3])}


def test_teacher_data_round_trips_through_safetensors(tmp_path):
    data = _data()
    path = save_teacher_data(data, tmp_path / DATA_FILE)
    back = load_teacher_data(path, "tiny")
    assert back["sequences"] == data["sequences"] and back["frequent_ids"].tolist() == [1, 2, 3]
    assert all(torch.equal(a, b) for a, b in zip(back["features"], data["features"]))
    with pytest.raises(ValueError, match="was made for 'tiny', not 'other'"):
        load_teacher_data(path, "other")


def _rewrite_data(path, change) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - a handle
    change(tensors, meta)
    save_file(tensors, str(path), metadata=meta)


DATA_DAMAGE = {
    "an empty file": (lambda p: p.write_bytes(b""), "it is empty"),
    "a JSON file": (lambda p: p.write_text('{"sequences": []}'), "it is JSON text"),
    "a half-written file": (_truncate, "not a readable safetensors file"),
    "another format": (lambda p: _rewrite_data(p, lambda t, m: m.update(format="x")), "not teacher data"),
    "a newer version": (lambda p: _rewrite_data(p, lambda t, m: m.update(version="9")), "version '9'"),
    "a tensor missing": (lambda p: _rewrite_data(p, lambda t, m: t.pop("features")), "missing ['features']"),
    "offsets past the ids": (lambda p: _rewrite_data(p, lambda t, m: t.update(offsets=torch.tensor([0, 5, 9]))),
                             "offsets do not cover"),
    "a prompt as long as its sequence": (lambda p: _rewrite_data(p, lambda t, m: t.update(
        prompt_lens=torch.tensor([5, 1]))), "prompt length"),
    "features of another length": (lambda p: _rewrite_data(p, lambda t, m: t.update(
        features=t["features"][:4])), "shapes do not fit"),
}


@pytest.mark.parametrize("case", list(DATA_DAMAGE))
def test_broken_teacher_data_is_refused_with_one_line_naming_the_file(tmp_path, case):
    """Refused before any model loads: "tiny" is no model the loader knows, so reaching it would
    raise a ModelLoadError instead."""
    damage, words = DATA_DAMAGE[case]
    path = save_teacher_data(_data(), tmp_path / DATA_FILE)
    damage(path)
    with pytest.raises(ValueError) as err:
        train(TrainConfig(target="tiny", out=str(tmp_path / "out"), data=str(path)))
    line = _one_line(err)
    assert str(path) in line and words in line, line


def test_a_checkpoint_round_trips_and_a_broken_one_is_refused(target, tmp_path):
    head = EagleHead(target)
    optimizer = torch.optim.AdamW(head.parameters(), lr=1e-3)
    head(torch.randn(1, 3, 64), torch.tensor([[1, 2, 3]]), torch.arange(3).view(1, -1)).sum().backward()
    optimizer.step()
    path = save_state(tmp_path / STATE_FILE, optimizer, 7, [{"step": 7, "loss": 1.5}], "tiny")
    state = load_state(path, "tiny")
    assert state["step"] == 7 and state["history"] == [{"step": 7, "loss": 1.5}]
    fresh = torch.optim.AdamW(head.parameters(), lr=1e-3)
    fresh.load_state_dict(state["optimizer"])
    torch.testing.assert_close(fresh.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    for damage, words in ((lambda p: p.write_bytes(b""), "it is empty"), (_truncate, "not a readable safetensors"),
                          (lambda p: p.write_text("[1, 2]"), "it is JSON text")):
        broken = tmp_path / "broken" / STATE_FILE
        broken.parent.mkdir(exist_ok=True)
        shutil.copy(path, broken)
        damage(broken)
        with pytest.raises(ValueError) as err:
            load_state(broken, "tiny")
        assert str(broken) in _one_line(err) and words in str(err.value), str(err.value)
    with pytest.raises(ValueError, match="made for 'tiny', not 'other'"):
        load_state(path, "other")


def test_a_half_written_checkpoint_is_refused_on_resume(tmp_path):
    """A checkpoint whose head and state are of different steps (a run stopped between the two
    writes), or whose head file was cut short, is refused, naming what is wrong."""
    from helpers import bpe_tokenizer

    from specviz.models.loading import LoadedModel
    from specviz.train.train_draft import load_prompts

    tokenizer = bpe_tokenizer(load_prompts()[:60], chat=True, vocab_size=300)
    model = tiny_llama(0, vocab_size=len(tokenizer), lm_head_scale=12.0)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    loaded = LoadedModel(model, tokenizer, "tiny", "tiny", torch.device("cpu"), torch.float32)
    cfg = TrainConfig(target="tiny", out=str(tmp_path), tokens=300, steps=4, rollout=1, batch=4, vocab=50,
                      max_new_tokens=24, gen_batch=16, max_len=64, checkpoint_every=2)
    train(cfg, loaded)
    checkpoint = tmp_path / "checkpoint"
    _rewrite_config(checkpoint, lambda c: c["eagle"].update(step=2))
    with pytest.raises(ValueError, match="half-written checkpoint") as err:
        train(TrainConfig(**{**cfg.__dict__, "steps": 6, "resume": True}), loaded)
    assert str(checkpoint) in _one_line(err)
    _truncate(checkpoint / HEAD_FILE)
    with pytest.raises(ValueError, match="not a readable safetensors file") as err:
        train(TrainConfig(**{**cfg.__dict__, "steps": 6, "resume": True}), loaded)
    assert str(checkpoint / HEAD_FILE) in _one_line(err)
