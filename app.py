"""specviz — watch speculative sampling happen on a real language model.

The front door: builds the page (:func:`specviz.ui.page.build_page`, the ``specviz/ui`` package
holds the page, one module per tab and the pieces they share), prepares the offline model on a
first start, and launches the server with its queue. ``demo`` stays at module level: Hugging Face
Spaces import it.

Run ``python app.py`` and open the printed URL. The first start prepares the offline models
(a minute, with progress in the terminal); later starts take seconds.

On a ZeroGPU Space ``spaces`` must be imported before anything imports torch (it patches CUDA in
the main process), so it comes first here where it is installed; the page's one GPU entry point is
:func:`specviz.ui.serve.gpu.run_job`, and the public presets' models are placed on ``cuda`` at import
(:func:`specviz.ui.serve.placement.place_at_import`; nothing happens off a Space).
"""

from __future__ import annotations

import logging
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

try:
    import spaces  # noqa: F401  (first: before torch is imported)
except ImportError:  # not on a Space: nothing to patch
    pass

from specviz.ui.serve.threads import configure_threads

# Before any model loads, here rather than under __main__: a Space imports this module. Leaving a
# core to the browser and everything else keeps a busy small CPU fast and steady
# (specviz/ui/serve/threads.py; SPECVIZ_THREADS overrides it).
THREADS, THREADS_SOURCE = configure_threads()

from specviz.models import loading as models  # noqa: E402
from specviz.models.memory import fixed_mmap_threshold  # noqa: E402
from specviz.ui.serve.placement import place_at_import  # noqa: E402
from specviz.ui.page import build_page  # noqa: E402
from specviz.ui.serve.settings import DEFAULT_PRESET, PRESETS, PUBLIC, QUEUE_SIZE, max_upload_bytes  # noqa: E402

demo = build_page(PUBLIC)
place_at_import()


if __name__ == "__main__":
    fixed_mmap_threshold()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("specviz.app").info("torch threads: %d (%s)", THREADS, THREADS_SOURCE)
    # First start only: convert the default offline model once, logging its progress (later
    # starts find it cached).
    models.prepare_offline(PRESETS[DEFAULT_PRESET]["target"])
    # Uploads past the limit are refused by the server before they are stored (the trace loader
    # checks the same limit again).
    demo.queue(max_size=QUEUE_SIZE).launch(max_file_size=max_upload_bytes(PUBLIC))
