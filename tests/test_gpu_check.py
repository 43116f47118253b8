"""``python -m scripts.gpu_check``: the device checks in one command (scripts/gpu_check.py).

Its ``--dry-run`` runs every check on the CPU at tiny shapes; here it runs in a subprocess that
refuses gradio, plotly and gguf (the lent GPU image has none of them), and must exit 0 with one
line per check.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ABSENT_ON_THE_GPU_IMAGE = ("gradio", "plotly", "gguf")

#: Run in the subprocess: a meta path finder that refuses the modules the GPU image lacks and
#: records every attempt (a guarded ``try: import plotly`` would hide a refusal, not the attempt).
REFUSE_AND_RUN = f"""
import atexit, importlib.abc, sys
ABSENT, tried = {ABSENT_ON_THE_GPU_IMAGE!r}, []
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT:
            tried.append(name)
            raise ImportError(f"{{name}} is not installed on the GPU image")
        return None
sys.meta_path.insert(0, Refuse())
atexit.register(lambda: print("tried to import:", sorted(set(tried)), file=sys.stderr))
from scripts.gpu_check import main
sys.exit(main(sys.argv[1:]))
"""

LINE = re.compile(r"^(PASS|FAIL|SKIP) (?P<name>[^:]+): .+ \(expected: .+\)$")


def test_the_dry_run_passes_with_one_line_per_check_and_imports_no_gradio_plotly_or_gguf(tmp_path):
    out = tmp_path / "checks.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", REFUSE_AND_RUN, "--dry-run", "--json", str(out)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, "\n".join(line for line in (done.stdout + done.stderr).splitlines()
                                           if not line.startswith(("PASS", "SKIP")))
    assert "tried to import: []" in done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("versions: python ") and "torch " in lines[0] and "transformers " in lines[0]
    assert re.fullmatch(r"\d+ passed, 0 failed, \d+ skipped in \d+ s", lines[-1]), lines[-1]
    checks = lines[1:-1]
    assert all(LINE.match(line) for line in checks), [line for line in checks if not LINE.match(line)]
    names = [LINE.match(line)["name"] for line in checks]
    assert len(names) == len(set(names)) == 32
    for dtype in ("float32", "bfloat16", "float16"):
        assert f"greedy equality, {dtype}" in names and f"tree-mask agreement, {dtype}" in names
    assert sum(name.startswith("c and v, ") for name in names) == 8  # four pairs, eager and static
    skipped = {name for line, name in zip(checks, names) if line.startswith("SKIP")}
    cuda_only = ("prefill timed", "host syncs", "peak memory", "static draft step", "app job")  # app job: only with --app-job
    assert skipped == {n for n in names if n.startswith(cuda_only)}
    record = json.loads(out.read_text())
    assert [c["name"] for c in record["checks"]] == names and record["summary"] == lines[-1]


def test_the_presets_models_all_have_a_config_in_the_check():
    from scripts.gpu_check import PAIRS, PRESET_CONFIGS
    from specviz.ui.serve.settings import PRESETS

    hub = {spec[key].split("/")[-1] for spec in PRESETS.values() for key in ("target", "draft_model")
           if "/" in spec[key]}
    assert hub and hub <= set(PRESET_CONFIGS)
    assert {name for pair in PAIRS for name in pair} - {"EAGLE head"} == set(PRESET_CONFIGS)


def test_the_offline_smollm2_config_matches_the_checks_copy():
    from scripts.gpu_check import PRESET_CONFIGS
    from specviz.models.offline import cache_dir

    path = cache_dir() / "models" / "smollm2-135m-instruct" / "config.json"
    if not path.is_file():
        pytest.skip("the offline SmolLM2-135M-Instruct is not prepared here")
    saved = json.loads(path.read_text())
    copy = PRESET_CONFIGS["SmolLM2-135M-Instruct"]
    assert {key: saved[key] for key in copy} == copy


def test_without_cuda_the_full_check_refuses_in_one_line(capsys):
    import torch

    from scripts.gpu_check import main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the full check would run")
    assert main([]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--dry-run" in err
