"""Scenarios run by :mod:`tests.test_zerogpu_real`, each in a fresh Python under the real
``spaces`` emulation (:mod:`tests.zerogpu_harness` sets the environment): ``python -m
tests.zerogpu_driver SCENARIO`` prints one JSON line with what the test checks. A CLI script:
printing is its output."""

from __future__ import annotations

import json
import logging
import sys
import time


def _start() -> None:
    from tests.zerogpu_harness import install_cuda_stubs

    install_cuda_stubs()
    import spaces  # noqa: F401  (first, as app.py does: it patches torch)


def _cache_entries() -> list[dict]:
    from specviz import models

    return [{"name": e["name"], "device": e["device"], "dtype": e["dtype"]} for e in models.cache_info()["entries"]]


def scenario_import() -> dict:
    """``import app`` in public mode: what the model cache holds afterwards, and the log's warnings."""
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logging.getLogger("specviz").addHandler(handler)
    t0 = time.perf_counter()
    import app  # noqa: F401

    return {"entries": _cache_entries(), "warnings": records[-10:], "import_s": time.perf_counter() - t0}


def _hub_values() -> dict:
    """The page's values for the SmolLM2 hub preset, as a visitor sends them in public mode."""
    from specviz.ui import settings

    preset = settings.PRESETS["SmolLM2-135M → SmolLM2-1.7B-Instruct · hub, GPU"]
    return dict(prompt="Fix the typos: Teh cat sat on teh mat.", target_id=preset["target"], drafter_kind="model",
                draft_model=preset["draft_model"], early_exit_layers=4, k=4, temperature=0.0, top_k=0, top_p=1.0,
                max_new_tokens=8, seed=0, chat=True, device="auto", dtype="auto")


def scenario_deploy() -> dict:
    """A first deploy: ``import app`` in public mode, then ``spaces``' own packing as ``launch()``
    runs it (the placed tensors written to the offload folder, the hub blobs they were mapped from
    deleted), then a visitor's hub-preset request through the page's validation and the model
    loads its job makes: the sentence each gives, or "ok"."""
    from spaces.zero import torch as zero_torch

    result = scenario_import()
    from specviz import models
    from specviz.ui.fields import request_from
    from tests.zerogpu_harness import HUB_MODELS

    packed = zero_torch.pack()
    hub = __import__("pathlib").Path(__import__("os").environ["HF_HUB_CACHE"])
    blobs_left = sorted(p.name for p in hub.glob("models--*/blobs/*") if p.stat().st_size > 10_000)
    outcome = {}
    try:
        request = request_from(_hub_values(), public=True)
        outcome["request"] = "ok"
        for name in (request.target, request.draft):
            loaded = models.load_model(name, device=request.device, dtype=request.dtype)
            outcome[f"load {name}"] = f"ok {loaded.device}"
    except Exception as err:
        outcome["request"] = f"{type(err).__name__}: {err}"
    return {**result, "packed_bytes": packed, "big_blobs_left": blobs_left, "hub_models": list(HUB_MODELS),
            **outcome}


SCENARIOS = {"import": scenario_import, "deploy": scenario_deploy}


def main(argv: list[str]) -> int:
    _start()
    result = SCENARIOS[argv[0]]()
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
