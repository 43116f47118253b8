"""The guided tour: a small fixed panel that walks a learner through the page one action at a
time (press Run, click a token, step a replay pass, move α in the Playground, …) and moves on
when the learner does the step's action, like the textbook of Transformer Explainer. It runs in
the browser (:func:`tour_js`, loaded once by the page), listening for clicks and inputs on the
controls' elem_ids; its place is kept in sessionStorage, so a reload resumes it. Esc closes it.
The panel's look is the page's stylesheet's (:data:`specviz.ui.draw.styles.TOUR_CSS`)."""

from __future__ import annotations

import json

#: The steps: what to read, the action that moves on (shown as "To go on: …"), and how the page
#: sees it: a CSS selector the event's target must be inside, the events, and optionally a text
#: the matched element must contain (tab buttons have no ids). ``needs``: skip the step when no
#: element matches (the Watch tab is optional). The last step has no action.
STEPS = [
    dict(text="<b>Welcome.</b> A small draft model guesses K tokens; the big target model checks them all in "
              "<i>one</i> verify pass. Let's watch it.",
         action="press <b>Run</b> (left column of the Run tab)", selector="#sv-run-btn", events=["click"]),
    dict(text="Tokens arrive coloured by how they were made: accepted drafts, a resampled token at the first "
              "rejection (the struck-through draft before it), a bonus token when all K passed.",
         action="click any token (or Tab to it and press Enter)", selector="#sv-tokens [data-r]", events=["click"]),
    dict(text="The <b>token inspector</b>, right under the tokens, shows the decision: p_draft, p_target, "
              "min(1, p_target/p_draft) and the uniform draw.",
         action="open <b>Replay, export and saved traces</b> (under the charts)", selector="button, .label-wrap",
         label="Replay, export", events=["click"]),
    dict(text="Replay goes back over the run one verify pass at a time: tokens, summary and charts as they stood.",
         action="press <b>pass ▶</b> or <b>◀ pass</b>", selector="#sv-replay-next, #sv-replay-back",
         events=["click"]),
    dict(text="The <b>race</b> puts plain decoding and the speculative run on one clock: draft time, verify "
              "passes, and the drafting wasted on rejected guesses.",
         action="type a pass number in <b>from pass</b> or <b>to pass</b> to highlight a stretch",
         selector="#sv-race-from, #sv-race-to", events=["input", "change"]),
    dict(text="Why does it pay off at all? The closed form says.", action="open the <b>Playground</b> tab",
         selector="button[role=tab]", label="Playground", events=["click"]),
    dict(text="E[N] = (1 − α^(K+1)) / (1 − α) tokens per pass; the speedup divides it by the round's cost "
              "K·c + v.",
         action="move the <b>α</b> slider", selector="#sv-pg-alpha", events=["input", "change"]),
    dict(text="Which K is best? Predict before you look.",
         action="type a guess of the best K and press <b>Reveal</b> (or <b>Just show it</b>)",
         selector="#sv-pg-reveal, #sv-pg-show", events=["click"]),
    dict(text="Share exactly this setting with your class.", action="press <b>Copy link</b>",
         selector="#sv-pg-copy", events=["click"]),
    dict(text="Watch one verify pass in slow motion, beat by beat.", action="open the <b>Watch a pass</b> tab",
         selector="button[role=tab]", label="Watch a pass", events=["click"], needs=True),
    dict(text="Each lesson sets up the Run tab for one scenario and says what to notice.",
         action="open the <b>Lessons</b> tab", selector="button[role=tab]", label="Lessons", events=["click"]),
    dict(text="<b>That's the tour.</b> Tick <i>Colour-blind-safe colours</i> at the top if green and red are hard "
              "to tell apart. Every control works from the keyboard.", action="", selector="", events=[]),
]

_JS_BODY = """
  if (window.svTour) return [];
  const STEPS = __STEPS__;
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
  let panel = null;
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
    if (!s.open) { if (panel) panel.hidden = true; return; }
    if (!panel) build();
    const step = STEPS[s.step];
    if (step.needs && !present(step)) { go(s.step + 1); return; }
    panel.hidden = false;
    panel.dataset.step = String(s.step);
    panel.querySelector('.sv-tour-count').textContent = 'Tour · step ' + (s.step + 1) + ' of ' + STEPS.length;
    panel.querySelector('.sv-tour-text').innerHTML = step.text;
    panel.querySelector('.sv-tour-do').innerHTML = step.action ? 'To go on: ' + step.action : '';
    panel.querySelector('[data-go="-1"]').disabled = s.step === 0;
    panel.querySelector('[data-go="1"]').textContent = s.step === STEPS.length - 1 ? 'Finish' : 'Skip';
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
    }, true);
  }
  document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape' && load().open) close(); });
  window.svTour = {go, open, close, state: load, steps: STEPS.length};
  render();
  return [];
"""


def tour_js() -> str:
    """The tour's browser code, a function for ``demo.load(None, js=...)``: adds the panel and its
    listeners (once per page)."""
    body = _JS_BODY.replace("__STEPS__", json.dumps(STEPS))
    return "() => {" + body + "}"
