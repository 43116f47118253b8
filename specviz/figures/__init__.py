"""Figures, once: every number the page, the command line and the bench show, from the round records.

* :mod:`specviz.figures.analysis`: every derived figure of a run (α, tokens per pass, c, v, the
  closed forms beside the measured ones) and the health notes.
* :mod:`specviz.figures.speedup`: the measured speedup against plain decoding on the same models,
  its range, and when it is doubted.
* :mod:`specviz.figures.theory`: the closed forms (Leviathan et al. 2023) in plain floats.
* :mod:`specviz.figures.trace`: a run saved and loaded as JSON (checked field by field), as CSV,
  and the names of single tokens.
"""
