"""Public mode (SPECVIZ_PUBLIC=1, what a Space sets): only the presets' models, tighter caps, a
wall-time limit per run; the same for the page's callbacks and the Gradio API. Outside public mode
nothing changes."""

from __future__ import annotations

import dataclasses
import logging
import re

import gradio as gr
import pytest

from specviz.models import loading as models
from specviz.run.request import (
    DEFAULT_PUBLIC_MAX_RUN_S,
    PUBLIC_LIMITS,
    RequestError,
    ServerDevice,
    check_public_models,
    pin_public_device,
    public_mode,
    public_policy,
    validate_request,
)
from specviz.ui.tabs import run_stream
from specviz.ui.serve import settings
from specviz.ui.serve.fields import request_from
from specviz.ui.tabs.lossless_check import run_lossless
from specviz.ui.page import build_page

TARGETS, DRAFTS = settings.public_allowed()


def _args(**overrides):
    """The API test's default run settings (tests/test_api.py), with overrides."""
    from test_api import _run_args

    return _run_args(**overrides)


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if anything tries to load a model or reach the hub."""
    import huggingface_hub

    def forbidden(*args, **kwargs):
        raise AssertionError(f"nothing may load for a refused request: {args} {kwargs}")

    monkeypatch.setattr(models, "load_model", forbidden)
    for name in ("snapshot_download", "hf_hub_download", "model_info"):
        monkeypatch.setattr(huggingface_hub, name, forbidden, raising=False)


# ----------------------------------------------------------------------------- the pure policy
@pytest.mark.parametrize("value, expected", [("1", True), ("true", True), ("Yes", True), (" on ", True),
                                             ("0", False), ("", False), ("no", False), (None, False)])
def test_public_mode_reads_the_variable(value, expected):
    env = {} if value is None else {"SPECVIZ_PUBLIC": value}
    assert public_mode(env) is expected


def test_public_policy_caps_and_wall_time_variable():
    policy = public_policy({})
    assert policy.max_run_s == DEFAULT_PUBLIC_MAX_RUN_S == 60.0
    assert policy.limits.max_k == 8 and policy.limits.max_new_tokens == 256 and policy.max_draws == 4000
    assert public_policy({"SPECVIZ_MAX_RUN_S": "12.5"}).max_run_s == 12.5
    for bad in ("soon", "-3", "0", "nan"):
        assert public_policy({"SPECVIZ_MAX_RUN_S": bad}).max_run_s == DEFAULT_PUBLIC_MAX_RUN_S


def test_presets_and_model_free_drafters_are_allowed():
    on_gpu, on_cpu = settings.public_models(cuda=True), settings.public_models(cuda=False)
    for preset in settings.PRESETS.values():
        draft = preset["draft_model"] if preset["drafter"] == "model" else preset["drafter"]
        if preset.get("hub_twin"):  # an offline pair: on a GPU its hub twin runs instead
            check_public_models(preset["target"], draft, *on_cpu)
            with pytest.raises(RequestError, match="public mode"):
                check_public_models(preset["target"], draft, *on_gpu)
            twin = settings.PRESETS[preset["hub_twin"]]
            check_public_models(twin["target"], twin["draft_model"], *on_gpu)
        else:
            check_public_models(preset["target"], draft, *on_gpu)
    for draft in ("ngram", "none", "int8", "early-exit:3"):
        check_public_models("gemma-3-270m", draft, TARGETS, DRAFTS)


def test_hub_presets_are_refused_on_a_machine_without_cuda():
    targets, drafts = settings.public_models(cuda=False)
    assert targets == {"smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-1.5b-instruct"}
    assert drafts == {"eagle", "qwen2.5-coder-0.5b-instruct"}  # the offline pair's draft comes from PyPI
    for target, draft in (("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
                          ("Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct")):
        with pytest.raises(RequestError, match="public mode"):
            check_public_models(target, draft, targets, drafts)


def test_the_shipped_head_is_allowed_and_a_head_directory_is_not():
    targets, drafts = settings.public_models(cuda=False)
    check_public_models("smollm2-135m-instruct", "eagle", targets, drafts)
    for spec in ("eagle:/tmp/head", "eagle:specviz/heads/smollm2-135m-instruct"):
        with pytest.raises(RequestError, match="not allowed"):
            check_public_models("smollm2-135m-instruct", spec, targets, drafts)


@pytest.mark.parametrize("target, draft, what", [
    ("gpt2", "ngram", "target model 'gpt2'"),
    ("/tmp", "ngram", "target model '/tmp'"),
    ("smollm2-135m-instruct", "someone/tiny-draft", "draft model 'someone/tiny-draft'"),
    ("smollm2-135m-instruct", "./my-draft", "draft model './my-draft'"),
])
def test_other_models_are_refused(target, draft, what):
    with pytest.raises(RequestError, match="public mode") as err:
        check_public_models(target, draft, TARGETS, DRAFTS)
    assert what in str(err.value) and "only the presets" in str(err.value)


def test_outside_public_mode_a_local_directory_is_still_accepted(tmp_path):
    request = validate_request(prompt="hi", target=str(tmp_path), draft=str(tmp_path), k=16, temperature=0,
                               top_k=0, top_p=1, max_new_tokens=1024, seed=0)
    assert request.target == str(tmp_path) and request.k == 16
    assert request_from(_args(target_id=str(tmp_path), k=16, max_new_tokens=1024), public=False).target == str(tmp_path)
    with pytest.raises(RequestError, match="lookahead K"):
        validate_request(prompt="hi", target="x", draft="ngram", k=16, temperature=0, top_k=0, top_p=1,
                         max_new_tokens=1, seed=0, limits=PUBLIC_LIMITS)


# ----------------------------------------------------------------------------- the callbacks
def _run_demo(public=True, **overrides):
    return list(run_stream.run_demo(**_args(**overrides), baselines={}, progress=lambda *a, **k: None, public=public))


@pytest.mark.parametrize("overrides, message", [
    (dict(target_id="Qwen/Qwen2.5-72B-Instruct"), "Public mode: the target model 'Qwen/Qwen2.5-72B-Instruct'"),
    (dict(target_id="/tmp"), "Public mode: the target model '/tmp'"),
    (dict(drafter_kind="model", draft_model="someone/draft"), "Public mode: the draft model 'someone/draft'"),
    (dict(k=9), "Lookahead K must be a whole number between 1 and 8"),
    (dict(max_new_tokens=257), "Max new tokens must be a whole number between 1 and 256"),
])
def test_run_demo_refuses_in_public_mode_before_loading(no_loading, overrides, message):
    with pytest.raises(gr.Error) as err:
        _run_demo(**overrides)
    assert message in str(err.value), str(err.value)


def test_the_module_flag_applies_when_no_mode_is_bound(no_loading, monkeypatch):
    monkeypatch.setattr(settings, "PUBLIC", True)
    with pytest.raises(gr.Error, match="Public mode"):
        list(run_stream.run_demo(**_args(target_id="gpt2"), baselines={}, progress=lambda *a, **k: None))


def test_lossless_draws_are_capped_in_public_mode(no_loading):
    args = {name: value for name, value in _args().items() if name != "max_new_tokens"}
    with pytest.raises(gr.Error, match="Draws must be a whole number between 100 and 4000"):
        run_lossless(**args, n_draws=20000, progress=lambda *a, **k: None, public=True)
    with pytest.raises(gr.Error, match="Public mode: the target model"):
        run_lossless(**{**args, "target_id": "gpt2"}, n_draws=1000, progress=lambda *a, **k: None,
                     public=True)


def test_a_run_past_the_time_limit_stops_with_its_tokens(monkeypatch, caplog):
    models.prepare_offline("smollm2-135m-instruct")
    monkeypatch.setattr(settings, "PUBLIC_POLICY", dataclasses.replace(settings.PUBLIC_POLICY, max_run_s=0.5))

    def no_baseline(prepared, baselines, should_end=None):  # keep the test short
        return None, baselines
        yield  # a generator, like the real one

    monkeypatch.setattr(run_stream, "measure_baseline", no_baseline)
    with caplog.at_level(logging.INFO, logger="specviz.app"):
        updates = _run_demo(max_new_tokens=200, chat=False,
                            prompt="Count: one two three four five six seven eight nine ten eleven twelve")
    html, summary = updates[-1][:2]
    assert "**Stopped** at the public time limit of 0.5 s" in summary, summary
    assert "sv-tok" in html and html.endswith('<i hidden class="sv-done"></i></div>')
    shown = int(summary.split(" tokens")[0].rsplit("· ", 1)[1].split("/")[0])
    assert 1 <= shown < 200 and html.count('class="sv-tok') >= shown
    lines = [r.getMessage() for r in caplog.records if r.name == "specviz.app"]
    assert len(lines) == 1 and "time-limit" in lines[0] and "alpha=" in lines[0] and "tokens/s=" in lines[0]


# ----------------------------------------------------------------------------- the Gradio API
gradio_client = pytest.importorskip("gradio_client")


@pytest.fixture(scope="module")
def public_client():
    demo = build_page(public=True)
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        yield gradio_client.Client(demo.local_url, verbose=False)
    finally:
        demo.close()


def test_the_api_refuses_a_hub_id_in_public_mode(public_client):
    with pytest.raises(Exception) as err:
        public_client.predict(**_args(target_id="Qwen/Qwen2.5-72B-Instruct"), api_name="/run")
    assert "Public mode: the target model 'Qwen/Qwen2.5-72B-Instruct' is not allowed" in str(err.value)
    with pytest.raises(Exception) as err:
        args = {name: value for name, value in _args().items() if name != "max_new_tokens"}
        public_client.predict(**args, n_draws=50000, api_name="/lossless")
    assert "between 100 and 4000" in str(err.value)


def test_public_page_hides_machine_controls():
    config = build_page(public=True).get_config_file()
    by_label = {c["props"].get("label"): c["props"] for c in config["components"]
                if "label" in c.get("props", {}) and c.get("type") != "accordion"}
    assert by_label["Device"]["visible"] is False and by_label["Dtype"]["visible"] is False
    assert by_label["Target model"]["interactive"] is False and by_label["Draft model"]["interactive"] is False
    assert by_label["Model pair"].get("interactive") is not False
    assert by_label["Lookahead K"]["maximum"] == 8
    private = {(c.get("type"), c["props"].get("label")): c["props"]
               for c in build_page(public=False).get_config_file()["components"] if "label" in c.get("props", {})}
    assert private[("dropdown", "Device")].get("visible") is not False
    assert private[("textbox", "Target model")].get("interactive") is not False


# ----------------------------------------------------------------------------- the server's device and dtype
CUDA_SERVER = ServerDevice("cuda", ("bfloat16", "float16"), 40 << 30)


def _request(**changes):
    base = validate_request(prompt="hi", target="Qwen/Qwen2.5-7B-Instruct", draft="Qwen/Qwen2.5-0.5B-Instruct", k=4,
                            temperature=0, top_k=0, top_p=1, max_new_tokens=8, seed=0)
    return base.with_(**changes)


def test_the_server_chooses_device_and_dtype_and_a_visitor_may_ask_for_them():
    for device, dtype in (("auto", "auto"), ("cuda", "auto"), ("auto", "bfloat16"), ("cuda", "float16")):
        pinned = pin_public_device(_request(device=device, dtype=dtype), CUDA_SERVER)
        assert (pinned.device, pinned.dtype) == ("cuda", "bfloat16" if dtype == "auto" else dtype)
    cpu = ServerDevice("cpu", ("bfloat16", "float32"), 8 << 30)
    small = _request(target="smollm2-135m-instruct", draft="int8")
    assert (pin_public_device(small, cpu).device, pin_public_device(small, cpu).dtype) == ("cpu", "bfloat16")
    assert pin_public_device(small.with_(device="cpu", dtype="float32"), cpu).dtype == "float32"


@pytest.mark.parametrize("changes, server, message", [
    (dict(device="cpu"), CUDA_SERVER, "public mode: this server runs models on cuda, so the device 'cpu' cannot be "
                                      "chosen here (send auto)"),
    (dict(dtype="float32"), CUDA_SERVER, "public mode: this server runs models on cuda in bfloat16 or float16, so the "
                                         "dtype 'float32' cannot be chosen here (send auto)"),
    (dict(target="smollm2-135m-instruct", draft="int8"), CUDA_SERVER,
     "public mode: the int8 drafter does not run with the target on cuda; pick another "
     "drafter, such as early-exit:4"),
    (dict(), dataclasses.replace(CUDA_SERVER, model_bytes=16 << 30),
     "public mode: Qwen/Qwen2.5-7B-Instruct with the draft model 'Qwen/Qwen2.5-0.5B-Instruct' needs about 18.1 GiB in "
     "bfloat16 and this server has 16.0 GiB for models; pick a smaller model pair"),
    (dict(device="cuda"), ServerDevice("cpu", ("float32",), 8 << 30), "this server runs models on cpu"),
])
def test_a_visitors_override_is_refused_in_one_sentence(changes, server, message):
    with pytest.raises(RequestError) as err:
        pin_public_device(_request(**changes), server)
    assert message in str(err.value) and _one_sentence(str(err.value))


def _one_sentence(text: str) -> bool:
    return "\n" not in text and re.search(r"[.!?]\s+[A-Z]", text) is None


@pytest.fixture
def cuda_server(monkeypatch):
    """This CPU machine seen as a public CUDA server (nothing reaches CUDA: a refusal comes first)."""
    monkeypatch.setattr(settings, "server_device", lambda: "cuda")
    monkeypatch.setattr(settings, "public_server", lambda: CUDA_SERVER)


def _refusal(client, api_name="/run", **values) -> str:
    with pytest.raises(Exception) as err:
        client.predict(**values, api_name=api_name)
    return str(err.value)


def test_the_api_refuses_a_device_or_dtype_the_cpu_server_did_not_choose(public_client, no_loading):
    said = _refusal(public_client, **_args(device="cuda"))
    assert said == ("Public mode: this server runs models on cpu, so the device 'cuda' cannot be chosen here "
                    "(send auto).")
    assert _one_sentence(said)
    said = _refusal(public_client, **_args(dtype="float16"))
    assert said.startswith("Public mode: this server runs models on cpu in ") and "'float16' cannot" in said, said


def test_the_api_refuses_overrides_on_a_cuda_server_before_any_work(public_client, no_loading, cuda_server,
                                                                   monkeypatch):
    assert _refusal(public_client, **_args(device="cpu")).startswith(
        "Public mode: this server runs models on cuda, so the device 'cpu' cannot be chosen here")
    assert "the dtype 'float32' cannot be chosen here" in _refusal(public_client, **_args(device="auto"))
    assert "the int8 drafter does not run with the target on cuda" in _refusal(
        public_client, **_args(device="auto", dtype="auto", drafter_kind="int8"))
    shared = {k: v for k, v in _args(device="auto", dtype="auto").items() if k != "max_new_tokens"}
    said = _refusal(public_client, "/sweep", parameter="Drafter", values_text="ngram int8", max_new_tokens=8, **shared)
    assert "the int8 drafter does not run with the target on cuda" in said, said
    big = dict(target_id="Qwen/Qwen2.5-7B-Instruct", drafter_kind="model", draft_model="Qwen/Qwen2.5-0.5B-Instruct")
    monkeypatch.setattr(settings, "public_server", lambda: dataclasses.replace(CUDA_SERVER, model_bytes=16 << 30))
    said = _refusal(public_client, **_args(device="auto", dtype="auto", **big))
    assert said.startswith("Public mode: Qwen/Qwen2.5-7B-Instruct with the draft model") and "pick a smaller" in said


def _preset_menu(page) -> list[str]:
    menu = next(c["props"] for c in page.get_config_file()["components"] if c["props"].get("label") == "Model pair")
    return [value for _, value in menu["choices"]]


def test_gpu_presets_are_listed_only_on_a_cuda_public_server(monkeypatch):
    monkeypatch.setattr(settings, "server_device", lambda: "cpu")
    assert _preset_menu(build_page(public=True)) == [n for n, p in settings.PRESETS.items()
                                                     if p["target"] in models.OFFLINE_MODELS]
    # a machine of one's own: every preset it can reach (with the hub off, the offline ones and cached hub ones)
    assert _preset_menu(build_page(public=False)) == [n for n, p in settings.PRESETS.items() if settings.reachable(p)]
    monkeypatch.setattr(settings, "server_device", lambda: "cuda")
    assert _preset_menu(build_page(public=True)) == [n for n, p in settings.PRESETS.items() if not p.get("hub_twin")]


def test_importing_the_page_asks_cuda_nothing():
    """On a ZeroGPU Space ``spaces`` must be imported before anything asks CUDA: the page's
    modules ask only when a page is built or a request comes (``settings.server_device``)."""
    import subprocess
    import sys

    code = ("import torch\n"
            "def asked(*a, **k): raise SystemExit('torch.cuda.is_available() was called at import')\n"
            "torch.cuda.is_available = asked\n"
            "import specviz.ui.page\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_rule_reaches_a_public_request_and_a_bad_one_is_refused_before_loading(no_loading):
    """Public mode offers the rule control too: a rule reaches the request, a bad one is one sentence."""
    from specviz.ui.serve.fields import request_from

    assert request_from(_args(rule="exact-match"), public=True).rule == "exact-match"
    with pytest.raises(gr.Error, match="The verification rule must be one of"):
        _run_demo(rule="typical")
