"""The EAGLE-style head and its drafter: features with no extra pass, greedy equality, save/load,
the registry entry and the training command's pieces, on tiny models built from a config."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import bpe_tokenizer, tiny_llama

from specviz import drafters
from specviz.drafters import PromptLookupDrafter
from specviz.drafters.combined import LookupThenEagle
from specviz.drafters.eagle import (
    EagleDrafter,
    EagleHead,
    load_head,
    save_head,
    shipped_head_dir,
)
from specviz.core.drafttree import LastLayerFeatures
from specviz.core.engine import Generation
from specviz.models.loading import LoadedModel
from specviz.core.sampling import SamplingConfig
from specviz.train.train_draft import TrainConfig, load_prompts, rollout_mask, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GREEDY = SamplingConfig(temperature=0.0)
VOCAB = 32
PROMPT = [1, 2, 3]


def agreeing_head(target) -> EagleHead:
    """A head that reads only the next token's embedding through the target's last layer: on a
    tiny random target (whose next token depends mostly on the current one) it agrees with the
    target often, so runs mix long accepted blocks with rejections."""
    head = EagleHead(target)
    hidden = head.hidden_size
    with torch.no_grad():
        head.fuse.weight.zero_()
        head.fuse.weight[:, hidden:] = torch.eye(hidden)
    return head


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0, vocab_size=VOCAB, lm_head_scale=4.0)


class CountingDrafter(EagleDrafter):
    """The real drafter, also keeping every feature block the engine hands it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.received: list[torch.Tensor] = []

    def extend_features(self, features: torch.Tensor) -> None:
        self.received.append(features.clone())
        super().extend_features(features)


@pytest.mark.parametrize("branches", [1, 3], ids=["chain", "tree"])
def test_features_are_the_targets_last_layer_states_with_no_extra_pass(target, branches):
    calls = []
    handle = target.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        plain = Generation(target, PROMPT, None, sampling=GREEDY, max_new_tokens=20).run()
        plain_calls = len(calls)
        drafter = CountingDrafter(agreeing_head(target), VOCAB)
        gen = Generation(target, PROMPT, drafter, k=3, sampling=GREEDY, max_new_tokens=20, branches=branches).run()
        spec_calls = len(calls) - plain_calls
    finally:
        handle.remove()
    assert plain_calls == 20  # the prefill, then one pass per further token
    # The prefill, then one verify pass per round (the first round's only when it drafted something).
    assert spec_calls == 1 + len(gen.rounds) - (not gen.rounds[0].drafted)
    assert any(r.n_accepted >= 2 for r in gen.rounds)
    assert gen.token_ids == plain.token_ids
    # The features handed over are those of the committed tokens the target's cache holds, in order.
    committed = PROMPT + gen.token_ids
    handed = torch.cat(drafter.received)
    recorder = LastLayerFeatures(target)
    with recorder, torch.inference_mode():
        target(input_ids=torch.tensor([committed[: handed.shape[0]]]))
    assert handed.shape[0] == len(committed) - 1
    torch.testing.assert_close(handed, recorder.features[0], atol=1e-4, rtol=1e-4)


def test_last_layer_features_are_before_the_final_norm(target):
    recorder = LastLayerFeatures(target)
    with recorder, torch.inference_mode():
        out = target(input_ids=torch.tensor([PROMPT]), output_hidden_states=True)
    normed = target.model.norm(recorder.features)
    torch.testing.assert_close(normed, out.hidden_states[-1])
    assert not torch.allclose(recorder.features, out.hidden_states[-1])
    hooks = target.model.layers[-1]._forward_hooks.values()
    assert all(getattr(hook, "__self__", None) is not recorder for hook in hooks)  # ours is gone after the block


@pytest.mark.parametrize("branches,k", [(1, 1), (1, 4), (2, 3), (3, 5)])
def test_greedy_equals_plain_decoding(target, branches, k):
    plain = Generation(target, PROMPT, None, sampling=GREEDY, max_new_tokens=40).run()
    gen = Generation(target, PROMPT, EagleDrafter(agreeing_head(target), VOCAB), k=k, sampling=GREEDY,
                     max_new_tokens=40, branches=branches).run()
    assert gen.token_ids == plain.token_ids
    accepted = [r.n_accepted for r in gen.rounds]
    assert max(accepted) >= min(k, 2) and 0 in accepted  # long blocks and rejections both happen


class Recording(LookupThenEagle):
    """The real hybrid drafter, also keeping which of its two drafters proposed each round."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.turns: list[str] = []

    def propose(self, *args, **kwargs):
        tree = super().propose(*args, **kwargs)
        self.turns.append(self.last)
        return tree


@pytest.mark.parametrize("branches", [1, 2], ids=["chain", "tree"])
def test_lookup_then_eagle_copies_where_it_can_and_keeps_greedy_text(target, branches):
    # The prompt repeats a trigram, so early rounds copy; the random target soon writes text
    # with no repeated trigram behind it, where the head drafts.
    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7]
    plain = Generation(target, prompt, None, sampling=GREEDY, max_new_tokens=40).run()
    drafter = Recording(EagleDrafter(agreeing_head(target), VOCAB), PromptLookupDrafter(VOCAB, min_ngram=3))
    gen = Generation(target, prompt, drafter, k=3, sampling=GREEDY, max_new_tokens=40, branches=branches).run()
    assert gen.token_ids == plain.token_ids
    assert drafter.turns[0] == ("lookup" if branches == 1 else "both") and "head" in drafter.turns, drafter.turns
    for turn, round_ in zip(drafter.turns, gen.rounds):  # at T = 0 every node is a point mass
        assert all(node.p_draft == 1.0 for node in round_.drafted), turn
    if branches > 1:  # the first tree holds lookup's copy and the head's branches beside it
        first = gen.rounds[0].drafted
        assert [node.id for node in first[:3]] == [8, 9, 10] and len(first) > 3, first
    # As a chain, or with fill_trees off, a round comes from one of the two.
    single = Recording(EagleDrafter(agreeing_head(target), VOCAB), PromptLookupDrafter(VOCAB, min_ngram=3),
                       fill_trees=False)
    again = Generation(target, prompt, single, k=3, sampling=GREEDY, max_new_tokens=40, branches=branches).run()
    assert again.token_ids == plain.token_ids and "both" not in single.turns
    assert drafters.parse_drafter_spec("Lookup+EAGLE:/tmp/h") == "lookup+eagle:/tmp/h"


def test_the_bench_compares_a_head_with_transformers_prompt_lookup(target):
    from specviz.run.bench import transformers_counterpart
    from specviz.drafters import ModelDrafter

    head = EagleDrafter(EagleHead(target), VOCAB)
    for drafter in (head, LookupThenEagle(head, PromptLookupDrafter(VOCAB)), PromptLookupDrafter(VOCAB)):
        assert transformers_counterpart(drafter).startswith("prompt-lookup decoding")
    assert transformers_counterpart(ModelDrafter(target, VOCAB)).startswith("assisted generation")
    assert transformers_counterpart(None) is None


def test_restricted_head_gives_no_mass_outside_its_vocabulary(target):
    head = EagleHead(target, torch.tensor([3, 5, 8]))
    features = torch.randn(1, 2, head.hidden_size)
    out = head(features, torch.tensor([[1, 2]]), torch.arange(2).view(1, -1))
    probs = torch.softmax(head.logits(out, VOCAB), dim=-1)
    assert torch.all(probs[..., [i for i in range(VOCAB) if i not in (3, 5, 8)]] == 0)
    torch.testing.assert_close(probs.sum(-1), torch.ones(1, 2))


def test_tree_children_are_distinct_and_within_budget(target):
    drafter = EagleDrafter(EagleHead(target), VOCAB)
    gen = Generation(target, PROMPT, drafter, k=4, sampling=SamplingConfig(temperature=1.0), max_new_tokens=30,
                     branches=3, tree_nodes=9)
    for round_ in gen:
        assert len(round_.drafted) <= 9
        by_parent = {}
        for node in round_.drafted:
            by_parent.setdefault(node.parent, []).append(node.id)
        assert all(len(ids) == len(set(ids)) <= 3 for ids in by_parent.values())


def test_save_and_load_keep_only_the_heads_weights(target, tmp_path):
    head = EagleHead(target, torch.tensor([0, 4, 9]))
    save_head(head, tmp_path, {"target": "tiny"})
    loaded = load_head(tmp_path, target)
    from safetensors.torch import load_file

    names = set(load_file(str(tmp_path / "model.safetensors")))
    assert not any(name.startswith(("embed", "norm", "lm_head", "model.")) for name in names)
    assert names >= {"fuse.weight", "frequent_ids"}
    assert loaded.meta["target"] == "tiny"
    features = torch.randn(1, 3, head.hidden_size)
    args = (features, torch.tensor([[1, 2, 3]]), torch.arange(3).view(1, -1))
    torch.testing.assert_close(loaded.logits(loaded(*args), VOCAB), head.logits(head(*args), VOCAB))
    from transformers import LlamaConfig, LlamaForCausalLM

    narrower = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                            num_attention_heads=2, num_key_value_heads=2))
    with pytest.raises(ValueError, match=r"hidden_size 64 \(the target.s 32\)"):
        load_head(tmp_path, narrower)
    with pytest.raises(ValueError, match="not an EAGLE head directory"):
        load_head(tmp_path / "missing", target)


def test_a_head_saved_in_bfloat16_is_half_the_file_and_drafts_the_same(target, tmp_path):
    head = EagleHead(target, torch.tensor([0, 4, 9]))
    save_head(head, tmp_path / "f32")
    save_head(head, tmp_path / "bf16", dtype=torch.bfloat16)
    sizes = [(tmp_path / d / "model.safetensors").stat().st_size for d in ("f32", "bf16")]
    assert sizes[1] < 0.55 * sizes[0], sizes
    loaded = load_head(tmp_path / "bf16", target)
    assert loaded.meta["weights_dtype"] == "bfloat16" and loaded.fuse.weight.dtype == torch.float32
    torch.testing.assert_close(loaded.fuse.weight, head.fuse.weight.to(torch.bfloat16).float())
    assert torch.equal(loaded.frequent_ids, head.frequent_ids)


def test_batched_teacher_features_equal_one_sequence_at_a_time(target):
    from specviz.train.train_draft import teacher_features

    sequences = [([1, 2, 3, 4, 5, 6, 7], 2), ([8, 9], 1), ([3, 1, 4, 1, 5], 3)]
    batched = teacher_features(target, sequences, batch=3)
    alone = teacher_features(target, sequences, batch=1)
    assert [f.shape[0] for f in batched] == [7, 2, 5]
    for a, b in zip(batched, alone):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3)


def test_the_learning_rate_warms_up_then_decays_to_a_tenth():
    from specviz.train.train_draft import lr_factor

    factors = [lr_factor(step, 1_000) for step in range(1_000)]
    assert factors[0] < 0.05 and max(factors) == pytest.approx(1.0)
    peak = factors.index(max(factors))
    assert all(a <= b for a, b in zip(factors[:peak], factors[1 : peak + 1]))
    assert all(a >= b for a, b in zip(factors[peak:], factors[peak + 1 :]))
    assert factors[-1] == pytest.approx(0.1, abs=1e-3) and lr_factor(5_000, 1_000) == pytest.approx(0.1)


def test_the_validation_set_is_the_same_whatever_the_training_tokens():
    from specviz.train.train_draft import _split

    sequences = [(list(range(10 + i % 7)), 4) for i in range(200)]
    small_train, small_val = _split(sequences, TrainConfig(target="t", out="", tokens=100))
    full_train, full_val = _split(sequences, TrainConfig(target="t", out="", tokens=10**9))
    assert small_val == full_val and len(full_val) == 10
    assert not set(full_train) & set(full_val) and len(full_train) == 190
    assert small_train == full_train[: len(small_train)]
    assert 100 <= sum(len(sequences[i][0]) - 4 for i in small_train) < 100 + 16


def test_registry_entry_and_the_message_without_a_shipped_head():
    assert drafters.parse_drafter_spec("eagle") == "eagle"
    assert drafters.parse_drafter_spec("eagle:/tmp/My Head") == "eagle:/tmp/My Head"
    assert drafters.drafter_kind("eagle:/tmp/x").spec == "eagle"
    assert "eagle" in drafters.DRAFTER_KINDS and "eagle[:DIR]" in drafters.spec_forms()
    with pytest.raises(ValueError, match="train-draft --target no-such-target"):
        shipped_head_dir("no-such-target")


def test_rollout_mask_matches_what_drafting_sees():
    mask = rollout_mask(5, 3)
    # Position 4 at depth 3 drafts from the target's feature at 2: pass 1 up to 2, pass 2 at 3, pass 3 at 4.
    expected = torch.zeros(15, dtype=torch.bool)
    expected[[0, 1, 2, 5 + 3, 10 + 4]] = True
    assert torch.equal(mask[4], expected)
    assert torch.equal(rollout_mask(4, 1), torch.ones(4, 4, dtype=torch.bool).tril())


def test_prompts_are_varied():
    prompts = load_prompts()
    assert len(prompts) >= 200 and len(set(prompts)) == len(prompts)


@pytest.fixture(scope="module")
def tiny_loaded():
    corpus = load_prompts()[:120]
    tokenizer = bpe_tokenizer(corpus, chat=True, vocab_size=300)
    model = tiny_llama(0, vocab_size=len(tokenizer), lm_head_scale=12.0)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return LoadedModel(model, tokenizer, "tiny", "tiny", torch.device("cpu"), torch.float32)


def test_training_lowers_the_loss_and_resumes(tiny_loaded, tmp_path):
    cfg = TrainConfig(target="tiny", out=str(tmp_path), tokens=1_500, steps=60, rollout=2, batch=4, lr=3e-3,
                      vocab=120, max_new_tokens=24, gen_batch=16, max_len=64, checkpoint_every=30)
    summary = train(cfg, tiny_loaded)
    history = summary["history"]
    assert len(history) == 60

    def mean(rows, key):
        return sum(r[key] if key == "loss" else r[key][0] for r in rows) / len(rows)

    # The loss includes the target's own entropy, which no head can remove: a fall of 15% is learning.
    assert mean(history[-10:], "loss") < 0.85 * mean(history[:10], "loss")
    assert mean(history[-10:], "acceptance") > mean(history[:10], "acceptance") + 0.1
    log = json.loads((tmp_path / "training_log.json").read_text())
    assert [v["depth"] for v in log["validation"]] == [1, 2]
    assert all(0 <= v["acceptance"] <= 1 and 0 <= v["top1"] <= 1 for v in log["validation"])
    head = load_head(tmp_path, tiny_loaded.model)
    assert 0 < head.frequent_ids.numel() <= 120
    # Resuming continues from the checkpoint and reads the cached teacher data.
    resumed = train(TrainConfig(**{**cfg.__dict__, "steps": 65, "resume": True}), tiny_loaded)
    assert len(resumed["history"]) == 65 and resumed["history"][:60] == history
    assert resumed["sequences"] == summary["sequences"]


def _toy_batch(target) -> dict:
    """Two teacher-forced sequences of the tiny target as a training batch (every answer row trained)."""
    from specviz.train.train_draft import _batch, teacher_features

    generator = torch.Generator().manual_seed(0)
    sequences = [(torch.randint(0, VOCAB, (n,), generator=generator).tolist(), 2) for n in (24, 17)]
    data = {"sequences": sequences, "features": teacher_features(target, sequences)}
    return _batch(data, [0, 1], 64, torch.device("cpu"))


def test_the_rollout_loss_weighs_depths_by_the_decay_and_adds_the_total_variation(target):
    """Depth s weighs decay^(s−1) (normalised); the TV term adds tv_weight × (1 − acceptance) to each
    depth's loss and leaves the figures as they were."""
    from specviz.train.train_draft import rollout_loss

    head, batch = EagleHead(target), _toy_batch(target)
    with torch.no_grad():
        base, figures = rollout_loss(head, batch, 5, 0.1)
        decayed, _ = rollout_loss(head, batch, 5, 0.1, depth_decay=0.8)
        with_tv, tv_figures = rollout_loss(head, batch, 5, 0.1, tv_weight=0.5)
    assert len(figures) == 5 and base.item() == pytest.approx(sum(f["loss"] for f in figures) / 5, rel=1e-5)
    weights = [0.8**s for s in range(5)]
    assert decayed.item() == pytest.approx(sum(w * f["loss"] for w, f in zip(weights, figures)) / sum(weights),
                                           rel=1e-5)
    assert with_tv.item() == pytest.approx(sum(f["loss"] for f in tv_figures) / 5, rel=1e-5)
    for plain, tv in zip(figures, tv_figures):
        assert tv["loss"] == pytest.approx(plain["loss"] + 0.5 * (1 - plain["acceptance"]), rel=1e-5)
        assert (tv["top1"], tv["acceptance"], tv["rows"]) == (plain["top1"], plain["acceptance"], plain["rows"])
    loss, _ = rollout_loss(head, batch, 3, 0.0, tv_weight=1.0, depth_decay=0.8)
    loss.backward()
    assert head.fuse.weight.grad is not None and torch.isfinite(head.fuse.weight.grad).all()


def test_the_vocabulary_mask_leaves_out_rows_whose_top_token_the_head_cannot_propose(target):
    """EAGLE-3's mask: the loss is the mean over the rows whose target top token is in the head's
    vocabulary (computed here by hand at depth 1); the figures still cover every row; with the
    whole vocabulary the mask changes nothing."""
    from specviz.drafters.eagle import tree_mask
    from specviz.train.train_draft import _target_distribution, rollout_loss, rollout_mask

    batch = _toy_batch(target)
    features, ids, rows = batch["features"], batch["ids"], batch["rows"]
    _, top = _target_distribution(EagleHead(target), features[:, 1:][rows])
    tops = sorted(set(top.tolist()))
    head = EagleHead(target, torch.tensor(sorted(set(range(VOCAB)) - set(tops[::2]))))  # half the top tokens out
    with torch.no_grad():
        masked, masked_figures = rollout_loss(head, batch, 1, 0.0, mask_outside_vocab=True)
        unmasked, figures = rollout_loss(head, batch, 1, 0.0)
        p_target, inside = _target_distribution(head, features[:, 1:][rows])
        length = features.shape[1] - 1
        out = head(features[:, :-1], ids[:, 1:], torch.arange(length).view(1, -1),
                   tree_mask(rollout_mask(length, 1), torch.float32))
        cross_entropy = -(p_target * torch.log_softmax(head.sub_logits(out[rows]), dim=-1)).sum(-1)
    assert 0 < int((inside < 0).sum()) < inside.numel()
    assert masked.item() == pytest.approx(cross_entropy[inside >= 0].mean().item(), rel=1e-5)
    assert unmasked.item() == pytest.approx(cross_entropy.mean().item(), rel=1e-5) != masked.item()
    assert masked_figures[0]["rows"] == figures[0]["rows"] == inside.numel()
    assert masked_figures[0]["acceptance"] == figures[0]["acceptance"]
    full = EagleHead(target)
    with torch.no_grad():
        assert rollout_loss(full, batch, 2, 0.1, mask_outside_vocab=True)[0] == rollout_loss(full, batch, 2, 0.1)[0]


def test_training_with_eagle3_options_at_toy_size(tiny_loaded, tmp_path, monkeypatch):
    """Seven unrolled steps with weights 0.8^s, the vocabulary mask, a TV term, AdamW (0.9, 0.95)
    and a 0.5 gradient clip: the run reports seven depths, and every step used those betas and
    that clip."""
    betas, clips = [], []
    step, clip = torch.optim.AdamW.step, torch.nn.utils.clip_grad_norm_

    def recording_step(self, *args, **kwargs):
        betas.append(tuple(self.param_groups[0]["betas"]))
        return step(self, *args, **kwargs)

    def recording_clip(parameters, max_norm, *args, **kwargs):
        clips.append(max_norm)
        return clip(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording_clip)
    cfg = TrainConfig(target="tiny", out=str(tmp_path), tokens=400, steps=4, rollout=7, batch=4, vocab=60,
                      max_new_tokens=24, gen_batch=16, max_len=48, checkpoint_every=100, device="cpu",
                      mask_outside_vocab=True, depth_decay=0.8, tv_weight=0.5, betas=(0.9, 0.95), grad_clip=0.5)
    summary = train(cfg, tiny_loaded)
    assert [v["depth"] for v in summary["validation"]] == list(range(1, 8))
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in summary["history"]) and len(summary["history"]) == 4
    assert betas == [(0.9, 0.95)] * 4 and clips == [0.5] * 4
    assert summary["config"]["depth_decay"] == 0.8 and summary["config"]["mask_outside_vocab"]


def test_training_options_are_checked_and_reach_the_command_line():
    from specviz.cli import build_parser

    args = build_parser().parse_args(["train-draft", "--out", "/tmp/h", "--device", "cpu", "--mask-outside-vocab",
                                      "--rollout", "7", "--depth-decay", "0.8", "--tv-weight", "0.5", "--betas",
                                      "0.9", "0.95", "--grad-clip", "0.5"])
    assert (args.device, args.mask_outside_vocab, args.rollout, args.depth_decay, args.tv_weight, args.betas,
            args.grad_clip) == ("cpu", True, 7, 0.8, 0.5, [0.9, 0.95], 0.5)
    defaults = build_parser().parse_args(["train-draft", "--out", "/tmp/h"])
    assert (defaults.device, defaults.mask_outside_vocab, defaults.depth_decay, defaults.tv_weight,
            defaults.betas, defaults.grad_clip) == ("auto", False, 1.0, 0.0, [0.9, 0.999], 0.5)
    for bad in ({"depth_decay": 0.0}, {"tv_weight": -1.0}, {"grad_clip": 0.0}, {"betas": (0.9, 1.0)},
                {"device": "tpu"}):
        with pytest.raises(ValueError):
            TrainConfig(target="t", out="/tmp/h", **bad).check()
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            train(TrainConfig(target="t", out="/tmp/h", device="cuda"))


def test_train_draft_command_line_and_public_mode():
    from specviz.cli import build_parser
    from specviz.run.request import RequestError, check_public_models

    args = build_parser().parse_args(["train-draft", "--out", "/tmp/h", "--steps", "7", "--rollout", "2", "--resume"])
    assert (args.target, args.out, args.steps, args.rollout, args.resume) == ("smollm2-135m-instruct", "/tmp/h", 7, 2,
                                                                             True)
    assert args.func.__name__ == "cmd_train_draft"
    # A head directory is read from the server's disk: public mode allows only the presets' drafters.
    with pytest.raises(RequestError, match="not allowed"):
        check_public_models("t", "eagle:/tmp/h", ["t"], [])


def test_a_run_can_start_from_a_head_and_score_it_without_training(tiny_loaded, tmp_path):
    """``init``: a head directory's weights and vocabulary are the starting point (with 0 steps the
    written head is that head, scored on this data's held-out set); its vocabulary wins over the
    data's; warm-up 0 starts at the peak learning rate."""
    from specviz.train.train_draft import lr_factor

    first = TrainConfig(target="tiny", out=str(tmp_path / "a"), tokens=400, steps=3, rollout=2, batch=4, vocab=60,
                        max_new_tokens=24, gen_batch=16, max_len=48, checkpoint_every=100, device="cpu")
    trained = train(first, tiny_loaded)
    data = str(tmp_path / "a" / "teacher_data.safetensors")
    scored = train(TrainConfig(**{**first.__dict__, "out": str(tmp_path / "b"), "steps": 0, "data": data,
                                  "init": str(tmp_path / "a"), "vocab": 40}), tiny_loaded)
    assert scored["history"] == [] and scored["validation"] == trained["validation"]
    original, copy = load_head(tmp_path / "a", tiny_loaded.model), load_head(tmp_path / "b", tiny_loaded.model)
    assert all(torch.equal(a, b) for a, b in zip(original.state_dict().values(), copy.state_dict().values()))
    more = train(TrainConfig(**{**first.__dict__, "out": str(tmp_path / "c"), "steps": 2, "data": data,
                                "init": str(tmp_path / "a"), "warmup": 0}), tiny_loaded)
    assert len(more["history"]) == 2 and more["vocabulary"] == trained["vocabulary"]
    assert lr_factor(0, 100, warmup=0) == pytest.approx(1.0) and lr_factor(0, 100) < 0.2
    for bad in ({"init": str(tmp_path / "nowhere")}, {"warmup": -1}, {"steps": 0}):
        with pytest.raises(ValueError):
            TrainConfig(target="t", out="/tmp/h", **bad).check()
    from specviz.cli import build_parser

    args = build_parser().parse_args(["train-draft", "--out", "/tmp/h", "--init", "/tmp/a", "--warmup", "0",
                                      "--val-fraction", "0.1", "--max-len", "256"])
    assert (args.init, args.warmup, args.val_fraction, args.max_len) == ("/tmp/a", 0, 0.1, 256)
