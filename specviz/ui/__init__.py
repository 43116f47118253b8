"""The web page (Gradio): :func:`specviz.ui.page.build_page` shows the page, one module per tab
builds that tab, and the pieces below the tabs hold what they share (the run's fields and request,
the run state, the error translator, the model loading, the page-only views, the prose).

Only this package and ``app.py`` import gradio.
"""
