"""From a request to runs: validation, the pair and the prompt, the plain baseline, experiments, the bench.

* :mod:`specviz.run.request`: the one validation of a run's settings (:class:`~specviz.run.request.RunRequest`).
* :mod:`specviz.run.runner`: load the pair, encode the prompt, warm up, make a
  :class:`~specviz.core.engine.Generation` (:class:`~specviz.run.runner.PreparedRun`).
* :mod:`specviz.run.baseline`: plain decoding timed several times, the speedup's denominator.
* :mod:`specviz.run.sweep`: one setting varied, one row per setting.
* :mod:`specviz.run.bench`: the loop against transformers' own decoding on the same models.
* :mod:`specviz.run.pair_sizing`: what a target and its drafter take together.
"""
