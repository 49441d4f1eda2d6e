/* The usage page's chart: GPUs reporting, allocated and busy over the page's range
 * (dashboard/usage/report.py allocation_series, passed with json_script), on uPlot
 * (time-chart.js) as the node page's: as Plotly's, it took five tasks to evaluate and a first
 * drawing in parts (issue 18). The band between allocated and busy is shaded: GPUs someone
 * holds that sit idle. The tables are the server's.
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  const LINES = [
    { key: "busy", name: "busy", colour: "#2ca02c" },
    // Its band reaches down to busy: the GPUs held but idle.
    { key: "allocated", name: "allocated", colour: "#d97706", band: "busy" },
    { key: "gpus", name: "GPUs reporting", colour: "#7f7f7f", dash: true },
  ];

  const data = JSON.parse(document.getElementById("usage-series").textContent);

  /* The times and each line's values, with a null where points are missing (ingest away, no GPU
   * reporting): the chart draws a gap there instead of a line across it. */
  function points() {
    const out = { x: [], busy: [], allocated: [], gpus: [] };
    data.ts.forEach(function (ts, i) {
      if (i && ts - data.ts[i - 1] > data.resolution) {
        out.x.push(data.ts[i - 1] + data.resolution);
        LINES.forEach(function (line) { out[line.key].push(null); });
      }
      out.x.push(ts);
      LINES.forEach(function (line) { out[line.key].push(data[line.key][i]); });
    });
    return out;
  }

  function draw() {
    const p = points();
    const chart = new window.GpulseTimeChart(document.getElementById("usage-chart"), {
      title: "GPUs", unit: "GPUs", digits: 1, emptyText: "No usage recorded in this range yet: ingest writes each minute once it is over.",
    });
    chart.update({
      x: p.x,
      lines: LINES.map(function (line) {
        const y = p[line.key];
        const drawn = { label: line.name, colour: line.colour, show: true, y: y, dash: line.dash };
        if (line.band) {
          Object.assign(drawn, { low: p[line.band], high: y });
          // The band is the idle GPUs; the tooltip gives the line's own value.
          drawn.describe = function (i) { return y[i].toFixed(1) + " GPUs"; };
        }
        return drawn;
      }),
      xrange: [data.since, data.until],
      yrange: null,
      thresholds: [],
    });
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
  draw();
})();
