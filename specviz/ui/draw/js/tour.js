/* The guided tour: a small fixed panel (#sv-tour, made here) that walks a learner through the page
   one action at a time and moves on when the learner does the step's action. Called once when the
   page loads with the steps (draw/tour_steps.py's STEPS, bound by tour.py), it adds the panel and
   its listeners (once per page): a click on #sv-tour-btn (page.py's "Take the tour" button) opens
   it; a click, input or change inside the step's selector (and holding its label's text) goes on;
   Esc closes it. Each step scrolls the thing it names to the middle of the screen and outlines it
   (class sv-tour-target, written here). Its place is kept in sessionStorage, so a reload resumes it.
   Reads: #sv-tour-btn (elem_id, page.py); each step's selector, the components' elem_ids and
   gradio's tab buttons, and #sv-tokens [data-r] (draw/run_views.py's tokens); inside its own panel
   .sv-tour-count, .sv-tour-text, .sv-tour-do and button[data-go], which it writes itself. A step
   whose element is on a tab the learner left (its ``tab``) says to go back there first. Its look
   is draw/styles.py's TOUR_CSS. */
(STEPS) => {
  if (window.svTour) return [];
  const KEY = 'sv-tour';
  // The stored place is read back as a step number, never as anything to show: sessionStorage
  // outlives the page's own code (another version of it, or a script on the same origin).
  const load = () => {
    let s = {};
    try { s = JSON.parse(sessionStorage.getItem(KEY)) || {}; } catch (err) {}
    const ok = Number.isInteger(s.step) && s.step >= 0 && s.step < STEPS.length;
    return {open: s.open === true, step: ok ? s.step : 0};
  };
  const save = (s) => { try { sessionStorage.setItem(KEY, JSON.stringify(s)); } catch (err) {} };
  const hit = (el, step) => {
    if (!step.selector || !el || !el.closest) return null;
    const found = el.closest(step.selector);
    return found && (!step.label || found.textContent.includes(step.label)) ? found : null;
  };
  const present = (step) => [...document.querySelectorAll(step.selector)].some(
    (el) => !step.label || el.textContent.includes(step.label));
  // The step's tab is the open one (its button selected): its element may still be out of sight
  // inside a closed section, which the step's own action then names.
  const onTab = (step) => [...document.querySelectorAll('button[role=tab][aria-selected=true]')].some(
    (b) => b.textContent.trim() === step.tab);
  let panel = null;
  let marked = null;  // the element the step names, outlined (class sv-tour-target)
  // The step's thing brought to the middle of the screen and outlined, so the learner sees what the
  // text names (the first step neither scrolled to Run nor pointed at it); the
  // middle, because the panel sits in the bottom-right corner.
  const point = (step) => {
    if (marked) marked.classList.remove('sv-tour-target');
    marked = null;
    if (!step.selector) return;
    const el = [...document.querySelectorAll(step.selector)].find(
      (e) => e.getClientRects().length > 0 && (!step.label || e.textContent.includes(step.label)));
    if (!el) return;
    marked = el;
    el.classList.add('sv-tour-target');
    const still = window.matchMedia && window.matchMedia('(prefers-reduced-motion: reduce)').matches;
    el.scrollIntoView({block: 'center', inline: 'nearest', behavior: still ? 'auto' : 'smooth'});
  };
  function build() {
    panel = document.createElement('div');
    panel.id = 'sv-tour';
    panel.setAttribute('role', 'dialog');
    panel.setAttribute('aria-label', 'Guided tour');
    panel.innerHTML = '<div class="sv-tour-count"></div><div class="sv-tour-text" tabindex="-1" aria-live="polite">'
      + '</div><div class="sv-tour-do"></div><div class="sv-tour-buttons"><button type="button" data-go="-1">Back'
      + '</button><button type="button" data-go="1">Skip</button><button type="button" data-go="0">Close (Esc)'
      + '</button></div>';
    panel.addEventListener('click', (ev) => {
      const b = ev.target.closest('button[data-go]');
      if (!b) return;
      const d = Number(b.dataset.go);
      if (d === 0) close(); else go(load().step + d);
    });
    document.body.appendChild(panel);
  }
  function render() {
    const s = load();
    if (!s.open) { if (panel) panel.hidden = true; point({}); return; }
    if (!panel) build();
    const step = STEPS[s.step];
    if (step.needs && !present(step)) { go(s.step + 1); return; }
    panel.hidden = false;
    panel.dataset.step = String(s.step);
    panel.querySelector('.sv-tour-count').textContent = 'Tour · step ' + (s.step + 1) + ' of ' + STEPS.length;
    panel.querySelector('.sv-tour-text').innerHTML = step.text;
    // A learner who opened another tab is told where the step is, not left with an action they
    // cannot do there.
    const away = step.tab && !onTab(step) ? 'go back to the <b>' + step.tab + '</b> tab, then ' : '';
    panel.querySelector('.sv-tour-do').innerHTML = step.action ? 'To go on: ' + away + step.action : '';
    panel.querySelector('[data-go="-1"]').disabled = s.step === 0;
    panel.querySelector('[data-go="1"]').textContent = s.step === STEPS.length - 1 ? 'Finish' : 'Skip';
    point(step);
  }
  function go(i) {
    if (i >= STEPS.length) { close(); return; }
    save({open: true, step: Math.max(0, i)});
    render();
  }
  function close() { save({open: false, step: load().step}); render(); }
  function open() { save({open: true, step: 0}); render(); panel.querySelector('.sv-tour-text').focus(); }
  for (const type of ['click', 'input', 'change']) {
    document.addEventListener(type, (ev) => {
      if (type === 'click' && ev.target.closest && ev.target.closest('#sv-tour-btn')) { open(); return; }
      const s = load();
      if (!s.open || !panel || panel.contains(ev.target)) return;
      const step = STEPS[s.step];
      if (step.events.includes(type) && hit(ev.target, step)) go(s.step + 1);
      // a tab opened: once gradio has switched it, say again where the step is
      else if (type === 'click' && ev.target.closest && ev.target.closest('button[role=tab]')) {
        setTimeout(render, 200);
        setTimeout(render, 800);  // a heavy tab can take longer to open on a busy machine
      }
    }, true);
  }
  document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape' && load().open) close(); });
  window.svTour = {go, open, close, state: load, steps: STEPS.length};
  render();
  return [];
}
