"""The guided tour's steps, as data: the tour's script (``js/tour.js``, bound to these by
:func:`specviz.ui.tour.tour_js`) shows each step's text and action and moves on when the page sees
the action. The texts are the code's own (they are shown as HTML: ``<b>``, ``<i>``); the selectors
name the components' elem_ids, gradio's tab buttons and the token panel's tokens
(``[data-r]``, :mod:`.run_views`). Each step's element is scrolled to the middle of the screen
and outlined while the step shows, so "the thing the text names" is where the learner looks."""

from __future__ import annotations

__all__ = ["STEPS"]

#: The steps: what to read, the action that moves on (shown as "To go on: …"), and how the page
#: sees it: a CSS selector the event's target must be inside, the events, and optionally a text
#: the matched element must contain (tab buttons have no ids). ``needs``: skip the step when no
#: element matches (the Watch tab is optional). ``tab``: the tab the step's element is on, so a
#: learner who switched away is told to go back there (a tab button is on every tab: no ``tab``).
#: The last step has no action.
STEPS = [
    dict(text="<b>Welcome.</b> A cheap drafter guesses K tokens (here prompt lookup, copying from the prompt; the "
              "model pair menu has a small draft model of the same family); the target checks them all in "
              "<i>one</i> verify pass. Let's watch it.",
         action="press <b>Run</b> (under the prompt, outlined)", selector="#sv-run-btn", events=["click"], tab="Run"),
    dict(text="Tokens arrive coloured by how they were made: accepted drafts, a resampled token at the first "
              "rejection (the struck-through draft before it), a bonus token when all K passed.",
         action="click any token (or Tab to it and press Enter)", selector="#sv-tokens [data-r]", events=["click"],
         tab="Run"),
    dict(text="The <b>token inspector</b>, right under the tokens, shows the decision: p_draft, p_target, "
              "min(1, p_target/p_draft) and the uniform draw.",
         action="open <b>Replay, export and saved traces</b> (under the charts)", selector="button, .label-wrap",
         label="Replay, export", events=["click"], tab="Run"),
    dict(text="Replay goes back over the run one verify pass at a time: tokens, summary and charts as they stood.",
         action="press <b>pass ▶</b> or <b>◀ pass</b> (in <b>Replay, export and saved traces</b>)",
         selector="#sv-replay-next, #sv-replay-back",
         events=["click"], tab="Run"),
    dict(text="The <b>race</b> puts plain decoding and the speculative run on one clock: draft time, verify "
              "passes, and the drafting wasted on rejected guesses. In it, a pass number in <b>from pass</b> or "
              "<b>to pass</b> highlights a stretch, here and in the tokens above.",
         action="open <b>The race</b> (under the charts)", selector="button, .label-wrap", label="The race",
         events=["click"], tab="Run"),
    dict(text="Why does it pay off at all? The closed form says.", action="open the <b>Playground</b> tab",
         selector="button[role=tab]", label="Playground", events=["click"]),
    dict(text="E[N] = (1 − α^(K+1)) / (1 − α) tokens per pass; the speedup divides it by the round's cost "
              "K·c + v.",
         action="move the <b>α</b> slider", selector="#sv-pg-alpha", events=["input", "change"], tab="Playground"),
    dict(text="Which K is best? Predict before you look.",
         action="type a guess of the best K and press <b>Reveal</b> (or <b>Just show it</b>)",
         selector="#sv-pg-reveal, #sv-pg-show", events=["click"], tab="Playground"),
    dict(text="Share exactly this setting with your class.", action="press <b>Copy link</b>",
         selector="#sv-pg-copy", events=["click"], tab="Playground"),
    dict(text="Watch one verify pass in slow motion, beat by beat.", action="open the <b>Watch a pass</b> tab",
         selector="button[role=tab]", label="Watch a pass", events=["click"], needs=True),
    dict(text="Each lesson sets up the Run tab for one scenario and says what to notice.",
         action="open the <b>Lessons</b> tab", selector="button[role=tab]", label="Lessons", events=["click"]),
    dict(text="<b>That's the tour.</b> Tick <i>Colour-blind-safe colours</i> at the top if green and red are hard "
              "to tell apart. Every control works from the keyboard.", action="", selector="", events=[]),
]
