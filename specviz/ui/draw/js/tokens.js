/* The Run tab's token panel (gr.HTML js_on_load, elem_id sv-tokens): a click, Enter or Space on a
   token sends the component's "click" event with its round, its slot and whether it is a rejected
   draft, which opens the token inspector; the box follows the newest tokens unless the visitor
   scrolled up (a panel with its own heading, .sv-caption, is shown from its top); and the page's
   root carries the class sv-streaming while tokens stream in.
   Reads: #sv-tokens (the component's elem_id, run_tab.py); the tokens' data-r, data-i, data-rej,
   the panel .sv-out, its tokens .sv-tok, its done mark .sv-done and the legend's .sv-caption, all
   written by draw/run_views.py (render_round, PANEL_OPEN, DONE_MARK, with_caption). Writes: sv-streaming on <html>, which
   draw/styles.py (CHART_CSS) reads. */
element.addEventListener('click', (event) => {
  const token = event.target.closest('[data-r]');
  if (!token) return;
  trigger('click', {round: Number(token.dataset.r), slot: Number(token.dataset.i),
                    rejected: token.dataset.rej === '1'});
});
// Keyboard: every token is a button reachable by Tab (tabindex and role come in the HTML, see
// render_round); Enter or Space opens it like a click.
element.addEventListener('keydown', (event) => {
  const token = event.target.closest('[data-r]');
  if (!token || (event.key !== 'Enter' && event.key !== ' ')) return;
  event.preventDefault();
  token.click();
});
// The box (#sv-tokens, a fixed height) follows the newest tokens unless the visitor scrolled up.
const box = element.closest('#sv-tokens') || element;
let follow = true;
box.addEventListener('scroll', () => { follow = box.scrollTop + box.clientHeight >= box.scrollHeight - 40; });
// While tokens stream in (the panel growing, not yet closed by its done mark), the page carries the
// class sv-streaming, under which off-screen charts skip the browser's rendering work
// (styles.CHART_CSS); it goes at the done mark, or 3 s after the panel last changed (a replay).
let streamingTimer = null;
const streaming = (on) => {
  document.documentElement.classList.toggle('sv-streaming', on);
  clearTimeout(streamingTimer);
  if (on) streamingTimer = setTimeout(() => streaming(false), 3000);
};
// A panel with a heading of its own (the recorded run the page opens on: .sv-caption in its legend)
// is shown from its top: followed to its end, its heading and colour key scrolled out of a phone's
// box, where the legend is not sticky. The next panel without one is followed again.
let headed = false;
new MutationObserver(() => {
  if (element.querySelector('.sv-legend > .sv-caption')) {
    headed = true;
    box.scrollTop = 0;
  } else {
    if (headed) { headed = false; follow = true; }
    if (follow) box.scrollTop = box.scrollHeight;
  }
  streaming(!!element.querySelector('.sv-out .sv-tok') && !element.querySelector('.sv-done'));
}).observe(element, {childList: true, subtree: true});
