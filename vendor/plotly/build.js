// Bundles index.js into dist/plotly-gpulse.min.js, as Plotly's own build makes its partial
// bundles (esbuild-config.js of plotly.js). Evaluating it holds the main thread at every page
// load: the full bundle 680-820 ms on a quiet 2-core machine, the cartesian one 310-390 ms,
// this one 70-140 ms (issue 18, docs/PERFORMANCE.md).
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
  // devtools/plotly_css.py reads the version here; the bundled libraries' licences are at the end.
  banner: { js: `/* plotly.js (gpulse: scatter, heatmap - minified) v${version}\n * Copyright Plotly, Inc. Licensed under the MIT license */` },
  logLevel: "warning",
});
