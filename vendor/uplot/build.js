// Bundles index.js into dist/uplot-gpulse.min.js, uPlot with its two locale formats made when first
// used rather than as it is evaluated. The first Intl object a page makes loads ICU's data, 16-74 ms
// in Chromium on a 2-core machine: as uPlot was evaluated it made a NumberFormat (its default axis
// and legend numbers, which gpulse's charts format themselves) and a DateTimeFormat (the browser's
// zone, compared in uPlot.tzDate, which gpulse does not call), and the node page's and /usage/'s
// loads held a long task now and then (issue 18, docs/PERFORMANCE.md, 2026-11-27). The build fails
// if a new uPlot no longer has either statement as written here.
const fs = require("fs");
const path = require("path");
const esbuild = require("esbuild");
const { version } = require("uplot/package.json");

const DIST = path.join(__dirname, "dist");
const LAZY = [
  [
    "const numFormatter = new Intl.NumberFormat(domEnv ? nav.language : 'en-US');\n" +
      "const fmtNum = val => numFormatter.format(val);",
    "let numFormatter = null;\n" +
      "const fmtNum = val => (numFormatter || (numFormatter = new Intl.NumberFormat(domEnv ? nav.language : 'en-US'))).format(val);",
  ],
  // Only uPlot.tzDate reads it, to skip a conversion for the browser's own zone; without it, that
  // zone is converted like any other, to the same time.
  ["const localTz = new Intl.DateTimeFormat().resolvedOptions().timeZone;", "const localTz = null;"],
];

const lazyIntl = {
  name: "lazy-intl",
  setup(build) {
    build.onLoad({ filter: /uPlot\.esm\.js$/ }, (args) => {
      let source = fs.readFileSync(args.path, "utf8");
      for (const [made, lazy] of LAZY) {
        if (source.split(made).length !== 2) throw new Error(`uPlot ${version}: expected once in ${args.path}: ${made}`);
        source = source.replace(made, lazy);
      }
      return { contents: source, loader: "js" };
    });
  },
};

esbuild
  .build({
    entryPoints: [path.join(__dirname, "index.js")],
    outfile: path.join(DIST, "uplot-gpulse.min.js"),
    bundle: true,
    minify: true,
    format: "iife",
    target: "es2020",
    plugins: [lazyIntl],
    // First, V8's explicit compile hint (as vendor/plotly/build.js): every function compiled as the
    // script is streamed, on a background thread. On a 2-core machine it took uPlot's evaluation from
    // a median of 8.3 to 3.6 ms and /usage/'s first chart (made and drawn) from 31 to 13 ms.
    banner: { js: `//# allFunctionsCalledOnLoad\n/* uPlot v${version} (gpulse: locale formats made when first used)\n * Copyright (c) 2022 Leon Sorokin. Licensed under the MIT license */` },
    logLevel: "warning",
  })
  .then(() => fs.copyFileSync(require.resolve("uplot/dist/uPlot.min.css"), path.join(DIST, "uPlot.min.css")))
  .catch((error) => {
    if (!error.errors) console.error(error); // esbuild has printed its own
    process.exit(1);
  });
