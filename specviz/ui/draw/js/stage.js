/* Watch a pass's stage (gr.HTML js_on_load, elem_id sv-watch-stage, watch_tab.py): Space / → step
   forward, ← back, while the tab is visible and no field has the focus (Space on a focused button
   presses it); the plot gets the beat's sentence as its text alternative (role img, aria-label),
   again each time the stage's value changes.
   Reads: .sv-watch-sentence, written by draw/watch_views.py (stage_html); #sv-watch-stage,
   #sv-watch-plot, #sv-watch-next and #sv-watch-back, the components' elem_ids (watch_tab.py). */
const describe = () => {
  const plot = document.querySelector('#sv-watch-plot');
  const text = element.querySelector('.sv-watch-sentence');
  if (plot && text) { plot.setAttribute('role', 'img'); plot.setAttribute('aria-label', text.textContent); }
};
describe();
watch('value', describe);
if (!window.svWatchKeys) {
  window.svWatchKeys = true;
  document.addEventListener('keydown', (event) => {
    const stage = document.querySelector('#sv-watch-stage');
    if (!stage || stage.offsetParent === null || event.altKey || event.ctrlKey || event.metaKey) return;
    const tag = (event.target.tagName || '').toLowerCase();
    if (['input', 'textarea', 'select'].includes(tag) || event.target.isContentEditable) return;
    const button = {'ArrowRight': '#sv-watch-next', ' ': '#sv-watch-next', 'ArrowLeft': '#sv-watch-back'}[event.key];
    if (!button || (tag === 'button' && event.key === ' ')) return;  // Space on a button presses that button
    event.preventDefault();
    document.querySelector(button)?.click();
  });
}
