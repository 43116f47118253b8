"""The exported charts page: one self-contained HTML file (plotly.js embedded once, no network)
that says what it shows, written by the Run tab's export (:func:`specviz.ui.tabs.replay.export_run`).
Its few style rules are the stylesheet module's (:data:`.styles.EXPORT_CSS`); every value from
outside the code goes through :func:`.escape.as_text`."""

from __future__ import annotations

from specviz.ui.draw.escape import as_text
from specviz.ui.draw.styles import EXPORT_CSS

__all__ = ["charts_html"]


def _settings_rows(meta: dict) -> list[tuple[str, object]]:
    """The run's settings table, in reading order: the pair, each other setting but the prompt (shown
    apart), then the device, the dtype and how the run finished, each name once; a field the trace
    lacks is left out."""
    head = [("target", meta.get("target")), ("drafter", meta.get("drafter") or "plain decoding")]
    tail = [("device", meta.get("device")), ("dtype", meta.get("dtype")), ("finish", meta.get("finish_reason"))]
    # The settings repeat the target (its name as asked for): each row is listed once.
    shown = {name for name, _ in head + tail} | {"prompt"}
    rows = [*head, *((name, value) for name, value in (meta.get("settings") or {}).items() if name not in shown),
            *tail]
    return [(name, value) for name, value in rows if value is not None]


def charts_html(figures, label: str = "", meta: dict | None = None) -> str:
    """The run's charts (Plotly figures, in order) as one self-contained HTML page under a title
    naming the run (``label``: the pair in words) and a table of the run's settings, model names,
    device and dtype (``meta``: the saved trace's fields other than the rounds), so a page opened
    later says what it shows. The same figures and settings give the same bytes (fixed element
    ids ``sv-chart-<i>``), so re-exporting a run adds nothing to gradio's content-addressed cache."""
    meta = meta or {}
    table = "".join(f"<tr><th>{as_text(str(name))}</th><td>{as_text(str(value))}</td></tr>"
                    for name, value in _settings_rows(meta))
    prompt = (meta.get("settings") or {}).get("prompt")
    title = as_text(f"specviz charts · {label}" if label else "specviz charts")
    body = (f"<h1>{title}</h1><table>{table}</table>"
            + (f"<p>Prompt:</p><pre class='sv-export-prompt'>{as_text(str(prompt))}</pre>" if prompt else ""))
    parts = [fig.to_html(full_html=False, include_plotlyjs=i == 0, div_id=f"sv-chart-{i}")
             for i, fig in enumerate(figures)]
    head = f"<meta charset='utf-8'><title>{title}</title><style>{EXPORT_CSS}</style>"
    return f"<html><head>{head}</head><body>{body}" + "".join(parts) + "</body></html>"
