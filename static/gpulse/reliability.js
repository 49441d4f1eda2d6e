/* The reliability page's chart: unexpected incidents per week, one line per component
 * (dashboard/reliability/report.py weekly, passed with json_script), on uPlot (time-chart.js)
 * as the usage page's. The numbers and tables are the server's.
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  // Tableau 10, as the other charts' lines.
  const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf"];
  const WEEK = 7 * 86400;

  const data = JSON.parse(document.getElementById("reliability-series").textContent);
  const lines = data.series.map(function (series, i) {
    return { label: series.label, colour: COLOURS[i % COLOURS.length], show: true, y: series.counts,
      markers: true };
  });

  const chart = new window.GpulseTimeChart(document.getElementById("reliability-chart"), {
    title: "Incidents per week", unit: "incidents", digits: 0,
    emptyText: "No unexpected incident in this range.",
  });
  const weeks = data.weeks;
  chart.update({
    x: weeks,
    lines: lines,
    xrange: weeks.length ? [weeks[0], weeks[weeks.length - 1] + WEEK] : null,
    yrange: null,
    thresholds: [],
  });

  const legend = document.getElementById("reliability-legend");
  legend.replaceChildren.apply(legend, lines.map(function (line) {
    const entry = F.element("span", "legend-entry");
    const swatch = F.element("span", "legend-swatch");
    swatch.style.color = line.colour;
    entry.append(swatch, line.label);
    return entry;
  }));
  document.getElementById("time-zone").textContent = "times in " + F.zoneName();
})();
