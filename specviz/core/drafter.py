"""What the loop needs from a drafter: :class:`Drafter`.

Every drafter implements the same small interface, the seam that transformers calls
``get_candidates``:

* :meth:`Drafter.prefill` is told the prompt once;
* :meth:`Drafter.propose` returns a :class:`~specviz.core.drafttree.DraftTree`: up to N token ids,
  each with its parent (``-1`` = the committed context), **and the exact distributions they were
  drawn from** (``p_draft``), because the accept test divides by those probabilities. A chain
  (one branch) has parents ``-1, 0, 1, …``; asked for ``branches = 1`` every drafter returns one;
* :meth:`Drafter.rollback` is told how many committed tokens are still valid after verification
  and which tree nodes were accepted, so a drafter with a KV cache can drop what was rejected;
* :meth:`Drafter.finish` is told a finished run's prompt and output (the suffix drafter learns
  from it).

Two optional hooks hand a drafter what the verify passes computed anyway: the target's features
(``wants_features``, the EAGLE head) and its top-k next tokens (``wants_top_ids``, Token Recycling).
The drafters themselves live in :mod:`specviz.drafters`.
"""

from __future__ import annotations

from typing import Protocol

import torch

from specviz.core.drafttree import DraftTree
from specviz.core.sampling import SamplingConfig

__all__ = ["Drafter"]


class Drafter(Protocol):
    """What the speculative loop needs from a source of draft tokens.

    Optional: a drafter with ``wants_features = True`` also has ``extend_features(features)``,
    called with ``(M, H)``, the target's last-layer hidden states (before the final norm) of the
    ``M`` positions the target's cache just gained: the whole prompt after the prefill, then each
    round's pending tokens and accepted path, in position order. They come from the passes the
    loop runs anyway (no extra target pass); drafters without the attribute cost nothing extra.

    Optional too: a drafter with ``wants_top_ids = k`` (> 0) also has
    ``observe_top_ids(tokens, top_ids)``, called after each verify pass with the ``M`` tokens whose
    next-token distributions the pass computed (the last committed token, then every drafted
    node) and ``(M, k)`` int64, the target's k most likely next tokens at each, most likely first
    (Token Recycling's table, :mod:`specviz.drafters.recycle`).
    Optional too: ``device``, where the drafter samples (the engine hands it that device's
    generator, :class:`~specviz.core.generators.GeneratorPool`; default the target's), and
    ``set_cache(kind, max_len)``, called before each run's :meth:`prefill` with the run's KV
    cache kind (``"dynamic"`` or ``"static"``, :mod:`specviz.core.kvcache`) and the most positions the
    drafter's cache will hold.
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
            max_nodes: N, the most nodes (default :func:`~specviz.core.drafttree.default_tree_nodes`);
                ignored for a chain.

        Returns:
            A :class:`~specviz.core.drafttree.DraftTree` (``p_draft`` rows ``(N, V)`` float32, the
            distribution each token was drawn from; ``steps`` the forward passes spent).
        """

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        """Forget everything past the first ``valid`` committed tokens; ``path`` lists the
        accepted nodes of the last proposal (None: a chain prefix)."""

    def finish(self, prompt: list[int], output: list[int]) -> None:
        """A run with this drafter finished with ``output`` after ``prompt`` (optional)."""
