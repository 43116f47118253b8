"""The speculative sampling loop, and plain decoding through the same sampler.

One round of speculative sampling (Chen et al. 2023, Algorithm 2; Leviathan et al. 2023,
Algorithm 1):

1. the drafter proposes a tree of tokens (depth <= K, at most N nodes; a chain when B = 1) and
   the distributions they were drawn from (:class:`~specviz.core.drafttree.DraftTree`);
2. the target scores the pending token and every node in **one** forward pass (the verify pass):
   a tree attention mask lets each node see the committed context and its own ancestors, with
   position ids by depth (SpecInfer, Miao et al. 2024), giving N + 1 distributions;
3. :func:`specviz.core.sampling.verify_tree` accepts a path from the root, then resamples one token
   from the residual or, at a leaf, samples a bonus token, under the run's verification rule
   (:data:`specviz.core.sampling.RULES`; a rule whose draft proposes its argmax has the drafter draft
   at temperature 0, so each drafted token is a point mass);
4. both models' KV caches keep only the committed tokens and the accepted path.

A drafter that reads the target's features (``wants_features``, an EAGLE-style head) is handed
the target's last-layer hidden states of the positions its cache just kept (the prefill's, then
each round's pending tokens and accepted path) from the passes the loop runs anyway: no extra
target pass; other drafters cost nothing extra (:class:`~specviz.core.drafttree.LastLayerFeatures`).
A drafter with ``wants_top_ids = k`` (Token Recycling) is handed, after each verify pass, the
target's k most likely next tokens at every position it scored (ranked by the raw logits, which
the temperature and filters do not reorder).

Chains and trees go through the same code. A chain's tree mask is the causal mask, so its verify
pass is the plain causal call (the logits are those of the same attention; transformers builds
that mask itself) and its cache is cropped instead of index-selected.

Tree attention needs an attention that takes an arbitrary 4D mask. Sliding-window layers (Gemma 2
and 3, ``layer_types`` with ``"sliding_attention"``) and flash-attention kernels cannot, so there
a tree run falls back to chains (B = 1) and says so in :attr:`Generation.notes`.

Cache bookkeeping. Each model's cache holds the committed tokens *except the last one* (the
"pending" token, whose next-token distribution nobody has computed yet). A round feeds each model
``committed[cache_length:]`` followed by any new tokens, so a cache that lags behind (a drafter
that proposed nothing, or the draft's K-th token that was never fed) catches up in the same
forward pass, causally, before the tree's nodes. After verification the target keeps
``old committed + accepted path``.

The one exception is the prompt. The target's prefill feeds the *whole* prompt in one pass, as
transformers' ``generate()`` does, and keeps its last row: the first round takes the root's
distribution from there and feeds only its draft (nothing at all when nothing was drafted). The
first token is then computed exactly as ``generate()`` computes it; a pass of a different shape
can flip a near-tied argmax in bfloat16, and then the two runs write different texts from the
first token on. That round is marked ``Round.root_from_prefill``.

With ``cache="static"`` both caches are :class:`~specviz.core.kvcache.PaddedStaticCache` s: the same
bookkeeping, but every pass after the prefill has one shape (the target's verify pass 1 + N
positions, padded; a draft model's steps one token each), so that a CUDA graph could replay it.
Padding sits after the real positions and is cut off right after the pass: no real row changes.

Plain decoding is the same loop with no drafter: one target pass, one token, ``kind="plain"``.

The engine knows nothing about tokenization beyond an optional ``decode`` callable used to put
text into the trace.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from specviz.core.drafter import Drafter
from specviz.core.drafttree import (
    DraftTree,
    LastLayerFeatures,
    crop_cache,
    default_tree_nodes,
)
from specviz.core.generators import GeneratorPool
from specviz.core.kvcache import CACHE_KINDS, PaddedStaticCache, run_pass
from specviz.core.phaseclock import PhaseClock
from specviz.core.recorder import TOP_TOKENS, IncrementalDecoder, RoundRecorder
from specviz.core.records import EmittedToken, Round
from specviz.core.sampling import (
    SamplingConfig,
    check_rule,
    logits_to_probs,
    verify_tree,
)

__all__ = ["TOP_TOKENS", "ContextLengthError", "DraftIdError", "Generation", "IncrementalDecoder", "checked_draft_ids",
           "context_limit",
           "keep_cache_positions", "tree_attention_blocker", "tree_attention_inputs"]

#: Most children per node (B) and most nodes per tree (N) a run may ask for.
MAX_BRANCHES = 16
MAX_TREE_NODES = 256


class ContextLengthError(ValueError):
    """Raised before a run starts when prompt + new tokens would exceed a model's context."""


class DraftIdError(ValueError):
    """A drafter proposed something that is not a token id of the run's vocabulary."""


def checked_draft_ids(tokens, vocab: int, drafter) -> list[int]:
    """A draft's token ids as Python ints, checked where the draft enters the loop: each a whole
    number of an integer type (a float, a bool or a float tensor is not an id) in ``[0, vocab)``.
    An id outside would index the verify pass's rows out of range, or wrap around (−1, vLLM's
    placeholder, would read the last token's row and could be emitted).

    Raises:
        DraftIdError: naming the drafter (its ``name``), the node and the value.
    """
    name = getattr(drafter, "name", None) or type(drafter).__name__
    ids = []
    for node, token in enumerate(tokens):
        value = token.item() if torch.is_tensor(token) and token.numel() == 1 else token
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise DraftIdError(f"the drafter {name!r} proposed {value!r} at draft node {node}: a token id is a whole "
                               "number of an integer type")
        if not 0 <= value < vocab:
            raise DraftIdError(f"the drafter {name!r} proposed token id {value} at draft node {node}, outside the "
                               f"vocabulary [0, {vocab})")
        ids.append(int(value))
    return ids


def context_limit(model) -> int | None:
    """A model's maximum number of positions (tokens), or None if its config does not say."""
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(getattr(config, "text_config", config), name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def tree_attention_blocker(model) -> str | None:
    """Why ``model`` cannot verify a tree in one pass, or None when it can.

    A tree needs an attention that takes an arbitrary 4D additive mask. Sliding-window layers
    build their own windowed mask (Gemma 2/3, Mistral-style ``layer_types``), and flash-attention
    kernels take no mask at all.
    """
    config = getattr(model.config, "text_config", None) or model.config
    layer_types = getattr(config, "layer_types", None) or []
    if any("sliding" in str(t) for t in layer_types) or config.model_type in ("gemma2", "gemma3", "gemma3_text"):
        return f"{config.model_type} has sliding-window attention layers"
    implementation = str(getattr(model.config, "_attn_implementation", "") or "")
    if "flash" in implementation:
        return f"the {implementation} attention takes no tree mask"
    return None


def tree_attention_inputs(
    parents: list[int], cached: int, pending: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention mask and position ids of a verify pass over ``pending`` committed tokens and
    a tree (SpecInfer's tree attention, Miao et al. 2024, Section 4).

    The pending tokens attend causally; node ``i`` attends to the cached context, the pending
    tokens and its own ancestors and itself, and sits at position ``cached + pending + depth − 1``
    (its depth's position in a chain).

    Args:
        parents: the tree's parent indices (``-1`` = the context), parents first, N nodes.
        cached: positions already in the KV cache.
        pending: committed tokens fed before the nodes (0 when the cache holds them all: the
            first round, whose root the prefill scored).
        dtype: the model's dtype (the mask is added to its attention scores).
        device: the model's device.

    Returns:
        ``(mask, position_ids)``: mask ``(1, 1, pending + N, cached + pending + N)``, 0 where
        attention is allowed and ``dtype``'s minimum where it is blocked; position ids
        ``(1, pending + N)`` int64.
    """
    n = len(parents)
    q_len = pending + n
    allowed = torch.zeros(q_len, cached + q_len, dtype=torch.bool)
    allowed[:, :cached] = True
    allowed[:pending, cached : cached + pending] = torch.ones(pending, pending, dtype=torch.bool).tril()
    allowed[pending:, cached : cached + pending] = True
    ancestors = torch.zeros(n, n, dtype=torch.bool)
    depths = []
    for i, parent in enumerate(parents):
        if parent >= 0:
            ancestors[i] = ancestors[parent]
        ancestors[i, i] = True
        depths.append(1 if parent < 0 else depths[parent] + 1)
    allowed[pending:, cached + pending :] = ancestors
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    positions = list(range(cached, cached + pending)) + [cached + pending - 1 + d for d in depths]
    return mask.view(1, 1, *allowed.shape).to(device), torch.tensor([positions], dtype=torch.long, device=device)


def keep_cache_positions(cache, keep: torch.Tensor) -> None:
    """Keep only the positions ``keep`` of every layer of a DynamicCache, in that order.

    Each ``cache.layers[i]`` holds ``.keys``/``.values`` of shape (batch, kv_heads, seq, head_dim)
    (transformers 5); the kept path is an index-select along dim 2, after which the layer's length
    (``get_seq_length``) follows the tensors.

    Args:
        cache: a transformers ``DynamicCache``.
        keep: ``(L,)`` int64 positions, increasing, on the cache's device.
    """
    for layer in cache.layers:
        if getattr(layer, "is_initialized", True) and layer.keys is not None and layer.keys.numel():
            layer.keys = layer.keys.index_select(2, keep)
            layer.values = layer.values.index_select(2, keep)


@dataclass
class Generation:
    """One generation run, speculative or plain; iterate it to run it round by round.

    Args:
        target: the target causal LM (transformers model, eval mode).
        prompt_ids: the prompt's token ids (chat template and BOS already applied), non-empty.
        drafter: a :class:`~specviz.core.drafter.Drafter`, or None for plain decoding.
        k: lookahead K, the most tokens drafted per round (>= 1 when a drafter is given).
        sampling: sampling settings, applied to draft and target alike.
        max_new_tokens: tokens to emit at most (>= 1).
        seed: seed of the run's random generators, one per device (:class:`~specviz.core.generators.GeneratorPool`):
            the target's verifies, and a drafter on another device (its ``device`` attribute)
            draws from its own.
        eos_token_ids: ids that end the run when emitted (the EOS is kept as the last token).
        vocab_size: shared real vocabulary width; both models' logits are cut to it so a padded
            lm_head never yields an id the tokenizer lacks. Defaults to the target's logits width.
        decode: optional ``list[int] -> str`` for per-token text in the trace.
        label: optional ``int -> str``, the text of one token standing alone (drafted nodes,
            top-token rows), e.g. :class:`specviz.figures.trace.TokenPieces`; default ``decode([id])``.
        instrument: record per-token probabilities and uniforms in the trace (the UI needs them;
            the benchmark measures their cost by turning them off).
        branches: B, the most children a draft node may have; 1 (the default) drafts chains.
        tree_nodes: N, the most nodes of a draft tree (>= K; default
            :func:`specviz.core.drafttree.default_tree_nodes`, 2·K); ignored for chains.
        cache: the KV cache kind (:data:`specviz.core.kvcache.CACHE_KINDS`): ``"dynamic"`` (the
            default), or ``"static"``: fixed-shape passes (:class:`~specviz.core.kvcache.PaddedStaticCache`)
            for the target (every verify pass 1 + N positions wide) and a draft model (one
            token per pass), which a CUDA graph can replay; their outputs equal the dynamic
            path's. Where a model's attention takes no arbitrary mask the run stays dynamic and
            says so in :attr:`notes`.
        rule: the verification rule, a name of :data:`specviz.core.sampling.RULES` (default
            ``"full"``). For a rule whose draft proposes its argmax (``"one-hot"``,
            ``"exact-match"``) the drafter drafts with temperature 0 and the run's top-k/top-p,
            so ``p_draft`` rows are one-hot; the target keeps the run's sampling. ``"block"``
            verifies chains only.

    Every phase boundary is read through one :class:`~specviz.core.phaseclock.PhaseClock`, which
    synchronises the devices first, so ``prefill_ms`` and each round's ``draft_ms``,
    ``verify_ms`` and ``other_ms`` are the work's time on a GPU too, not its launch time.

    :attr:`notes` lists plain sentences about the run the UI should show (e.g. a tree run that
    fell back to chains because the target's attention cannot take a tree mask).

    Iterating yields one :class:`~specviz.core.records.Round` per target pass. Afterwards
    :attr:`tokens` and :attr:`finish_reason` describe the run (its figures:
    :func:`specviz.figures.analysis.analyse_generation`); if iteration
    stopped early (an error, or the user pressed Stop) they describe what was produced so far. A
    Generation runs once: iterating it a second time raises :class:`RuntimeError`.

    Raises (while iterating):
        ContextLengthError: before any model call, if prompt + max_new_tokens exceeds a
            model's context length.
        specviz.core.sampling.NonFiniteLogitsError: if a model produces NaN/+inf logits.
        DraftIdError: if the drafter proposes an id outside the vocabulary (:func:`checked_draft_ids`).
        ValueError: for an empty prompt or out-of-range K / max_new_tokens.
        specviz.core.sampling.RuleError: for an unknown rule, or a chain-only rule with B > 1.
    """

    target: object
    prompt_ids: list[int]
    drafter: Drafter | None = None
    k: int = 4
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = 64
    seed: int = 0
    eos_token_ids: tuple[int, ...] = ()
    vocab_size: int | None = None
    decode: Callable[[list[int]], str] | None = None
    label: Callable[[int], str] | None = None
    instrument: bool = True
    branches: int = 1
    tree_nodes: int | None = None
    cache: str = "dynamic"
    rule: str = "full"

    def __post_init__(self) -> None:
        self.notes: list[str] = []
        self.rounds: list[Round] = []
        self.tokens: list[EmittedToken] = []
        self.finish_reason: str | None = None
        self.wall_s = 0.0
        self.prefill_ms = 0.0
        self._clock: PhaseClock | None = None
        self._started = False

    # ----------------------------------------------------------------- public summaries
    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    @property
    def token_ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    @property
    def elapsed_s(self) -> float:
        """Generation wall time so far (s): prefill and rounds, not the consumer's pauses."""
        if self.finish_reason is None and self._clock is not None and self._clock.started:
            return self._clock.elapsed_s()
        return self.wall_s

    @property
    def tokens_per_s(self) -> float:
        """Emitted tokens ÷ :attr:`elapsed_s` (tokens/s), 0 before any time has passed."""
        elapsed = self.elapsed_s
        return len(self.tokens) / elapsed if elapsed > 0 else 0.0

    # ----------------------------------------------------------------- the loop
    def _check(self) -> None:
        if not self.prompt_ids:
            raise ValueError("the prompt is empty: give at least one token")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.drafter is not None and not 1 <= self.k <= 64:
            raise ValueError(f"lookahead K must be between 1 and 64, got {self.k}")
        if not 1 <= self.branches <= MAX_BRANCHES:
            raise ValueError(f"branches B must be between 1 and {MAX_BRANCHES}, got {self.branches}")
        if self.tree_nodes is not None and not self.k <= self.tree_nodes <= MAX_TREE_NODES:
            raise ValueError(f"tree nodes N must be between K = {self.k} and {MAX_TREE_NODES}, got {self.tree_nodes}")
        check_rule(self.rule, tree=self.drafter is not None and self.branches > 1)
        if self.cache not in CACHE_KINDS:
            raise ValueError(f"the KV cache must be one of {', '.join(CACHE_KINDS)}, got {self.cache!r}")
        # The longest forward pass covers the prompt and max_new_tokens - 1 new tokens (drafts are
        # capped by the remaining budget); one more position keeps the check simple and safe.
        needed = len(self.prompt_ids) + self.max_new_tokens
        models = [("target", self.target)]
        if self.drafter is not None and getattr(self.drafter, "model", None) is not None:
            models.append(("draft", self.drafter.model))
        for role, model in models:
            limit = context_limit(model)
            if limit is not None and needed > limit:
                raise ContextLengthError(
                    f"prompt ({len(self.prompt_ids)} tokens) + max new tokens ({self.max_new_tokens})"
                    + f" = {needed} exceeds the {role} model's context length of {limit} tokens"
                )

    def __iter__(self) -> Iterator[Round]:
        if self._started:
            raise RuntimeError("a Generation runs once: make a new one to run again")
        self._started = True
        self._check()
        self._setup()
        self._clock.start()
        self._prefill()
        self.prefill_ms = self._clock.elapsed_s() * 1e3  # a synchronised reading closes the prefill
        while self.finish_reason is None:
            round_ = self._round()
            if self.finish_reason is not None:
                self.wall_s = round_.elapsed_s
                finish = getattr(self.drafter, "finish", None)
                if finish is not None:  # e.g. the suffix drafter learns this output
                    finish(list(self.prompt_ids), self.token_ids)
            # Time spent by the consumer between rounds (rendering, charts, streaming) is not
            # generation time: leave it out so the UI's work never counts against the run.
            self._clock.pause()
            yield round_
            self._clock.resume()

    def _setup(self) -> None:
        self._device = next(self.target.parameters()).device
        self._vocab = self.vocab_size or self.target.get_output_embeddings().weight.shape[0]
        self._generators = GeneratorPool(self.seed)
        self._generator = self._generators.get(self._device)  # the verify walk's
        drafter_device = getattr(self.drafter, "device", None) or self._device
        self._draft_generator = self._generators.get(drafter_device)
        s = self.sampling
        argmax = check_rule(self.rule).proposes == "argmax"
        self._draft_sampling = SamplingConfig(0.0, s.top_k, s.top_p) if argmax else s
        self._clock = PhaseClock([self._device, drafter_device])
        self._recorder = RoundRecorder(self.decode, self.instrument, self.eos_token_ids, self.label)
        self._committed = list(self.prompt_ids)
        self._branches = self.branches if self.drafter is not None else 1
        blocker = tree_attention_blocker(self.target) if self._branches > 1 else None
        if blocker:
            self._branches = 1
            self.notes.append(f"Tree drafts need tree attention, and {blocker}: this run drafts chains (B = 1).")
        self._tree_nodes = self.tree_nodes or default_tree_nodes(self.k, self._branches)
        self._cache = self._new_caches()
        self._root_logits: torch.Tensor | None = None  # (1, V): the prefill's last row, for round 1
        wants = self.drafter is not None and getattr(self.drafter, "wants_features", False)
        self._features = LastLayerFeatures(self.target) if wants else None
        self._top_ids = int(getattr(self.drafter, "wants_top_ids", 0) or 0) if self.drafter is not None else 0
        self._fed: tuple[int, torch.Tensor] | None = None  # (pending tokens fed, their and the nodes' features)

    def _new_caches(self):
        """The target's KV cache, and the drafter told which kind to use (``set_cache``, optional)."""
        from transformers import DynamicCache

        kind = self.cache
        draft_model = getattr(self.drafter, "model", None)
        if kind == "static":
            roles = [("target", self.target)] + ([("draft", draft_model)] if draft_model is not None else [])
            blocked = [(role, why) for role, model in roles if (why := tree_attention_blocker(model))]
            if blocked:
                kind = "dynamic"
                role, why = blocked[0]
                self.notes.append(f"A static cache needs an attention that takes any mask, and the {role} model's "
                                  f"{why}: this run uses the dynamic cache.")
        # The longest the caches grow: every committed token but the last, plus one pass's width
        # (a draft: K draft tokens).
        needed = len(self.prompt_ids) + self.max_new_tokens
        set_cache = getattr(self.drafter, "set_cache", None)
        if set_cache is not None:
            set_cache(kind, needed + self.k)
        if kind == "dynamic":
            return DynamicCache()
        width = 1 + (self._tree_nodes if self.drafter is not None else 0)  # the pending token and N nodes
        return PaddedStaticCache.create(self.target, needed + width, width)

    def _target_forward(self, ids: list[int], keep: int, parents: list[int] | None = None) -> torch.Tensor:
        """Logits ``(keep, V)`` of the target's last ``keep`` positions after feeding ``ids``.

        With ``parents`` (a tree's, N nodes), the last N ids are a draft tree fed with its tree
        attention mask and position ids (:func:`tree_attention_inputs`); the ids before them are
        fed causally.
        """
        inp = torch.tensor(ids, dtype=torch.long, device=self._device)
        tree = None
        if parents is not None:
            tree = tree_attention_inputs(parents, self._cache.get_seq_length(), len(ids) - len(parents),
                                         self.target.dtype, self._device)
        with torch.inference_mode():
            if self._features is None:
                logits = run_pass(self.target, self._cache, inp, keep, tree)
            else:
                with self._features:
                    logits = run_pass(self.target, self._cache, inp, keep, tree)
                # the fed positions' features (a static pass's padding cut off); the pending count is set by _score
                self._fed = (len(ids), self._features.features[0, : len(ids)])
        return logits[:, : self._vocab]

    def _prefill(self) -> None:
        # The whole prompt, as generate() prefills it; the last row is the first round's root.
        self._root_logits = self._target_forward(self._committed, 1)
        if self.drafter is not None:
            self.drafter.prefill(self._committed[:-1])
        if self._features is not None:
            self.drafter.extend_features(self._fed[1])
            self._fed = None

    def _draft(self, k_round: int) -> DraftTree:
        if k_round > 0:
            tree = self.drafter.propose(self._committed, k_round, self._draft_sampling, self._draft_generator,
                                        branches=self._branches, max_nodes=max(self._tree_nodes, k_round))
            if isinstance(tree, tuple):  # a drafter written for the chain-only interface
                tree = DraftTree.chain(*tree)
            tree.tokens = checked_draft_ids(tree.tokens, self._vocab, self.drafter)  # once, for every drafter
            return tree
        return DraftTree.chain([], torch.empty(0, self._vocab))

    def _round(self) -> Round:
        """One round (Chen et al. 2023, Algorithm 2): draft, one verify pass, the accept walk, the
        caches; then the trace record, and the emitted tokens are committed."""
        remaining = self.max_new_tokens - len(self.tokens)
        # Never draft past the length limit: a path of K' + 1 tokens at most fills it exactly.
        k_round = min(self.k, remaining - 1) if self.drafter is not None else 0
        root_from_prefill = self._root_logits is not None
        t0 = self._clock.mark()
        # 1. Draft: up to N nodes (depth <= K') and the p_draft rows they were drawn from.
        tree = self._draft(k_round)
        t1 = self._clock.mark()
        # 2. One verify pass: p_target (N + 1, V) at the root and after every node.
        p_target = self._score(tree)
        # 3. The accept walk: an accepted path from the root, then a resampled or a bonus token.
        tokens = torch.tensor(tree.tokens, dtype=torch.long, device=self._device)
        result = verify_tree(tokens, tree.parents, tree.p_draft.to(self._device), p_target, tree.point_mass,
                             self._generator, self.rule)
        # 4. Both caches keep the committed context plus the accepted path.
        self._keep_path(len(self._committed), result.path, tree.is_chain)
        self._hand_features(result.path)
        t2 = self._clock.mark()
        round_ = self._recorder.record(len(self.rounds), tree, result, k_round, p_target)
        round_.draft_ms, round_.draft_steps = (t1 - t0) * 1e3, tree.steps
        round_.verify_ms = (t2 - t1) * 1e3
        round_.root_from_prefill = root_from_prefill
        self._commit(round_)
        t3 = self._clock.mark()
        round_.other_ms = (t3 - t2) * 1e3
        round_.elapsed_s = self._clock.elapsed_s(t3)
        return round_

    def _score(self, tree: DraftTree) -> torch.Tensor:
        """The verify pass: the target's processed distributions ``(N + 1, V)`` at the root (the
        pending token's next-token distribution) and after every node, in one forward pass over
        the pending tokens and the tree (the prefill's last row is the first round's root)."""
        pending = self._committed[self._cache.get_seq_length() :]
        parents = None if tree.is_chain else tree.parents  # a chain's tree mask is the causal mask
        root, self._root_logits = self._root_logits, None
        self._fed = None
        if root is None:
            logits = self._target_forward(pending + tree.tokens, len(tree) + 1, parents)
        elif len(tree):  # the prefill scored the root: feed the nodes only
            logits = torch.cat([root, self._target_forward(tree.tokens, len(tree), parents)])
            pending = []
        else:
            logits = root
        if self._fed is not None:
            self._fed = (len(pending), self._fed[1])
        if self._top_ids:  # Token Recycling's table learns from this very pass: no extra pass
            self.drafter.observe_top_ids([self._committed[-1], *tree.tokens],
                                         logits.topk(min(self._top_ids, logits.shape[-1]), dim=-1).indices)
        return logits_to_probs(logits, self.sampling)

    def _keep_path(self, n_old: int, path: list[int], chain: bool) -> None:
        """Roll both caches back to the ``n_old`` committed tokens plus the accepted ``path``."""
        if path == list(range(len(path))):  # a prefix of the node list (always, for a chain): crop
            crop_cache(self._cache, n_old + len(path))
        else:
            keep = list(range(n_old)) + [n_old + node for node in path]
            if isinstance(self._cache, PaddedStaticCache):
                self._cache.keep_positions(keep)  # in place: the slots a replayed graph reads stay put
            else:
                keep_cache_positions(self._cache, torch.tensor(keep, dtype=torch.long, device=self._device))
        if self.drafter is not None and chain:  # a chain's path is its prefix: the length says it all
            self.drafter.rollback(n_old + len(path))
        elif self.drafter is not None:
            self.drafter.rollback(n_old + len(path), path)

    def _hand_features(self, path: list[int]) -> None:
        """Give a feature-reading drafter the target's features ``(M, H)`` of the positions its
        cache just kept: the pending tokens fed this round, then the accepted path's nodes."""
        if self._features is None or self._fed is None:
            return  # nothing fed this round (the prefill scored the root and nothing was drafted)
        pending, features = self._fed
        self._fed = None
        rows = torch.tensor(list(range(pending)) + [pending + node for node in path], dtype=torch.long,
                            device=features.device)
        self.drafter.extend_features(features.index_select(0, rows))

    def _commit(self, round_: Round) -> None:
        """Append the round's emitted tokens and record; set finish_reason on an EOS or the length."""
        self.tokens.extend(round_.emitted)
        self._committed.extend(t.id for t in round_.emitted)
        self.rounds.append(round_)
        if round_.emitted[-1].id in self._recorder.eos:  # the recorder cut the round after it
            self.finish_reason = "eos"
        elif len(self.tokens) >= self.max_new_tokens:
            self.finish_reason = "length"

    def run(self) -> Generation:
        """Run to completion and return self."""
        for _ in self:
            pass
        return self
