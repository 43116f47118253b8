/* The Run tab's "What an engine would have logged" switch (elem_id sv-engine-log, run_tab.py)
   toggles the class sv-engine-log on the page's root, under which draw/styles.py (ENGINE_CSS) greys
   out what no engine's counters tell: the rejected drafts, the inspector's probabilities and draws
   (the class sv-unlogged, draw/run_views.py's unlogged()), its chart and tree's untested nodes, the
   calibration and the rules charts. Reads no DOM; an event's js with the checkbox's value as input. */
(on) => { document.documentElement.classList.toggle('sv-engine-log', !!on); return []; }
