/* Marks the verify passes from…to (1-based; one end alone runs to the run's start or end) in the
   token panel, as replay.race_view highlights them in the race lanes: an event's js with the two
   "from pass" / "to pass" numbers as inputs (run_tab.py).
   Reads: #sv-tokens (elem_id, run_tab.py), its rounds .sv-round and their data-round, written by
   draw/run_views.py (render_round). Writes: the class sv-stretch on those rounds, which
   draw/styles.py draws. */
(first, last) => {
  const lo = first || 1, hi = last || Infinity;
  document.querySelectorAll('#sv-tokens .sv-round').forEach((span) => {
    const pass = Number(span.dataset.round) + 1;
    span.classList.toggle('sv-stretch', Boolean(first || last) && pass >= Math.min(lo, hi) && pass <= Math.max(lo, hi));
  });
  return [];
}
