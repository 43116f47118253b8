"""An empirical check that speculative sampling is lossless, for the app's "Is it lossless?" panel.

For one prompt we compute the draft's and the target's next-token distributions **once** (one draft
proposal, one target forward pass), then repeat only the random part many times:

* speculative: draw a draft token from ``p_draft``, run :func:`specviz.core.sampling.verify` on it, and
  keep the first emitted token (the accepted draft token, or the token resampled from the residual);
* direct: draw the first token straight from ``p_target``.

If the method is exact, both histograms estimate ``p_target``. We report the total-variation
distance of each histogram to ``p_target`` and a chi-square goodness-of-fit p-value (scipy) over
the most likely tokens plus one "everything else" bin.

A control case shows that the test can fail: with ``control="accept_all"`` every draft token is
accepted whatever p_target says, so the first token is distributed as p_draft, not p_target,
and the chi-square rejects it whenever the two differ by more than sampling noise.
:func:`lossless_notes` says in words what the chosen settings make the check show (at
temperature 0 there is nothing to sample; a prompt-lookup draft is a point mass), and
:func:`specviz.figures.trace.token_label` names a token so that a reader can tell tokens apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from scipy import stats

from specviz.drafters import ModelDrafter, real_draft_phrase
from specviz.core.drafter import Drafter
from specviz.core.sampling import SamplingConfig, check_rule, logits_to_probs, sample, verify
from specviz.figures.trace import token_label

__all__ = ["ACCEPT_ALL", "CONTROLS", "REAL_VERIFY", "LosslessReport", "draw_first_tokens", "first_token_experiment",
           "lossless_notes", "token_label"]

#: The control cases: ``"none"`` (the real verify step) and ``"accept_all"`` (a deliberately broken
#: verify step that accepts every draft token, so its first token follows p_draft).
REAL_VERIFY, ACCEPT_ALL = "none", "accept_all"
CONTROLS = (REAL_VERIFY, ACCEPT_ALL)


@dataclass
class LosslessReport:
    """Result of :func:`first_token_experiment` (plain data).

    Attributes:
        token_ids: the ``top`` most likely target tokens (by p_target), then ``-1`` for "other".
        p_target: p_target of each bin.
        freq_speculative: empirical frequency of each bin among speculative first tokens.
        freq_direct: empirical frequency of each bin among direct target samples.
        tv_speculative / tv_direct: total-variation distance of the binned histograms to binned p_target.
        p_value_speculative / p_value_direct: chi-square goodness-of-fit p-values against p_target.
        n: number of draws of each kind.
        acceptance_rate: fraction of speculative draws whose draft token was accepted.
        draft_label: what proposed the draft token.
        control: ``"none"``, or ``"accept_all"`` when the verify step was deliberately broken.
        p_draft: p_draft of each bin (what a broken verify step would reproduce).
        rule: the verification rule the speculative draws used (:data:`specviz.core.sampling.RULES`).
    """

    token_ids: list[int]
    p_target: list[float]
    freq_speculative: list[float]
    freq_direct: list[float]
    tv_speculative: float
    tv_direct: float
    p_value_speculative: float
    p_value_direct: float
    n: int
    acceptance_rate: float
    draft_label: str
    control: str = "none"
    p_draft: list[float] | None = None
    rule: str = "full"


def binned(counts: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    picked = counts[top]
    return torch.cat([picked, (counts.sum() - picked.sum()).view(1)])


def chi_square_p(observed: torch.Tensor, expected_probs: torch.Tensor, n: int) -> float:
    # Merge bins whose expected count is below 5 into "other": the chi-square approximation needs it.
    expected = expected_probs * n
    keep = expected >= 5
    keep[-1] = True
    obs = torch.cat([observed[:-1][keep[:-1]], (observed[:-1][~keep[:-1]].sum() + observed[-1]).view(1)])
    exp = torch.cat([expected[:-1][keep[:-1]], (expected[:-1][~keep[:-1]].sum() + expected[-1]).view(1)])
    if exp[-1] <= 0:
        obs, exp = obs[:-1], exp[:-1]
    if len(exp) < 2:
        return 1.0
    exp = exp * (obs.sum() / exp.sum())  # guard against float rounding in the totals
    return float(stats.chisquare(obs.double().numpy(), exp.double().numpy()).pvalue)


@torch.inference_mode()
def first_distributions(target, drafter, prompt_ids, sampling, vocab, generator):
    """``(p_target, p_draft)`` of the first new token, both ``(vocab,)`` on the target's device:
    one forward pass of each model, or prompt lookup's point mass."""
    device = next(target.parameters()).device
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    p_target_first = logits_to_probs(target(input_ids=ids, logits_to_keep=1).logits[0, -1, :vocab], sampling)
    if isinstance(drafter, ModelDrafter):
        draft_logits = drafter.model(input_ids=ids, logits_to_keep=1).logits[0, -1, : drafter.vocab_size]
        p_draft_first = logits_to_probs(draft_logits, sampling).to(device)
        if p_draft_first.shape[-1] < vocab:
            p_draft_first = torch.nn.functional.pad(p_draft_first, (0, vocab - p_draft_first.shape[-1]))
        return p_target_first, p_draft_first[:vocab]
    tree = drafter.propose(list(prompt_ids), 1, sampling, generator)
    proposal, p_rows = tree.tokens, tree.p_draft
    if not proposal:
        raise ValueError(f"{drafter.name} proposes nothing for this prompt (no earlier n-gram match)")
    return p_target_first, p_rows[0].to(device)


def first_token_experiment(
    target,
    drafter: Drafter,
    prompt_ids: list[int],
    sampling: SamplingConfig,
    n: int = 4000,
    seed: int = 0,
    top: int = 12,
    vocab_size: int | None = None,
    control: str = "none",
    rule: str = "full",
) -> LosslessReport:
    """Draw ``n`` first tokens speculatively and ``n`` directly from the target, and compare.

    One draft proposal (K = 1) and one target forward pass are computed; only the random draws
    are repeated, so ``n`` in the thousands takes seconds on a CPU.

    Args:
        target: the target causal LM.
        drafter: any drafter (a model draft, a self-draft, or prompt lookup — whose point-mass
            proposal is fixed by the prompt).
        prompt_ids: the encoded prompt (non-empty).
        sampling: sampling settings, applied to both models.
        n: draws of each kind (>= 100).
        seed: seed for all draws.
        top: number of most likely target tokens shown as their own bins.
        vocab_size: shared vocabulary width (defaults to the target's logits width).
        control: ``"none"`` (the real verify step) or ``"accept_all"`` (accept every draft token:
            a deliberately broken method, which the test should reject; see :func:`draw_first_tokens`).
        rule: the verification rule of the speculative draws (:func:`draw_first_tokens`).

    Returns:
        A :class:`LosslessReport`.

    Raises:
        ValueError: for an empty prompt, ``n < 100``, or a drafter that proposes nothing for this
            prompt (prompt lookup with no earlier match), or an unknown ``control``.
    """
    if control not in CONTROLS:
        raise ValueError(f"control must be one of {', '.join(CONTROLS)}, got {control!r}")
    check_rule(rule)
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    if n < 100:
        raise ValueError(f"n must be at least 100 draws, got {n}")
    device = next(target.parameters()).device
    vocab = vocab_size or target.get_output_embeddings().weight.shape[0]
    generator = torch.Generator(device=device).manual_seed(seed)
    p_target_first, p_draft_first = first_distributions(target, drafter, prompt_ids, sampling, vocab, generator)

    spec_counts, accepted = draw_first_tokens(p_target_first, p_draft_first, n, generator, control, rule)
    direct = torch.multinomial(p_target_first, n, replacement=True, generator=generator).cpu()
    direct_counts = torch.bincount(direct, minlength=vocab)

    p_cpu = p_target_first.cpu().double()
    top_ids = torch.topk(p_cpu, min(top, vocab)).indices
    p_binned = binned(p_cpu, top_ids)
    spec_binned = binned(spec_counts.double(), top_ids)
    direct_binned = binned(direct_counts.double(), top_ids)
    # TV over the bins: over the full vocabulary a few thousand draws of a diffuse distribution
    # would be dominated by sampling noise in the long tail, for both methods alike.
    tv_spec = 0.5 * float((spec_binned / n - p_binned).abs().sum())
    tv_direct = 0.5 * float((direct_binned / n - p_binned).abs().sum())
    return LosslessReport(
        token_ids=top_ids.tolist() + [-1],
        p_target=p_binned.tolist(),
        freq_speculative=(spec_binned / n).tolist(),
        freq_direct=(direct_binned / n).tolist(),
        tv_speculative=tv_spec,
        tv_direct=tv_direct,
        p_value_speculative=chi_square_p(spec_binned, p_binned, n),
        p_value_direct=chi_square_p(direct_binned, p_binned, n),
        n=n,
        acceptance_rate=accepted / n,
        draft_label=drafter.name,
        control=control,
        p_draft=binned(p_draft_first.cpu().double(), top_ids).tolist(),
        rule=rule,
    )


def draw_first_tokens(p_target: torch.Tensor, p_draft: torch.Tensor, n: int, generator: torch.Generator | None,
                      control: str = "none", rule: str = "full") -> tuple[torch.Tensor, int]:
    """Draw the first emitted token ``n`` times: a draft token from ``p_draft``, then the verify step.

    With ``control="none"`` this is :func:`specviz.core.sampling.verify` (accept with probability
    min(1, p_target/p_draft), else resample from the residual), so the counts estimate p_target.
    With ``control="accept_all"`` every draft token is kept, so the counts estimate p_draft: the
    method a learner might guess ("just use the draft") and the one the check must catch.

    Args:
        p_target, p_draft: ``(V,)`` distributions of the first new token, on one device.
        n: number of draws (>= 1).
        generator: random source.
        control: ``"none"`` or ``"accept_all"``.
        rule: the verification rule (:data:`specviz.core.sampling.RULES`): a rule whose draft proposes
            its argmax proposes the argmax of ``p_draft`` as a point mass every draw; the lossy
            ``"relaxed-top-k"`` control is expected to fail the check.

    Returns:
        ``(counts, accepted)``: ``(V,)`` int64 counts of the first emitted token (on the CPU) and
        how many of the ``n`` draft tokens were accepted.
    """
    vocab = p_target.shape[-1]
    if control == "accept_all":
        drafts = torch.multinomial(p_draft, n, replacement=True, generator=generator).cpu()
        return torch.bincount(drafts, minlength=vocab), n
    # Position 1 of p_target is only used when the draft token is accepted *and* we wanted a bonus
    # token; the first emitted token never comes from it, so any valid row will do.
    p_target_rows = torch.stack([p_target, p_target])
    counts = torch.zeros(vocab, dtype=torch.long)
    accepted = 0
    argmax = check_rule(rule).proposes == "argmax"
    if argmax:
        draft_token = p_draft.argmax().view(1)
        draft_row = torch.nn.functional.one_hot(draft_token, vocab).to(p_draft.dtype)
    for _ in range(n):
        if not argmax:
            draft_token, draft_row = sample(p_draft, generator).view(1), p_draft.view(1, -1)
        result = verify(draft_token, draft_row, p_target_rows, generator, rule)
        first = int(draft_token) if result.n_accepted == 1 else result.next_token
        accepted += result.n_accepted
        counts[first] += 1
    return counts, accepted


#: How whitespace and control characters are shown in a token label.


def lossless_notes(report: LosslessReport, temperature: float, lookup: bool = False, device="cpu") -> list[str]:
    """Plain sentences on what these settings make the check show (empty when nothing stands out).

    Args:
        report: the check's result.
        temperature: the sampling temperature it ran at.
        lookup: the drafter is prompt lookup (a point-mass draft).
        device: where the target is: a suggested drafter is one that runs there
            (:func:`specviz.drafters.real_draft_phrase`).
    """
    notes = []
    if temperature == 0:
        notes.append("At temperature 0 there is nothing to sample: every draw is the argmax, both histograms are "
                     "one bar and both p-values are 1. Set the check's temperature above 0 (1 is the model's own "
                     "distribution) to see the test work.")
    rule = check_rule(report.rule)
    if report.control == REAL_VERIFY and not rule.lossless and rule.weight is not None:
        notes.append(f"The {report.rule} rule is lossy by design: each first token follows {rule.weight:g}·p_target "
                     f"+ {1 - rule.weight:g}·p_draft, so its distance to p_target is {1 - rule.weight:g} of the "
                     "draft's. A working test rejects it once that exceeds the sampling noise.")
    elif report.control == REAL_VERIFY and not rule.lossless:
        notes.append(f"The {report.rule} rule is a lossy control: it accepts any drafted token within the target's "
                     "top few, so the first token is drawn too often where the draft likes it. A working test "
                     "rejects it (a tiny p-value) whenever the draft and the target disagree.")
    if report.control == "accept_all":
        notes.append("Control case: every draft token was accepted, so the first token follows p_draft, not "
                     "p_target. A working test rejects this (a tiny p-value) whenever the two differ.")
    if lookup and temperature > 0:
        notes.append(f"Prompt lookup proposes one fixed token (a point mass, p_draft = 1), so it is accepted with "
                     f"probability p_target of that token ({report.acceptance_rate:.0%} of draws here); every other "
                     "first token comes from the residual, which is p_target with that token removed.")
    if temperature > 0 and report.acceptance_rate in (0.0, 1.0) and report.control == REAL_VERIFY:
        notes.append("The draft token was never or always accepted, so only one branch of the method was tested: "
                     f"try {real_draft_phrase(device)}, whose draft is a real distribution.")
    return notes
