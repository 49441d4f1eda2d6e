/* The usage page's chart: GPUs reporting, allocated and busy over the page's range
 * (dashboard/usage/report.py allocation_series, passed with json_script). The band
 * between allocated and busy is shaded: GPUs someone holds that sit idle. The tables
 * are the server's. window.gpulseUsage says when the chart is drawn (for tests).
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  const FONT = { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 11, color: "#1f2933" };
  const PLOT_CONFIG = { displaylogo: false, displayModeBar: false, responsive: true };
  const LINES = [
    // Busy first: allocated fills down to it ("tonexty"), which shades the idle gap.
    { key: "busy", name: "busy", colour: "#2ca02c" },
    { key: "allocated", name: "allocated", colour: "#d97706", fill: "rgba(217,119,6,0.25)" },
    { key: "gpus", name: "GPUs reporting", colour: "#7f7f7f", dash: "dot" },
  ];

  const data = JSON.parse(document.getElementById("usage-series").textContent);
  const state = (window.gpulseUsage = { drawn: false });

  /* x and each line's y, with a null where points are missing (ingest away, no GPU
   * reporting): Plotly then draws a gap instead of a line across it. */
  function points() {
    const out = { x: [], busy: [], allocated: [], gpus: [] };
    data.ts.forEach(function (ts, i) {
      if (i && ts - data.ts[i - 1] > data.resolution) {
        out.x.push(F.plotlyDate(data.ts[i - 1] + data.resolution));
        LINES.forEach(function (line) { out[line.key].push(null); });
      }
      out.x.push(F.plotlyDate(ts));
      LINES.forEach(function (line) { out[line.key].push(data[line.key][i]); });
    });
    return out;
  }

  function draw() {
    const p = points();
    const traces = LINES.map(function (line) {
      return {
        type: "scatter", mode: "lines", name: line.name, x: p.x, y: p[line.key],
        line: { width: 1.5, color: line.colour, dash: line.dash || "solid" },
        fill: line.fill ? "tonexty" : "none", fillcolor: line.fill,
        hovertemplate: "%{fullData.name}: %{y:.1f} GPUs<extra></extra>",
      };
    });
    const layout = {
      // As the node page's charts: a white plot the dark theme's stylesheet repaints.
      height: 300, margin: { l: 50, r: 10, t: 10, b: 58 }, font: FONT,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#ffffff",
      xaxis: { type: "date", range: [F.plotlyDate(data.since), F.plotlyDate(data.until)],
               gridcolor: "#e8ecf0", linecolor: "#c9d1d9" },
      yaxis: { title: { text: "GPUs" }, rangemode: "tozero", gridcolor: "#e8ecf0", zeroline: false },
      hovermode: "x unified",
      legend: { orientation: "h", x: 0, y: -0.22, font: { size: 10 } },
    };
    Plotly.react(document.getElementById("usage-chart"), traces, layout, PLOT_CONFIG).then(function () {
      state.drawn = true;
    });
  }

  document.getElementById("time-zone").textContent = "times in " + F.zoneName();
  window.GpulsePlotly.then(draw); // Plotly loads in stages, a task each (vendor/plotly/index.js)
})();
