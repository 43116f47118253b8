"""Safe in front of strangers: visitors of a public app, each a ``gradio_client.Client`` session,
never see each other's text (the suffix drafter's history is per visitor), cannot fill the
server's disk or memory (upload cap, bounded exports), get one generation at a time each, and
every generation stops at the public time limit."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time

import gradio as gr
import httpx
import pytest

from specviz.ui.tabs import replay
from specviz.ui.serve import settings
from specviz.ui.serve import visitors
from specviz.ui.page import build_page

gradio_client = pytest.importorskip("gradio_client")

SECRET = "The vault code is 7319-KESTREL-4480."
UPLOAD_MB = 1.0  # the tests' upload limit (SPECVIZ_MAX_UPLOAD_MB), small so the files stay small


@pytest.fixture(scope="module")
def app():
    """A public app (as a Space runs it: public mode, the upload limit, the queue's size)."""
    from specviz.models import loading as models

    models.prepare_offline("smollm2-135m-instruct")
    os.environ[settings.MAX_UPLOAD_ENV] = str(UPLOAD_MB)
    demo = build_page(public=True)
    demo.queue(max_size=settings.QUEUE_SIZE).launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True,
                                                    max_file_size=settings.max_upload_bytes(True))
    try:
        yield demo
    finally:
        demo.close()
        os.environ.pop(settings.MAX_UPLOAD_ENV, None)


def _client(app):
    return gradio_client.Client(app.local_url, verbose=False)


def _run(**overrides):
    values = dict(prompt="Count from one to ten.", target_id="smollm2-135m-instruct", drafter_kind="suffix",
                  draft_model="", early_exit_layers=4, k=4, temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=8,
                  seed=0, chat=True, device="cpu", dtype="float32", branches=1, tree_nodes=0)
    values.update(overrides)
    return values


def _shared(**overrides):
    """The /lossless, /sweep and /side_by_side settings (the run's, less its own fields)."""
    return {k: v for k, v in _run(**overrides).items() if k not in ("max_new_tokens", "branches", "tree_nodes")}


def _exported_trace(client) -> dict:
    files = client.predict(api_name="/export")
    path = next(f for f in files if str(f).endswith("specviz-trace.json"))
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _drafted_text(trace: dict) -> str:
    """Every drafted token's text of a trace (accepted or not)."""
    return "".join(str(d.get("text", "")) for r in trace["rounds"] for d in r.get("drafted", []))


def _emitted_text(trace: dict) -> str:
    return "".join(str(e.get("text", "")) for r in trace["rounds"] for e in r.get("emitted", []))


def _probe(client) -> tuple[str, str]:
    """Visitor B's probe: "The vault code is" with the suffix drafter; (output text, drafted text)."""
    client.predict(**_run(prompt="The vault code is", chat=False, max_new_tokens=6), api_name="/run")
    trace = _exported_trace(client)
    return _emitted_text(trace), _drafted_text(trace)


# ----------------------------------------------------------------------------- 1. privacy
def test_one_visitors_text_is_never_drafted_for_another(app):
    a, b = _client(app), _client(app)
    a.predict(**_run(prompt=f"Repeat exactly, nothing else: {SECRET}", max_new_tokens=24), api_name="/run")
    assert "7319-KESTREL" in _emitted_text(_exported_trace(a))  # A's output holds the secret
    b_output, b_drafted = _probe(b)
    # (SmolLM2 writes digits one token each: " 7", "3", "1", "9".)
    assert "731" not in b_drafted and "KEST" not in b_drafted  # never drafted (struck or accepted) for B
    assert "731" not in b_output
    # A's own history still drafts for A (the drafter works, per visitor) …
    _, a_drafted = _probe(a)
    assert "731" in a_drafted
    # … until A asks to forget it.
    assert "Forgotten" in a.predict(api_name="/forget")
    _, a_drafted = _probe(a)
    assert "731" not in a_drafted


def test_a_visitors_history_is_freed_when_they_leave(app):
    client = _client(app)
    client.predict(**_run(max_new_tokens=4), api_name="/run")
    assert client.session_hash in visitors.HISTORIES
    client.close()  # the tab closed: gradio runs demo.unload once the heartbeat stops
    deadline = time.time() + 60
    while client.session_hash in visitors.HISTORIES and time.time() < deadline:
        time.sleep(0.5)
    assert client.session_hash not in visitors.HISTORIES


def test_history_store_is_bounded_in_sessions_and_time():
    store = visitors.HistoryStore(max_sessions=3, ttl_s=3600)
    for i in range(5):
        store.get(f"s{i}").add([1, 2, 3])
    assert len(store) == 3 and "s0" not in store and "s4" in store
    assert store.get("s4").to_list() == [[1, 2, 3]] and len(store.get("s0")) == 0  # s0 starts afresh
    expiring = visitors.HistoryStore(max_sessions=10, ttl_s=0.0)
    expiring.get("old").add([5])
    time.sleep(0.01)
    expiring.get("new")
    assert "old" not in expiring and len(expiring) == 1


def test_callbacks_without_a_session_get_a_history_of_their_own():
    first, second = visitors.visitor_history(), visitors.visitor_history()
    first.add([1, 2, 3])
    assert first is not second and len(second) == 0
    assert first.max_tokens == visitors.SESSION_HISTORY_MAX_TOKENS


# ----------------------------------------------------------------------------- 2. uploads
def test_an_upload_over_the_limit_is_refused_naming_it(app, tmp_path):
    big = tmp_path / "big.json"
    big.write_text('{"rounds": [' + ",".join(["0"] * 1_200_000) + "]}")
    assert big.stat().st_size > UPLOAD_MB * 2**20
    with pytest.raises(Exception) as err:  # the client reads the server's limit and refuses itself
        _client(app).predict(gradio_client.handle_file(str(big)), api_name="/load_trace")
    assert str(settings.max_upload_bytes(True)) in str(err.value)
    with open(big, "rb") as f:  # a caller that ignores it is refused by the server, before storing
        response = httpx.post(f"{app.local_url}gradio_api/upload", files=[("files", ("big.json", f))])
    assert response.status_code == 413 and "1048576 bytes" in response.text
    # The trace loader checks the same limit (an app launched without max_file_size).
    with pytest.raises(gr.Error, match="larger than 1 MB"):
        replay.load_trace(str(big), public=True)


@pytest.fixture(scope="module")
def saved_trace(app) -> dict:
    """A real exported trace (a short prompt-lookup run) to damage."""
    client = _client(app)
    client.predict(**_run(drafter_kind="ngram", max_new_tokens=6), api_name="/run")
    return _exported_trace(client)


def _nested(trace):
    return "[" * 100_000 + "]" * 100_000


MALFORMED = {
    "deep nesting": (_nested, "nested too deeply"),
    "version as text": (lambda t: json.dumps({**t, "version": "1"}), "version"),
    "rounds as a number": (lambda t: json.dumps({**t, "rounds": 7}), "rounds"),
    "a huge token id": (lambda t: json.dumps(t).replace('"id": ', '"id": 1' + "0" * 400 + " + ", 1).replace(" + ", "", 1),
                        "rounds[0]"),
    "a 5,000-digit number": (lambda t: json.dumps({**t, "k": int("9" * 4000)}), "k"),
    "not JSON": (lambda t: "{not json", "not valid JSON"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_trace_gets_a_clear_message(app, saved_trace, tmp_path, case):
    damage, message = MALFORMED[case]
    path = tmp_path / "trace.json"
    path.write_text(damage(saved_trace))
    with pytest.raises(Exception) as err:
        _client(app).predict(gradio_client.handle_file(str(path)), api_name="/load_trace")
    assert "Could not load that trace" in str(err.value) and message in str(err.value), str(err.value)
    assert "upstream app raised an exception" not in str(err.value)


def test_a_valid_trace_loads(app, saved_trace, tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(saved_trace))
    summary = _client(app).predict(gradio_client.handle_file(str(path)), api_name="/load_trace")[1]
    assert "**Loaded** a saved trace" in summary


def test_max_upload_setting():
    assert settings.max_upload_mb(True, {}) == 5 and settings.max_upload_mb(False, {}) == 64
    assert settings.max_upload_mb(True, {settings.MAX_UPLOAD_ENV: "12"}) == 12
    for bad in ("lots", "-1", "0", "inf"):
        assert settings.max_upload_mb(True, {settings.MAX_UPLOAD_ENV: bad}) == 5


# ----------------------------------------------------------------------------- 3. disk
def _du(*folders) -> int:
    total = 0
    for folder in folders:
        for root, _, files in os.walk(folder):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files if os.path.exists(os.path.join(root, f)))
    return total


def test_exports_do_not_grow_the_disk(app):
    client = _client(app)
    client.predict(**_run(drafter_kind="ngram"), api_name="/run")
    client.predict(api_name="/export")
    before = _du(app.GRADIO_CACHE, visitors.EXPORT_ROOT)
    for _ in range(10):
        files = client.predict(api_name="/export")
        assert len(files) == 3
    assert _du(app.GRADIO_CACHE, visitors.EXPORT_ROOT) - before < 64 * 1024  # not 10 × 4.6 MB


# ----------------------------------------------------------------------------- 4. fair queue
def test_one_generation_waiting_or_running_per_visitor(app):
    a, b = _client(app), _client(app)
    outcomes: list[str] = []

    def submit(i):
        try:
            a.predict(**_run(drafter_kind="ngram", max_new_tokens=24, seed=i), api_name="/run")
            outcomes.append("ran")
        except Exception as err:  # noqa: BLE001 — the refusal is what is tested
            outcomes.append(str(err))

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    started = time.time()
    b.predict(**_run(drafter_kind="ngram", max_new_tokens=4), api_name="/run")  # B waits for one run at most
    b_waited = time.time() - started
    for t in threads:
        t.join(timeout=300)
    refused = [o for o in outcomes if o != "ran"]
    assert outcomes.count("ran") == 1 and len(refused) == 3, outcomes
    assert all("One generation at a time per visitor" in o for o in refused), refused
    assert b_waited < 120
    # Once A's run is over, A may run again.
    a.predict(**_run(drafter_kind="ngram", max_new_tokens=2), api_name="/run")


# ----------------------------------------------------------------------------- 5. time limit
@pytest.fixture
def short_limit(monkeypatch):
    monkeypatch.setattr(settings, "PUBLIC_POLICY", dataclasses.replace(settings.PUBLIC_POLICY, max_run_s=0.3))


def test_experiments_stop_at_the_public_time_limit(app, short_limit):
    status, table, *_ = _client(app).predict("Temperature", "0 1", 48, **_shared(drafter_kind="ngram"),
                                             api_name="/sweep")
    assert "**Stopped** at the public time limit of 0.3 s" in status, status
    assert len(table["data"]) < 2


def test_side_by_side_stops_at_the_public_time_limit(app, short_limit):
    html, status = _client(app).predict(["Prompt lookup", "None (plain decoding)"], 48, **_shared(),
                                        api_name="/side_by_side")
    assert "**Stopped** at the public time limit of 0.3 s" in status and ("0/2" in status or "1/2" in status), status


def test_lossless_check_stops_at_the_public_time_limit(app, monkeypatch):
    monkeypatch.setattr(settings, "PUBLIC_POLICY", dataclasses.replace(settings.PUBLIC_POLICY, max_run_s=1e-6))
    _, text = _client(app).predict(**_shared(drafter_kind="int8", temperature=1.0), n_draws=1000, control=False,
                                   api_name="/lossless")
    assert "**Stopped** at the public time limit" in text and "no draws were made" in text, text


def test_a_visitor_leaving_frees_their_history_and_export_folder(monkeypatch, tmp_path):
    from types import SimpleNamespace

    monkeypatch.setattr(visitors, "EXPORT_ROOT", str(tmp_path))
    leaving, staying = SimpleNamespace(session_hash="leaving"), SimpleNamespace(session_hash="staying")
    visitors.visitor_history(leaving).add([1, 2])
    visitors.visitor_history(staying).add([3, 4])
    folder = visitors.export_folder(leaving)
    open(os.path.join(folder, "specviz-trace.json"), "w").write("{}")
    visitors.end_session(leaving)
    assert "leaving" not in visitors.HISTORIES and not os.path.exists(folder)
    assert visitors.visitor_history(staying).to_list() == [[3, 4]]
    visitors.end_session(staying)


def test_a_visitors_recycling_table_is_their_own_bounded_and_freed_with_their_history():
    from types import SimpleNamespace

    import torch

    mine, theirs = SimpleNamespace(session_hash="mine"), SimpleNamespace(session_hash="theirs")
    table = visitors.visitor_table(mine)
    table.update([7], torch.tensor([[8, 9]]))
    assert visitors.visitor_table(mine) is table and visitors.visitor_table(theirs).row(7) == []
    assert table.max_rows == visitors.SESSION_TABLE_MAX_ROWS and visitors.visitor_table() is not visitors.visitor_table()
    assert "Token Recycling" in visitors.forget(mine)
    assert "mine" not in visitors.TABLES and visitors.visitor_table(mine).row(7) == []
    visitors.visitor_table(theirs)
    visitors.end_session(theirs)
    assert "theirs" not in visitors.TABLES
    visitors.end_session(mine)


def test_export_folders_are_few_and_young(monkeypatch, tmp_path):
    from types import SimpleNamespace

    monkeypatch.setattr(visitors, "EXPORT_ROOT", str(tmp_path))
    monkeypatch.setattr(visitors, "EXPORT_FOLDERS", 3)
    folders = [visitors.export_folder(SimpleNamespace(session_hash=f"s{i}")) for i in range(6)]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(f) for f in folders[-3:])
    os.utime(folders[-2], (0, 0))  # older than the TTL
    visitors.export_folder(SimpleNamespace(session_hash="s5"))
    assert not os.path.exists(folders[-2]) and os.path.exists(folders[-1])


def test_lossless_check_draws_only_what_fits_in_the_public_time_limit(app, monkeypatch):
    # The pair loaded first, under the usual limit: the 0.3 s below is for the draws, and a load in
    # a fresh test process (seconds) would use it up before the first draw.
    _client(app).predict(**_shared(drafter_kind="int8", temperature=1.0), n_draws=100, control=False,
                         api_name="/lossless")
    monkeypatch.setattr(settings, "PUBLIC_POLICY", dataclasses.replace(settings.PUBLIC_POLICY, max_run_s=0.3))
    # 4,000 draws are 4,000 verify steps in Python: far more than 0.3 s on any CPU.
    _, text = _client(app).predict(**_shared(drafter_kind="int8", temperature=1.0), n_draws=4000, control=False,
                                   api_name="/lossless")
    assert "**Fewer draws**" in text and "of the 4000 asked for" in text and "0.3 s" in text, text
    assert "total-variation distance" in text  # the check still reports its figures


# ----------------------------------------------------------------------------- 6. export after run
def test_a_new_visitors_export_right_after_its_run_finds_the_run(app):
    for seed in range(5):
        client = _client(app)
        client.predict(**_run(drafter_kind="ngram", max_new_tokens=2, seed=seed), api_name="/run")
        assert len(client.predict(api_name="/export")) == 3  # not "Nothing to export yet"


# ----------------------------------------------------------------------------- prompt tokens
def test_a_long_cjk_prompt_is_refused_by_its_token_count(app):
    prompt = ("東京の天気は晴れです。" * 260)[:2600]  # 2,600 characters, thousands of tokens
    for endpoint, args in (("/run", _run(prompt=prompt, drafter_kind="ngram", max_new_tokens=2)),
                           ("/lossless", dict(_shared(prompt=prompt, drafter_kind="int8"), n_draws=100,
                                              control=False))):
        with pytest.raises(Exception) as err:
            _client(app).predict(**args, api_name=endpoint)
        assert "tokens long (2600 characters); the limit is 1024 tokens" in str(err.value), str(err.value)
