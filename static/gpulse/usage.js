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
      height: 280, margin: { l: 50, r: 28, t: 10, b: 36 }, font: FONT,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#ffffff",
      // As the node page's charts (issue 18): the legend is HTML (showLegend), and the tick labels skip
      // Plotly's check that each stays inside the chart (the margins leave them room). A Plotly legend
      // pushed the margin and made Plotly draw the axes twice; the check measured every label once per
      // label placed: most of the page's one long task, 57-159 ms.
      xaxis: { type: "date", range: [F.plotlyDate(data.since), F.plotlyDate(data.until)],
               gridcolor: "#e8ecf0", linecolor: "#c9d1d9", ticklabeloverflow: "allow" },
      yaxis: { title: { text: "GPUs" }, rangemode: "tozero", gridcolor: "#e8ecf0", zeroline: false, ticklabeloverflow: "allow" },
      hovermode: "x unified",
      showlegend: false,
    };
    // In parts, an animation frame each (first-drawing.js), then whole.
    const parts = window.GpulseFirstDrawing.parts(traces, layout).concat([[traces, layout]]);
    const chart = document.getElementById("usage-chart");
    (function drawPart(k) {
      const drawn = Plotly.react(chart, parts[k][0], parts[k][1], PLOT_CONFIG);
      if (k + 1 < parts.length) requestAnimationFrame(function () { drawPart(k + 1); });
      else drawn.then(function () { state.drawn = true; });
    })(0);
  }

  /* The chart's key: each line's name beside a swatch of its colour (dotted for a dotted line). */
  function showLegend() {
    const legend = document.getElementById("usage-legend");
    legend.replaceChildren.apply(legend, LINES.map(function (line) {
      const entry = F.element("span", "legend-entry");
      const swatch = F.element("span", "legend-swatch" + (line.dash ? " legend-dotted" : ""));
      swatch.style.color = line.colour;
      entry.append(swatch, line.name);
      return entry;
    }));
  }

  document.getElementById("time-zone").textContent = "times in " + F.zoneName();
  showLegend();
  window.GpulsePlotly.then(draw); // Plotly loads in stages, a task each (vendor/plotly/index.js)
})();
