// The trace type gpulse's pages draw: scatter, in Plotly's core (the overview's heatmap is
// heatmap.js's own canvas).
// tests/test_browser_plotly_bundle.py fails if a page draws a type left out here.
//
// Plotly's modules are evaluated in stages, each in a task of its own, so that loading it
// never holds the page for more than 50 ms (issue 18): evaluated in one task, they took
// 81-166 ms at 2,000 GPUs. esbuild wraps each CommonJS module in a function that runs on its
// first require, so requiring a subtree evaluates it (and whatever of its dependencies has not
// run yet); a later require of it only looks it up. The stages follow the order in which
// plotly.js/lib/core requires them; each took up to 24 ms on a 2-core machine (up to 14 ms with
// the compile hint of build.js), where all of them in one task took 53-98 ms
// (docs/PERFORMANCE.md, 2026-11-26).
//
// window.GpulsePlotly is a promise of Plotly once every stage has run; the global Plotly is set
// then too. Page scripts draw their charts from it (GpulsePlotly.then(...)).
var STAGES = [
  function () { require("@plotly/d3"); },
  function () { require("plotly.js/src/components/color"); },
  function () { require("plotly.js/src/lib"); },
  function () { require("plotly.js/build/plotcss"); require("plotly.js/src/plots/cartesian/axes"); },
  function () { require("plotly.js/src/plot_api"); },
  function () { require("plotly.js/lib/core"); },
];

window.GpulsePlotly = new Promise(function (resolve) {
  var next = 0;
  function stage() {
    STAGES[next++]();
    if (next < STAGES.length) setTimeout(stage, 0);
    // Resolved in a task of its own: the charts waiting for it draw as it resolves, and
    // a first draw on cold code, added to the last stage, made a task over 50 ms.
    else setTimeout(function () { resolve((window.Plotly = require("plotly.js/lib/core"))); }, 0);
  }
  stage();
});
