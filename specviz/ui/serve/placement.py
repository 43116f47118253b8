"""Where the models go at import: on a ZeroGPU Space the public presets' models are placed on
``cuda`` before any visitor asks (:func:`place_at_import`, called by ``app.py``); elsewhere nothing
happens.
"""

from __future__ import annotations

import logging

import gradio as gr

from specviz.ui.serve import settings
from specviz.ui.draw.escape import as_text
from specviz.ui.serve.gpu import on_zero_gpu

logger = logging.getLogger("specviz.app")


# ----------------------------------------------------------------------------- models at import
def public_pairs() -> list[tuple[str, str]]:
    """(target, draft model or "") of each preset public mode runs on this server's device."""
    targets, drafts = settings.public_allowed()
    pairs = []
    for p in settings.PRESETS.values():
        if p["target"] in targets:
            pairs.append((p["target"], p["draft_model"] if p["draft_model"] in drafts else ""))
    return pairs


#: Why no public model could be placed at import on this Space, for the server's owner: shown on
#: the Run tab's status line at every page load (:func:`show_problem`), each model's error in the
#: log; "" when some were, or off a Space.
PLACEMENT_PROBLEM = ""


def place_at_import(load=None) -> list[str]:
    """On a ZeroGPU Space, load the public presets' models onto ``cuda`` now, at import, as
    ZeroGPU asks (its main process emulates CUDA and moves the weights into each worker): each
    with the device and dtype the public pin will request (:func:`specviz.ui.serve.settings.public_server`),
    so the model cache's key matches the runs' and no worker loads a copy. Elsewhere nothing
    happens. The model cache's budget on a Space is not read from ``torch.cuda.mem_get_info``
    (emulated there): :func:`specviz.ui.serve.settings.public_server` gives it.

    Before anything loads, every public model's size is counted (:func:`specviz.models.memory.model_parameters`
    remembers it): at ``launch()`` ZeroGPU packs the placed tensors and deletes the hub-cache files
    they were read from, so public mode's per-request memory check must not read them again. Each
    placed model is pinned in the model cache for the server's life (evicted, it could not be read
    back). The loader reads on the CPU and places from this thread
    (:func:`specviz.models.loading.load_model`): ZeroGPU's emulation covers the importing thread only.

    Args:
        load: the loader (default :func:`specviz.models.loading.load_model`; tests pass their own).

    Returns:
        The names loaded, in order ([] off a Space). A model that fails to load is logged and
        skipped: its run will say why when a visitor asks for it. When none loads, that is logged
        as an error and kept in :data:`PLACEMENT_PROBLEM`. The model cache's count limit is
        raised to hold them all (six with today's presets; the byte budget still applies).
    """
    global PLACEMENT_PROBLEM
    if not on_zero_gpu():
        return []
    from specviz.models import memory
    from specviz.models import loading as models

    load = load or models.load_model
    server = settings.public_server()
    dtype = server.dtypes[0] if server.dtypes else "auto"
    names = list(dict.fromkeys(name for pair in public_pairs() for name in pair if name))
    for name in names:  # counted now, while the files exist (see above)
        memory.model_parameters(name)
    if models.cache_info()["max_models"] < len(names):  # keep every placed model: none evicts another
        models.set_cache_limits(max_models=len(names))
    loaded: list[str] = []
    errors: list[str] = []
    for name in names:
        try:
            models.pin_forever(load(name, device="cuda", dtype=dtype))
            loaded.append(name)
        except Exception as err:  # a model that cannot load now is refused with a sentence later
            errors.append(f"{name}: {err}")
            logger.warning("not placed at import: %s (%s)", name, err, exc_info=True)
    if names and not loaded:
        # The page says which models and where to look, not the errors themselves: an exception's
        # text (paths, a hub's answer) is for the owner's log, not every visitor.
        PLACEMENT_PROBLEM = (f"No model could be placed on the GPU at start-up ({', '.join(names)}), so runs on "
                             "this Space will fail. To the Space's owner: the Space's logs say why for each model "
                             "(\"not placed at import\").")
        logger.error("%s Errors: %s", PLACEMENT_PROBLEM, "; ".join(errors))
    return loaded


def page_status():
    """The Run tab's status line as a page loads: :data:`PLACEMENT_PROBLEM` in bold where nothing
    could be placed at import, else ``gr.skip()`` (the line as it is)."""
    if not PLACEMENT_PROBLEM:
        return gr.skip()
    return f"**Not ready:** {as_text(PLACEMENT_PROBLEM)}"


def show_problem(status: gr.components.Component) -> None:
    """On the page being built, on a ZeroGPU Space only: each page load writes :func:`page_status`
    to ``status`` (the Run tab's status line). Read at load, not now: :func:`place_at_import` runs
    after the page is built (``app.py``). Model-free and off the generation queue; no API endpoint."""
    if not on_zero_gpu():
        return
    from gradio.context import Context

    Context.root_block.load(page_status, None, status, api_name=False, concurrency_limit=None,
                            show_progress="hidden")
