/* A number typed into a slider's box outside the slider's range: gradio's Slider keeps the typed
   number in the box until the box loses focus, then clamps it to the range without a word, and the
   run uses the clamped value (K 40 ran as 16). This says so under the slider as soon as the number
   is typed: "Lookahead K runs from 1 to 16 here: 40 becomes 16."; and a fraction typed into a slider
   of whole numbers, which the box keeps and Run refuses (K 2.5). The note goes once the box holds a
   number the slider takes again. Run once when the page loads (page.py). Reads: every number box
   inside a gradio block that also holds a range input (any slider, on any tab), the range's min
   and max, and the block's label text; writes one .sv-range-note per block (textContent only:
   the typed text is the visitor's and is never read as markup). Its look is draw/styles.py's
   TOUR_CSS (.sv-range-note). */
() => {
  if (window.__svSliderRange) return [];
  window.__svSliderRange = true;
  const say = (ev) => {
    const box = ev.target;
    if (!(box instanceof HTMLInputElement) || box.type !== 'number') return;
    const block = box.closest('.block');
    const range = block && block.querySelector('input[type=range]');
    if (!range) return;
    let note = block.querySelector('.sv-range-note');
    const typed = Number(box.value), lo = Number(range.min), hi = Number(range.max);
    // A slider of whole numbers (K, B, N…) given a fraction: the box keeps it and Run refuses it.
    const whole = Number.isInteger(Number(range.step)) && Number(range.step) >= 1 && Number.isInteger(lo);
    const fraction = whole && Number.isFinite(typed) && !Number.isInteger(typed);
    if (box.value.trim() === '' || !Number.isFinite(typed) || (typed >= lo && typed <= hi && !fraction)) {
      if (note && ev.type !== 'focusout') note.remove();
      return;
    }
    if (!note) {
      note = document.createElement('div');
      note.className = 'sv-range-note';
      note.setAttribute('role', 'status');
      block.appendChild(note);
    }
    const label = ((block.querySelector('[data-testid=block-info]') || block.querySelector('label') || {})
      .textContent || 'This setting').trim();
    const used = Math.min(Math.max(typed, lo), hi);
    note.textContent = typed >= lo && typed <= hi
      ? label + ' takes whole numbers from ' + lo + ' to ' + hi + ': ' + box.value.trim() + ' is not one, so Run refuses it.'
      : label + ' runs from ' + lo + ' to ' + hi + ' here: ' + box.value.trim() + ' becomes ' + used + '.';
  };
  for (const type of ['input', 'change', 'focusout']) document.addEventListener(type, say, true);
  return [];
}
