/* A time chart on uPlot (vendor/uplot), for the node page's and the usage page's charts. The node
 * page's live charts are redrawn every second, and a Plotly redraw of one cost about 23 ms at 2,000
 * GPUs, on a slower machine a long task each; uPlot draws the same lines on a canvas in under a
 * millisecond, and it evaluates in one short task where Plotly took five (issue 18,
 * docs/PERFORMANCE.md). It is what Grafana draws its time series panels with.
 *
 * Lines over the time range asked, a gap where a value is null; a line with low and high values
 * has the band between them shaded, a line with dash: true is dotted, a line with markers has
 * a marker at each point (joined: false, markers only); a dashed red line at each alert
 * threshold, labelled; a tooltip with each line's value under the pointer (describe(i), where
 * given, says a point instead); a drag across the chart asks for that time range
 * (options.onZoom(range)), a double-click for none (onZoom(null)): the node page zooms every chart
 * of a section together. Where no line has a value, a message stands in for empty axes. Times are
 * unix seconds, shown in the browser's zone.
 *
 *   const chart = new GpulseTimeChart(element, {title, unit, digits, emptyText, onZoom (or none: no zoom)});
 *   chart.update({x, lines: [{label, colour, show, y, low, high, dash, markers, joined, describe}],
 *                 xrange: [start, end] or null (the data's), yrange: [min, max] or null (from 0 up),
 *                 thresholds: [{value, label}]});
 *
 * element.timeChart is the chart, for tests: its view (the latest update) and uplot.
 */
(function () {
  "use strict";

  const L = window.GpulseFormat;
  const HEIGHT = 220; // the plot and its axes; the title sits above
  const FONT = "11px system-ui, -apple-system, Segoe UI, Roboto, sans-serif";
  const LABEL_FONT = "10px system-ui, -apple-system, Segoe UI, Roboto, sans-serif";
  const THRESHOLD_COLOUR = "#d1242f";
  const MINUTE = 60;
  const DAY = 86400;
  const BAND_ALPHA = 0.15;
  const DOTS = [2, 3]; // a dashed line's dash and gap (CSS pixels)

  /* An x tick's label, local time: seconds where ticks are seconds apart, the date where days are. */
  function tickLabel(ts, step) {
    const local = L.localDateTime(ts); // "YYYY-MM-DD HH:MM:SS.mmm" in the browser's zone
    if (step >= DAY) return local.slice(0, 10);
    return local.slice(11, step < MINUTE ? 19 : 16);
  }

  /* A colour of the page's theme (gpulse.css), read once a chart is made: the canvas cannot use CSS. */
  function themeColour(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  function GpulseTimeChart(element, options) {
    this.element = element;
    this.options = options;
    this.view = null;
    this.uplot = null;
    this.linesKey = "";
    this.width = 0; // the element's, as its ResizeObserver last gave it
    this.title = L.element("div", "chart-title");
    this.title.textContent = options.title;
    this.empty = L.element("p", "chart-empty");
    this.empty.textContent = options.emptyText;
    this.empty.hidden = true;
    this.plot = L.element("div", "chart-plot");
    this.tooltip = L.element("div", "chart-tooltip");
    this.tooltip.hidden = true;
    element.replaceChildren(this.title, this.plot, this.empty);
    element.timeChart = this;
    const chart = this;
    // Sized to its element: a chart of the two-column grid narrows with the window. The observer
    // gives the width once the page is laid out: reading it before (clientWidth) forced the page's
    // first layout into the first chart's drawing, 15-49 ms of it (issue 18).
    new ResizeObserver(function (entries) {
      const width = Math.round(entries[entries.length - 1].contentRect.width);
      if (width === chart.width) return;
      chart.width = width;
      if (chart.uplot) chart.uplot.setSize({ width: width, height: HEIGHT });
      else if (chart.view) chart.draw();
    }).observe(element);
  }

  GpulseTimeChart.prototype.update = function (view) {
    this.view = view;
    this.draw();
  };

  /* Draw the latest view. */
  GpulseTimeChart.prototype.draw = function () {
    const view = this.view;
    const hasValue = view.lines.some(function (line) { return line.y.some(function (v) { return v !== null; }); });
    this.empty.hidden = hasValue;
    this.plot.hidden = !hasValue;
    if (!hasValue || !this.width) return; // drawn once it has a width (hidden, it has none)
    // The lines, how each is drawn, make the chart: made anew only when those change.
    const key = JSON.stringify(view.lines.map(function (line) {
      return [line.label, line.colour, Boolean(line.low), Boolean(line.dash), Boolean(line.markers), line.joined !== false];
    }));
    if (key !== this.linesKey) {
      if (this.uplot) this.uplot.destroy();
      this.uplot = this.make(view);
      this.linesKey = key;
      return;
    }
    const u = this.uplot;
    const first = seriesOf(view);
    view.lines.forEach(function (line, k) {
      if (u.series[first[k]].show === line.show) return;
      lineSeries(line, first[k]).forEach(function (index) { u.setSeries(index, { show: line.show }); });
    });
    u.setData(columns(view)); // the scales' range functions read the view's ranges
  };

  /* uPlot's data: the times, then each line's values, then its low and high where it has a band. */
  function columns(view) {
    const data = [view.x];
    view.lines.forEach(function (line) {
      data.push(line.y);
      if (line.low) data.push(line.low, line.high);
    });
    return data;
  }

  /* The index of each line's first series in columns(view). */
  function seriesOf(view) {
    const first = [];
    let next = 1;
    view.lines.forEach(function (line) {
      first.push(next);
      next += line.low ? 3 : 1;
    });
    return first;
  }

  /* The series indices of ``line``, whose first is ``first``: its values, then its band's low and high. */
  function lineSeries(line, first) {
    return line.low ? [first, first + 1, first + 2] : [first];
  }

  function translucent(hex) {
    return "rgba(" + L.rgb(hex).join(",") + "," + BAND_ALPHA + ")";
  }

  /* The time range when the view asks for none: its times' (oldest first), a minute either side of a
   * single point. From the view, not from the min and max uPlot hands the range function: for a single
   * time uPlot makes those a span of 86,400 / its ms option, 1,000 days for times in seconds, so one
   * probe drew an axis from 2027 to 2029 (issue 32). */
  function dataRange(x) {
    const min = x[0], max = x[x.length - 1];
    return min === max ? [min - MINUTE, max + MINUTE] : [min, max];
  }

  /* The y range when the view fixes none: from 0 to above the highest value and threshold. */
  GpulseTimeChart.prototype.autoY = function (dataMax) {
    let top = dataMax === null || !isFinite(dataMax) ? 0 : dataMax;
    this.view.thresholds.forEach(function (threshold) { top = Math.max(top, threshold.value); });
    return [0, top > 0 ? top * 1.05 : 1];
  };

  GpulseTimeChart.prototype.make = function (view) {
    const chart = this;
    const options = this.options;
    const ink = themeColour("--ink");
    const grid = { stroke: themeColour("--line"), width: 1 };
    const ticks = { stroke: themeColour("--line-strong"), width: 1 };
    return new uPlot({
      width: this.width,
      height: HEIGHT,
      legend: { show: false }, // the section's legend: one for its four charts (node.js)
      scales: {
        x: { time: true, range: function () { return chart.view.xrange || dataRange(chart.view.x); } },
        y: { range: function (u, min, max) { return chart.view.yrange || chart.autoY(max); } },
      },
      axes: [
        { stroke: ink, font: FONT, grid: grid, ticks: ticks, space: 70, // px between time labels, at least
          values: function (u, splits, axis, space, step) { return splits.map(function (ts) { return tickLabel(ts, step); }); } },
        { stroke: ink, font: FONT, grid: grid, ticks: ticks, size: 46,
          values: function (u, splits) { return splits.map(L.axisNumber); } },
      ],
      series: series(view),
      bands: bands(view),
      cursor: {
        y: false,
        points: { show: false },
        drag: { x: Boolean(options.onZoom), y: false, setScale: false },
        bind: {
          // A double-click asks for the whole range again, as the section's Reset zoom button does.
          dblclick: function () { return function (event) { if (event.button === 0 && options.onZoom) options.onZoom(null); }; },
        },
      },
      hooks: {
        draw: [function (u) { chart.drawThresholds(u); }],
        setSelect: [function (u) { chart.selected(u); }],
        setCursor: [function (u) { chart.showTooltip(u); }],
        ready: [function (u) { u.over.append(chart.tooltip); }],
      },
    }, columns(view), this.plot);
  };

  function series(view) {
    const all = [{}];
    view.lines.forEach(function (line) {
      const drawn = { label: line.label, stroke: line.colour, width: 1.5, show: line.show };
      // Without markers, uPlot marks the points only where they are few and far apart: two minutes
      // of usage in a two-hour chart would be two specks.
      if (line.markers) drawn.points = { show: true, size: 6, fill: line.colour, stroke: line.colour };
      if (line.dash) drawn.dash = DOTS.map(function (px) { return px * uPlot.pxRatio; }); // uPlot's are the canvas
      if (line.joined === false) drawn.paths = function () { return null; }; // markers only
      all.push(drawn);
      if (line.low) {
        const edge = { stroke: line.colour, width: 0, show: line.show, points: { show: false } };
        all.push(Object.assign({ label: line.label + " low" }, edge), Object.assign({ label: line.label + " high" }, edge));
      }
    });
    return all;
  }

  /* The shaded band between each line's low and high. */
  function bands(view) {
    const first = seriesOf(view);
    const all = [];
    view.lines.forEach(function (line, k) {
      if (line.low) all.push({ series: [first[k] + 2, first[k] + 1], fill: translucent(line.colour) });
    });
    return all;
  }

  /* A drag across the plot has ended: ask for its time range, and clear the selection drawn. */
  GpulseTimeChart.prototype.selected = function (u) {
    if (u.select.width <= 0) return;
    const range = [u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x")];
    u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
    this.options.onZoom(range);
  };

  GpulseTimeChart.prototype.drawThresholds = function (u) {
    const ctx = u.ctx;
    const ratio = uPlot.pxRatio;
    const box = u.bbox;
    ctx.save();
    ctx.strokeStyle = ctx.fillStyle = THRESHOLD_COLOUR;
    ctx.lineWidth = ratio;
    ctx.setLineDash([5 * ratio, 4 * ratio]);
    ctx.font = LABEL_FONT.replace("10px", 10 * ratio + "px");
    ctx.textAlign = "right";
    ctx.textBaseline = "bottom";
    this.view.thresholds.forEach(function (threshold) {
      const y = Math.round(u.valToPos(threshold.value, "y", true));
      if (y < box.top || y > box.top + box.height) return;
      ctx.beginPath();
      ctx.moveTo(box.left, y);
      ctx.lineTo(box.left + box.width, y);
      ctx.stroke();
      // A rule's name is people's to choose: drawn as text on the canvas, never markup.
      ctx.fillText(threshold.label, box.left + box.width - 2 * ratio, y - 2 * ratio);
    });
    ctx.restore();
  };

  /* Each shown line's value at the pointer's time, beside the pointer. */
  GpulseTimeChart.prototype.showTooltip = function (u) {
    const index = u.cursor.idx;
    if (index === null || index === undefined || u.cursor.left < 0) {
      this.tooltip.hidden = true;
      return;
    }
    const options = this.options;
    const rows = [];
    const head = L.element("div", "chart-tooltip-time");
    head.textContent = L.dateTime(u.data[0][index]); // local "YYYY-MM-DD HH:MM:SS UTC+01:00", as every time a page shows
    rows.push(head);
    this.view.lines.forEach(function (line) {
      const value = line.y[index];
      if (!line.show || value === null || value === undefined) return;
      const row = L.element("div");
      const swatch = L.element("span", "legend-swatch");
      swatch.style.background = line.colour;
      row.append(swatch, " " + line.label + ": " + (line.describe ? line.describe(index) : say(value, line, index, options)));
      rows.push(row);
    });
    this.tooltip.replaceChildren.apply(this.tooltip, rows);
    this.tooltip.hidden = false;
    // Beside the pointer, on the side with more room.
    const left = u.cursor.left < u.over.clientWidth / 2;
    this.tooltip.style.left = left ? u.cursor.left + 12 + "px" : "";
    this.tooltip.style.right = left ? "" : u.over.clientWidth - u.cursor.left + 12 + "px";
  };

  /* "61 °C", or with a band "61 °C (58–64)". */
  function say(value, line, index, options) {
    const text = value.toFixed(options.digits) + " " + options.unit;
    if (!line.low || line.low[index] === null || line.high[index] === null) return text;
    return text + " (" + line.low[index].toFixed(options.digits) + "–" + line.high[index].toFixed(options.digits) + ")";
  }

  window.GpulseTimeChart = GpulseTimeChart;
})();
