"""Dump the Gradio API of ``app.py``'s page as JSON: ``Client.view_api(return_format="dict")`` for
the private and the public page, to diff before and after a change to the page.

    python scripts/api_dump.py before.json   # on the old commit
    python scripts/api_dump.py after.json    # on the new one
    diff <(python -m json.tool --sort-keys before.json) <(python -m json.tool --sort-keys after.json)

Unlabelled outputs are named after their component id (``value_165``), which counts every
component built before them: the dump writes each such label as ``value_#``, so a page that adds a
component (a ``gr.State`` among them) before an endpoint's outputs still compares equal when the
endpoint itself did not change.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio_client  # noqa: E402

import app  # noqa: E402


def build(public: bool):
    """The page of a mode, by today's entry point or the one before specviz/ui (``build_demo``)."""
    return app.build_demo(public=public) if hasattr(app, "build_demo") else app.build_page(public)


def _without_component_ids(value):
    """``value`` with every auto-generated label ``value_<component id>`` written ``value_#``."""
    if isinstance(value, dict):
        return {key: _without_component_ids(v) for key, v in value.items()}
    if isinstance(value, list):
        return [_without_component_ids(v) for v in value]
    return "value_#" if isinstance(value, str) and re.fullmatch(r"value_\d+", value) else value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", help="the JSON file to write")
    args = parser.parse_args()
    api = {}
    for public in (False, True):
        demo = build(public)
        demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
        try:
            client = gradio_client.Client(demo.local_url, verbose=False)
            api["public" if public else "private"] = client.view_api(return_format="dict", print_info=False)
        finally:
            demo.close()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(_without_component_ids(api), f, indent=1, sort_keys=True, ensure_ascii=False)
    print(f"wrote {args.out}: {', '.join(sorted(api['private']['named_endpoints']))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
