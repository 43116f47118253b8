"""The algorithm: speculative sampling's loop and everything it needs, importing nothing else of specviz.

Read it in this order:

1. :mod:`specviz.core.textbook` — one chain round in about sixty lines, the whole rule in one
   place (draft K, one target pass, accept with min(1, p_target/p_draft), residual, bonus).
2. :mod:`specviz.core.sampling` — the same rule for chains and trees, with every rule variant the
   app compares (:mod:`specviz.core.rules` names them), on probabilities the temperature, top-k
   and top-p made (:func:`~specviz.core.sampling.logits_to_probs`).
3. :mod:`specviz.core.engine` — :class:`~specviz.core.engine.Generation`, the loop: prefill,
   then rounds of draft → one verify pass → accept walk → caches cropped to the accepted path.
4. :mod:`specviz.core.drafter` — what a drafter must do (:class:`~specviz.core.drafter.Drafter`)
   and :mod:`specviz.core.drafttree` — what it hands the loop (a chain or a tree of tokens and
   the distributions they were drawn from).
5. :mod:`specviz.core.kvcache` — rolling the KV caches back to the accepted path.
6. :mod:`specviz.core.records` and :mod:`specviz.core.recorder` — what each round leaves
   behind (:class:`~specviz.core.records.Round`), the record every figure is computed from.
7. :mod:`specviz.core.phaseclock` and :mod:`specviz.core.generators` — honest timing (devices
   synchronised at each phase boundary) and one random generator per device.
"""
