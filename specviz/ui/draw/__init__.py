"""The page's drawing: plain data in (trace rounds, a run's analysis, a sweep's rows), HTML, CSS,
Markdown and Plotly figures out. Nothing here imports gradio or torch, so every view is tested
without a browser and a saved trace draws exactly like a live run.

* :mod:`.palette`: every colour the page uses, once (token kinds, their colour-blind set, charts);
* :mod:`.styles`: the page's one stylesheet, its colours read from the palette;
* :mod:`.run_views`: the token stream, the summary, the inspector's story, a round as a tree;
* :mod:`.charts`: the Run tab's and the inspector's figures, the playground's, the sweep's;
* :mod:`.beat_charts`: Watch a pass's figures; :mod:`.race`: the race lanes;
* :mod:`.watch_views`: Watch a pass's stage; :mod:`.export_page`: the exported charts page;
* :mod:`.tab_views`: the other tabs' tables and outputs;
* :mod:`.scripts`: the page's JavaScript, one file per script in ``js/`` beside the HTML it reads
  (the tour's steps, its data, in :mod:`.tour_steps`).
"""
