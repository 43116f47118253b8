"""The page's tabs, one module each with ``build(ctx)`` (``*_tab.py``), and the pieces only a tab
draws with: the Run tab's stream (``run_stream``), its replay and inspector (``replay``), its
panels (``numbers_hide``, ``lossless_check``, ``dial_view``) and the experiments' shared steps
(``sweep_steps``). Tabs never import each other: they meet in :class:`specviz.ui.context.PageContext`.
"""
