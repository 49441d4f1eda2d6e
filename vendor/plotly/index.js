// The trace types gpulse's pages draw: scatter (in Plotly's core) and heatmap.
// tests/test_browser_plotly_bundle.py fails if a page draws a type left out here.
var Plotly = require("plotly.js/lib/core");

Plotly.register([require("plotly.js/lib/heatmap")]);

module.exports = Plotly;
