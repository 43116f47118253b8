"""``python -m specviz import`` and ``export``, run in-process through :func:`specviz.cli.main`:
figures with their engine fields, the closed form from specviz's own functions, export → import for
each engine, and ``import --url`` against a local http.server that replays a recorded SSE stream (no
network). Torch-free: the trace is built from plain records."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from specviz.figures import theory
from specviz.cli import main
from specviz.diagnose.diagnostics import engine_k
from specviz.figures.trace import trace_to_dict
from specviz.core.records import DraftedToken, EmittedToken, Round

FIXTURES = Path(__file__).parent / "fixtures" / "engines"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_import_prints_each_figure_with_its_engine_field_and_conversion(capsys):
    code, out, _ = run_cli(capsys, "import", str(FIXTURES / "vllm_summary.json"))
    assert code == 0
    assert "per-token α (÷ tested): 0.2000" in out
    assert "[vllm:metrics.speculative_decoding.acceptance_histogram]" in out
    assert "passes by accepted drafts (bonus not counted): 0: 39 · 1: 1 · 2: 0 · 3: 3" in out
    assert "give --c and --v" in out


def test_import_json_closed_form_comes_from_specviz_theory_and_engine_k(capsys):
    code, out, _ = run_cli(capsys, "import", str(FIXTURES / "vllm_detailed.json"), "--json", "--c", "0.1", "--v", "1.2")
    data = json.loads(out)
    assert code == 0 and data["engine"] == "vllm" and data["accepted_per_pass"] == [3, 1, 0]
    form = data["closed_form"]
    assert form["alpha"] == pytest.approx(4 / 6)
    assert form["expected_tokens_per_pass"] == pytest.approx(theory.expected_tokens_per_pass(4 / 6, 3))
    assert form["theoretical_speedup"] == pytest.approx(theory.expected_speedup(4 / 6, 3, 0.1, 1.2))
    assert form["engine_k"] == engine_k([2 / 3, 1 / 2, 1.0], 0.1, 1.2).k


def test_import_with_an_earlier_scrape_reads_one_run(capsys):
    code, out, _ = run_cli(capsys, "import", str(FIXTURES / "vllm_metrics_after.prom"), "--before",
                           str(FIXTURES / "vllm_metrics.prom"), "--json")
    data = json.loads(out)
    assert code == 0 and data["cumulative"] is False and data["passes"] == 3


def test_import_of_a_foreign_file_ends_with_one_line(capsys, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("nothing to see", encoding="utf-8")
    code, out, err = run_cli(capsys, "import", str(path))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("specviz: error: file: the file holds no field")


def _trace_file(tmp_path) -> Path:
    """A three-pass chain run with K = 2 as plain records: keeps 2 (bonus), 0 (resample), 1 (resample)."""
    def drafted(n, kept):
        return [DraftedToken(id=10 + i, text=f"d{i}", p_draft=0.5, p_target=0.4, accept_prob=0.8, uniform=0.5,
                             accepted=i < kept, tested=i <= kept) for i in range(n)]

    def emitted(kinds, index):
        return [EmittedToken(id=20 + j, text=f"e{index}{j}", kind=kind, p_target=0.4, round=index)
                for j, kind in enumerate(kinds)]

    rounds = [Round(index=0, drafted=drafted(2, 2), n_accepted=2, emitted=emitted(["accepted", "accepted", "bonus"], 0), k=2),
              Round(index=1, drafted=drafted(2, 0), n_accepted=0, emitted=emitted(["resampled"], 1), k=2),
              Round(index=2, drafted=drafted(2, 1), n_accepted=1, emitted=emitted(["accepted", "resampled"], 2), k=2)]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(trace_to_dict(rounds, k=2, finish_reason="length", settings={"k": 2})), encoding="utf-8")
    return path


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp", "mlx"])
def test_export_then_import_gives_the_runs_own_figures(capsys, tmp_path, engine):
    out_path = tmp_path / f"run.{engine}"
    code, out, _ = run_cli(capsys, "export", str(_trace_file(tmp_path)), "--engine", engine, "-o", str(out_path))
    assert code == 0 and "3 passes (3 drafting)" in out
    code, out, _ = run_cli(capsys, "import", str(out_path), "--json")
    data = json.loads(out)
    figures = {f["name"]: f["value"] for f in data["figures"]}
    assert data["engine"] == engine and data["passes"] == 3
    assert figures["acceptance rate (÷ drafted)"] == pytest.approx(3 / 6)
    assert figures["per-token α (÷ tested)"] == pytest.approx(3 / (2 + 1 + 2))
    assert figures["full acceptance at position 1"] == pytest.approx(2 / 3)


class _Replay(BaseHTTPRequestHandler):
    """Answers every POST with the recorded vLLM stream, keeping the request body it got."""

    bodies: ClassVar[list] = []

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        type(self).bodies.append(json.loads(self.rfile.read(length)))
        payload = (FIXTURES / "vllm_stream.sse").read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture()
def replay_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Replay)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/completions"
    server.shutdown()
    server.server_close()


def test_import_url_streams_one_completion_and_reads_it(capsys, replay_server):
    _Replay.bodies.clear()
    code, out, _ = run_cli(capsys, "import", "--url", replay_server, "--engine", "vllm", "--json", "--max-tokens", "8")
    data = json.loads(out)
    assert code == 0 and data["source"] == replay_server
    assert data["accepted_per_pass"] == [3, 1, 0]
    assert data["token_kinds"][:5] == ["target", "draft", "draft", "draft", "target"]
    body = _Replay.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 8


def test_import_url_that_is_not_http_is_refused_in_one_line(capsys):
    code, _, err = run_cli(capsys, "import", "--url", "file:///etc/passwd")
    assert code == 1 and err.count("\n") == 1 and "not an http:// or https:// address" in err


def test_the_request_body_follows_the_endpoint_each_engine_serves():
    from specviz.engine_logs.stream import request_body

    assert request_body("http://h/generate", "p", 8, None)["sampling_params"] == {"max_new_tokens": 8, "temperature": 0}
    assert request_body("http://h/completion", "p", 8, None)["n_predict"] == 8
    openai = request_body("http://h/v1/completions", "p", 8, "m")
    assert openai["stream_options"] == {"include_usage": True} and openai["model"] == "m" and openai["logprobs"] == 0


def test_a_url_with_a_password_or_key_is_shown_without_them():
    from specviz.engine_logs.stream import display_url

    assert display_url("https://user:secret@host:8443/v1/completions?api_key=k#x") == "https://host:8443/v1/completions"
