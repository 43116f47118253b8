"""The trace of a run: what each round of the loop drafted, tested and emitted, as
:class:`~specviz.core.records.Round` records.

The loop (:class:`specviz.core.engine.Generation`) does the method: draft, one verify pass, the accept
walk, the caches. It hands each round's outcome to a :class:`RoundRecorder`, which turns it into
the record the app, the CLI and the analysis read: the drafted nodes with their accept tests, the
emitted tokens with their kinds (accepted, resampled, bonus, plain) and text, cut at an EOS, and,
for an instrumented run, the top tokens of ``p_draft``, ``p_target`` and the residual at each
node for the token inspector.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from specviz.core.drafttree import DraftTree
from specviz.core.records import (
    ACCEPTED,
    PLAIN,
    RESAMPLED,
    DraftedToken,
    EmittedToken,
    Round,
)
from specviz.core.sampling import TreeVerifyResult

__all__ = ["TOP_TOKENS", "IncrementalDecoder", "RoundRecorder"]

#: Tokens kept per distribution for the token inspector (instrumented runs).
TOP_TOKENS = 10


class IncrementalDecoder:
    """Text of each new token, robust to byte-level BPE pieces that only make sense together.

    The text of token i is ``decode(ids[j:i+1])`` minus ``decode(ids[j:i])`` for a short window
    ``j``, the approach text-generation-inference uses; an incomplete UTF-8 sequence (``\\ufffd``)
    is held back until the next token completes it.

    Args:
        decode: ``list[int] -> str`` (e.g. ``tokenizer.decode`` with special tokens skipped).
        window: number of earlier tokens decoded along with the new one.
    """

    def __init__(self, decode: Callable[[list[int]], str], window: int = 6) -> None:
        self.decode = decode
        self.window = window
        self.ids: list[int] = []
        self.emitted_upto = 0  # ids[:emitted_upto] have had their text handed out

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        start = max(0, self.emitted_upto - self.window)
        before = self.decode(self.ids[start : self.emitted_upto])
        after = self.decode(self.ids[start:])
        if after.endswith("\ufffd"):
            return ""
        self.emitted_upto = len(self.ids)
        return after[len(before) :]


class RoundRecorder:
    """Builds one :class:`~specviz.core.records.Round` per round of a run from the round's outcome.

    Args:
        decode: optional ``list[int] -> str`` for per-token text (None: empty texts).
        instrument: record per-node probabilities, uniforms and the inspector's top tokens (the
            benchmark turns this off to measure its cost).
        eos_token_ids: ids that end the run; emitted tokens are cut after the first of them.
        label: optional ``int -> str``, one token's own text standing alone (drafted nodes and top
            tokens: special tokens by name, a partial UTF-8 character as its bytes,
            :class:`specviz.figures.trace.TokenPieces`); None: ``decode([id])``.
    """

    def __init__(self, decode: Callable[[list[int]], str] | None, instrument: bool,
                 eos_token_ids: Iterable[int], label: Callable[[int], str] | None = None) -> None:
        self.decode = decode
        self.label = label
        self.instrument = instrument
        self.eos = set(eos_token_ids)
        self._decoder = IncrementalDecoder(decode) if decode else None
        self._texts: dict[int, str] = {}

    def record(self, index: int, tree: DraftTree, result: TreeVerifyResult, k_round: int,
               p_target: torch.Tensor) -> Round:
        """The round's trace record: drafted nodes with their tests, and the emitted tokens, cut
        at an EOS (nothing after it, no bonus token; the last emitted token is then the EOS).

        Args:
            index: the round's index in the run.
            tree: the round's draft (N nodes).
            result: :func:`specviz.core.sampling.verify_tree`'s outcome.
            k_round: the lookahead this round drafted with.
            p_target: ``(N + 1, V)`` the target's processed distributions at the root and nodes.
        """
        path = result.path
        new_ids = [tree.tokens[node] for node in path] + [result.next_token]
        kinds = [ACCEPTED] * len(path) + [(result.next_kind if len(tree) else PLAIN)]
        if self.instrument and path:
            p_node = result.p_target_node.tolist()  # one host transfer
            p_new = [p_node[node] for node in path]
        else:
            p_new = [0.0] * len(path)
        p_new.append(result.next_p_target)
        for position, token_id in enumerate(new_ids):
            if token_id in self.eos:
                new_ids, kinds, p_new = new_ids[: position + 1], kinds[: position + 1], p_new[: position + 1]
                break
        # An EOS inside the accepted path also ends the bookkeeping there: nodes deeper than it
        # never reach the output, so they count as neither proposed nor accepted, and
        # accepted + resampled + bonus + plain always equals the emitted tokens.
        n_accepted = min(len(path), len(new_ids))
        round_ = Round(index=index, n_accepted=n_accepted, k=k_round)
        round_.drafted = self._drafted_records(tree, result)
        if self.instrument:
            self._record_distributions(round_.drafted, tree, p_target)
        if n_accepted < len(path):
            round_.drafted = _cut_below_depth(round_.drafted, tree.depths(), n_accepted)
        for token_id, kind, p in zip(new_ids, kinds, p_new):
            emitted = EmittedToken(id=token_id, text=self._decoder.push(token_id) if self._decoder else "",
                                   kind=kind, p_target=p, round=round_.index)
            if kind == RESAMPLED:  # the last rejected sibling at that depth
                emitted.rejected_id = tree.tokens[result.rejected_node]
                emitted.rejected_text = round_.drafted[result.rejected_node].text
            round_.emitted.append(emitted)
        if self.instrument and round_.emitted[-1].kind != ACCEPTED:  # (accepted last: an EOS cut the path)
            self._record_source(round_.emitted[-1], result)
        return round_

    def _top(self, probs: torch.Tensor) -> list[list]:
        """``[[id, text, probability], ...]`` of the :data:`TOP_TOKENS` most likely ids of each row of
        ``probs`` ``(rows, V)``, zero-probability ids left out (a point-mass row keeps one)."""
        values, ids = torch.topk(probs, min(TOP_TOKENS, probs.shape[-1]), dim=-1)
        rows = []
        for row_values, row_ids in zip(values.tolist(), ids.tolist()):
            rows.append([[i, self._text_of(i), p] for i, p in zip(row_ids, row_values) if p > 0])
        return rows

    def _text_of(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = (self.label(token_id) if self.label else
                                            self.decode([token_id]) if self.decode else "")
        return text

    def _record_distributions(self, drafted: list[DraftedToken], tree: DraftTree, p_target: torch.Tensor) -> None:
        """The inspector's rows: top tokens under p_draft and p_target at each drafted node (its
        parent's context), the distributions the test actually used."""
        if not drafted:
            return
        rows = torch.tensor([parent + 1 for parent in tree.parents], dtype=torch.long, device=p_target.device)
        for token, top_d, top_t in zip(drafted, self._top(tree.p_draft.to(p_target.device)), self._top(p_target[rows])):
            token.top_draft, token.top_target = top_d, top_t

    def _record_source(self, emitted: EmittedToken, result: TreeVerifyResult) -> None:
        """The distribution the target's own token was drawn from: the final residual, or p_target."""
        if result.next_distribution is None:
            return
        emitted.p_source = float(result.next_distribution[emitted.id])
        emitted.top_source = self._top(result.next_distribution.view(1, -1))[0]

    def _drafted_records(self, tree: DraftTree, result: TreeVerifyResult) -> list[DraftedToken]:
        if not len(tree):
            return []
        if not self.instrument:
            return [DraftedToken(t, "", 0.0, 0.0, 0.0, 0.0, result.accepted[i], result.tested[i],
                                 parent=tree.parents[i]) for i, t in enumerate(tree.tokens)]
        # One host transfer per figure, not one per node.
        p_target = result.p_target_node.tolist()
        p_draft = result.p_draft_node.tolist()
        accept = result.accept_prob.tolist()
        uniforms = result.uniforms.tolist()
        return [
            DraftedToken(
                id=token_id,
                text=self._text_of(token_id),
                p_draft=p_draft[i],
                p_target=p_target[i],
                accept_prob=accept[i],
                uniform=uniforms[i],
                accepted=result.accepted[i],
                tested=result.tested[i],
                parent=tree.parents[i],
            )
            for i, token_id in enumerate(tree.tokens)
        ]

def _cut_below_depth(drafted: list[DraftedToken], depths: list[int], depth: int) -> list[DraftedToken]:
    """The nodes of depth <= ``depth``, parents renumbered (parents first, so a kept node's
    parent is kept too)."""
    new_index: dict[int, int] = {}
    kept = []
    for i, (token, d) in enumerate(zip(drafted, depths)):
        if d <= depth:
            new_index[i] = len(kept)
            parent = token.parent if token.parent is None or token.parent < 0 else new_index[token.parent]
            kept.append(DraftedToken(**{**token.__dict__, "parent": parent}))
    return kept
