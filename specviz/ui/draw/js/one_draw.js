/* Every chart is drawn once per update, in place. gradio's Plot component re-mounts its chart
   whenever a new figure arrives (a {#key} block around the chart in gradio 6's Plot.svelte): in one
   update the old chart's effect redraws the old <div> with Plotly.react, the block removes that
   div, and the new chart draws a fresh one from nothing. Both draws are waste: a fresh draw costs
   2-5 times a redraw of a chart already drawn (the race 136 against 44 ms, tokens per pass 62
   against 13 ms, in a 256-token run), and while tokens streamed the two made up most of each long
   task.

   Run once when the page loads (page.py), this wraps Plotly.react (every other call of Plotly is
   untouched): a call on a chart <div> is carried out once, at the end of the current task's
   microtasks, when gradio's update has settled, and only on a div still in the page. A new div
   that takes the place of one gradio just removed receives the removed div's chart (moved inside
   it, as it stands), which is then redrawn in place. The Plotly global appears when gradio first
   loads its plotly chunk, which may come before or after this script.
   Each chart drawn is handed to window.svFitChart (fit_charts.js), which fits its title and legend.
   Reads: the chart <div>s gradio's Plot passes to Plotly.react and their parents (no id, class
   or data-* attribute of draw/); window.Plotly and window.svFitChart. */
() => {
  if (window.__svOneDraw) return [];
  window.__svOneDraw = true;
  const wrap = (plotly) => {
    if (!plotly || typeof plotly.react !== 'function' || plotly.__svOneDraw) return;
    plotly.__svOneDraw = true;
    const react = plotly.react;
    const pending = new Map();  // gradio's chart div -> [its parent then, the latest call's arguments]
    const drawn = new WeakMap();  // a parent element -> the chart div last drawn there
    const flush = () => {
      const calls = [...pending];
      pending.clear();
      for (const [div, [parent, args]] of calls) {
        if (!div.isConnected) continue;  // removed by this update: its successor draws
        let chart = drawn.get(parent);
        if (chart && chart !== div && !chart.isConnected) div.appendChild(chart);  // the old chart, kept
        else if (!chart || !chart.isConnected || !div.contains(chart)) chart = div;
        drawn.set(parent, chart);
        try {
          // Then its title and legend are fitted to the width it was drawn at (fit_charts.js).
          Promise.resolve(react.call(plotly, chart, ...args)).then(() => window.svFitChart && window.svFitChart(chart),
                                                                   (error) => console.error(error));
        } catch (error) { console.error(error); }  // one chart's failure leaves the others drawn
      }
    };
    plotly.react = function (gd, ...args) {
      if (!(gd instanceof Element) || !gd.parentElement) return react.call(this, gd, ...args);
      if (pending.size === 0) queueMicrotask(flush);
      pending.set(gd, [gd.parentElement, args]);
      return Promise.resolve(gd);
    };
  };
  if (window.Plotly) { wrap(window.Plotly); return []; }
  let loaded;
  Object.defineProperty(window, 'Plotly', {configurable: true, enumerable: true,
    get: () => loaded, set: (value) => { wrap(value); loaded = value; }});
  return [];
}
