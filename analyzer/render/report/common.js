// The report's shared pieces (analyzer/render/report/*.js are put together by analyzer/render/html.py, in one
// script): the view model's tables, number and time formatting, DOM helpers that only ever set text, the
// phases' and categories' names and colours, and plotly's defaults. Every panel module takes this context.
function reportContext(D) {
  var TL = D.timeline, S = TL.strings, PH = D.phases, CA = D.categories;
  var plots = [];
  var WEBGL = (function () {
    try { var c = document.createElement("canvas"); return !!(c.getContext("webgl") || c.getContext("experimental-webgl")); }
    catch (e) { return false; }
  })();
  // WebGL pays off only for very long series: its start-up (a software rasteriser where there is no GPU) costs
  // more than one SVG path of tens of thousands of points
  var GL_POINTS = 20000;
  var FONT = { family: "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif", size: 12, color: "#1d2433" };
  // Plotly's toolbar stands upright in the chart's right margin, which every chart keeps at least TOOLBAR_PX wide:
  // it covers no legend, label or data (a toolbar across the top covered the legends above the charts)
  var CONFIG = { displaylogo: false, responsive: true,
    modeBarButtonsToRemove: ["lasso2d", "select2d", "zoomIn2d", "zoomOut2d", "autoScale2d"] };
  var TOOLBAR_PX = 34;

  // ---------------------------------------------------------------------------------------------- helpers
  function esc(s) { return String(s == null ? "" : s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = String(text);
    return e;
  }
  function add(parent) { for (var i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]); return parent; }
  var FMT = {};
  function num(x, d) {
    if (x == null || isNaN(x)) return "-";
    var f = FMT[d] || (FMT[d] = new Intl.NumberFormat("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }));
    return f.format(x);
  }
  function ms(x, d) { return num(x, d == null ? 3 : d) + " ms"; }
  function dur(ns) { return ns < 1e6 ? num(ns / 1e3, 1) + " µs" : num(ns / 1e6, 3) + " ms"; }
  function pct(x, d) { return (x == null || isNaN(x)) ? "-" : (100 * x).toFixed(d == null ? 1 : d) + "%"; }
  function undelta(a) { var out = new Float64Array(a.length), acc = 0; for (var i = 0; i < a.length; i++) { acc += a[i]; out[i] = acc; } return out; }
  function cummaxEnd(s, d) { var out = new Float64Array(s.length), m = -Infinity; for (var i = 0; i < s.length; i++) { m = Math.max(m, s[i] + d[i]); out[i] = m; } return out; }
  function lowerBound(arr, x) { var lo = 0, hi = arr.length; while (lo < hi) { var mid = (lo + hi) >> 1; if (arr[mid] < x) lo = mid + 1; else hi = mid; } return lo; }
  function upperBound(arr, x) { var lo = 0, hi = arr.length; while (lo < hi) { var mid = (lo + hi) >> 1; if (arr[mid] <= x) lo = mid + 1; else hi = mid; } return lo; }
  function phaseName(i) { return i >= 0 && i < PH.length ? PH[i].name : "(grouping)"; }
  function phaseColor(i) { return i >= 0 && i < PH.length ? PH[i].color : "#d0d5dd"; }
  function catName(i) { return i >= 0 && i < CA.length ? CA[i].name : "?"; }
  function catColor(i) { return i >= 0 && i < CA.length ? CA[i].color : "#999"; }
  // Captures with dozens of phases (one per aten op, say) are drawn with the largest ones by name, the rest
  // stacked as "other phases" (the JSON and CSV outputs have them all): which ones, derived/views.py chart_phases.
  var byName = {}; PH.forEach(function (p) { byName[p.name] = p; });
  var SHOWN = { shown: D.chart.shown.map(function (n) { return byName[n]; }), hidden: D.chart.hidden.map(function (n) { return byName[n]; }) };
  var OTHER = SHOWN.hidden.length ? "other phases (" + SHOWN.hidden.length + ")" : null;
  var HIDDEN = {}; D.chart.hidden.forEach(function (n) { HIDDEN[n] = 1; });
  function isShown(name) { return !HIDDEN[name]; }
  function plot(id, data, layout, config) {
    var p = Plotly.newPlot(id, data, layout, Object.assign({}, CONFIG, config || {}));
    plots.push(p);
    return p;
  }
  function baseLayout(extra) {
    var layout = Object.assign({ font: FONT, paper_bgcolor: "#fff", plot_bgcolor: "#fff",
      hoverlabel: { font: { family: FONT.family, size: 12 }, align: "left" }, modebar: { orientation: "v" } }, extra || {});
    layout.margin = Object.assign({ l: 60, r: 16, t: 10, b: 40 }, layout.margin || {});
    layout.margin.r = Math.max(layout.margin.r, TOOLBAR_PX);
    return layout;
  }
  // A legend in one row (or more, wrapping) above the plotting area, from its left edge: plotly grows the top
  // margin to hold it, so it meets neither the data nor the axes' labels.
  function legendAbove(extra) {
    return Object.assign({ orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom", font: { size: 11 } }, extra || {});
  }
  // A row of buttons above the chart `gd`, the first one pressed: `choices` is [[label, f], ...]; pressing one
  // presses it alone and calls its f (HTML beside the chart, never over it: plotly's own buttons sat on labels).
  function choices(gd, list) {
    var bar = el("div", "controls choices"), buttons = [];
    list.forEach(function (c, i) {
      var b = el("button", i ? null : "on", c[0]);
      b.type = "button";
      b.addEventListener("click", function () {
        buttons.forEach(function (x) { x.className = x === b ? "on" : ""; });
        c[1]();
      });
      buttons.push(b);
      bar.appendChild(b);
    });
    gd.parentNode.insertBefore(bar, gd);
    return bar;
  }
  function emptyNote(parent, text) { parent.appendChild(el("p", "muted", text)); }

  return { TL: TL, S: S, PH: PH, CA: CA, plots: plots, TOOLBAR_PX: TOOLBAR_PX, WEBGL: WEBGL, GL_POINTS: GL_POINTS, FONT: FONT, CONFIG: CONFIG,
    esc: esc, el: el, add: add, num: num, ms: ms, dur: dur, pct: pct, undelta: undelta, cummaxEnd: cummaxEnd,
    lowerBound: lowerBound, upperBound: upperBound, phaseName: phaseName, phaseColor: phaseColor, catName: catName,
    catColor: catColor, SHOWN: SHOWN, OTHER: OTHER, isShown: isShown, plot: plot,
    baseLayout: baseLayout, legendAbove: legendAbove, choices: choices, emptyNote: emptyNote, D: D };
}
