// Panels "Per cycle" (attributed time per phase in every cycle; a click shows the cycle in the timeline) and
// "Cycle times" (how cycle times spread).
function cyclesPanels(R) {
  var D = R.D, TL = R.TL, WEBGL = R.WEBGL, GL_POINTS = R.GL_POINTS, esc = R.esc, num = R.num, ms = R.ms,
    SHOWN = R.SHOWN, OTHER = R.OTHER, plot = R.plot, baseLayout = R.baseLayout, legendAbove = R.legendAbove,
    choices = R.choices, emptyNote = R.emptyNote,
    timeline = R.timeline;

  function cycleWindow(i) {
    var kinds = TL.windows.kind, n = -1;
    for (var w = 0; w < kinds.length; w++) { if (kinds[w] === "cycle") { n++; if (n === i) return w; } }
    return 0;
  }

  function cycleSeries() {
    var c = D.cycles, box = document.getElementById("cycle-series");
    if (!c.n) { emptyNote(box, "No cycles: the trace has no `" + TL.grouping.join("`/`") + "` ranges."); return; }
    var pids = []; c.pid.forEach(function (p) { if (pids.indexOf(p) < 0) pids.push(p); });
    var per = c.n / pids.length, many = per > GL_POINTS;
    var traces = [], type = many && WEBGL ? "scattergl" : "scatter", mode = per > 600 ? "lines" : "lines+markers";
    pids.forEach(function (pid, pi) {
      var idx = []; c.pid.forEach(function (p, i) { if (p === pid) idx.push(i); });
      var x = idx.map(function (i) { return c.index[i]; });
      var suffix = pids.length > 1 ? " · process " + (pi + 1) : "";
      function series(name, ys, color, extra) {
        traces.push(Object.assign({ type: type, mode: mode, name: esc(name + suffix), x: x, y: idx.map(function (i) { return ys[i]; }),
          line: { color: color, width: 1.3 }, marker: { color: color, size: 4 }, legendgroup: esc(name),
          hovertemplate: "cycle %{x}<br>" + esc(name) + ": %{y:.3f} ms<extra></extra>" }, extra || {}));
      }
      series("cycle on its stream", c.total_ms, "#1d2433", { line: { color: "#1d2433", width: 1.6 } });
      SHOWN.shown.forEach(function (p) { if (c.phases[p.name]) series(p.name, c.phases[p.name], p.color); });
      if (OTHER && c.other_ms) series(OTHER, c.other_ms, "#98a2b3");
      series("cpu range", c.cpu_ms, "#98a2b3", { visible: "legendonly", line: { color: "#98a2b3", width: 1, dash: "dot" } });
    });
    var p50 = c.stats.total.p50, top = Math.max(c.stats.total.max, c.stats.cpu.max), clip = c.stats.total.p99 * 1.3;
    var gd = document.getElementById("cycle-series");
    if (top > 2 * clip) choices(gd, [
      ["all cycles", function () { Plotly.relayout(gd, { "yaxis.autorange": true }); }],
      ["up to p99 × 1.3", function () { Plotly.relayout(gd, { "yaxis.range": [0, clip], "yaxis.autorange": false }); }]]);
    plot(gd, traces, baseLayout({
      height: 320, margin: { l: 56, t: 10, b: 40 }, hovermode: "closest",
      xaxis: { title: { text: "cycle" }, gridcolor: "#f1f2f5", zeroline: false },
      yaxis: { title: { text: "attributed ms" }, gridcolor: "#eef0f3", rangemode: "tozero" },
      legend: legendAbove(),
      shapes: [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: p50, y1: p50, line: { color: "#1d2433", width: 1, dash: "dash" }, opacity: 0.35 }],
      annotations: [{ xref: "paper", x: 1, y: p50, yanchor: "bottom", xanchor: "right", showarrow: false,
        text: "p50 " + num(p50, 2) + " ms", font: { size: 10, color: "#475467" } }],
    })).then(function (gd) {
      gd.on("plotly_click", function (ev) {
        if (!ev || !ev.points || !ev.points.length) return;
        var i = ev.points[0].x;
        timeline.show(cycleWindow(i));
        document.getElementById("panel-timeline").scrollIntoView({ behavior: "smooth", block: "start" });
      });
    });
  }

  function cycleHist() {
    var c = D.cycles, box = document.getElementById("cycle-hist");
    if (!c.n) { emptyNote(box, "No cycles in this trace."); return; }
    var st = c.stats.total;
    var shapes = [], ann = [];
    [["p50", st.p50, "right"], ["p90", st.p90, "left"]].forEach(function (q) {
      shapes.push({ type: "line", yref: "paper", y0: 0, y1: 1, x0: q[1], x1: q[1], line: { color: "#1d2433", width: 1, dash: "dash" } });
      // inside the plotting area, at its top: the legend above it stays clear
      ann.push({ yref: "paper", y: 1, x: q[1], yanchor: "top", xanchor: q[2], showarrow: false, text: " " + q[0] + " " + num(q[1], 2) + " ",
        font: { size: 10 }, bgcolor: "rgba(255,255,255,0.85)" });
    });
    // a few far outliers (a prefill inside a cycle, say) would squeeze every other cycle into one bin: the range
    // and what falls outside it come with the data (derived/views.py cycle_hist_range)
    var h = c.hist, xrange = null;
    if (h && h.clip) {
      xrange = [h.lo_ms, h.hi_ms];
      ann.push({ xref: "paper", yref: "paper", x: 1, y: 0.82, xanchor: "right", showarrow: false, align: "right", font: { size: 10, color: "#b42318" },
        text: h.above + " cycle times above " + num(h.hi_ms, 2) + " ms (max " + num(h.max_ms, 1) + " ms) off the right edge" });
    }
    plot("cycle-hist", [
      { type: "histogram", x: c.total_ms, name: "gpu attributed", marker: { color: "#4C78A8" }, opacity: 0.75, nbinsx: 50,
        xbins: xrange ? { start: xrange[0], end: xrange[1], size: (xrange[1] - xrange[0]) / 60 } : undefined,
        hovertemplate: "%{x} ms: %{y} cycles<extra>gpu</extra>" },
      { type: "histogram", x: c.cpu_ms, name: "cpu range", marker: { color: "#F58518" }, opacity: 0.5, nbinsx: 50,
        xbins: xrange ? { start: xrange[0], end: xrange[1], size: (xrange[1] - xrange[0]) / 60 } : undefined,
        hovertemplate: "%{x} ms: %{y} cycles<extra>cpu</extra>" },
    ], baseLayout({
      barmode: "overlay", height: 300, margin: { l: 50, t: 10, b: 40 }, shapes: shapes, annotations: ann,
      xaxis: { title: { text: "cycle time, ms" }, gridcolor: "#f1f2f5", range: xrange || undefined, autorange: !xrange },
      yaxis: { title: { text: "cycles" }, gridcolor: "#eef0f3" },
      legend: legendAbove(),
    }));
  }

  return { cycleSeries: cycleSeries, cycleHist: cycleHist };
}
