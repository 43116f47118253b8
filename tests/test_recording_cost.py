"""scripts.recording_cost times the loop's recorder inside real runs of the default preset."""

from __future__ import annotations

import re


def test_the_recorder_is_timed_inside_a_real_run_and_its_share_printed(capsys):
    from scripts import recording_cost

    assert recording_cost.main(["--runs", "1", "--max-new-tokens", "8", "--temperature", "0"]) == 0
    out = capsys.readouterr().out
    run = re.search(r"run 0: (\d+) tokens in (\d+) passes, ([\d.]+) s; record ([\d.]+) ms", out)
    assert run, out
    tokens, passes, wall_s, record_ms = int(run[1]), int(run[2]), float(run[3]), float(run[4])
    assert 0 < passes <= tokens <= 8 and record_ms > 0  # the wrapped recorder ran, once a pass
    share = float(re.search(r"median: the recorder is ([\d.]+)% of a run", out)[1])
    assert abs(share - 100 * record_ms / 1000 / wall_s) < 0.15  # the share is recorder time ÷ wall time
