"""Drafters: where the K guessed tokens come from.

Every drafter implements the same small interface (:class:`Drafter`), the seam that
transformers calls ``get_candidates``:

* :meth:`Drafter.prefill` is told the prompt once;
* :meth:`Drafter.propose` returns a :class:`DraftTree`: up to N token ids, each with its parent
  (``-1`` = the committed context), **and the exact distributions they were drawn from**
  (``p_draft``), because the accept test divides by those probabilities. A chain (one branch)
  has parents ``-1, 0, 1, …``; asked for ``branches = 1`` every drafter returns one;
* :meth:`Drafter.rollback` is told how many committed tokens are still valid after verification
  and which tree nodes were accepted, so a drafter with a KV cache can drop what was rejected;
* :meth:`Drafter.finish` is told a finished run's prompt and output (the suffix drafter learns
  from it).

Kinds:

* :class:`ModelDrafter`: any causal LM sharing the target's tokenizer, sampled with the same
  :class:`~specviz.sampling.SamplingConfig` as the target (Chen et al. 2023; Leviathan et al. 2023).
  As a tree it adds, beside its sampled chain, the draft's most likely other tokens where it is
  unsure (ranked by draft confidence, as EAGLE-2 expands, Li et al. 2024). The teaching
  self-drafts (an int8 copy of the target, the target's first N layers) are ``ModelDrafter`` s
  around models built in :mod:`specviz.models`.
* :class:`PromptLookupDrafter`: copies the tokens that followed the latest earlier occurrence of
  the context's last n-gram (Saxena 2023, "prompt lookup decoding"); as a tree, the continuations
  of up to B distinct earlier matches, longest match first, each at most twice as deep as its
  match is long, merged into a prefix tree. Deterministic, so its draft
  distribution is a point mass (a one-hot ``p_draft``) and the accept test becomes
  "accept with probability p_target(x)" — still exactly lossless.
* :class:`SuffixDrafter`: model-free, in the spirit of SuffixDecoding (Oliaro et al. 2024; vLLM's
  ``suffix`` method): the longest suffix of the context that occurs in the context or in earlier
  outputs of this process (:data:`SUFFIX_HISTORY`, emptied by :func:`clear_suffix_history`), and
  its most frequent continuations as a tree (as deep as twice the match length). Point masses too.
"""

from __future__ import annotations

import heapq
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from . import selfdraft
from .drafttree import DraftTree, crop_cache, default_tree_nodes
from .errors import IncompatiblePairError
from .offline import OFFLINE_MODELS, is_repo_id
from .sampling import SamplingConfig, logits_to_probs, sample

__all__ = ["DRAFTER_KINDS", "HISTORY_MAX_SEQUENCES", "HISTORY_MAX_TOKENS", "SESSION_HISTORY_MAX_SEQUENCES",
           "SESSION_HISTORY_MAX_TOKENS", "SUFFIX_HISTORY", "DraftTree", "Drafter", "DrafterKind", "ModelDrafter",
           "PromptLookupDrafter", "SuffixDrafter", "SuffixHistory", "clear_suffix_history", "crop_cache",
           "default_tree_nodes", "drafter_kind", "parse_drafter_spec", "prefix_tree", "shared_vocab_size",
           "spec_forms", "spec_help"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DrafterKind:
    """One kind of drafter: the one place its spec, description and construction live.

    The app's menu, ``--draft``'s help, :func:`parse_drafter_spec`, public mode's allowed
    drafters (:func:`specviz.request.check_public_models`) and
    :func:`specviz.models.build_drafter` all read :data:`DRAFTER_KINDS`; adding a drafter is
    adding one entry there.

    Attributes:
        spec: the spec string (``--draft`` on the command line) and the key in the registry.
        label: the app's menu entry.
        note: one or two sentences on what it is and when it pays off, shown beside the menu.
        form: how a spec names it, for help and error messages (``"early-exit:N (first N
            layers)"``).
        build: ``(target, spec, device, dtype, progress, load) -> Drafter | None``: the drafter
            for a :class:`~specviz.models.LoadedModel` target and a normalised spec; ``load`` is
            :func:`specviz.models.load_model` (passed in, since that module imports this one).
        needs_model: loads a model of its own (a draft checkpoint); public mode allows only the
            presets' models for such kinds.
        can_branch: drafts trees (B > 1).
        aliases: other spellings of ``spec`` (lower case), normalised to it.
        pattern: for a parametrised kind, the regular expression its specs must match (group 1
            is the parameter: a number is normalised, other text such as a path kept as written;
            an optional group left out gives the bare spec); specs starting with ``spec`` are
            checked against it.
    """

    spec: str
    label: str
    note: str
    form: str
    build: Callable[..., Drafter | None]
    needs_model: bool = False
    can_branch: bool = True
    aliases: tuple[str, ...] = ()
    pattern: str | None = None

    def normalise(self, key: str) -> str | None:
        """``key`` (stripped) as this kind's spec, or None if it is not this kind.

        Raises:
            ValueError: for a parametrised kind's spec of the wrong form.
        """
        lowered = key.lower()
        if self.pattern is None:
            return self.spec if lowered in (self.spec, *self.aliases) else None
        if not lowered.startswith(self.spec):
            return None
        match = re.fullmatch(self.pattern, key, flags=re.IGNORECASE)
        if not match:  # the parameter's range depends on the target: checked when the draft is built
            raise ValueError(f"bad drafter spec {key!r}: write {self.form}; accepted: {spec_forms()}")
        if match.group(1) is None:  # an optional parameter left out
            return self.spec
        parameter = match.group(1)
        return f"{self.spec}:{int(parameter) if parameter.isdigit() else parameter}"


def _vocab(target) -> int:
    return min(target.vocab_size, target.logits_width)


def _build_none(target, spec, device, dtype, progress, load):
    return None


def _build_ngram(target, spec, device, dtype, progress, load):
    return PromptLookupDrafter(_vocab(target))


def _build_suffix(target, spec, device, dtype, progress, load):
    return SuffixDrafter(_vocab(target))


def _build_int8(target, spec, device, dtype, progress, load):
    return ModelDrafter(selfdraft.int8_draft(target), _vocab(target), name="int8 copy of the target")


def _build_early_exit(target, spec, device, dtype, progress, load):
    n, total = int(spec.split(":")[1]), selfdraft.num_layers(target.model)
    return ModelDrafter(selfdraft.early_exit_draft(target, n), _vocab(target),
                        name=f"first {n} of {total} layers of the target")


def _build_eagle(target, spec, device, dtype, progress, load):
    from .eagle import EagleDrafter, load_head, shipped_head_dir

    directory = spec.partition(":")[2] or shipped_head_dir(target.name)
    head = load_head(directory, target.model)
    return EagleDrafter(head, _vocab(target), name=f"EAGLE head {Path(directory).name}")


def _build_lookup_eagle(target, spec, device, dtype, progress, load):
    from .eagle import LookupThenEagle

    directory = spec.partition(":")[2]
    head = _build_eagle(target, f"eagle:{directory}" if directory else "eagle", device, dtype, progress, load)
    # Trigram matches only: on free text a shorter match is usually a common word, not a copy.
    return LookupThenEagle(head, PromptLookupDrafter(_vocab(target), max_ngram=3, min_ngram=3))


def _build_model(target, spec, device, dtype, progress, load):
    if not (spec in OFFLINE_MODELS or Path(spec).expanduser().is_dir() or is_repo_id(spec)):
        raise ValueError(f"unknown drafter spec {spec!r}; accepted: {spec_forms()}: an offline name "
                         f"({', '.join(OFFLINE_MODELS)}), a local directory or a hub id 'org/name'")
    draft = load(spec, device=device, dtype=dtype, progress=progress)
    if draft.model is target.model:
        logger.warning("draft %r is the target itself: every token will be accepted, nothing is saved", spec)
    return ModelDrafter(draft.model, shared_vocab_size(target, draft), name=f"draft model {spec}")


#: Every kind of drafter, in menu order: the one place their descriptions and builders live.
DRAFTER_KINDS: dict[str, DrafterKind] = {k.spec: k for k in (
    DrafterKind("ngram", "Prompt lookup (n-gram match in the context)",
                "Copies what followed the last earlier occurrence of the current few tokens in the prompt or "
                "output. Costs almost nothing and is exactly lossless: on copy-heavy prompts (fix typos, CSV → "
                "JSON) it is the drafter that pays off on a CPU (measured on 2 cores, typo prompt: 2.5–3.1× alone, "
                "about 1.4× with a browser drawing the page on the same cores); on free text it pays only where "
                "the model repeats itself.",
                "ngram (prompt lookup)", _build_ngram, aliases=("prompt-lookup",)),
    DrafterKind("suffix", "Suffix lookup (context and earlier outputs)",
                "Looks the current suffix up in the prompt, the output so far and earlier outputs of this process, "
                "and proposes the most frequent continuations (SuffixDecoding). Model-free and exactly lossless "
                "like prompt lookup; it pays off when requests repeat themselves (agents, templated answers).",
                "suffix (suffix lookup in the context and earlier outputs of this process)", _build_suffix,
                aliases=("suffix-decoding",)),
    DrafterKind("model", "Draft model (give its id below)",
                "A smaller language model with exactly the target's tokenizer (offline name, local directory or "
                "hub id; different tokenizers are refused). Pays off on a GPU with a big target (e.g. 135M → "
                "1.7B); on a CPU a draft is rarely cheap enough relative to a 135M target.",
                "a draft model (offline name, directory or hub id) sharing the target's tokenizer", _build_model,
                needs_model=True),
    DrafterKind("int8", "Self-draft: int8 copy of the target (teaching)",
                "The target itself, quantized to int8 (CPU only). It agrees with the target often (α ≈ 0.5–0.9) "
                "but costs 50–100% of a target step, so it shows a high α *without* a speedup: the 'good draft, "
                "too expensive' case.",
                "int8 (quantized copy of the target)", _build_int8),
    DrafterKind("early-exit", "Self-draft: first N layers of the target (teaching)",
                "The target's first N layers feeding its final norm and output head, sharing its weights, with no "
                "training: it almost never agrees with the target (α ≈ 0). The 'poorly aligned draft' case: "
                "nearly every pass is wasted.",
                "early-exit:N (first N layers)", _build_early_exit, pattern=r"early-exit:(\d+)"),
    DrafterKind("eagle", "Learned head on the target's features (EAGLE)",
                "A one-layer head trained on the target's own answers that reads the target's last hidden "
                "state (EAGLE): a draft for free text where lookup finds nothing; exactly lossless, since the "
                "head reports the distribution it samples from, so its drafts carry fractional acceptance "
                "probabilities. The one shipped for SmolLM2-135M costs c ≈ 0.08 but agrees with the target "
                "on only 0.2–0.45 of tokens (measured on 2 cores: 1.29× on a story at T = 1, about 1× at "
                "T = 0). Train one with python -m specviz train-draft.",
                "eagle[:DIR] (a learned head on the target's features: the shipped one, or a head directory)",
                _build_eagle, needs_model=True, pattern=r"eagle(?::(.+))?"),
    DrafterKind("lookup+eagle", "Prompt lookup, else the learned head",
                "Copies from the context where a trigram of it repeats (prompt lookup), and lets the learned "
                "head (EAGLE) draft everywhere else: the copy machine for copy-heavy text, the head for free "
                "text. Exactly lossless: each round is tested against the distribution of whichever drafted it.",
                "lookup+eagle[:DIR] (prompt lookup, else the learned head: the shipped one, or a head directory)",
                _build_lookup_eagle, needs_model=True, pattern=r"lookup\+eagle(?::(.+))?"),
    DrafterKind("none", "None: plain decoding of the target",
                "No drafting: the target decodes one token per forward pass, the baseline every speedup is "
                "measured against.",
                "none (plain decoding)", _build_none, can_branch=False, aliases=("",)),
)}

#: The kind a spec naming none of the others is: a draft model.
_MODEL_KIND = "model"


def spec_forms() -> str:
    """The accepted drafter specs in one line, in registry order, the draft model last."""
    named = [k.form.split(" (")[0] for k in DRAFTER_KINDS.values() if k.spec != _MODEL_KIND]
    order = sorted(named, key=lambda form: form != "none")  # none first, as users look for it
    return ", ".join(order) + ", or " + DRAFTER_KINDS[_MODEL_KIND].form


def spec_help() -> str:
    """``--draft``'s help: every kind's form and what it is."""
    return ", ".join(k.form for k in DRAFTER_KINDS.values())


def drafter_kind(spec: str) -> DrafterKind:
    """The kind of a normalised spec (:func:`parse_drafter_spec`): the draft model for any name."""
    for kind in DRAFTER_KINDS.values():
        if kind.spec != _MODEL_KIND and (spec == kind.spec or (kind.pattern and spec.startswith(kind.spec + ":"))):
            return kind
    return DRAFTER_KINDS[_MODEL_KIND]


def parse_drafter_spec(spec: str) -> str:
    """Normalise a drafter spec by :data:`DRAFTER_KINDS`: a kind's spec or alias → its spec
    (``""`` → ``"none"``, ``"prompt-lookup"`` → ``"ngram"``), a parametrised form checked and
    normalised (``"early-exit:03"`` → ``"early-exit:3"``); anything else is a draft model name,
    kept stripped (whether it exists is found out when it loads).

    Raises:
        ValueError: for a non-string, a parametrised kind's spec of the wrong form
            (``early-exit`` without a layer count), or the menu's ``"model"`` entry with no model
            named.
    """
    if not isinstance(spec, str):
        raise ValueError(f"the drafter spec must be text; accepted: {spec_forms()}")
    key = spec.strip()
    if key.lower() == _MODEL_KIND:
        raise ValueError("choose a draft model: give its hub id or local directory, or pick another drafter")
    for kind in DRAFTER_KINDS.values():
        if kind.spec != _MODEL_KIND:
            normalised = kind.normalise(key)
            if normalised is not None:
                return normalised
    return key


def shared_vocab_size(target, draft) -> int:
    """Check that ``draft`` can draft for ``target`` and return the vocabulary width they share.

    The tokenizers must agree: every token of the smaller tokenizer must have the same id in the
    larger one, and the BOS and EOS ids must be equal where both define them. The shared width is
    ``min(len(target tokenizer), len(draft tokenizer), target logits width, draft logits width)``,
    so lm_heads padded to different widths (e.g. 49152 vs 49280) pair fine: the padding columns
    are cut off before any probability is computed.

    Returns:
        The shared width (number of token ids), to pass as ``vocab_size`` to the engine and the
        :class:`~specviz.drafters.ModelDrafter`.

    Raises:
        IncompatiblePairError: if the tokenizers differ; the message names both models, their
            vocabulary sizes and one differing token.
    """
    t_vocab, d_vocab = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    label = (f"target {target.name!r} (vocab {len(target.tokenizer)}) and draft {draft.name!r} "
             f"(vocab {len(draft.tokenizer)})")
    small, big, small_name, big_name = ((t_vocab, d_vocab, target.name, draft.name)
                                        if len(t_vocab) <= len(d_vocab) else
                                        (d_vocab, t_vocab, draft.name, target.name))
    for token, index in small.items():
        other = big.get(token)
        if other != index:
            where = f"id {other} in {big_name!r}" if other is not None else f"missing from {big_name!r}"
            raise IncompatiblePairError(
                f"{label} use different tokenizers: token {token!r} is id {index} in {small_name!r} "
                f"but {where}; a draft must share the target's tokenizer"
            )
    for attr in ("bos_token_id", "eos_token_id"):
        a, b = getattr(target.tokenizer, attr, None), getattr(draft.tokenizer, attr, None)
        if a is not None and b is not None and a != b:
            raise IncompatiblePairError(f"{label} disagree on {attr}: {a} vs {b}")
    return min(len(target.tokenizer), len(draft.tokenizer), target.logits_width, draft.logits_width)


def prefix_tree(sequences: list[list[int]], max_nodes: int) -> tuple[list[int], list[int]]:
    """Merge token sequences into a prefix tree (a trie), in the order given, within a node budget.

    Shared prefixes become shared nodes, so no parent gets two children with the same token (the
    verify walk would certainly reject the second). Sequences are inserted in priority order; the
    one that reaches the budget is cut there, and later ones are left out.

    Args:
        sequences: token sequences, highest priority first.
        max_nodes: most nodes in the tree (N).

    Returns:
        ``(tokens, parents)``, parents first (``-1`` = the context).
    """
    tokens: list[int] = []
    parents: list[int] = []
    child_of: dict[tuple[int, int], int] = {}
    for sequence in sequences:
        node = -1
        for token in sequence:
            existing = child_of.get((node, token))
            if existing is None:
                if len(tokens) >= max_nodes:
                    return tokens, parents
                existing = len(tokens)
                tokens.append(token)
                parents.append(node)
                child_of[(node, token)] = existing
            node = existing
    return tokens, parents


class Drafter(Protocol):
    """What the speculative loop needs from a source of draft tokens.

    Optional: a drafter with ``wants_features = True`` also has ``extend_features(features)``,
    called with ``(M, H)``, the target's last-layer hidden states (before the final norm) of the
    ``M`` positions the target's cache just gained: the whole prompt after the prefill, then each
    round's pending tokens and accepted path, in position order. They come from the passes the
    loop runs anyway (no extra target pass); drafters without the attribute cost nothing extra.
    """

    #: short label shown in the UI and the CLI output
    name: str
    #: True when the drafter runs a neural network (its step time enters the cost ratio c)
    uses_model: bool

    def prefill(self, context: list[int]) -> None:
        """Process the prompt (all of it but the last token, which the first round feeds)."""

    def propose(
        self, committed: list[int], k: int, sampling: SamplingConfig, generator: torch.Generator | None,
        branches: int = 1, max_nodes: int | None = None,
    ) -> DraftTree:
        """Draft a tree of depth ``<= k`` after ``committed``.

        Args:
            committed: the committed tokens (prompt and output so far).
            k: the deepest a node may be (K).
            sampling, generator: the run's sampling settings and random source.
            branches: B, the most children a node may have; 1 asks for a chain (parents
                ``-1, 0, 1, …``), which every drafter must honour.
            max_nodes: N, the most nodes (default :func:`default_tree_nodes`); ignored for a chain.

        Returns:
            A :class:`DraftTree` (``p_draft`` rows ``(N, V)`` float32, the distribution each token
            was drawn from; ``steps`` the forward passes spent).
        """

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        """Forget everything past the first ``valid`` committed tokens; ``path`` lists the
        accepted nodes of the last proposal (None: a chain prefix)."""

    def finish(self, prompt: list[int], output: list[int]) -> None:
        """A run with this drafter finished with ``output`` after ``prompt`` (optional)."""


class ModelDrafter:
    """A draft language model with its own KV cache.

    Args:
        model: a transformers causal LM (already on its device, in eval mode).
        vocab_size: width of the shared real vocabulary; logits are cut to this many columns
            so draft and target distributions live on the same ids (padded widths differ).
        name: label for the UI.
    """

    uses_model = True

    def __init__(self, model, vocab_size: int, name: str = "draft model") -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.name = name
        self.device = next(model.parameters()).device
        self.cache = None

    def _new_cache(self):
        from transformers import DynamicCache

        return DynamicCache()

    @torch.inference_mode()
    def _forward(self, ids: list[int] | torch.Tensor, keep: int) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor):
            ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(input_ids=ids.view(1, -1), cache=self.cache, use_cache=True, logits_to_keep=keep)
        return out.logits[0, :, : self.vocab_size]

    def prefill(self, context: list[int]) -> None:
        self.cache = self._new_cache()
        if context:
            self._forward(context, 1)

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None) -> DraftTree:
        """A sampled chain of ``k`` tokens (the spine), plus, as a tree, other likely tokens.

        The spine is the chain drafter's: each token sampled from the draft's distribution given
        the tokens before it, one forward pass per token. With ``branches > 1`` each spine
        position also offers up to ``branches − 1`` of the draft's most likely *other* tokens as
        siblings of its spine token (leaves: they cost no draft pass), the best by draft
        confidence (the chance the path reaches them times their draft probability, EAGLE-2's
        ranking, Li et al. 2024) within the node budget ``max_nodes − k``. Those siblings are
        chosen from the probabilities, not sampled, so they are point masses; tested after the
        spine token, exact by :func:`specviz.sampling.verify_tree`. At T = 0 the ranking uses the
        softmax of the raw logits (the processed distribution is one-hot there).
        """
        if k <= 0:
            return DraftTree.chain([], torch.empty(0, self.vocab_size, device=self.device))
        pending = committed[self.cache.get_seq_length() :]
        tokens: list[torch.Tensor] = []
        rows: list[torch.Tensor] = []
        ranked: list[torch.Tensor] = []
        step_input: list[int] | torch.Tensor = pending
        for _ in range(k):
            logits = self._forward(step_input, 1)[-1]
            p_draft = logits_to_probs(logits, sampling)
            token = sample(p_draft, generator)
            tokens.append(token)
            rows.append(p_draft)
            if branches > 1:
                ranked.append(torch.softmax(logits.float(), dim=-1) if sampling.greedy else p_draft)
            # Stay on the device: the next step's input is the sampled tensor itself.
            step_input = token.view(1)
        spine = torch.stack(tokens).tolist()
        tree = DraftTree.chain(spine, torch.stack(rows), k)
        if branches > 1:
            budget = (max_nodes or default_tree_nodes(k, branches)) - k
            tree = _add_siblings(tree, torch.stack(ranked), branches, budget)
        return tree

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        # The cache holds only spine tokens: keep the leading accepted nodes that are spine nodes.
        if path is not None:
            on_spine = next((i for i, node in enumerate(path) if node != i), len(path))
            valid -= len(path) - on_spine
        crop_cache(self.cache, valid)

    def finish(self, prompt: list[int], output: list[int]) -> None:
        pass


def _add_siblings(spine: DraftTree, ranked: torch.Tensor, branches: int, budget: int) -> DraftTree:
    """The spine plus the best ``budget`` other tokens as siblings of its nodes (point masses).

    Args:
        spine: the sampled chain, ``k`` nodes.
        ranked: ``(k, V)`` the draft's confidence in each token at each spine position.
        branches: B, the most children per node (spine token included).
        budget: most siblings to add (nodes).
    """
    k = len(spine)
    if budget <= 0 or k == 0:
        return spine
    top_p, top_ids = ranked.topk(min(branches, ranked.shape[-1]), dim=-1)
    top_p, top_ids = top_p.tolist(), top_ids.tolist()
    spine_p = ranked.gather(1, torch.tensor(spine.tokens, device=ranked.device).view(k, 1)).squeeze(1).tolist()
    candidates = []  # (score, depth, token): score = P(reaching the parent) · q(token)
    reach = 1.0
    for depth in range(k):
        others = [(p, t) for p, t in zip(top_p[depth], top_ids[depth]) if t != spine.tokens[depth]]
        candidates += [(reach * p, depth, t) for p, t in others[: branches - 1] if p > 0]
        reach *= spine_p[depth]
    chosen = sorted(heapq.nlargest(budget, candidates), key=lambda c: (c[1], -c[0]))
    tokens = spine.tokens + [t for _, _, t in chosen]
    parents = spine.parents + [depth - 1 for _, depth, _ in chosen]
    index = torch.tensor([t for _, _, t in chosen], dtype=torch.long, device=spine.p_draft.device)
    one_hot = torch.nn.functional.one_hot(index, spine.p_draft.shape[-1]).to(spine.p_draft.dtype)
    return DraftTree(tokens, parents, torch.cat([spine.p_draft, one_hot]), spine.steps,
                     spine.point_mass + [True] * len(chosen))


class PromptLookupDrafter:
    """Prompt lookup decoding: propose the continuation of an earlier match of the last n-gram.

    As a chain (``branches = 1``, the classic method, Saxena 2023, and what transformers'
    ``prompt_lookup_num_tokens`` does): for n from ``max_ngram`` down to ``min_ngram``, the last n
    committed tokens are searched for earlier in the context (most recent occurrence first); the
    up-to-K tokens that followed it are proposed. With no match nothing is proposed and the round
    is a plain target step.

    As a tree (``branches = B > 1``): every earlier position whose preceding tokens match the
    context's end contributes a branch; matches are ranked by how long the match is (up to
    ``max_match`` tokens, longest first, then most recent), and each branch is cut to
    ``depth_factor × match length`` tokens (at most K). That cut is SuffixDecoding's rule (Oliaro
    et al. 2024; vLLM's ``suffix_decoding_max_spec_factor``): a long match is evidence that the text
    is being copied, so it earns a deep branch, while a one-token match earns a short one. The
    first B distinct branches are merged into a prefix tree (:func:`prefix_tree`) within the node
    budget. Replaying the bench prompts (BENCHMARKS.md, "Tree speculation") this rule used fewer
    nodes per pass than the chain and accepted more tokens per pass; without it (every branch K
    deep) the tree used twice the chain's nodes and lost on free text.

    The proposal is a deterministic function of the context, so ``p_draft`` is one-hot: the
    acceptance probability is ``p_target(x)`` and the residual is ``p_target`` with ``x`` removed.

    Args:
        vocab_size: width of the probability rows to return.
        max_ngram: longest n-gram to match in chain mode (tokens).
        min_ngram: shortest n-gram (chain) or match (tree) to use (tokens).
        max_match: longest match measured in tree mode (tokens).
        depth_factor: a tree branch is at most ``depth_factor × match length`` tokens deep.
    """

    uses_model = False

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1, max_match: int = 16,
                 depth_factor: float = 2.0) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        if max_match < min_ngram or depth_factor <= 0:
            raise ValueError(f"need max_match >= min_ngram and depth_factor > 0, got {max_match}, {depth_factor}")
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.max_match = max_match
        self.depth_factor = depth_factor
        self.name = "prompt lookup (n-gram)"
        self.device = torch.device("cpu")

    def lookup(self, committed: list[int], k: int) -> list[int]:
        """The up-to-``k`` tokens that followed the most recent earlier match of the last n-gram
        (the longest n-gram that occurs, ``max_ngram`` at most)."""
        n_tokens = len(committed)
        for n in range(min(self.max_ngram, n_tokens - 1), self.min_ngram - 1, -1):
            suffix = committed[n_tokens - n :]
            # Most recent match first: in copy-heavy prompts it is the one being copied.
            for start in range(n_tokens - n - 1, -1, -1):
                if committed[start : start + n] == suffix:
                    return committed[start + n : start + n + k]
        return []

    def branches(self, committed: list[int], k: int, matches: int) -> list[list[int]]:
        """Up to ``matches`` distinct tree branches: the continuations of earlier matches of the
        context's end, longest match first (then most recent), each cut to
        ``depth_factor × match length`` tokens (at most ``k``).

        A branch that is a prefix of one already taken adds nothing to a tree and is skipped.
        """
        ranked = [m for m in _context_matches(committed, self.max_match) if m[0] >= self.min_ngram]
        ranked.sort(key=lambda m: -m[0])  # stable: longest first, the most recent among equals
        found: list[list[int]] = []
        for length, end in ranked:
            branch = committed[end : end + _branch_depth(self.depth_factor, length, k)]
            if not any(f[: len(branch)] == branch for f in found):
                found.append(branch)
                if len(found) >= matches:
                    break
        return found

    def prefill(self, context: list[int]) -> None:
        pass

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None) -> DraftTree:
        if k <= 0:
            return DraftTree.point_masses([], [], self.vocab_size)
        if branches <= 1:
            tokens = self.lookup(committed, k)
            return DraftTree.point_masses(tokens, list(range(-1, len(tokens) - 1)), self.vocab_size)
        tokens, parents = prefix_tree(self.branches(committed, k, branches),
                                      max_nodes or default_tree_nodes(k, branches))
        return DraftTree.point_masses(tokens, parents, self.vocab_size)

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        pass

    def finish(self, prompt: list[int], output: list[int]) -> None:
        pass


#: Caps of a :class:`SuffixHistory`: the process-wide one (the CLI, the bench) and one visitor's
#: own (a few runs' outputs: its index costs about 100 bytes a token, per visitor).
HISTORY_MAX_TOKENS = 200_000
HISTORY_MAX_SEQUENCES = 256
SESSION_HISTORY_MAX_TOKENS = 16_384
SESSION_HISTORY_MAX_SEQUENCES = 32


class SuffixHistory:
    """Earlier outputs (token ids) searched by :class:`SuffixDrafter`: the process's (the CLI's,
    the bench's) or one visitor's own, so one visitor's text is never drafted for another.

    Each token's occurrences are indexed when an output is added, so a lookup visits only the
    positions that follow the current last token, not the whole history. Bounded in memory: at
    most ``max_sequences`` outputs and ``max_tokens`` tokens, the oldest outputs dropped first (an
    output longer than ``max_tokens`` keeps its last ``max_tokens`` tokens). Small and plain, so
    it can live in per-session state: :meth:`to_list` / :meth:`from_list`, and ``copy.deepcopy``
    (which copies the outputs and rebuilds the index).

    Args:
        max_tokens: keep at most this many tokens (>= 1).
        max_sequences: keep at most this many outputs (>= 1).

    Raises:
        ValueError: if a cap is < 1.
    """

    def __init__(self, max_tokens: int = HISTORY_MAX_TOKENS, max_sequences: int = HISTORY_MAX_SEQUENCES) -> None:
        if max_tokens < 1 or max_sequences < 1:
            raise ValueError(f"need max_tokens >= 1 and max_sequences >= 1, got {max_tokens}, {max_sequences}")
        self.max_tokens = max_tokens
        self.max_sequences = max_sequences
        self.sequences: list[list[int]] = []
        self._ends: dict[int, list[tuple[int, int]]] = {}  # token → (sequence, index after it)
        self._n_tokens = 0

    def add(self, tokens: list[int]) -> None:
        """Remember one output (token ids), dropping the oldest outputs past the caps."""
        tokens = [int(t) for t in tokens][-self.max_tokens:]
        if not tokens:
            return
        self.sequences.append(tokens)
        self._n_tokens += len(tokens)
        dropped = False
        while len(self.sequences) > 1 and (self._n_tokens > self.max_tokens
                                           or len(self.sequences) > self.max_sequences):
            self._n_tokens -= len(self.sequences.pop(0))
            dropped = True
        if dropped:  # indices shifted: rebuild (rare: only once the history is full)
            self._ends = {}
            for i in range(len(self.sequences)):
                self._index(i)
        else:
            self._index(len(self.sequences) - 1)

    def _index(self, i: int) -> None:
        seq = self.sequences[i]
        for end in range(1, len(seq)):  # an end with at least one token after it
            self._ends.setdefault(seq[end - 1], []).append((i, end))

    def ends_after(self, token: int) -> list[tuple[int, int]]:
        """``(sequence index, end)`` of every position right after ``token`` that has a next token."""
        return self._ends.get(token, [])

    def clear(self) -> None:
        self.sequences.clear()
        self._ends.clear()
        self._n_tokens = 0

    def to_list(self) -> list[list[int]]:
        """The outputs, oldest first, as plain lists of ints (a copy), for per-session state."""
        return [list(s) for s in self.sequences]

    @classmethod
    def from_list(cls, sequences: list[list[int]], max_tokens: int = HISTORY_MAX_TOKENS,
                  max_sequences: int = HISTORY_MAX_SEQUENCES) -> SuffixHistory:
        """A history holding ``sequences`` (oldest first, as :meth:`to_list` gives), within the caps.

        Raises:
            ValueError: if ``sequences`` is not a list of lists of token ids (ints >= 0).
        """
        history = cls(max_tokens, max_sequences)
        if not isinstance(sequences, list):
            raise ValueError("a suffix history is a list of token-id lists")
        for seq in sequences:
            if not isinstance(seq, list) or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in seq):
                raise ValueError("a suffix history is a list of token-id lists (ints >= 0)")
            history.add(seq)
        return history

    def __deepcopy__(self, memo) -> SuffixHistory:
        return SuffixHistory.from_list(self.sequences, self.max_tokens, self.max_sequences)

    def __len__(self) -> int:
        return self._n_tokens


#: The process-wide history of finished outputs: the default of a :class:`SuffixDrafter` built
#: without one (the CLI, the bench). The app gives each visitor session its own.
SUFFIX_HISTORY = SuffixHistory()


def clear_suffix_history() -> None:
    """Forget every earlier output (the bench does this before each measurement, so that no
    method is measured on its own earlier output)."""
    SUFFIX_HISTORY.clear()


def _match_length(seq: list[int], end: int, suffix: list[int]) -> int:
    """How many tokens of ``suffix`` (from its end) equal ``seq`` just before ``end``."""
    n = 0
    while n < len(suffix) and n < end and seq[end - 1 - n] == suffix[-1 - n]:
        n += 1
    return n


def _context_matches(committed: list[int], max_match: int) -> list[tuple[int, int]]:
    """``(match length, end)`` of every earlier place in ``committed`` where its last tokens (at
    most ``max_match``) occur, most recent first: the match ends just before index ``end``, and
    ``committed[end:]`` is what followed it. The context's own end is not a match."""
    suffix = committed[-max_match:]
    return [(_match_length(committed, end, suffix), end) for end in range(len(committed) - 1, 0, -1)
            if committed[end - 1] == suffix[-1]]


def _branch_depth(depth_factor: float, match_length: int, k: int) -> int:
    """SuffixDecoding's cap on a branch behind a match: ``depth_factor × match length`` tokens
    (at least 1, at most ``k``)."""
    return min(k, max(1, int(depth_factor * match_length)))


class SuffixDrafter:
    """Suffix lookup over the context and earlier outputs, in the spirit of SuffixDecoding.

    SuffixDecoding (Oliaro et al. 2024; vLLM's ``suffix`` speculative method) keeps suffix trees
    of the prompt and of earlier outputs, finds the longest match of the current suffix, and
    proposes the continuations that followed it most often, as a tree verified in one pass. This
    is the same idea with plain lists: every earlier position of the context (prompt and output
    so far) and of :data:`SUFFIX_HISTORY` whose preceding tokens match the longest suffix
    (``<= max_match`` tokens) that occurs at all contributes its next ``k`` tokens; the
    continuations are counted in a trie, and the tree takes nodes best-first by count (how many
    matches pass through them), at most B children per node, within the node budget (B = 1: the
    most frequent child at each step, a chain). As a tree (B > 1) the continuations are cut to
    ``depth_factor × match length`` tokens, SuffixDecoding's rule (vLLM's
    ``suffix_decoding_max_spec_factor``): the longer the match, the deeper the speculation.
    Deterministic given the context and the history, so every node is a point mass.

    The engine calls :meth:`finish` when a run ends, which adds its output to the history.

    Args:
        vocab_size: width of the probability rows to return.
        max_match: longest suffix to match (tokens).
        history: the history to search and extend: each visitor's own in the app, so nobody's
            text is drafted for someone else (default :data:`SUFFIX_HISTORY`, the process-wide one
            of the CLI and the bench).
        depth_factor: in a tree, a continuation is at most ``depth_factor × match length`` deep.
    """

    uses_model = False

    def __init__(self, vocab_size: int, max_match: int = 8, history: SuffixHistory | None = None,
                 depth_factor: float = 2.0) -> None:
        if max_match < 1 or depth_factor <= 0:
            raise ValueError(f"need max_match >= 1 and depth_factor > 0, got {max_match}, {depth_factor}")
        self.depth_factor = depth_factor
        self.vocab_size = vocab_size
        self.max_match = max_match
        self.history = history if history is not None else SUFFIX_HISTORY
        self.name = "suffix lookup (context and earlier outputs)"
        self.device = torch.device("cpu")

    def continuations(self, committed: list[int], k: int) -> tuple[int, list[list[int]]]:
        """The longest matching suffix's length (tokens) and the next ``k`` tokens after every
        occurrence of it, the context's most recent first, then the history's newest first."""
        if not committed:
            return 0, []
        suffix = committed[-self.max_match :]
        matches = [(n, committed, end) for n, end in _context_matches(committed, self.max_match)]
        history = self.history.sequences
        matches += [(_match_length(history[i], end, suffix), history[i], end)
                    for i, end in reversed(self.history.ends_after(suffix[-1]))]
        best, found = 0, []
        for n, seq, end in matches:
            if n > best:
                best, found = n, []
            if n == best:
                found.append(seq[end : end + k])
        return best, found

    def prefill(self, context: list[int]) -> None:
        pass

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None) -> DraftTree:
        if k <= 0:
            return DraftTree.point_masses([], [], self.vocab_size)
        length, found = self.continuations(committed, k)
        budget = k
        if branches > 1:
            budget = max_nodes or default_tree_nodes(k, branches)
            depth = _branch_depth(self.depth_factor, length, k)
            found = [f[:depth] for f in found]
        tokens, parents = _frequent_tree(found, max(branches, 1), budget)
        return DraftTree.point_masses(tokens, parents, self.vocab_size)

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        pass

    def finish(self, prompt: list[int], output: list[int]) -> None:
        self.history.add(output)


def _frequent_tree(sequences: list[list[int]], branches: int, max_nodes: int) -> tuple[list[int], list[int]]:
    """The most frequent continuations as a tree: trie nodes taken best-first by count.

    A node is a candidate once its parent is taken; candidates are taken by count (ties: the
    earlier sequence, i.e. the more recent match), at most ``branches`` children per node, until
    ``max_nodes`` are taken. Parents come before children in the result.
    """
    counts: dict[tuple, int] = {}
    first_seen: dict[tuple, int] = {}
    for order, seq in enumerate(sequences):
        for depth in range(1, len(seq) + 1):
            key = tuple(seq[:depth])
            counts[key] = counts.get(key, 0) + 1
            first_seen.setdefault(key, order)
    children: dict[tuple, list[tuple]] = {}
    for key in counts:
        children.setdefault(key[:-1], []).append(key)
    tokens: list[int] = []
    parents: list[int] = []
    index: dict[tuple, int] = {(): -1}
    taken_children: dict[tuple, int] = {}
    heap = [(-counts[c], first_seen[c], c) for c in children.get((), [])]
    heapq.heapify(heap)
    while heap and len(tokens) < max_nodes:
        _, _, key = heapq.heappop(heap)
        parent = key[:-1]
        if taken_children.get(parent, 0) >= branches:
            continue
        taken_children[parent] = taken_children.get(parent, 0) + 1
        index[key] = len(tokens)
        tokens.append(key[-1])
        parents.append(index[parent])
        for child in children.get(key, []):
            heapq.heappush(heap, (-counts[child], first_seen[child], child))
    return tokens, parents
