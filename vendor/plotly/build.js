// Bundles index.js into dist/plotly-gpulse.min.js, as Plotly's own build makes its partial
// bundles (esbuild-config.js of plotly.js). Evaluating it holds the main thread at every page
// load: the full bundle 680-820 ms on a quiet 2-core machine, the cartesian one 310-390 ms,
// this one 70-140 ms in one task, hence index.js's stages (issue 18, docs/PERFORMANCE.md).
const path = require("path");
const esbuild = require("esbuild");
const { version } = require("plotly.js/package.json");

esbuild.buildSync({
  entryPoints: [path.join(__dirname, "index.js")],
  outfile: path.join(__dirname, "dist", "plotly-gpulse.min.js"),
  bundle: true,
  minify: true,
  // No global name: index.js sets window.GpulsePlotly and, once its last stage has run, window.Plotly.
  format: "iife",
  target: "es2016",
  define: { global: "window", "define.amd": "false" },
  // MapLibre's stylesheet, required only when a map trace registers: there is none.
  loader: { ".css": "empty" },
  // First, V8's explicit compile hint: compile every function as the script is streamed, on a
  // background thread, instead of each on the main thread when first called. On a 2-core machine
  // it took Plotly's longest stage from 12-24 ms to 5-14 ms and a page's first chart from
  // 73-117 ms to 43-64 ms (docs/PERFORMANCE.md, 2026-11-26). Then the version, which devtools/plotly_css.py
  // reads; the bundled libraries' licences are at the end.
  banner: { js: `//# allFunctionsCalledOnLoad\n/* plotly.js (gpulse: scatter - minified) v${version}\n * Copyright Plotly, Inc. Licensed under the MIT license */` },
  logLevel: "warning",
});
