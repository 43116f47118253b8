"""The Gradio API: malformed values sent to /run and /lossless get the page's clear one-line
message (not gradio's generic "the upstream app raised an exception"), and the app keeps serving."""

from __future__ import annotations

import pytest

from specviz.ui.page import build_page

gradio_client = pytest.importorskip("gradio_client")


@pytest.fixture(scope="module")
def client():
    from specviz.models import loading as models

    models.prepare_offline("smollm2-135m-instruct")
    demo = build_page(public=False)
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        yield gradio_client.Client(demo.local_url, verbose=False)
    finally:
        demo.close()


def _run_args(**overrides):
    values = dict(prompt="Fix the typos: Teh cat sat on teh mat.", target_id="smollm2-135m-instruct",
                  drafter_kind="ngram", draft_model="", early_exit_layers=4, k=4, temperature=0.0, top_k=0,
                  top_p=1.0, max_new_tokens=6, seed=0, chat=True, device="cpu", dtype="float32")
    values.update(overrides)
    return values


MALFORMED = {
    "k=None": (dict(k=None), "Lookahead K must be a whole number"),
    "k=2.5": (dict(k=2.5), "Lookahead K must be a whole number"),
    "temperature='hot'": (dict(temperature="hot"), "Temperature must be a number"),
    "temperature='NaN' (JSON has no NaN)": (dict(temperature="NaN"), "Temperature must be a number"),
    "max_new_tokens=1e9": (dict(max_new_tokens=10**9), "Max new tokens must be a whole number"),
    "seed=-3": (dict(seed=-3), "Seed must be a whole number"),
    "top_p=None": (dict(top_p=None), "Top-p must be a number"),
    "drafter_kind='x'": (dict(drafter_kind="x"), "The drafter must be one of"),
    "prompt=None": (dict(prompt=None), "The prompt is empty"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_values_through_the_api_get_a_clear_message(client, case):
    overrides, message = MALFORMED[case]
    with pytest.raises(Exception) as err:
        client.predict(**_run_args(**overrides), api_name="/run")
    assert message in str(err.value), str(err.value)
    assert "upstream app raised an exception" not in str(err.value)


def test_lossless_endpoint_checks_its_draw_count(client):
    with pytest.raises(Exception) as err:
        args = {name: value for name, value in _run_args().items() if name != "max_new_tokens"}
        client.predict(**args, n_draws="lots", api_name="/lossless")
    assert "Draws must be a whole number" in str(err.value)


def test_the_app_keeps_serving_after_bad_requests(client):
    with pytest.raises(Exception):
        client.predict(**_run_args(k=None), api_name="/run")
    html, summary, *_ = client.predict(**_run_args(), api_name="/run")
    assert "**Done**" in summary and "sv-tok" in html


SETTINGS = ["prompt", "target_id", "drafter_kind", "draft_model", "early_exit_layers", "k", "temperature", "top_k",
            "top_p"]
DEVICE = ["seed", "chat", "device", "dtype"]
#: The API's endpoints and their parameters, as callers name them (written out, not derived from
#: specviz.ui.serve.fields, so that a change there that renames or reorders a parameter fails here).
API = {
    "/apply_preset": ["name"],
    "/dial": SETTINGS + DEVICE + ["n_draws"],
    "/engine_commands": SETTINGS + DEVICE + ["rule"],
    "/export": [],
    "/forget": [],
    "/import_engine": ["path", "engine", "c", "v"],
    "/load_trace": ["path"],
    "/llamacpp_lane": SETTINGS + DEVICE + ["rule"],
    "/lossless": SETTINGS + DEVICE + ["rule", "n_draws", "control"],
    "/on_drafter_change": ["kind"],
    "/playground": ["alpha", "k", "c", "v", "map_axes", "rounds", "seed"],
    "/playground_load_run": [],
    "/replay": ["upto"],
    "/run": SETTINGS + ["max_new_tokens"] + DEVICE + ["branches", "tree_nodes", "rule"],
    "/side_by_side": ["drafters", "max_new_tokens"] + SETTINGS + DEVICE + ["rule"],
    "/sweep": ["parameter", "values_text", "max_new_tokens"] + SETTINGS + DEVICE + ["rule"],
}


def test_the_api_keeps_its_endpoints_and_parameter_names(client):
    api = client.view_api(return_format="dict", print_info=False)
    assert {name: [p["parameter_name"] for p in endpoint["parameters"]]
            for name, endpoint in api["named_endpoints"].items()} == API
    assert not api["unnamed_endpoints"]


def test_an_engines_file_through_the_api_is_read_and_a_bad_engine_name_refused(client):
    """/import_engine: the file is uploaded and read as the page reads it; an engine name
    the menu does not hold is refused with the menu's choices."""
    from pathlib import Path

    fixture = Path(__file__).resolve().parent / "fixtures" / "engines" / "vllm_detailed.json"
    summary, table, *_ = client.predict(gradio_client.handle_file(str(fixture)), "guess", 0.05, 1.0,
                                        api_name="/import_engine")
    assert "read as **vLLM**" in summary and "per_step_accepted" in table.replace("&#95;", "_")
    with pytest.raises(Exception) as err:
        client.predict(gradio_client.handle_file(str(fixture)), "tgi", 0.05, 1.0, api_name="/import_engine")
    assert "tgi" in str(err.value) and "llamacpp" in str(err.value)  # the dropdown's own check names the choices
