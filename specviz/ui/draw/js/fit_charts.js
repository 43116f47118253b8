/* Fits each chart's title and legend to the width the chart is drawn at (titles
   cut at the right edge by up to 114 px, wrapped titles rising above the chart, legends over
   titles). The figures (draw/charts.py and friends) arrive with a title wrapped for a typical
   width; Plotly never wraps a title, and a horizontal legend above the plot pushes the top margin
   for itself alone, not for the title above it. So after every draw of a chart (Plotly's
   plotly_afterplot: a new figure, a window resize, a relayout) and every change of its width (a
   ResizeObserver) this re-wraps the title at word
   breaks into lines that fit the chart's width (a single word too long for it gets a smaller
   font), and so the legend's entries; then, from where Plotly drew them, it puts the title at the
   top, the legend between the title and the plot (or under the x axis's title), sets the margins
   to hold them and grows the chart where they would squeeze the plot. Each pass changes a chart
   only when the fit differs, so its own redraws end the loop.
   Called once when the page loads (page.py); one_draw.js calls window.svFitChart after each draw it
   makes. Reads: each chart <div> Plotly draws (class js-plotly-plot: its layout, its _fullLayout
   and its legend group, class legend); window.Plotly. Writes the charts' layouts and trace names, and
   each chart <div>'s height. */
() => {
  if (window.svFitChart) return [];
  const TOP = 6;  // px above the title's first line
  const GAP = 4;  // px between the title, the legend and the plot
  const RIGHT = 10;  // px kept free at the right edge
  const MIN_PLOT = 120;  // px of plot area kept when the title and legend need more: the chart grows
  const SWATCH = 44;  // px of a legend entry that are not its text (the symbol and the padding)
  const pen = document.createElement('canvas').getContext('2d');
  // Titles hold character references (draw/escape.py writes outside text that way): measured as
  // the characters they stand for. An inert document: nothing in it loads or runs.
  const parser = new DOMParser();
  const decoded = (s) => (s.includes('&') ? parser.parseFromString(s, 'text/html').documentElement.textContent : s);
  const measure = (text, font, size) => {
    pen.font = `${font.weight || 'normal'} ${size}px ${font.family || 'sans-serif'}`;
    return pen.measureText(decoded(text)).width;
  };
  // A change made and, once Plotly has drawn it, the next fit: while it is pending the chart's
  // layout already says the new values and its drawing still shows the old, so a fit then would
  // measure the old drawing against the new layout and move the title twice.
  const apply = (gd, change) => {
    gd.__svBusy = true;
    Promise.resolve(change()).catch(() => {}).finally(() => { gd.__svBusy = false; fit(gd); });
  };
  const words = (text) => String(text).replace(/<br\s*\/?>/gi, ' ').split(/\s+/).filter(Boolean);
  const wrap = (list, avail, font, size) => {
    const lines = [];
    let line = '';
    for (const word of list) {
      const longer = line ? line + ' ' + word : word;
      if (!line || measure(longer, font, size) <= avail) line = longer;
      else { lines.push(line); line = word; }
    }
    if (line) lines.push(line);
    return lines;
  };
  // The first pass: the title and the legend's entries wrapped at word breaks to fit the width (a
  // title word too long for it gets a smaller font). Returns whether it changed the chart.
  const fitText = (gd, full, layout) => {
    const width = full.width;
    const update = {};
    const text = layout.title && typeof layout.title.text === 'string' ? layout.title.text : '';
    if (text.trim()) {
      const font = full.title.font || {};
      const left = (full.title.xref === 'paper' ? full.margin.l : 0) + (full.title.x || 0) * width;
      const avail = Math.max(40, width - left - RIGHT);
      let size = (layout.title.font && layout.title.font.size) || font.size || 14;
      let lines = wrap(words(text), avail, font, size);
      const widest = Math.max(...lines.map((l) => measure(l, font, size)));
      if (widest > avail + 1) {  // one word wider than the chart: a smaller font, never below 9 px
        size = Math.max(9, Math.floor(size * avail / widest));
        lines = wrap(words(text), avail, font, size);
        update['title.font.size'] = size;
      }
      if (lines.join('<br>') !== text) update['title.text'] = lines.join('<br>');
    }
    const names = {};
    if (full.showlegend && full.legend) {
      const font = full.legend.font || {};
      const avail = Math.max(60, width - 2 * GAP - SWATCH);
      gd.data.forEach((trace, i) => {
        if (!trace.name || trace.showlegend === false) return;
        const name = wrap(words(trace.name), avail, font, font.size || 11).join('<br>');
        if (name !== trace.name) names[i] = name;
      });
    }
    const restyled = Object.keys(names).map(Number);
    if (!Object.keys(update).length && !restyled.length) return false;
    apply(gd, async () => {
      if (Object.keys(update).length) await window.Plotly.relayout(gd, update);
      if (restyled.length) await window.Plotly.restyle(gd, {name: restyled.map((i) => names[i])}, restyled);
    });
    return true;
  };
  const box = (el) => (el && el.getBoundingClientRect().height > 0 ? el.getBoundingClientRect() : null);
  // The second pass, from what was drawn: the title's first line TOP px below the chart's top
  // edge; a legend above the plot between the title and the plot, one under it below the x axis's
  // tick labels and title (both as wide as the plot at most: Plotly wraps a horizontal legend's
  // entries at the plot's width; placed by the chart's edge, autoexpand pushed the left margin
  // past the plot); the margins holding them, and
  // the chart taller where they would leave less than MIN_PLOT px of plot.
  const fitPlace = (gd, full, layout) => {
    const chart = gd.getBoundingClientRect();
    const size = full._size;
    const update = {};
    const title = box(gd.querySelector('.g-gtitle .gtitle'));
    const named = layout.title && String(layout.title.text || '').trim();
    if (named && !title) return;  // not laid out (an off-screen chart while a run streams): later
    let titleBottom = 0;
    if (title) {
      // Placed by Plotly inside the chart (automargin: Plotly's own rule for where a title of
      // several lines starts; a position set here and measured on the page never settled), and
      // the margin sized from where it was drawn.
      // Plotly centres a title of several lines on the first line's place, so each line after
      // the first lifts it by about 0.65 of its font size: moved down by that much.
      // Where that still leaves it above the chart's edge (seen on a two-line title of 14 px), the
      // rest is made up, not while a run streams (its figures come faster than their redraws), at
      // most 60 px per figure and width (gd.__svNudge).
      const lines = String(layout.title.text).split(/<br\s*\/?>/i).length;
      const above = 1 - (title.top - chart.top);
      const streaming = document.documentElement.className.split(' ').includes('sv-streaming');  // tokens.js's mark
      if (above > 0 && full.title.automargin === true && !streaming && (gd.__svNudge || 0) < 60) {
        gd.__svNudge = Math.min(60, (gd.__svNudge || 0) + above);
      }
      const y = 1 - ((lines - 1) * 0.65 * (full.title.font.size || 14) + (gd.__svNudge || 0)) / full.height;
      if (full.title.automargin !== true) {
        Object.assign(update, {'title.automargin': true, 'title.yref': 'container', 'title.yanchor': 'top',
                               'title.pad.t': TOP});
      }
      if (typeof full.title.y !== 'number' || Math.abs(full.title.y - y) > 1e-3) update['title.y'] = y;
      titleBottom = Math.max(title.bottom - chart.top, TOP + title.height);
    }
    const legendEl = gd.querySelector('g.legend');
    const legend = full.showlegend && full.legend ? box(legendEl) : null;
    const horizontal = legend && full.legend.orientation === 'h';
    const above = horizontal && full.legend.y >= 1;
    const under = horizontal && (full.legend.y < 0 || (full.legend.yref === 'container' && full.legend.y < 0.01));
    let top = layout.margin && layout.margin.t != null ? layout.margin.t : size.t;
    let bottom = layout.margin && layout.margin.b != null ? layout.margin.b : size.b;
    if (title || above) top = Math.ceil((title ? titleBottom : 0) + GAP + (above ? legend.height + GAP : 0));
    if (under) {
      const plotBottom = chart.top + size.t + size.h;
      let axis = 0;
      for (const el of gd.querySelectorAll('.xtick text, .g-xtitle text')) {
        const b = box(el);
        if (b) axis = Math.max(axis, b.bottom - plotBottom);
      }
      bottom = Math.ceil(axis + GAP + legend.height + GAP);
      if (full.legend.yref !== 'container') update['legend.yref'] = 'container';
      if (full.legend.yanchor !== 'bottom') update['legend.yanchor'] = 'bottom';
      if (full.legend.y !== 0) update['legend.y'] = 0;
    }
    // Compared with the margins asked for, not those drawn: Plotly's autoexpand (gradio turns it
    // on) may push a margin further for a legend or a colour bar, and chasing that never ends.
    const asked = layout.margin || {};
    if (Math.abs(top - (asked.t ?? size.t)) > 1) update['margin.t'] = top;
    if (Math.abs(bottom - (asked.b ?? size.b)) > 1) update['margin.b'] = bottom;
    // The figure's own height is kept unless the title and legend need more.
    if (layout.height !== gd.__svHeight) gd.__svBase = layout.height || full.height;
    const height = Math.max(gd.__svBase || full.height, Math.ceil(top + bottom + MIN_PLOT));
    if (Math.abs(height - full.height) > 1) { update.height = height; gd.__svHeight = height; }
    if (Object.keys(update).length) apply(gd, () => window.Plotly.relayout(gd, update));
  };
  const fit = (gd) => {
    const full = gd._fullLayout;
    const layout = gd.layout;
    if (!full || !layout || !full._size || !gd.isConnected || gd.offsetWidth < 50 || !window.Plotly || gd.__svBusy) return;
    // The chart's own height, said on its <div>: after a window was widened, Plotly's responsive
    // resize sized the chart's containers at 100% of a <div> whose height came from nothing else
    // (its SVGs are absolutely placed), and charts outside the Run tab's columns collapsed to 0 px.
    if (full.height > 0 && gd.style.height !== `${full.height}px`) gd.style.height = `${full.height}px`;
    // A guard against a fit that never settles (each fit's redraw calls the next): at most 12 fits
    // of one figure at one width; a new figure or width starts the count again.
    const key = String(full.width);
    const count = gd.__svCount && gd.__svCount.key === key ? gd.__svCount : {key, n: 0};
    gd.__svCount = count;
    if (++count.n > 12) return;
    // Drawn at another width than its <div> has now (Plotly's own resize on a window's resize missed
    // a chart, seen on the race going from 768 to 390 px): resized first, fitted on that redraw.
    // (Plots.resize does nothing to a chart whose layout holds a width and a height.)
    if (Math.abs(full.width - gd.offsetWidth) > 2) { apply(gd, () => window.Plotly.relayout(gd, {width: null, autosize: true})); return; }
    if (!fitText(gd, full, layout)) fitPlace(gd, full, layout);
  };
  // A chart whose <div> changes width (a window resized, a column stacked, a tab shown) is fitted
  // again once the change settles, whether or not Plotly redrew it.
  const timers = new WeakMap();
  const resized = new ResizeObserver((entries) => {
    for (const {target} of entries) {
      if (target.offsetWidth === target.__svWidth) continue;  // a height the fit set: no new fit
      target.__svWidth = target.offsetWidth;
      clearTimeout(timers.get(target));
      timers.set(target, setTimeout(() => {
        Object.assign(target, {__svCount: null, __svNudge: 0, __svNudged: false});
        fit(target);
      }, 250));
    }
  });
  const watch = (gd) => {
    if (!gd || !gd.on) return;
    if (!gd.__svFit) {
      gd.__svFit = true;
      gd.on('plotly_afterplot', () => fit(gd));
      resized.observe(gd);
    }
    gd.__svCount = null;  // a new figure (one_draw.js) or the page's first look: a fresh count
    gd.__svNudge = 0;
    gd.__svNudged = false;
    fit(gd);
  };
  window.svFitChart = watch;
  document.querySelectorAll('.js-plotly-plot').forEach(watch);
  return [];
}
