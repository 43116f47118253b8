"""Drafters: where the K guessed tokens come from.

Every drafter implements one small interface, :class:`specviz.core.drafter.Drafter` (prefill, propose a
:class:`~specviz.core.drafttree.DraftTree` with the exact distributions its tokens were drawn from,
rollback, finish), and every kind is one entry of :data:`DRAFTER_KINDS`. One module per family,
as vLLM lays out its proposers:

* :mod:`~specviz.drafters.base`: the match helpers prompt lookup and suffix lookup share.
* :mod:`~specviz.drafters.registry`: :class:`DrafterKind`, :data:`DRAFTER_KINDS` (spec, menu
  label, note, builder of each kind), :func:`build_drafter` (a spec and a loaded target → a drafter),
  and spec parsing and help (:func:`parse_drafter_spec`,
  :func:`drafter_kind`, :func:`spec_forms`, :func:`spec_help`).
* :mod:`~specviz.drafters.lookup`: :class:`PromptLookupDrafter` (prompt lookup decoding,
  Saxena 2023) and :func:`prefix_tree`.
* :mod:`~specviz.drafters.suffix`: :class:`SuffixDrafter` (in the spirit of SuffixDecoding,
  Oliaro et al. 2024) and the earlier outputs it searches (:class:`SuffixHistory`,
  :data:`SUFFIX_HISTORY`, :func:`clear_suffix_history`).
* :mod:`~specviz.drafters.recycle`: :class:`RecycleDrafter` (Token Recycling, Luo et al. 2025):
  a table of the target's own top-k next tokens (:class:`RecycleTable`, :data:`RECYCLE_TABLE`,
  :func:`clear_recycle_table`), walked as the paper's static tree.
* :mod:`~specviz.drafters.draft_model`: :class:`ModelDrafter`, a separate draft model sharing
  the target's tokenizer (Chen et al. 2023; Leviathan et al. 2023), and
  :func:`shared_vocab_size`, the check that pairs the two.
* the teaching self-drafts (an int8 copy of the target, its first N layers) are :class:`ModelDrafter` s
  around the target's own weights, cut by :mod:`specviz.models.selfdraft`.
* :mod:`~specviz.drafters.eagle`: the EAGLE-style learned head on the target's features, its
  save/load and :class:`~specviz.drafters.eagle.EagleDrafter` (chains, EAGLE-2 trees).
* :mod:`~specviz.drafters.oracle`: :class:`~specviz.drafters.oracle.OracleDrafter`, the target's
  own output for the same settings replayed as the draft (recorded by
  :func:`specviz.run.runner.make_generation`): the ceiling the other drafters are measured against.
* :mod:`~specviz.drafters.combined`: :class:`~specviz.drafters.combined.LookupThen`, prompt
  lookup where a trigram repeats, else Token Recycling or (``LookupThenEagle``) the head.

The draft tree itself (:class:`~specviz.core.drafttree.DraftTree`) is the algorithm's, in :mod:`specviz.core`. The
EAGLE modules load on first use (the registry imports them when such a drafter is built).
"""

from __future__ import annotations

from specviz.drafters.draft_model import ModelDrafter, shared_vocab_size
from specviz.drafters.lookup import PromptLookupDrafter, prefix_tree
from specviz.drafters.recycle import RECYCLE_TABLE, SESSION_TABLE_MAX_ROWS, RecycleDrafter, RecycleTable, clear_recycle_table
from specviz.drafters.registry import (DRAFTER_KINDS, DrafterKind, build_drafter, device_type, drafter_kind, for_device, kinds_for, parse_drafter_spec,
                       real_draft_phrase, spec_forms, spec_help)
from specviz.drafters.suffix import (HISTORY_MAX_SEQUENCES, HISTORY_MAX_TOKENS, SESSION_HISTORY_MAX_SEQUENCES,
                     SESSION_HISTORY_MAX_TOKENS, SUFFIX_HISTORY, SuffixDrafter, SuffixHistory,
                     clear_suffix_history)

__all__ = ["DRAFTER_KINDS", "HISTORY_MAX_SEQUENCES", "HISTORY_MAX_TOKENS", "RECYCLE_TABLE", "SESSION_TABLE_MAX_ROWS",
           "RecycleDrafter", "RecycleTable", "clear_recycle_table", "SESSION_HISTORY_MAX_SEQUENCES",
           "SESSION_HISTORY_MAX_TOKENS", "SUFFIX_HISTORY", "DrafterKind", "build_drafter", "ModelDrafter",
           "PromptLookupDrafter", "SuffixDrafter", "SuffixHistory", "clear_suffix_history", 
           "device_type", "drafter_kind", "for_device", "kinds_for", "parse_drafter_spec",
           "prefix_tree", "real_draft_phrase", "shared_vocab_size", "spec_forms", "spec_help"]
