"""Pure sampling math for speculative sampling.

Everything here is a function of tensors and an explicit ``torch.Generator``: no models, no
tokenizers, no global state. The engine (``specviz.core.engine``) calls these; the tests call them with
hand-built logits.

Conventions
-----------
* ``p_target`` is the target model's distribution, ``p_draft`` the draft's. Both are produced by
  :func:`logits_to_probs` with the *same* :class:`SamplingConfig`, in float32, so the ratio
  ``p_target / p_draft`` compares the exact distributions the tokens were drawn from
  (Chen et al. 2023, Algorithm 2; Leviathan et al. 2023, Section 2.3).
* Temperature 0 means greedy: the distribution is a one-hot vector at the argmax. The accept test
  and the residual then reduce to "accept iff the target's argmax equals the draft token", and the
  resampled token is the target's argmax, so greedy speculative decoding equals greedy decoding.
* Shapes use ``V`` for the vocabulary width, ``K`` for the number of drafted tokens of a chain and
  ``N`` for the number of nodes of a draft tree.

Trees. :func:`verify_tree` verifies a tree of drafted tokens (each node a token and its parent) in
one walk from the root, testing each node's children in turn against the current residual
(SpecInfer's multi-step speculative sampling, Miao et al. 2024, Algorithm 2). A chain is the tree
with one branch, and :func:`verify` is exactly that case.

Why it is exact: given that the walk reaches a test with residual ``r``, the token emitted at
that depth is distributed as ``r``: it is ``x`` with probability ``min(q, r)(x)`` (or
``r(x)·[x]`` for a point mass) and otherwise drawn later from the updated residual, whose
mass is exactly what is left, ``max(0, r − q)``. By induction over the siblings the first
test's ``r = p`` is reproduced, and each accepted node moves on with the target's own
distribution after it. At ``T = 0`` every row is one-hot, so a child is accepted iff it is the
target's argmax and the walk follows the target's greedy path.

Duplicates. After ``x`` is rejected, ``r(x) = 0`` (rejection needs ``r(x) < q(x)``, and a
point mass zeroes it), so a repeated child can never be accepted. A repeated *point-mass*
child is skipped (merged; ``tested`` stays False) because its rejection changes nothing; a
repeated *sampled* child still applies its residual update, which the exactness argument for
independent draws needs. The drafters merge duplicates when they build the tree.

Verification rules. Engines verify the same drafts by different rules, all exact but one; each is
a ``rule`` of :func:`verify_tree` and :func:`verify` (the table :data:`RULES`):

* ``"full"``: the rule above (Chen et al. 2023; Leviathan et al. 2023; SpecInfer for trees).
* ``"one-hot"``: vLLM V1's rejection sampler for an argmax draft (vllm-project/vllm PR #16899):
  the draft is the point mass ``δ_x`` at its argmax, accepted with probability ``p_target(x)``;
  the residual is ``p_target`` with ``x`` removed and renormalised. It is the point-mass case of
  the full rule, so trees need nothing new. Exact only when the drafted token is a function of the
  context (an argmax, a lookup): a *sampled* token tested as a point mass would be biased.
* ``"exact-match"``: llama.cpp's (and MLX's MTP before its PR #1085): the target draws its own
  token ``y ~ p_target`` at each position and the draft is kept iff ``y == x``; at the first
  mismatch ``y`` is emitted. Every emitted token is the target's own draw, so it is exact for any
  draft, chains and trees alike; with an argmax draft it accepts with the same probability
  ``p_target(x)`` as one-hot and its residual has the same law (``p_target`` given ``y ≠ x``).
* ``"block"``: block verification (Sun et al. 2024, arXiv 2403.10444, Algorithm 2), which
  decides the accepted length of the whole chain jointly; its expected accepted length is never
  below token-by-token verification's (their Theorem 2). Chains only.
* ``"relaxed-top-k"``: a **lossy** control: a drafted token is accepted whenever it is among the
  target's :data:`RELAXED_TOP_K` most likely tokens (the "relaxed acceptance" some engines offer
  for reasoning text); a rejection draws from ``p_target``. The output is *not* distributed as
  the target's; the lossless checks exist to show it.
* ``"ensemble:W"``: transformers' static ensemble verification (``assistant_ensemble_weight``,
  PR #45979; DIVERSED, arXiv 2604.07622), a dial from exact (W = 1, the full rule) to lossy: each
  token follows ``v = W·p_target + (1 − W)·p_draft`` (:func:`_ensemble`). Chains only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.core.rules import (
    RELAXED_TOP_K,
    RULE_NAMES,
    RULES,
    Rule,
    RuleError,
    check_rule,
)

__all__ = [
    "RELAXED_TOP_K",
    "RULES",
    "RULE_NAMES",
    "NonFiniteLogitsError",
    "Rule",
    "RuleError",
    "SamplingConfig",
    "TreeVerifyResult",
    "VerifyResult",
    "block_weights",
    "check_rule",
    "logits_to_probs",
    "residual_distribution",
    "sample",
    "verify",
    "verify_tree",
]


class NonFiniteLogitsError(ValueError):
    """Raised when a model produced NaN or +inf logits (a broken model or dtype overflow)."""


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings applied identically to the draft and the target.

    Attributes:
        temperature: softmax temperature; ``0`` means greedy (argmax). Must be finite and ``>= 0``.
        top_k: keep only the ``top_k`` most likely tokens; ``0`` disables the filter.
        top_p: nucleus filter: keep the smallest set of most likely tokens whose mass reaches
            ``top_p``; ``1.0`` disables it. Must be in ``(0, 1]``.

    Raises:
        ValueError: on out-of-range settings.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        # Also refuses NaN and +inf (logits / inf turns -inf masks into NaN).
        if not (0.0 <= self.temperature < float("inf")):
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def logits_to_probs(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Turn raw logits into the sampling distribution: temperature, then top-k, then top-p.

    Follows the usual order of transformers' logits processors (temperature → top-k → top-p).
    Computed in float32 whatever the model's dtype, so draft and target probabilities are
    compared in one precision.

    Args:
        logits: ``(..., V)`` raw logits, any float dtype. ``-inf`` entries (masked tokens) are
            allowed; ``NaN`` and ``+inf`` are not.
        config: the sampling settings.

    Returns:
        ``(..., V)`` float32 probabilities summing to 1 along the last axis. With
        ``temperature == 0`` each row is one-hot at the argmax (ties go to the lowest id).

    Raises:
        NonFiniteLogitsError: if any logit is NaN or +inf, or a row is entirely ``-inf``.
    """
    logits = logits.float()
    # One device-to-host sync for both checks (each `if tensor` waits for the GPU); the message
    # is worked out only on the rare failing path.
    broken = (torch.isnan(logits) | torch.isposinf(logits)).any(dim=-1) | torch.isneginf(logits).all(dim=-1)
    if broken.any():
        if torch.isnan(logits).any() or torch.isposinf(logits).any():
            raise NonFiniteLogitsError("the model produced NaN or +inf logits; try float32")
        raise NonFiniteLogitsError("a row of logits is entirely -inf: no token is possible")
    if config.greedy:
        # Greedy is the temperature → 0 limit; top-k/top-p cannot change the argmax.
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).float()
    # Shift the maximum to 0 before dividing: a tiny temperature then sends the other logits to
    # -inf instead of overflowing the largest to +inf (softmax of +inf is NaN). A temperature
    # below float32's range would round to 0 and turn the maximum's 0 / 0 into NaN, so it is
    # raised to the smallest normal float32, which gives the same limit (ties share the mass).
    temperature = max(config.temperature, torch.finfo(torch.float32).tiny)
    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature
    if config.top_k and config.top_k < logits.shape[-1]:
        kth = torch.topk(logits, config.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if config.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        # Mass strictly before each token: a token stays if the tokens ranked above it have
        # not yet reached top_p, so the most likely token always survives.
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = mass_before >= config.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Draw one token id per row of ``probs`` by inverse-CDF sampling.

    One uniform ``u`` per row, scaled by the row's total mass, is located in the cumulative sum
    with a binary search: the id ``i`` with ``cdf[i-1] <= u < cdf[i]``. A zero-probability id has
    ``cdf[i-1] == cdf[i]`` and so can never be chosen, and ``u`` is kept strictly below the total,
    so rounding cannot pick a zero-probability id at the end of the vocabulary either. This is
    the textbook method (e.g. Devroye 1986, Section III.2); we use it instead of
    ``torch.multinomial``, which took about 2 ms per call over SmolLM2's 49,152 ids on CPU
    against about 0.1 ms here (BENCHMARKS.md, goal 1).

    The cumulative sum is taken in float64 (float32 on Apple's MPS, which has no float64) so that
    the rounding error over a 250k-id vocabulary stays far below any probability we sample.

    Args:
        probs: ``(..., V)`` non-negative probabilities; rows need not be exactly normalised (the
            uniform is scaled by each row's sum), one-hot rows give their argmax. Each row must
            have positive, finite mass (an all-zero or NaN row has no id to give); every row that
            :func:`logits_to_probs` and :func:`residual_distribution` return does, and the check
            is left out here because it would cost a device-to-host sync per draw.
        generator: the random source; the only one used, so runs are reproducible per seed. It
            must live on ``probs``' device.

    Returns:
        ``(...)`` int64 token ids, on ``probs``' device.
    """
    flat = probs.reshape(-1, probs.shape[-1])
    dtype = torch.float32 if flat.device.type == "mps" else torch.float64
    uniforms = torch.rand(flat.shape[0], 1, generator=generator, device=flat.device, dtype=dtype)
    return _locate(flat, uniforms).reshape(probs.shape[:-1])


def _locate(flat: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse CDF of each row of ``flat`` ``(R, V)`` at its uniform ``(R, 1)``: ``(R,)`` ids (see
    :func:`sample`, which draws the uniforms; exact match records them)."""
    dtype = torch.float32 if flat.device.type == "mps" else torch.float64
    cdf = flat.to(dtype).cumsum(dim=-1)
    total = cdf[:, -1:]
    # u * total can round up to total itself; the largest float below total keeps u inside.
    u = torch.minimum(uniforms.to(dtype) * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)


def residual_distribution(p_target: torch.Tensor, p_draft: torch.Tensor) -> torch.Tensor:
    """The distribution to resample from after a rejection: normalize(max(0, p_target − p_draft)).

    Chen et al. 2023, Algorithm 2 (the ``(q − p)_+`` term, with their q the target). When the two
    distributions are equal the residual has no mass; a rejection is then impossible in exact
    arithmetic, but float rounding can still reach this branch, so we fall back to ``p_target``
    instead of dividing 0 by 0.

    Args:
        p_target: ``(..., V)`` target probabilities.
        p_draft: ``(..., V)`` draft probabilities, same shape.

    Returns:
        ``(..., V)`` float32 probabilities, never NaN.
    """
    residual = (p_target - p_draft).clamp_min(0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp_min(torch.finfo(residual.dtype).tiny), p_target)


@dataclass
class TreeVerifyResult:
    """Outcome of verifying one draft tree.

    Per-node tensors are ``(N,)`` float32 on ``p_target``'s device; per-node lists are host bools.

    Attributes:
        path: node indices of the accepted path, root first (``len(path)`` tokens accepted).
        next_token: the token emitted after the path: drawn from the final residual when every
            child of the last accepted node was rejected (``"resampled"``), or from the target at
            that node when it has no children (``"bonus"``).
        next_kind: ``"resampled"`` or ``"bonus"``.
        p_target_node: the target's probability of each node's token at its parent's context
            (the unmodified target distribution, before any residual).
        p_draft_node: the draft probability ``q(x)`` of each node's token (1 for a point mass).
        accept_prob: the acceptance probability each tested node actually faced:
            ``min(1, r(x)/q(x))`` against the residual ``r`` current at its test (``r(x)`` for a
            point mass). For an untested node, the value it would have had as its parent's first
            child, ``min(1, p_target(x)/q(x))``.
        uniforms: the uniform draw of each node's test (drawn for every node, used if tested).
        tested: True for every node that faced a test.
        accepted: True for the nodes of ``path``.
        next_p_target: the target's probability of ``next_token`` at its position (before any
            residual).
        rejected_node: for ``"resampled"``, the last rejected child of the last accepted node
            (the UI's struck-through token); else None.
        next_distribution: ``(V,)`` the distribution ``next_token`` was drawn from: the final
            residual after the rejected siblings, or the target's row at a leaf (the token
            inspector shows it).
    """

    path: list[int]
    next_token: int
    next_kind: str
    p_target_node: torch.Tensor
    p_draft_node: torch.Tensor
    accept_prob: torch.Tensor
    uniforms: torch.Tensor
    tested: list[bool]
    accepted: list[bool]
    next_p_target: float
    rejected_node: int | None
    next_distribution: torch.Tensor | None = None

    @property
    def n_accepted(self) -> int:
        return len(self.path)


def _check_tree(tokens: torch.Tensor, parents: list[int], p_draft: torch.Tensor, p_target: torch.Tensor) -> None:
    n = tokens.shape[0]
    if (tokens.dim() != 1 or len(parents) != n or p_draft.shape[0] != n or p_target.shape[0] != n + 1
            or p_draft.shape[-1] != p_target.shape[-1]):
        raise ValueError(
            f"shape mismatch: tokens {tuple(tokens.shape)}, parents {len(parents)}, p_draft {tuple(p_draft.shape)}, "
            f"p_target {tuple(p_target.shape)}; expected (N,), N, (N, V), (N+1, V)"
        )
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:  # parents first: every walk below only looks backwards
            raise ValueError(f"node {i} has parent {parent}: parents must be -1 (the context) or an earlier node")


@dataclass
class _NodeTests:
    """The per-node figures of one tree verification, and the test of one node's children."""

    token_ids: list[int]
    point_mass: list[bool]
    first_test: list[bool]
    uniforms: torch.Tensor
    p_draft: torch.Tensor
    p_draft_node: torch.Tensor
    accept_prob: torch.Tensor  # written for later siblings (their test faced a residual)
    tested: list[bool]  # written

    def run(self, kids: list[int], p_target_row: torch.Tensor) -> tuple[int | None, torch.Tensor | None, int | None]:
        """Test ``kids`` in turn against the residual (see :func:`verify_tree`).

        Returns:
            ``(accepted child or None, final residual or None, last rejected child or None)``.
        """
        residual, rejected, rejected_tokens = None, None, set()
        tiny = torch.finfo(torch.float32).tiny
        for child in kids:
            x = self.token_ids[child]
            if self.point_mass[child] and x in rejected_tokens:
                continue  # a repeated point mass: r(x) = 0 and removing it changes nothing
            self.tested[child] = True
            if residual is None:  # the first test faces the target's own row: decided up front
                ok = self.first_test[child]
            else:
                q_x = self.p_draft_node[child]
                self.accept_prob[child] = torch.clamp(residual[x] / q_x.clamp_min(tiny), max=1.0)
                ok = bool(self.uniforms[child] * q_x < residual[x])
            if ok:
                return child, residual, None
            rejected = child
            rejected_tokens.add(x)
            if self.point_mass[child]:
                q_row = torch.nn.functional.one_hot(torch.tensor(x, device=p_target_row.device),
                                                    p_target_row.shape[-1]).float()
            else:
                q_row = self.p_draft[child]
            residual = residual_distribution(p_target_row if residual is None else residual, q_row)
        return None, residual, rejected


def verify_tree(
    tokens: torch.Tensor,
    parents: torch.Tensor | list[int],
    p_draft: torch.Tensor,
    p_target: torch.Tensor,
    point_mass: bool | list[bool],
    generator: torch.Generator | None,
    rule: str = "full",
) -> TreeVerifyResult:
    """The verify step for a tree of drafted tokens: exact multi-step speculative sampling.

    Walk down from the root (the committed context). At a node whose next-token distribution
    under the target is ``p`` (row ``0`` for the root, row ``i + 1`` after node ``i``), start with
    the residual ``r = p`` and test its children in list order:

    * a child ``x`` drawn from the draft distribution ``q`` (its ``p_draft`` row) is accepted with
      probability ``min(1, r(x)/q(x))``; on rejection ``r ← normalize(max(0, r − q))``.
      SpecInfer's multi-step speculative sampling (Miao et al. 2024, Algorithm 2, Theorem 4.2:
      exact for children drawn independently from ``q``); with one child it is Chen et al. 2023,
      Algorithm 2 / Leviathan et al. 2023, Algorithm 1.
    * a deterministic child (prompt lookup, suffix and top-b drafts: a point mass ``δ_x``) is
      accepted with probability ``r(x)``; on rejection ``x``'s mass is removed and ``r``
      renormalised. This is the rule above with ``q = δ_x`` (``max(0, r − δ_x)`` is ``r`` with
      ``x`` zeroed): recursive rejection sampling without replacement (Jeon et al. 2024,
      "Recursive Speculative Decoding") for proposals that are a function of the context, as
      prompt lookup's and SuffixDecoding's trees are (Oliaro et al. 2024).

    Why this is exact, and how duplicates are handled: see the module docstring ("Trees").

    If every child of the last accepted node is rejected the next token is drawn from the final
    residual (``"resampled"``); if that node has no children (a leaf, e.g. depth K) it is the
    bonus token from the target's distribution there. First children are tested against the
    unmodified target rows all at once (one host synchronisation); only later siblings, reached
    after a rejection, cost one each.

    Args:
        tokens: ``(N,)`` int64 drafted token ids, ``N >= 0``.
        parents: ``N`` parent indices (``-1`` = the committed context), parents before children.
        p_draft: ``(N, V)``: row ``i`` the distribution node ``i`` was drawn from (its parent's
            draft distribution); ignored for point-mass nodes.
        p_target: ``(N + 1, V)``: row 0 the target's next-token distribution at the context,
            row ``i + 1`` the one after node ``i``.
        point_mass: one flag for the tree, or one per node: True for deterministic nodes.
        generator: random source of the uniforms and the final draw.
        rule: the verification rule (:data:`RULES`; module docstring, "Verification rules").
            ``"full"`` is the walk above; ``"one-hot"`` is that walk with every node a point mass
            (the drafts must be functions of the context, e.g. the draft's argmax);
            ``"exact-match"`` walks down the target's own draws (:func:`_exact_match`);
            ``"block"`` verifies a chain jointly (:func:`_block_verify`); ``"relaxed-top-k"`` is
            the lossy control (:func:`_relaxed_top_k`); ``"ensemble:W"`` a dial (:func:`_ensemble`).

    Returns:
        A :class:`TreeVerifyResult`. Under ``"exact-match"`` a node's ``uniforms`` entry is the
        uniform of the target's draw at its parent's row and ``accept_prob`` is ``p_target(x)``
        (the chance that draw is ``x``); under ``"block"`` they are Sun et al.'s ``η_i`` and
        ``h_i`` (the accepted length is the last ``i`` with ``η_i < h_i``, so a node can be
        accepted after a failed test of its own); under ``"relaxed-top-k"`` the test is
        deterministic: ``accept_prob`` is 1 or 0 and the uniform 0.

    Raises:
        ValueError: on shapes that disagree or parents that are not parents-first.
        RuleError: for an unknown rule, or ``"block"`` on a tree that is not a chain.
    """
    parents = parents.tolist() if isinstance(parents, torch.Tensor) else list(parents)
    _check_tree(tokens, parents, p_draft, p_target)
    n = tokens.shape[0]
    is_chain = all(parent == i - 1 for i, parent in enumerate(parents))
    found = check_rule(rule, tree=not is_chain)
    flags = [bool(point_mass)] * n if isinstance(point_mass, bool) else [bool(f) for f in point_mass]
    if rule == "one-hot":
        flags = [True] * n
    elif rule == "exact-match":
        return _exact_match(tokens, parents, p_draft, p_target, flags, generator)
    elif rule == "block":
        return _block_verify(tokens, p_draft, p_target, flags, generator)
    elif rule == "relaxed-top-k":
        return _relaxed_top_k(tokens, parents, p_draft, p_target, flags, generator)
    elif found.weight is not None:
        return _ensemble(tokens, p_draft, p_target, flags, generator, found.weight)
    return _full_rule(tokens, parents, p_draft, p_target, flags, generator)


def _full_rule(tokens, parents, p_draft, p_target, flags, generator) -> TreeVerifyResult:
    """:func:`verify_tree` under the ``"full"`` rule (and ``"one-hot"``, whose ``flags`` are all
    True): the walk of its docstring, with the same arguments, ``flags`` one per node."""
    n = tokens.shape[0]
    p_target_node, p_draft_node, uniforms, first_test, accept_prob = _node_figures(
        tokens, parents, p_draft, p_target, flags, generator)
    tested, accepted = [False] * n, [False] * n
    tests = _NodeTests(tokens.tolist(), flags, first_test, uniforms, p_draft, p_draft_node, accept_prob, tested)
    path, node, distribution, kind, rejected_node = _walk(parents, p_target, tests, accepted)
    next_token = int(sample(distribution, generator).item())
    return TreeVerifyResult(
        path=path, next_token=next_token, next_kind=kind, p_target_node=p_target_node, p_draft_node=p_draft_node,
        accept_prob=accept_prob, uniforms=uniforms, tested=tested, accepted=accepted,
        next_p_target=float(p_target[node + 1, next_token]), rejected_node=rejected_node,
        next_distribution=distribution,
    )


def _node_figures(tokens, parents, p_draft, p_target, flags, generator):
    """Per-node ``(p_target(x), q(x), uniforms, first-test verdicts, first-test accept probs)``, all
    ``(N,)``: every node decided as if it were its parent's first child, in one host sync."""
    n = tokens.shape[0]
    p_target_node, p_draft_node = _node_probs(tokens, parents, p_draft, p_target, flags)
    uniforms = torch.rand(n, generator=generator, device=p_target.device) if n else p_target.new_zeros(0)
    # Written u·q < p so that a target probability of 0 is never accepted and nothing divides by 0.
    first_test = (uniforms * p_draft_node < p_target_node).tolist()
    accept_prob = torch.clamp(p_target_node / p_draft_node.clamp_min(torch.finfo(torch.float32).tiny), max=1.0)
    return p_target_node, p_draft_node, uniforms, first_test, accept_prob


def _walk(parents: list[int], p_target: torch.Tensor, tests: _NodeTests, accepted: list[bool]):
    """Down from the root until a node's children all fail (resample) or it has none (bonus).

    Returns ``(path, last node, distribution of the next token, its kind, last rejected child)``.
    """
    children = _children_of(parents)
    path: list[int] = []
    node = -1
    while True:
        kids = children[node + 1]
        chosen, residual, rejected_node = tests.run(kids, p_target[node + 1])
        if chosen is None:
            break
        path.append(chosen)
        accepted[chosen] = True
        node = chosen
    if kids:
        return path, node, residual, "resampled", rejected_node
    return path, node, p_target[node + 1], "bonus", rejected_node


def _children_of(parents: list[int]) -> list[list[int]]:
    children: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, parent in enumerate(parents):
        children[parent + 1].append(i)
    return children


def _node_probs(tokens, parents, p_draft, p_target, flags):
    """``(p_target(x), q(x))`` of every node, both ``(N,)`` (``q = 1`` for a point mass)."""
    n = tokens.shape[0]
    device = p_target.device
    # Element indexing (row, token) picks N numbers without copying N rows of V.
    rows = torch.tensor([p + 1 for p in parents], dtype=torch.long, device=device)
    p_target_node = p_target[rows, tokens]
    p_draft_node = p_draft[torch.arange(n, device=device), tokens]
    if any(flags):
        p_draft_node = torch.where(torch.tensor(flags, device=device), 1.0, p_draft_node)
    return p_target_node, p_draft_node


def _first_passing_walk(parents: list[int], passes) -> tuple[list[int], int, list[bool], int | None]:
    """Down from the root: at each node, its children are tried in order and the first for which
    ``passes(child)`` holds is taken. Returns ``(path, last node, tested flags, last tried child
    of the last node or None)``."""
    children = _children_of(parents)
    tested = [False] * len(parents)
    path, node, last_tried = [], -1, None
    while True:
        chosen, last_tried = None, None
        for child in children[node + 1]:
            tested[child] = True
            last_tried = child
            if passes(child):
                chosen = child
                break
        if chosen is None:
            return path, node, tested, last_tried
        path.append(chosen)
        node = chosen


def _exact_match(tokens, parents, p_draft, p_target, flags, generator) -> TreeVerifyResult:
    """Exact match (llama.cpp's rule): the target draws ``y ~ p_target`` at every row by inverse
    CDF (one uniform per row, all drawn up front), and the walk follows the child equal to ``y``;
    the first row whose ``y`` no child matches emits ``y`` (``"resampled"``, or ``"bonus"`` at a
    leaf). Every emitted token is the target's own draw at its context, so the output is the
    target's whatever the drafts are."""
    n = tokens.shape[0]
    p_target_node, p_draft_node = _node_probs(tokens, parents, p_draft, p_target, flags)
    row_uniforms = torch.rand(n + 1, 1, generator=generator, device=p_target.device)
    draws = _locate(p_target, row_uniforms).tolist()
    token_ids = tokens.tolist()
    path, node, tested, last_tried = _first_passing_walk(parents, lambda c: token_ids[c] == draws[parents[c] + 1])
    rows = torch.tensor([p + 1 for p in parents], dtype=torch.long, device=p_target.device)
    next_token = draws[node + 1]
    kind = "resampled" if last_tried is not None else "bonus"
    return TreeVerifyResult(
        path=path, next_token=next_token, next_kind=kind, p_target_node=p_target_node, p_draft_node=p_draft_node,
        accept_prob=p_target_node.clone(), uniforms=row_uniforms.squeeze(-1)[rows].float(), tested=tested,
        accepted=[i in path for i in range(n)], next_p_target=float(p_target[node + 1, next_token]),
        rejected_node=last_tried, next_distribution=p_target[node + 1],
    )


def _relaxed_top_k(tokens, parents, p_draft, p_target, flags, generator) -> TreeVerifyResult:
    """The lossy control: the first child among the target's :data:`RELAXED_TOP_K` most likely
    tokens at its row (and of positive probability) is accepted outright; if none is, the next
    token is drawn from ``p_target``. A token in the top k is accepted even where the target gives
    it less mass than the draft does, so its share of the output is too large."""
    n = tokens.shape[0]
    p_target_node, p_draft_node = _node_probs(tokens, parents, p_draft, p_target, flags)
    rows = torch.tensor([p + 1 for p in parents], dtype=torch.long, device=p_target.device)
    kth = p_target.topk(min(RELAXED_TOP_K, p_target.shape[-1]), dim=-1).values[:, -1]
    in_top = ((p_target_node >= kth[rows]) & (p_target_node > 0)).tolist()
    path, node, tested, last_tried = _first_passing_walk(parents, lambda c: in_top[c])
    distribution = p_target[node + 1]
    next_token = int(sample(distribution, generator).item())
    return TreeVerifyResult(
        path=path, next_token=next_token, next_kind="resampled" if last_tried is not None else "bonus",
        p_target_node=p_target_node, p_draft_node=p_draft_node,
        accept_prob=torch.tensor(in_top, dtype=torch.float32, device=p_target.device),
        uniforms=torch.zeros(n, device=p_target.device), tested=tested, accepted=[i in path for i in range(n)],
        next_p_target=float(p_target[node + 1, next_token]), rejected_node=last_tried,
        next_distribution=distribution,
    )


def _ensemble(tokens, p_draft, p_target, flags, generator, weight: float) -> TreeVerifyResult:
    """Static ensemble verification of a chain at weight ``weight`` = w, as transformers ships it:
    ``_speculative_sampling`` in src/transformers/generation/utils.py (huggingface/transformers
    PR #45979, read at commit b012bdea8417ee91f0c85cabf7558cee6db09437; DIVERSED, arXiv 2604.07622).

    Drafted token i is kept with min(1, v(x_i)/q(x_i)), v = w·p_target + (1 − w)·q (transformers
    writes the ratio 1 − w + w·p_target/q); the first failure ends the chain and the next token is
    drawn from normalize(max(0, p_target − q)) at that position (v − q = w·(p_target − q), so it is
    the residual of v too; p_target where it has no mass, as transformers falls back); after K
    kept drafts the bonus comes from p_target. So each emitted token follows v: min(q, v) + max(0,
    v − q) = v. A point-mass node has q = δ_x (transformers has no point-mass drafts; this is the
    rule's plain extension). The test is written u·q < v, with the full rule's draws (K uniforms,
    then one sample): at w = 1 it *is* the full rule, draw for draw. (At temperature 0
    transformers compares argmaxes of the softmaxed mixture instead; here T = 0 rows are one-hot,
    so a mismatched argmax draft is kept with probability 1 − w.)"""
    k = tokens.shape[0]
    parents = list(range(-1, k - 1))
    p_target_node, p_draft_node = _node_probs(tokens, parents, p_draft, p_target, flags)
    q_rows = p_draft
    if any(flags):  # a point-mass node's row is its one-hot row, whatever was passed
        one_hot = torch.nn.functional.one_hot(tokens, p_target.shape[-1]).to(p_target.dtype)
        q_rows = torch.where(torch.tensor(flags, device=p_target.device)[:, None], one_hot, p_draft)
    uniforms = torch.rand(k, generator=generator, device=p_target.device) if k else p_target.new_zeros(0)
    v_node = weight * p_target_node + (1.0 - weight) * p_draft_node
    passed = (uniforms * p_draft_node < v_node).tolist()  # one host sync; v = 0 is never accepted
    tau = passed.index(False) if False in passed else k
    if tau == k:
        distribution, kind = p_target[k], "bonus"
    else:
        distribution, kind = residual_distribution(p_target[tau], q_rows[tau]), "resampled"
    next_token = int(sample(distribution, generator).item())
    return TreeVerifyResult(
        path=list(range(tau)), next_token=next_token, next_kind=kind, p_target_node=p_target_node,
        p_draft_node=p_draft_node,
        accept_prob=torch.clamp(v_node / p_draft_node.clamp_min(torch.finfo(torch.float32).tiny), max=1.0),
        uniforms=uniforms, tested=[i <= tau for i in range(k)], accepted=[i < tau for i in range(k)],
        next_p_target=float(p_target[tau, next_token]), rejected_node=tau if tau < k else None,
        next_distribution=distribution,
    )


def block_weights(p_target_drafted: torch.Tensor, p_draft_drafted: torch.Tensor, p_target: torch.Tensor,
                  p_draft: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Block verification's weights for one drafted chain (Sun et al. 2024, arXiv 2403.10444,
    Algorithm 2, written with ``M_b = p_target`` and ``M_s = p_draft``).

    With ``p_0 = 1`` and ``X^i`` the first ``i`` drafted tokens:

    * ``p_i = min(1, p_{i−1} · p_target(X_i | X^{i−1}) / p_draft(X_i | X^{i−1}))``;
    * ``R_i = Σ_x max(0, p_i · p_target(x | X^i) − p_draft(x | X^i))``, the residual mass at
      ``i`` (for ``i < K``);
    * ``h_i = R_i / (R_i + 1 − p_i)`` for ``i < K`` and ``h_K = p_K``.

    The accepted length is ``τ = max{i : η_i ≤ h_i}`` (0 if none) for independent uniforms
    ``η_i``; after ``τ < K`` the next token is drawn from ``normalize(max(0, p_τ · p_target(· |
    X^τ) − p_draft(· | X^τ)))``, after ``τ = K`` from ``p_target(· | X^K)`` (the bonus token). So
    ``P(τ = i) = h_i · Π_{j>i} (1 − h_j)`` given the draft. ``R_i + 1 − p_i = 0`` only when
    ``p_i = 1`` and the two distributions agree at ``i``; then every later ``h`` reaches 1 by
    ``h_K`` and ``h_i`` cannot decide ``τ``, so it is set to 0 there.

    Args:
        p_target_drafted: ``(K,)`` the target's probability of each drafted token.
        p_draft_drafted: ``(K,)`` the draft's probability of each (1 for a point mass).
        p_target: ``(K + 1, V)`` the target's rows (row ``i`` after ``X^i``).
        p_draft: ``(K, V)`` the rows the drafted tokens were drawn from (one-hot for a point mass).

    Returns:
        ``(weights, h, residual_mass)``: ``weights`` ``(K + 1,)`` the ``p_i`` from ``p_0 = 1``;
        ``h`` ``(K,)`` the ``h_1 … h_K``; ``residual_mass`` ``(K,)`` the ``R_0 … R_{K−1}``. All
        float32 on ``p_target``'s device.
    """
    k = p_target_drafted.shape[0]
    device = p_target.device
    tiny = torch.finfo(torch.float32).tiny
    ratios = (p_target_drafted / p_draft_drafted.clamp_min(tiny)).tolist()  # one host sync
    weights = [1.0]
    for ratio in ratios:  # a running product capped at 1: sequential, K ≤ 64 floats
        weights.append(min(weights[-1] * ratio, 1.0))
    w = torch.tensor(weights, dtype=torch.float32, device=device)
    residual_mass = (w[:k, None] * p_target[:k] - p_draft).clamp_min(0.0).sum(dim=-1)
    h = torch.zeros(k, dtype=torch.float32, device=device)
    if k:
        inner = residual_mass[1:]
        denominator = inner + 1.0 - w[1:k]
        h[: k - 1] = torch.where(denominator > 0, inner / denominator.clamp_min(tiny), 0.0)
        h[k - 1] = w[k]
    return w, h, residual_mass


def _block_verify(tokens, p_draft, p_target, flags, generator) -> TreeVerifyResult:
    """Block verification of a chain (:func:`block_weights`): one uniform per position, the
    accepted length the last position that passes its test, then the block residual's draw."""
    k = tokens.shape[0]
    device = p_target.device
    parents = list(range(-1, k - 1))
    p_target_node, p_draft_node = _node_probs(tokens, parents, p_draft, p_target, flags)
    q_rows = p_draft
    if any(flags):  # a point-mass node's row is its one-hot row, whatever was passed
        one_hot = torch.nn.functional.one_hot(tokens, p_target.shape[-1]).to(p_target.dtype)
        q_rows = torch.where(torch.tensor(flags, device=device)[:, None], one_hot, p_draft)
    w, h, mass = block_weights(p_target_node, p_draft_node, p_target, q_rows)
    uniforms = torch.rand(k, generator=generator, device=device) if k else p_target.new_zeros(0)
    passed = (uniforms < h).tolist()  # strict: η ∈ [0, 1) passes h = 1 and fails h = 0
    tau = max((i + 1 for i, ok in enumerate(passed) if ok), default=0)
    if tau == k:
        distribution, kind = p_target[k], "bonus"
    else:
        residual = (w[tau] * p_target[tau] - q_rows[tau]).clamp_min(0.0)
        # No residual mass: τ = tau is then impossible in exact arithmetic (h_tau = 0); rounding
        # can still land here, so fall back to the target's row as residual_distribution does.
        distribution = residual / mass[tau] if float(mass[tau]) > 0 else p_target[tau]
        kind = "resampled"
    next_token = int(sample(distribution, generator).item())
    return TreeVerifyResult(
        path=list(range(tau)), next_token=next_token, next_kind=kind, p_target_node=p_target_node,
        p_draft_node=p_draft_node, accept_prob=h, uniforms=uniforms, tested=[True] * k,
        accepted=[i < tau for i in range(k)], next_p_target=float(p_target[tau, next_token]),
        rejected_node=tau if tau < k else None, next_distribution=distribution,
    )


@dataclass
class VerifyResult:
    """Outcome of verifying one block of drafted tokens (a chain).

    Attributes:
        n_accepted: length of the accepted prefix, ``0 <= n_accepted <= K``.
        next_token: the token emitted after the accepted prefix: resampled from the residual at
            the first rejection, or the bonus token from the target when all K were accepted.
        next_kind: ``"resampled"`` or ``"bonus"``.
        p_target_drafted: ``(K,)`` target probability of each drafted token.
        p_draft_drafted: ``(K,)`` draft probability of each drafted token.
        accept_prob: ``(K,)`` ``min(1, p_target/p_draft)`` per drafted token.
        uniforms: ``(K,)`` the uniform draw each acceptance test used.
        next_p_target: target probability of ``next_token`` at its position (before any residual).
    """

    n_accepted: int
    next_token: int
    next_kind: str
    p_target_drafted: torch.Tensor
    p_draft_drafted: torch.Tensor
    accept_prob: torch.Tensor
    uniforms: torch.Tensor
    next_p_target: float


def verify(
    draft_tokens: torch.Tensor,
    p_draft: torch.Tensor,
    p_target: torch.Tensor,
    generator: torch.Generator | None,
    rule: str = "full",
) -> VerifyResult:
    """The verify step of speculative sampling for one block of K drafted tokens (a chain).

    Token ``i`` is accepted with probability ``min(1, p_target_i(x_i) / p_draft_i(x_i))``; at the
    first rejection a token is drawn from the residual distribution at that position and the rest
    of the block is discarded; if all K are accepted the bonus token is drawn from
    ``p_target[K]``. Chen et al. 2023, Algorithm 2; Leviathan et al. 2023, Algorithm 1.

    This is :func:`verify_tree` on the tree with one branch (parents ``-1, 0, 1, …``): the same
    code, the same random draws (K uniforms up front, then one sample).

    Args:
        draft_tokens: ``(K,)`` int64 drafted token ids, ``K >= 0``.
        p_draft: ``(K, V)`` the exact distributions the draft tokens were sampled from (a one-hot
            row for a point-mass drafter such as prompt lookup).
        p_target: ``(K + 1, V)`` target distributions at the K drafted positions and one more
            (for the bonus token).
        generator: random source for the uniforms and the resample.
        rule: the verification rule (:data:`RULES`, :func:`verify_tree`); ``"full"`` is the rule
            above.

    Returns:
        A :class:`VerifyResult` (``accept_prob`` and ``uniforms`` as :func:`verify_tree` says
        per rule).

    Raises:
        ValueError: if the shapes disagree.
        RuleError: for an unknown rule.
    """
    k = draft_tokens.shape[0]
    if p_draft.shape[0] != k or p_target.shape[0] != k + 1 or p_draft.shape[-1] != p_target.shape[-1]:
        raise ValueError(
            f"shape mismatch: draft_tokens {tuple(draft_tokens.shape)}, p_draft {tuple(p_draft.shape)}, "
            f"p_target {tuple(p_target.shape)}; expected (K,), (K, V), (K+1, V)"
        )
    result = verify_tree(draft_tokens, list(range(-1, k - 1)), p_draft, p_target, False, generator, rule)
    return VerifyResult(
        n_accepted=result.n_accepted,
        next_token=result.next_token,
        next_kind=result.next_kind,
        p_target_drafted=result.p_target_node,
        p_draft_drafted=result.p_draft_node,
        accept_prob=result.accept_prob,
        uniforms=result.uniforms,
        next_p_target=result.next_p_target,
    )
