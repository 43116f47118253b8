"""What a finished run hides, and what an engine user debugs with.

* :mod:`specviz.diagnose.diagnostics`: acceptance by position, accepted lengths, the cliff,
  calibration, the K an engine would pick.
* :mod:`specviz.diagnose.rule_replay`: each verification rule replayed on a recorded pass.
* :mod:`specviz.diagnose.twin`: the synthetic twin, the i.i.d. acceptance model at the run's own α
  beside the real passes, with a test of fit.
* :mod:`specviz.diagnose.health`: a loop at high α, a drafter that drafted nothing, counters that
  disagree with the tokens, a bursty stream.
* :mod:`specviz.diagnose.ceiling`: the oracle's ceiling (K + 1)/(K·c + v) and each drafter's gap to it.
"""
