/* The colour-blind-safe palette: the "Colour-blind-safe colours" checkbox (elem_id sv-cb, page.py)
   toggles the class sv-cb on the page's root, under which draw/palette.py (css_variables) switches
   the token colours' CSS variables to Okabe-Ito's. Reads no DOM; an event's js with the checkbox's
   value as input. */
(on) => { document.documentElement.classList.toggle('sv-cb', !!on); return []; }
