"""specviz as a package: what `import specviz.core.engine` loads, the public API, README's five-line
example, and what `pip install .` puts on disk."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, cwd: Path, env: dict | None = None, python: str = sys.executable) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def test_importing_the_loop_loads_only_the_algorithm():
    out = _python("import specviz.core.engine, sys; print(sorted(m for m in sys.modules if m.startswith('specviz')))",
                  ROOT)
    assert out.returncode == 0, out.stderr
    loaded = eval(out.stdout)
    assert "specviz.core.engine" in loaded
    assert all(m == "specviz" or m.startswith("specviz.core") for m in loaded), loaded


def test_the_public_api_names_load_on_first_use():
    import specviz

    for name in specviz.__all__:
        assert getattr(specviz, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        specviz.nonsense  # noqa: B018


def _readme_example() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Use it from Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_is_five_lines_and_runs(tmp_path):
    """README's example, as a new user runs it, from another folder, on the offline model."""
    code = _readme_example()
    assert len([line for line in code.splitlines() if line.strip()]) == 5, code
    out = _python(code, tmp_path, {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    if "run `python -m specviz prepare" in out.stderr or "not prepared" in out.stderr:
        pytest.skip("run `python -m specviz prepare smollm2-135m-instruct` first")
    assert out.returncode == 0, out.stderr[-2000:]
    printed = out.stdout.strip()
    assert re.search(r"\d\.\d+ \d\.\d+ \d", printed), printed  # α, tokens per pass, the speedup


def test_every_file_the_package_reads_is_in_its_package_data():
    """pyproject's package-data patterns cover every non-Python file under specviz/, so an installed
    package finds its prompts, traces, head, scripts and prose."""
    from fnmatch import fnmatch

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["specviz"]
    files = [p.relative_to(ROOT / "specviz").as_posix() for p in (ROOT / "specviz").rglob("*")
             if p.is_file() and p.suffix not in (".py", ".pyc")]
    missed = [f for f in files if not any(fnmatch(f, pattern) and f.count("/") == pattern.count("/")
                                          for pattern in patterns)]
    assert files and not missed, missed


@pytest.mark.slow
def test_pip_install_in_a_fresh_venv_gives_the_package_and_its_command(tmp_path):
    """`pip install .` into a fresh virtual environment (its dependencies taken from this one), then
    the `specviz` command and the installed package's data, from outside the checkout."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(ROOT)], capture_output=True,
                         text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-2000:]
    help_ = subprocess.run([str(venv / "bin" / "specviz"), "--help"], capture_output=True, text=True, timeout=120)
    assert help_.returncode == 0 and "run" in help_.stdout
    out = _python("import specviz, pathlib; from specviz.run import bench; from specviz.ui.tabs import watch_tab; "
                  "print(specviz.__file__, bench.DEFAULT_PROMPTS.is_file(), len(list(watch_tab.TRACES.glob('*.json'))))",
                  tmp_path, python=str(venv / "bin" / "python"))
    assert out.returncode == 0, out.stderr[-2000:]
    where, prompts, traces = out.stdout.split()
    assert str(venv) in where and prompts == "True" and int(traces) >= 5
