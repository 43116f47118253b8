"""The web page (Gradio), the library's one user interface; the library never imports it.

Three floors, one rule each:

* ``specviz/ui/*.py``: the page itself. :func:`specviz.ui.page.build_page` shows it, one
  ``*_tab.py`` module per tab builds that tab and wires its events, and the pieces below the tabs
  hold what they share (the run's fields and request, the run state, the streamed run, the error
  translator, the presets and public mode, the visitors' own data, the prose). Only this package
  and ``app.py`` import gradio.
* ``specviz/ui/draw/``: the page's drawing, plain data in and HTML, CSS, Markdown or Plotly out,
  with the one palette and the one stylesheet. No gradio, no torch.
* ``specviz/ui/teach/``: what only the page's teaching tools compute (a pass as beats, the
  playground's maths, the lossless experiment, the classroom links). No gradio.
"""
