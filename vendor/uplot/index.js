// uPlot as the pages load it: the global uPlot that static/gpulse/time-chart.js draws with.
import uPlot from "uplot";

window.uPlot = uPlot;
