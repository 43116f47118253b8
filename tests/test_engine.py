"""The speculative loop on tiny random Llama models (2 layers, hidden 64, float32, CPU).

What must hold for any target, draft and seed:

* greedy speculative output equals plain greedy output token for token;
* sampled speculative output follows the target's distribution (the first token over thousands of
  seeds, with a power bound: tests/test_loop_distribution.py);
* both KV caches hold exactly the committed tokens except the pending one after every round;
* the run stops at exactly ``max_new_tokens`` or right after an EOS, and every counter agrees with
  the emitted tokens.

The models' lm_head weights are scaled up (``lm_head_scale``): a randomly initialised model's
next-token distributions are nearly uniform, which would let a broken sampler pass and make
greedy argmaxes near-ties.
"""

from __future__ import annotations

import pytest
import torch
from helpers import assert_cache_holds, noisy_copy, tiny_llama, with_vocab_width

from specviz.drafters import ModelDrafter, PromptLookupDrafter
from specviz.core.engine import ContextLengthError, Generation
from specviz.core.sampling import NonFiniteLogitsError, SamplingConfig, logits_to_probs
from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED
from specviz.figures.analysis import analyse_generation

VOCAB = 256
GREEDY = SamplingConfig(temperature=0.0)
SAMPLED = SamplingConfig(temperature=1.0)
# Repetitive prompts so prompt lookup finds n-gram matches in the prompt as well as the output.
PROMPTS = [[3, 17, 42, 99, 5], [7, 7, 7, 12, 7, 7], [200, 1, 2, 3, 200, 1, 2, 3, 200]]
DRAFT_KINDS = ["random", "self", "noisy", "lookup"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def drafts(target):
    """Draft models by kind: unrelated weights, the target itself, and a perturbed copy.

    The perturbed copy (noise std 0.003 on weights of std 0.02) agrees with the target on roughly
    60% (greedy) to 85% (temperature 1) of tokens, so runs mix every accepted-prefix length with
    rejections.
    """
    return {
        "random": tiny_llama(1, lm_head_scale=8.0),
        "self": target,
        "noisy": noisy_copy(target, seed=5, scale=0.003),
    }


def make_drafter(kind: str, drafts: dict):
    if kind == "lookup":
        return PromptLookupDrafter(VOCAB)
    return ModelDrafter(drafts[kind], VOCAB)


def plain_ids(target, prompt, n, vocab_size=None, eos=()) -> list[int]:
    """Plain greedy decoding through the engine (no drafter)."""
    gen = Generation(target, prompt, None, sampling=GREEDY, max_new_tokens=n, vocab_size=vocab_size,
                     eos_token_ids=eos).run()
    return gen.token_ids


def uncached_greedy(model, prompt, n, vocab_size=VOCAB) -> list[int]:
    """Greedy decoding the slow obvious way: re-run the whole sequence each step, no KV cache."""
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1, :vocab_size]
            ids.append(int(logits.argmax()))
    return ids[len(prompt):]


# --------------------------------------------------------------------------- greedy equality


def test_plain_greedy_matches_uncached_argmax(target):
    """Plain decoding through the engine (cached, one token per pass) is the textbook argmax loop."""
    for prompt in PROMPTS:
        assert plain_ids(target, prompt, 24) == uncached_greedy(target, prompt, 24)


@pytest.mark.parametrize("kind", DRAFT_KINDS)
def test_greedy_speculative_equals_plain_greedy(target, drafts, kind):
    """At temperature 0, speculative output equals plain greedy output token for token (fp32).

    K in {1, 2, 3, 4, 8}, three prompts. The run also has to exercise the branch the drafter is
    there for: rejections for the random draft, no rejection for the target itself, both for the
    perturbed copy and for prompt lookup.
    """
    n = 24
    accepted = rejected = 0
    for prompt in PROMPTS:
        expected = plain_ids(target, prompt, n)
        for k in (1, 2, 3, 4, 8):
            gen = Generation(target, prompt, make_drafter(kind, drafts), k=k, sampling=GREEDY, max_new_tokens=n).run()
            assert gen.token_ids == expected, f"prompt {prompt}, K={k}"
            assert gen.finish_reason == "length"
            stats_ = analyse_generation(gen)
            accepted += stats_.accepted
            rejected += stats_.counts[RESAMPLED]
    if kind == "self":
        assert rejected == 0 and accepted > 0
    elif kind == "random":
        assert rejected > 0
    else:
        assert rejected > 0 and accepted > 0


def test_self_draft_greedy_accepts_every_token(target):
    """Draft = target at temperature 0, K = 4, 40 tokens: 8 target passes, α = 1, 5 tokens per pass.

    Each pass accepts all 4 drafts and adds the bonus: 40 / (4 + 1) = 8 passes exactly.
    """
    gen = Generation(target, PROMPTS[0], ModelDrafter(target, VOCAB), k=4, sampling=GREEDY, max_new_tokens=40).run()
    stats_ = analyse_generation(gen)
    assert stats_.target_passes == 8
    assert stats_.alpha == 1.0
    assert stats_.tokens_per_pass == 5.0
    assert stats_.counts == {ACCEPTED: 32, RESAMPLED: 0, BONUS: 8, PLAIN: 0}
    assert gen.token_ids == plain_ids(target, PROMPTS[0], 40)


@pytest.mark.parametrize("k", [3, 4])
def test_self_draft_sampling_keeps_full_acceptance_over_long_run(target, k):
    """Draft = target at temperature 1 over 240 tokens: α stays exactly 1.0 (no decay).

    The draft computes each distribution one token at a time, the target in one batched pass, so
    they differ only by float32 rounding (relative ~1e-6): a rejection has probability
    ≤ 1 − min(1, p_target/p_draft) ≈ 1e-6 per token, ≈ 2e-4 over the run. A draft cache that
    holds the wrong context (a token skipped, repeated, or rolled back one off) turns p_draft into
    the distribution of another context, and α drops far below 1 within a few rounds.
    """
    gen = Generation(target, PROMPTS[1], ModelDrafter(target, VOCAB), k=k, sampling=SAMPLED, max_new_tokens=240,
                     seed=11).run()
    stats_ = analyse_generation(gen)
    assert stats_.alpha == 1.0
    assert len(gen.token_ids) == 240
    assert all(r.n_accepted == r.n_proposed for r in gen.rounds)
    # Every full round emits K + 1 tokens; only the last one may be cut short by the length limit.
    assert all(len(r.emitted) == k + 1 for r in gen.rounds[:-1])


# --------------------------------------------------------------------------- KV cache bookkeeping


class CheckedDrafter(ModelDrafter):
    """A ModelDrafter that records its cache length after each rollback."""

    def __init__(self, model, vocab_size):
        super().__init__(model, vocab_size)
        self.lengths_after_rollback: list[int] = []

    def rollback(self, valid: int) -> None:
        super().rollback(valid)
        self.lengths_after_rollback.append(self.cache.get_seq_length())


@pytest.mark.parametrize("k", [3, 4])
def test_kv_caches_hold_committed_tokens_but_the_pending_one(target, drafts, k):
    """After every round both caches hold the committed tokens, exactly, minus the pending last one.

    Target: checked at the start of every verify pass (a forward pre-hook sees the cache the
    previous round left): length = committed − 1, and keys/values equal a fresh prefill of those
    tokens, so a rejected draft's entries never survive. The verify pass then feeds exactly the
    pending token plus the drafts. The first round is the exception: the prefill fed the whole
    prompt and scored the root, so its pass feeds the drafts alone.

    Draft (the perturbed copy, temperature 1, so rejections happen at every position): after a
    rejection its cache holds committed − 1 tokens; after a fully accepted block it holds
    committed − 2 (the K-th draft was sampled but never fed; the next round feeds it with the
    bonus). Its keys/values equal a fresh prefill too.
    """
    prompt = PROMPTS[2]
    drafter = CheckedDrafter(drafts["noisy"], VOCAB)
    gen = Generation(target, prompt, drafter, k=k, sampling=SAMPLED, max_new_tokens=48, seed=3)
    verify_calls = []

    def check_target_cache(module, args, kwargs):
        cache, input_ids = kwargs.get("cache", kwargs.get("past_key_values")), kwargs["input_ids"]
        if cache.get_seq_length() == 0:  # the prefill
            return
        committed = prompt + gen.token_ids
        assert_cache_holds(cache, target, committed if not gen.rounds else committed[:-1])
        verify_calls.append(input_ids.shape[1])

    handle = target.register_forward_pre_hook(check_target_cache, with_kwargs=True)
    try:
        for round_ in gen:
            committed = prompt + gen.token_ids
            if round_.n_proposed == 0:
                continue
            all_accepted = round_.n_accepted == round_.n_proposed and gen.finish_reason != "eos"
            expected = len(committed) - (2 if all_accepted else 1)
            assert drafter.lengths_after_rollback[-1] == expected
            assert_cache_holds(drafter.cache, drafter.model, committed[:expected])
    finally:
        handle.remove()
    n_accepted = [r.n_accepted for r in gen.rounds]
    assert 0 in n_accepted and k in n_accepted and any(0 < a < k for a in n_accepted)
    # Each verify pass feeds exactly the pending token plus the drafts (the first: the drafts).
    assert gen.rounds[0].root_from_prefill and not any(r.root_from_prefill for r in gen.rounds[1:])
    assert verify_calls == [int(not r.root_from_prefill) + r.n_proposed for r in gen.rounds
                            if r.n_proposed or not r.root_from_prefill]


# --------------------------------------------------------------------------- stopping


@pytest.mark.parametrize("max_new_tokens", [1, 5, 7])
def test_max_new_tokens_respected(target, drafts, max_new_tokens):
    """Exactly max_new_tokens come out even when every block is accepted (draft = target, K = 4).

    7 = one full block of 5, then a block cut to 1 draft + bonus. With the noisy draft at
    temperature 1 too.
    """
    for drafter, sampling in ((ModelDrafter(target, VOCAB), GREEDY), (ModelDrafter(drafts["noisy"], VOCAB), SAMPLED)):
        gen = Generation(target, PROMPTS[0], drafter, k=4, sampling=sampling, max_new_tokens=max_new_tokens).run()
        assert len(gen.tokens) == max_new_tokens
        assert gen.finish_reason == "length"
        assert analyse_generation(gen).emitted == max_new_tokens
    greedy = Generation(target, PROMPTS[0], ModelDrafter(target, VOCAB), k=4, sampling=GREEDY,
                        max_new_tokens=max_new_tokens).run()
    assert greedy.token_ids == plain_ids(target, PROMPTS[0], max_new_tokens)


def find_eos_position(ids: list[int], slots: tuple[int, ...], block: int) -> int:
    """First position whose slot in its block is in ``slots`` and whose token occurs there first."""
    for position, token in enumerate(ids):
        if position % block in slots and token not in ids[:position] and position < len(ids) - 1:
            return position
    raise AssertionError(f"no usable EOS position in {ids}")


@pytest.mark.parametrize("slot", ["accepted", "bonus"])
def test_eos_inside_block_ends_output(target, slot):
    """An EOS emitted inside an accepted block (or as the bonus) ends the output right there.

    Draft = target, greedy, K = 4: blocks are positions 5r .. 5r+4, the last being the bonus. The
    EOS id is a token that plain greedy decoding first emits at slot 1 or 2 of a block (or at
    slot 4, the bonus). The speculative output must be the plain output up to and including it:
    nothing after it, no bonus after it, finish reason "eos".
    """
    n = 40
    reference = plain_ids(target, PROMPTS[0], n)
    position = find_eos_position(reference, (1, 2) if slot == "accepted" else (4,), block=5)
    eos = reference[position]
    gen = Generation(target, PROMPTS[0], ModelDrafter(target, VOCAB), k=4, sampling=GREEDY, max_new_tokens=n,
                     eos_token_ids=(eos, 10_000)).run()
    assert gen.token_ids == reference[: position + 1]
    assert gen.finish_reason == "eos"
    last = gen.rounds[-1]
    assert [t.id for t in last.emitted][-1] == eos
    assert last.emitted[-1].kind == (ACCEPTED if slot == "accepted" else BONUS)
    if slot == "accepted":
        assert all(t.kind == ACCEPTED for t in last.emitted)
    # Plain decoding stops at the same place.
    assert plain_ids(target, PROMPTS[0], n, eos=(eos,)) == reference[: position + 1]


# --------------------------------------------------------------------------- counters


def check_counters(gen: Generation, k: int) -> None:
    """Every counter of a finished run agrees with its emitted tokens."""
    eos_round = len(gen.rounds) - 1 if gen.finish_reason == "eos" else None
    for r in gen.rounds:
        flags = [d.accepted for d in r.drafted]
        prefix = next((i for i, f in enumerate(flags) if not f), len(flags))
        assert r.n_accepted == prefix and flags == [i < prefix for i in range(len(flags))]
        assert [d.tested for d in r.drafted] == [i <= prefix for i in range(len(flags))]
        assert 0 <= r.n_accepted <= r.n_proposed <= k
        kinds = [t.kind for t in r.emitted]
        ids = [t.id for t in r.emitted]
        if r.index == eos_round:
            # Cut at the EOS: a prefix of what the round would have emitted.
            assert kinds[:-1] == [ACCEPTED] * (len(kinds) - 1)
            continue
        assert ids[: r.n_accepted] == [d.id for d in r.drafted[: r.n_accepted]]
        if r.n_proposed == 0:
            assert kinds == [PLAIN]
        elif r.n_accepted < r.n_proposed:
            assert kinds == [ACCEPTED] * r.n_accepted + [RESAMPLED]
            # The residual has no mass on the rejected token (rejection needs p_target < p_draft).
            assert r.emitted[-1].rejected_id == r.drafted[r.n_accepted].id != r.emitted[-1].id
        else:
            assert kinds == [ACCEPTED] * r.n_accepted + [BONUS]
    s = analyse_generation(gen)
    assert s.target_passes == len(gen.rounds)
    assert s.emitted == len(gen.tokens) == sum(s.counts.values())
    assert s.counts[ACCEPTED] + s.counts[RESAMPLED] + s.counts[BONUS] + s.counts[PLAIN] == s.emitted
    assert s.proposed == sum(r.n_proposed for r in gen.rounds)
    assert s.accepted == sum(r.n_accepted for r in gen.rounds)
    # Also for a round cut at an EOS: drafts past the EOS are dropped from the bookkeeping.
    assert s.counts[ACCEPTED] == s.accepted
    tested = sum(1 for r in gen.rounds for d in r.drafted if d.tested)
    assert s.tested == tested
    if s.proposed:
        assert 0.0 <= s.acceptance_rate <= s.alpha <= 1.0
        assert s.acceptance_rate == s.accepted / s.proposed
        assert s.alpha == s.accepted / s.tested
        # Per-position acceptance adds up to the run's totals.
        assert sum(p.tested for p in s.per_position) == s.tested
        assert sum(p.accepted for p in s.per_position) == s.accepted
    else:
        assert s.alpha is None and s.acceptance_rate is None
    assert [t.id for r in gen.rounds for t in r.emitted] == gen.token_ids


@pytest.mark.parametrize(
    "kind, sampling",
    [("random", SAMPLED), ("noisy", SAMPLED), ("noisy", GREEDY), ("lookup", GREEDY), ("lookup", SAMPLED),
     ("self", GREEDY)],
    ids=["random-t1", "noisy-t1", "noisy-t0", "lookup-t0", "lookup-t1", "self-t0"],
)
def test_counters_agree_with_emitted_tokens(target, drafts, kind, sampling):
    """Per round: n_accepted is the accepted prefix, then exactly one resampled/bonus/plain token.

    Per run: accepted + resampled + bonus + plain = emitted, 0 ≤ α ≤ 1, α = accepted / proposed.
    """
    for prompt in PROMPTS:
        gen = Generation(target, prompt, make_drafter(kind, drafts), k=4, sampling=sampling, max_new_tokens=30,
                         seed=5).run()
        check_counters(gen, 4)


def test_acceptance_rate_counts_only_proposed_tokens(target):
    """Prompt lookup proposes fewer than K tokens (or none): the acceptance rate's denominator is
    what was proposed.

    Greedy on a repetitive prompt: the lookup finds matches of varying lengths; rounds without a
    match emit one plain token and propose nothing. The acceptance rate must be accepted / proposed,
    not accepted / (K · rounds).
    """
    k = 8
    gen = Generation(target, PROMPTS[2], PromptLookupDrafter(VOCAB), k=k, sampling=GREEDY, max_new_tokens=40).run()
    s = analyse_generation(gen)
    proposed = [r.n_proposed for r in gen.rounds]
    assert any(0 < p < k for p in proposed) and 0 in proposed
    assert s.proposed == sum(proposed) < k * len(gen.rounds)
    assert s.acceptance_rate == s.accepted / s.proposed
    assert s.counts[PLAIN] == proposed.count(0)
    check_counters(gen, k)


def test_counters_with_eos_round(target):
    """A run ended by an EOS inside an accepted block still has consistent counters."""
    reference = plain_ids(target, PROMPTS[0], 40)
    eos = reference[find_eos_position(reference, (1, 2), block=5)]
    gen = Generation(target, PROMPTS[0], ModelDrafter(target, VOCAB), k=4, sampling=GREEDY, max_new_tokens=40,
                     eos_token_ids=(eos,)).run()
    assert gen.finish_reason == "eos"
    check_counters(gen, 4)


def test_plain_decoding_records_one_plain_token_per_pass(target):
    """Without a drafter every pass emits one token of kind "plain"; α is undefined."""
    gen = Generation(target, PROMPTS[0], None, sampling=SAMPLED, max_new_tokens=12, seed=1).run()
    assert [[t.kind for t in r.emitted] for r in gen.rounds] == [[PLAIN]] * 12
    assert analyse_generation(gen).alpha is None and analyse_generation(gen).target_passes == 12
    check_counters(gen, 0)


def test_same_seed_same_output(target, drafts):
    """The run's generator is the only random source: a seed fixes the output, another seed changes it."""

    def run(seed):
        return Generation(target, PROMPTS[0], ModelDrafter(drafts["noisy"], VOCAB), k=4, sampling=SAMPLED,
                          max_new_tokens=20, seed=seed).run().token_ids

    assert run(1) == run(1)
    assert run(1) != run(2)


@pytest.mark.parametrize("kind", ["random", "noisy", "lookup"])
def test_filtered_sampling_emits_only_tokens_the_target_allows(target, drafts, kind):
    """With top-k/top-p, every emitted token is in the *target's* filtered set at its position.

    The reference is computed independently: one uncached forward pass over prompt + output gives
    the target's logits at every position, filtered with the same settings. Each emitted token
    must have positive probability there, and the trace's ``p_target`` must be that probability
    (the target was filtered exactly like this, not left unfiltered).
    """
    config = SamplingConfig(temperature=0.8, top_k=8, top_p=0.9)
    prompt = PROMPTS[0]
    gen = Generation(target, prompt, make_drafter(kind, drafts), k=4, sampling=config, max_new_tokens=60,
                     seed=4).run()
    ids = prompt + gen.token_ids
    with torch.inference_mode():
        logits = target(input_ids=torch.tensor([ids]), use_cache=False).logits[0, len(prompt) - 1 : -1, :VOCAB]
    allowed = logits_to_probs(logits, config)
    p_emitted = allowed[torch.arange(len(gen.tokens)), torch.tensor(gen.token_ids)]
    assert (p_emitted > 0).all()
    torch.testing.assert_close(torch.tensor([t.p_target for t in gen.tokens]), p_emitted, atol=1e-4, rtol=1e-3)
    assert analyse_generation(gen).counts[RESAMPLED] > 0


# --------------------------------------------------------------------------- errors and edge cases


def count_calls(model) -> list[int]:
    """A list that grows by one item per forward pass of ``model``."""
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    return calls


def test_context_length_checked_before_any_model_call():
    """Prompt + max_new_tokens beyond a model's context raises ContextLengthError before any forward pass.

    Llama's rotary positions would not even fail beyond max_position_embeddings; the check must
    come from the engine. Checked for the target's and for a draft's shorter context; a run that
    exactly fills the context still works.
    """
    short_target = tiny_llama(0, max_position_embeddings=64, lm_head_scale=8.0)
    long_draft = tiny_llama(1, max_position_embeddings=512, lm_head_scale=8.0)
    short_draft = tiny_llama(1, max_position_embeddings=48, lm_head_scale=8.0)
    long_target = tiny_llama(0, max_position_embeddings=512, lm_head_scale=8.0)
    target_calls = count_calls(short_target)
    draft_calls = count_calls(long_draft)
    prompt = list(range(1, 41))
    with pytest.raises(ContextLengthError, match="target"):
        Generation(short_target, prompt, None, max_new_tokens=25).run()
    with pytest.raises(ContextLengthError, match="target"):
        Generation(short_target, prompt, ModelDrafter(long_draft, VOCAB), k=4, max_new_tokens=30).run()
    assert target_calls == [] and draft_calls == []

    short_draft_calls = count_calls(short_draft)
    long_target_calls = count_calls(long_target)
    with pytest.raises(ContextLengthError, match="draft"):
        Generation(long_target, prompt, ModelDrafter(short_draft, VOCAB), k=4, max_new_tokens=20).run()
    assert short_draft_calls == [] and long_target_calls == []

    gen = Generation(short_target, prompt, None, sampling=GREEDY, max_new_tokens=24).run()
    assert len(gen.tokens) == 24


def boost_padding(model, real_vocab: int):
    """Make the padded lm_head columns (ids ≥ real_vocab) win every argmax if they are not cut off."""

    def hook(module, args, output):
        output.logits[..., real_vocab:] += 1e4
        return output

    return model.register_forward_hook(hook)


@pytest.mark.parametrize("target_width, draft_width", [(256, 320), (320, 256)], ids=["wider-draft", "wider-target"])
def test_padded_vocab_widths(target_width, draft_width):
    """Target and draft with the same tokenizer but padded lm_heads of different widths.

    Both are cut to the shared 256 ids. The padded columns are boosted to dominate, so a missing
    cut emits an id ≥ 256 (or mismatches widths). The run works, never emits an id ≥ 256, and
    greedy output equals plain greedy decoding of the target over the shared ids.
    """
    shared = 256
    base = tiny_llama(0, vocab_size=shared, lm_head_scale=8.0)
    tgt = with_vocab_width(base, target_width)
    drf = noisy_copy(with_vocab_width(base, draft_width), seed=5, scale=0.003)
    handles = [boost_padding(m, shared) for m in (tgt, drf)]
    try:
        expected = uncached_greedy(tgt, PROMPTS[0], 20, vocab_size=shared)
        assert plain_ids(tgt, PROMPTS[0], 20, vocab_size=shared) == expected
        for k in (2, 4):
            gen = Generation(tgt, PROMPTS[0], ModelDrafter(drf, shared), k=k, sampling=GREEDY, max_new_tokens=20,
                             vocab_size=shared).run()
            assert gen.token_ids == expected
            sampled = Generation(tgt, PROMPTS[0], ModelDrafter(drf, shared), k=k, sampling=SAMPLED,
                                 max_new_tokens=40, vocab_size=shared).run()
            assert max(sampled.token_ids) < shared
            assert analyse_generation(sampled).accepted > 0
    finally:
        for handle in handles:
            handle.remove()


def nan_after(model, calls_ok: int):
    """Make the model's logits NaN from its (calls_ok + 1)-th forward pass on."""
    calls = []

    def hook(module, args, output):
        calls.append(1)
        if len(calls) > calls_ok:
            output.logits.fill_(float("nan"))
        return output

    return model.register_forward_hook(hook)


@pytest.mark.parametrize("drafted", [False, True], ids=["plain", "speculative"])
def test_nan_logits_stop_run_and_keep_earlier_tokens(target, drafts, drafted):
    """NaN logits mid-run raise NonFiniteLogitsError; the tokens of the earlier rounds stay in gen.tokens.

    The target's 4th forward pass returns NaN logits: after the prefill and 2 good verify passes,
    which is 2 rounds of speculation, or 3 plain rounds (the first plain round's token came from
    the prefill's pass, with no pass of its own).
    """
    drafter = ModelDrafter(drafts["noisy"], VOCAB) if drafted else None
    reference = plain_ids(target, PROMPTS[0], 20)
    handle = nan_after(target, 3)
    gen = Generation(target, PROMPTS[0], drafter, k=2, sampling=GREEDY, max_new_tokens=20)
    rounds = []
    try:
        with pytest.raises(NonFiniteLogitsError):
            for round_ in gen:
                rounds.append(round_)
    finally:
        handle.remove()
    assert len(rounds) == len(gen.rounds) == (2 if drafted else 3)
    emitted = [t.id for r in rounds for t in r.emitted]
    assert gen.token_ids == emitted == reference[: len(emitted)]
    assert gen.finish_reason is None


@pytest.mark.parametrize("broken", ["target", "draft"])
def test_nan_weights_raise_non_finite_error(broken):
    """A model whose lm_head is NaN stops the run at its first pass with NonFiniteLogitsError."""
    tgt = tiny_llama(0, lm_head_scale=8.0)
    drf = tiny_llama(1, lm_head_scale=8.0)
    with torch.no_grad():
        (tgt if broken == "target" else drf).lm_head.weight.fill_(float("nan"))
    gen = Generation(tgt, PROMPTS[0], ModelDrafter(drf, VOCAB), k=3, max_new_tokens=10)
    with pytest.raises(NonFiniteLogitsError):
        gen.run()
    assert gen.tokens == [] and gen.finish_reason is None


@pytest.mark.parametrize(
    "kwargs",
    [{"prompt_ids": []}, {"max_new_tokens": 0}, {"k": 0}, {"k": 65}],
    ids=["empty-prompt", "no-new-tokens", "k0", "k65"],
)
def test_bad_arguments_raise_value_error(target, kwargs):
    """Out-of-range arguments are refused before any model call."""
    args = {"target": target, "prompt_ids": [1, 2], "drafter": PromptLookupDrafter(VOCAB), "k": 4,
            "max_new_tokens": 4} | kwargs
    with pytest.raises(ValueError):
        Generation(**args).run()


def test_compiled_forward_gives_the_same_greedy_tokens():
    """``--compile`` (models.compile_forward) changes speed, never tokens: greedy speculative
    decoding with a compiled target and a compiled draft equals eager plain decoding, and a
    second call is a no-op (the forward is wrapped once). Compiling takes ~10-30 s on a CPU."""
    from specviz.models.loading import compile_forward

    target_model, draft_model = tiny_llama(seed=0), noisy_copy(tiny_llama(seed=0), seed=1, scale=0.02)
    prompt = [1, 5, 9, 2, 5, 9, 2]
    greedy = SamplingConfig(temperature=0.0)
    eager = Generation(target_model, prompt, None, k=1, sampling=greedy, max_new_tokens=16, seed=0).run().token_ids
    forward = compile_forward(target_model).forward
    assert hasattr(forward, "_torchdynamo_orig_callable")  # a torch.compile wrapper, not the eager forward
    assert compile_forward(target_model).forward is forward
    compile_forward(draft_model)
    drafter = ModelDrafter(draft_model, target_model.config.vocab_size)
    compiled = Generation(target_model, prompt, drafter, k=3, sampling=greedy, max_new_tokens=16, seed=0).run()
    assert compiled.token_ids == eager
    assert len(compiled.rounds) < 16  # it did verify multi-token blocks through the compiled forward


def test_a_generation_runs_once(target):
    """Iterating a finished Generation again raises instead of appending to the old run."""
    gen = Generation(target, PROMPTS[0], None, sampling=GREEDY, max_new_tokens=4).run()
    with pytest.raises(RuntimeError, match="runs once"):
        next(iter(gen))
    assert len(gen.tokens) == 4


def test_rounds_record_their_time_split_and_lookahead(target):
    """Every round records draft, verify and other time (ms, >= 0) and the K it was asked for,
    capped near the length limit (K' + 1 tokens at most fill it)."""
    gen = Generation(target, PROMPTS[2], PromptLookupDrafter(VOCAB), k=4, sampling=GREEDY, max_new_tokens=10).run()
    for r in gen.rounds:
        assert r.draft_ms >= 0 and r.verify_ms > 0 and r.other_ms >= 0
        assert 0 <= r.k <= 4 and r.n_proposed <= r.k
    assert gen.rounds[0].k == 4
    split = analyse_generation(gen).time_split
    assert [t.round for t in split] == [r.index for r in gen.rounds]
