/* The inspector just opened on a token: brought into view if it is not (the page may be scrolled
   elsewhere, or a phone's screen shows only the tokens). An event's js with no inputs, after the
   token click's callback (run_tab.py).
   Reads: #sv-inspector, the inspector Markdown's elem_id (run_tab.py). */
() => {
  const inspector = document.querySelector('#sv-inspector');
  if (inspector) inspector.scrollIntoView({block: 'nearest'});
  return [];
}
