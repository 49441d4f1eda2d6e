/* A Plotly chart's first drawing in parts, each drawn in an animation frame of its own (usage.js;
 * issue 18): its frame (the axes hidden), its axes, then
 * its first trace, then all of it. Drawn in one task, a chart's first drawing took 84-124 ms for a
 * page's first chart and 50-70 ms for the next ones at 2,000 GPUs, where a redraw takes 15-25 ms:
 * it builds the chart's frame, axes, tick labels, lines and legend, and a page's first chart runs
 * Plotly's code for each of them cold. The chart ends as one drawing leaves it.
 */
(function () {
  "use strict";

  /* ``layout`` with its axes copied: Plotly writes the ranges it finds into the axes it is given. */
  function copied(layout) {
    return Object.assign({}, layout, { xaxis: Object.assign({}, layout.xaxis), yaxis: Object.assign({}, layout.yaxis) });
  }

  /* The parts drawn before the whole drawing of ``traces`` in ``layout``, as [traces, layout]. */
  function parts(traces, layout) {
    const frame = copied(layout);
    frame.xaxis.visible = frame.yaxis.visible = false; // no tick labels to place and measure yet
    return [[[], frame], [[], copied(layout)], [traces.slice(0, 1), copied(layout)]];
  }

  window.GpulseFirstDrawing = { parts: parts };
})();
