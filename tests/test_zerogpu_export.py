"""/export right after /run, through ``spaces``' real generator wrapper and its forked worker (as on
a ZeroGPU Space): an API client that called /export as soon as /run returned once failed three
times in a row in one script ("Nothing to export yet", then no answer in five minutes). The
driver's ``export`` scenario (:func:`tests.zerogpu_driver.scenario_export`) serves the app with its
queue in a fresh Python and makes the calls with gradio_client.

Measured when it was written: four rounds, each /run 0.4-1.0 s and each /export 0.30-0.34 s, with
its three files. Slow: a fresh Python importing the app and ``spaces``, and four runs in the
forked worker (20 s on 2 cores, kept out of the default suite's time).
"""

from __future__ import annotations

import pytest

from tests.zerogpu_driver import EXPORT_ROUNDS
from tests.zerogpu_harness import build_caches, run_driver

pytest.importorskip("spaces")
pytestmark = pytest.mark.slow


def test_export_right_after_run_answers_each_time_through_the_forked_worker(tmp_path):
    env = {**build_caches(tmp_path), "SPECVIZ_PUBLIC": "0"}  # not public: the run may ask for the CPU
    result = run_driver("export", env, timeout=400)
    assert result["wrapped"] and result["schedules"] >= EXPORT_ROUNDS, result
    assert len(result["rounds"]) == EXPORT_ROUNDS, result
    for answer in result["rounds"]:  # the run's trace, its rounds and its charts, each time, at once
        assert answer["export"] == ["specviz-charts.html", "specviz-rounds.csv", "specviz-trace.json"], result
        assert answer["export_s"] < 30, result
