"""Threads that survive a busy CPU: the app's default of cores − 1 torch threads,
its overrides, the busy-machine note in a run's notes, and the benchmark's competing load."""

from __future__ import annotations

import pytest
import torch

from specviz.ui.serve import threads


@pytest.fixture
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_default_leaves_one_core_to_everything_else():
    assert [threads.default_threads(n) for n in (1, 2, 4, 16)] == [1, 1, 3, 15]


def test_the_setting_comes_from_the_cli_then_the_env_then_omp_then_the_default(keep_threads):
    assert threads.configure_threads(env={}) == (threads.default_threads(), "default: cores − 1")
    assert torch.get_num_threads() == threads.default_threads()
    assert threads.configure_threads(env={"OMP_NUM_THREADS": "2"}) == (2, "OMP_NUM_THREADS")
    assert threads.configure_threads(env={"SPECVIZ_THREADS": "3", "OMP_NUM_THREADS": "2"}) == (3, "SPECVIZ_THREADS")
    assert torch.get_num_threads() == 3
    assert threads.configure_threads(1, env={"SPECVIZ_THREADS": "3"}) == (1, "given")
    with pytest.raises(ValueError, match="SPECVIZ_THREADS must be a positive integer"):
        threads.configure_threads(env={"SPECVIZ_THREADS": "two"})
    with pytest.raises(ValueError, match=">= 1"):
        threads.configure_threads(0, env={})


def test_the_app_sets_it_before_any_model_loads():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "app.py").read_text(encoding="utf-8")
    assert text.index("configure_threads()") < text.index("from specviz.models import loading as models")


def test_a_busy_machine_is_said_in_the_runs_notes():
    assert threads.busy_note(load=2.4, cores=2) is None
    note = threads.busy_note(load=6.3, cores=2)
    assert "busy" in note and "6.3 on 2 cores" in note
    from specviz.ui.serve.state import RunState

    state = RunState(k=4, finished=True, busy_note=note)
    assert note in state.view(None, "**Done**", True).summary


def test_the_benchmarks_load_starts_and_stops_its_busy_loops():
    from scripts.threads_busy import Load, thread_counts

    assert thread_counts(2) == [1, 2] and thread_counts(8) == [1, 2, 7] and thread_counts(1) == [1]
    with Load(1, 30.0) as load:
        assert [p.poll() for p in load.procs] == [None]
    assert all(p.poll() is not None for p in load.procs)
