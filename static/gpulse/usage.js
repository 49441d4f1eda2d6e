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
    const gd = document.getElementById("usage-chart");
    const all = parts(traces, layout);
    (function drawPart(k) {
      const drawn = Plotly.react(gd, all[k][0], all[k][1], PLOT_CONFIG);
      if (k + 1 < all.length) requestAnimationFrame(function () { drawPart(k + 1); });
      else drawn.then(function () { state.drawn = true; });
    })(0);
  }

  /* The chart's first drawing in parts, each in an animation frame of its own: drawn at once it
   * was one task of 54-169 ms at 2,000 GPUs, the page's only chart running Plotly's code cold
   * (issue 18, docs/PERFORMANCE.md). The node page's parts (first-drawing.js) with two more:
   * - the legend after the frame: its first drawing widens the bottom margin and Plotly then
   *   draws the whole plot again, axes included, which made the last part 35-62 ms. From then on
   *   every part lists every line, those it does not draw yet as "legendonly" (in the legend,
   *   not in the plot or its ranges), so the margin stays;
   * - the y axis before both: the date axis' tick labels are the costliest to place and measure,
   *   and the two axes in one part took 31-67 ms. */
  function parts(traces, layout) {
    const out = window.GpulseFirstDrawing.parts(traces, layout).concat([[traces, layout]]);
    const axes = out[1][1];
    const yAxis = Object.assign({}, axes, { xaxis: Object.assign({}, axes.xaxis, { visible: false }) });
    out.splice(1, 0, [[], out[0][1]], [[], yAxis]);
    out.slice(1, -1).forEach(function (part) {
      part[0] = traces.map(function (trace, i) {
        return i < part[0].length ? trace : Object.assign({}, trace, { visible: "legendonly" });
      });
    });
    return out;
  }

  document.getElementById("time-zone").textContent = "times in " + F.zoneName();
  // Plotly loads in stages, a task each (vendor/plotly/index.js); the first part waits for a frame
  // of its own rather than running in the task that resolves Plotly.
  window.GpulsePlotly.then(function () { requestAnimationFrame(draw); });
})();
