/* specprof HTML report: draws the view model in #specprof-data (analyzer/render/html.py; docs/report.md).
 * Every name in the data came from someone else's program: it reaches the page only through textContent,
 * or entity-escaped (esc) where plotly renders it as a label. No markup is ever built from data. */
(function () {
  "use strict";
  var T = { start_ms: performance.now() };

  // The data block is JSON, or for big reports gzip'd JSON in base64 (half the file, and far less for the
  // HTML parser to read), inflated by the browser's own DecompressionStream.
  function loadData() {
    var node = document.getElementById("specprof-data");
    if (node.getAttribute("type") === "application/json") return Promise.resolve(JSON.parse(node.textContent));
    if (typeof DecompressionStream === "undefined") return Promise.reject(new Error("this browser has no DecompressionStream: open the report in a current Chrome, Edge, Firefox or Safari"));
    var bin = atob(node.textContent.trim()), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text().then(JSON.parse);
  }
  loadData().then(function (D) {
    T.parse_ms = performance.now() - T.start_ms;
    app(D);
  }).catch(function (e) {
    console.error("specprof report: " + (e && e.message));
    var h = document.getElementById("subtitle");
    if (h) h.textContent = "The report's data could not be read: " + (e && e.message);
  });

  function app(D) {
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
  var CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

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
  // Captures with dozens of phases (one per aten op, say) are drawn with the TOP_PHASES largest ones by name,
  // the rest summed as "other phases" (the JSON and CSV outputs have them all).
  var TOP_PHASES = 12;
  var SHOWN = (function () {
    var real = PH.filter(function (p) { return !p.pseudo; });
    return { shown: real.slice(0, TOP_PHASES).concat(PH.filter(function (p) { return p.pseudo; })), hidden: real.slice(TOP_PHASES) };
  })();
  var OTHER = SHOWN.hidden.length ? "other phases (" + SHOWN.hidden.length + ")" : null;
  function isShown(name) { return !SHOWN.hidden.some(function (p) { return p.name === name; }); }
  function plot(id, data, layout, config) {
    var p = Plotly.newPlot(id, data, layout, Object.assign({}, CONFIG, config || {}));
    plots.push(p);
    return p;
  }
  function baseLayout(extra) {
    return Object.assign({ font: FONT, paper_bgcolor: "#fff", plot_bgcolor: "#fff", margin: { l: 60, r: 16, t: 10, b: 40 },
      hoverlabel: { font: { family: FONT.family, size: 12 }, align: "left" } }, extra || {});
  }
  function emptyNote(parent, text) { parent.appendChild(el("p", "muted", text)); }

  // ---------------------------------------------------------------------------------------------- header
  function header() {
    var f = D.facts, c = D.cycles;
    var base = String(f.source || "").split("/").pop();
    document.getElementById("title").textContent = "specprof · " + (base || "trace");
    document.getElementById("subtitle").textContent = (f.source || "") + "  ·  " + (f.format || "") +
      (f.tool_version ? " " + f.tool_version : "") + "  ·  generated " + f.generated;
    var cmd = document.getElementById("command");
    if (f.command) {
      add(cmd, el("span", "k", "$ "), document.createTextNode(f.command));
      if (f.nsys_flags) add(cmd, el("span", "k", "   under nsys "), document.createTextNode(f.nsys_flags));
      cmd.title = f.command + (f.nsys_flags ? "\nnsys " + f.nsys_flags : "");
    }
    var tiles = document.getElementById("tiles");
    function tile(v, k, title) { var t = add(el("div", "tile"), el("div", "v", v), el("div", "k", k)); if (title) t.title = title; tiles.appendChild(t); }
    var gpus = (f.gpus || []).map(function (g) { return g.name || ("GPU " + g.device); });
    var uniq = {}; gpus.forEach(function (g) { uniq[g] = (uniq[g] || 0) + 1; });
    tile(Object.keys(uniq).map(function (g) { return (uniq[g] > 1 ? uniq[g] + "× " : "") + g; }).join(", ") || "no GPU listed", "GPUs");
    tile(num(f.cycles, 0), "cycles");
    if (c.n) tile(ms(c.stats.total.p50, 2), "cycle p50 (gpu)", "median GPU time attributed to one cycle; p90 " + ms(c.stats.total.p90, 2));
    tile(num(f.ops, 0), "GPU ops");
    tile(f.device_wall_ms ? pct(f.device_busy_ms / f.device_wall_ms) : "-", "GPU busy", "union of ops over the devices' wall time");
    var top = PH.filter(function (p) { return !p.pseudo; })[0];
    if (top) tile(top.name + " " + pct(top.attributed_ms / (f.attributed_ms || 1)), "largest phase");
    tile(pct(f.unattributed_share, 2), "unattributed", num(f.unattributed_ops, 0) + " ops no range claims");
    var est = D.economics && Array.isArray(D.economics.estimates) ? D.economics.estimates[0] : null;
    if (est && est.speedup != null) tile("×" + num(est.speedup, 2), "speculation speedup", est.source + ": " + (est.verdict || ""));
    else if (est && est.accept_len != null) tile(num(est.accept_len, 2), "accept length", est.source || "");
    tile(f.nsys_version || f.tool_version || "-", f.format === "nsys-sqlite" ? "nsys" : "tool");
  }

  function runFacts() {
    var f = D.facts, box = document.getElementById("run-facts");
    var dl = el("dl", "facts");
    function row(k, v, code) {
      if (v == null || v === "") return;
      dl.appendChild(el("dt", null, k));
      var dd = el("dd");
      if (code) dd.appendChild(el("code", "block", v)); else dd.textContent = String(v);
      dl.appendChild(dd);
    }
    row("trace", f.source);
    row("format", f.format + (f.tool_version ? " (" + f.tool_version + ")" : ""));
    row("nsys", f.nsys_banner);
    (f.gpus || []).forEach(function (g) {
      row("GPU " + g.device, [g.name, g.memory, g.driver ? "driver " + g.driver : null].filter(Boolean).join(" · "));
    });
    row("command", f.command, true);
    row("nsys flags", f.nsys_flags, true);
    row("preset", f.preset);
    var v = f.versions || {};
    row("versions", Object.keys(v).map(function (k) { return k + " " + v[k]; }).join(", "));
    row("host", f.host);
    row("captured", f.start ? f.start + (f.end ? " → " + f.end : "") : null);
    row("contents", num(f.ops, 0) + " GPU ops on " + f.streams + " stream(s), " + num(f.ranges, 0) + " ranges, " +
        num(f.cycles, 0) + " cycles");
    row("GPU time", ms(f.attributed_ms, 1) + " attributed over all streams; devices busy " + ms(f.device_busy_ms, 1) +
        " of " + ms(f.device_wall_ms, 1));
    row("unattributed", pct(f.unattributed_share, 2) + " of attributed time (" + ms(f.unattributed_ms) + ", " +
        num(f.unattributed_ops, 0) + " ops)");
    box.appendChild(dl);
    if (D.streams.length) {
      var t = el("table", "grid"), h = el("tr");
      ["device", "stream", "ops", "wall ms", "busy", "cpu_wait", "launch", "idle"].forEach(function (x, i) { h.appendChild(el("th", i > 1 ? "num" : null, x)); });
      t.appendChild(h);
      D.streams.forEach(function (s) {
        var r = el("tr");
        [s.device, s.stream, num(s.ops, 0), num(s.wall_ms, 1), pct(s.busy_ms / s.wall_ms), pct(s.cpu_wait_ms / s.wall_ms),
         pct(s.launch_ms / s.wall_ms), pct(s.idle_ms / s.wall_ms)].forEach(function (x, i) { r.appendChild(el("td", i > 1 ? "num" : null, x)); });
        t.appendChild(r);
      });
      box.appendChild(el("div", null, "\u00a0"));
      box.appendChild(t);
    }
    if (D.notes && D.notes.length) {
      var ul = el("ul", "notes");
      D.notes.forEach(function (n) { ul.appendChild(el("li", null, n)); });
      box.appendChild(ul);
    }
  }

  // ---------------------------------------------------------------------------------------------- phases
  function phaseBars() {
    var bars = SHOWN.shown.slice();
    if (OTHER) {
      var sum = function (key) { return SHOWN.hidden.reduce(function (acc, p) { return acc + (p[key] || 0); }, 0); };
      bars.push({ name: OTHER, instances: sum("instances"), attributed_ms: sum("attributed_ms"), members: SHOWN.hidden });
    }
    var names = bars.map(function (p) { return esc(p.name); });
    var perInst = bars.map(function (p) { return p.instances || null; });
    var traces = CA.map(function (c) {
      var tot = bars.map(function (p) {
        return p.members ? p.members.reduce(function (acc, q) { return acc + (c.by_phase[q.name] || 0); }, 0) : (c.by_phase[p.name] || 0);
      });
      var share = bars.map(function (p, i) { return p.attributed_ms ? tot[i] / p.attributed_ms : 0; });
      return {
        type: "bar", name: esc(c.name), x: names, y: tot, marker: { color: c.color,
          line: { color: c.idle ? "#98a2b3" : c.color, width: c.idle ? 0.6 : 0 },
          pattern: c.idle ? { shape: "/", fgcolor: "#98a2b3", size: 6, solidity: 0.25 } : undefined },
        customdata: share.map(function (s, i) { return [pct(s), perInst[i] ? ms(tot[i] / perInst[i]) : "-"]; }),
        hovertemplate: "<b>%{x}</b><br>" + esc(c.name) + ": %{y:,.3f} ms (%{customdata[0]} of the phase)<br>per instance %{customdata[1]}<extra></extra>",
      };
    });
    var totals = bars.map(function (p) { return p.attributed_ms; });
    traces.push({ type: "scatter", mode: "text", x: names, y: totals, text: totals.map(function (t) { return num(t, 1); }),
      textposition: "top center", showlegend: false, hoverinfo: "skip", textfont: { size: 11, color: "#475467" } });
    var perI = traces.slice(0, CA.length).map(function (t) { return t.y.map(function (v, i) { return perInst[i] ? v / perInst[i] : 0; }); });
    var perIT = totals.map(function (t, i) { return perInst[i] ? t / perInst[i] : 0; });
    var maxT = Math.max.apply(null, totals.concat([0]));
    plot("phase-bars", traces, baseLayout({
      barmode: "stack", height: 380, margin: { l: 64, r: OTHER ? 40 : 10, t: 34, b: 60 },
      yaxis: { title: { text: "attributed ms (total)" }, gridcolor: "#eef0f3", range: [0, maxT * 1.12 || 1] },
      legend: { orientation: "h", y: -0.2, font: { size: 11 } },
      updatemenus: [{ type: "buttons", direction: "right", x: 0, xanchor: "left", y: 1.13, yanchor: "top", showactive: true,
        font: { size: 11 }, pad: { r: 2, t: 0 },
        buttons: [
          { label: "total", method: "update", args: [{ y: traces.slice(0, CA.length).map(function (t) { return t.y; }).concat([totals]),
            text: [totals.map(function (t) { return num(t, 1); })] }, { "yaxis.title.text": "attributed ms (total)", "yaxis.range": [0, maxT * 1.12 || 1] }] },
          { label: "per instance", method: "update", args: [{ y: perI.concat([perIT]), text: [perIT.map(function (t) { return num(t, 3); })] },
            { "yaxis.title.text": "attributed ms per instance", "yaxis.range": [0, Math.max.apply(null, perIT.concat([0])) * 1.12 || 1] }] }] }],
    }));
  }

  function kernels() {
    var box = document.getElementById("kernels");
    if (!D.kernels.length) { emptyNote(box, "No kernels."); return; }
    var busy = {}; PH.forEach(function (p) { busy[p.name] = p.busy_ms; });
    var color = {}; CA.forEach(function (c) { color[c.name] = c.color; });
    var pcolor = {}; PH.forEach(function (p) { pcolor[p.name] = p.color; });
    var t = el("table", "grid"), h = el("tr");
    [["kernel", null], ["category", null], ["count", "num"], ["gpu ms", "num"], ["share", null]].forEach(function (x) { h.appendChild(el("th", x[1], x[0])); });
    t.appendChild(h);
    var last = null;
    D.kernels.forEach(function (k) {
      if (!isShown(k.phase)) return;
      if (k.phase !== last) {
        var g = el("tr", "group"), td = el("td");
        td.colSpan = 5;
        var sw = el("span", "swatch"); sw.style.background = pcolor[k.phase] || "#999";
        add(td, sw, document.createTextNode(k.phase + "  "), el("span", "muted", "busy " + ms(busy[k.phase], 2)));
        g.appendChild(td); t.appendChild(g); last = k.phase;
      }
      var r = el("tr");
      r.appendChild(el("td", "kname mono", k.name));
      var ct = el("td", "cat"), cs = el("span", "swatch"); cs.style.background = color[k.category] || "#999";
      add(ct, cs, document.createTextNode(k.category));
      r.appendChild(ct);
      r.appendChild(el("td", "num", num(k.count, 0)));
      r.appendChild(el("td", "num", num(k.ms, 3)));
      var share = busy[k.phase] ? k.ms / busy[k.phase] : 0;
      var bt = el("td"), bar = el("div", "bar");
      bar.style.width = Math.max(1, Math.round(90 * share)) + "px"; bar.style.background = color[k.category] || "#999";
      bt.title = pct(share) + " of the phase's busy time";
      add(bt, bar); r.appendChild(bt);
      t.appendChild(r);
    });
    box.appendChild(t);
    if (OTHER) box.appendChild(el("p", "muted", SHOWN.hidden.length + " smaller phases not listed: `specprof analyze --json` or `--csv` has every phase's kernels."));
  }

  // ---------------------------------------------------------------------------------------------- cycles
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
      series("total (gpu)", c.total_ms, "#1d2433", { line: { color: "#1d2433", width: 1.6 } });
      SHOWN.shown.forEach(function (p) { if (c.phases[p.name]) series(p.name, c.phases[p.name], p.color); });
      if (OTHER) {
        var rest = c.total_ms.map(function (v, i) { return SHOWN.hidden.reduce(function (acc, p) { return acc + ((c.phases[p.name] || [])[i] || 0); }, 0); });
        series(OTHER, rest, "#98a2b3");
      }
      series("cpu range", c.cpu_ms, "#98a2b3", { visible: "legendonly", line: { color: "#98a2b3", width: 1, dash: "dot" } });
    });
    var p50 = c.stats.total.p50, top = Math.max(c.stats.total.max, c.stats.cpu.max), clip = c.stats.total.p99 * 1.3;
    var menus = top > 2 * clip ? [{ type: "buttons", direction: "right", x: 1, xanchor: "right", y: -0.16, yanchor: "top", showactive: true,
      font: { size: 11 }, pad: { r: 2, t: 0 }, active: 0,
      buttons: [{ label: "all cycles", method: "relayout", args: [{ "yaxis.autorange": true }] },
        { label: "up to p99 × 1.3", method: "relayout", args: [{ "yaxis.range": [0, clip], "yaxis.autorange": false }] }] }] : [];
    plot("cycle-series", traces, baseLayout({ updatemenus: menus,
      height: 320, margin: { l: 56, r: 10, t: 10, b: 40 }, hovermode: "closest",
      xaxis: { title: { text: "cycle" }, gridcolor: "#f1f2f5", zeroline: false },
      yaxis: { title: { text: "attributed ms" }, gridcolor: "#eef0f3", rangemode: "tozero" },
      legend: { orientation: "h", y: 1.1, font: { size: 11 } },
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
      ann.push({ yref: "paper", y: 1, x: q[1], yanchor: "bottom", xanchor: q[2], showarrow: false, text: " " + q[0] + " " + num(q[1], 2) + " ",
        font: { size: 10 } });
    });
    // a few far outliers (a prefill inside a cycle, say) would squeeze every other cycle into one bin
    var hi = Math.max(st.p99, c.stats.cpu.p99) * 1.25, lo = Math.min(st.min, c.stats.cpu.min), xrange = null;
    if (Math.max(st.max, c.stats.cpu.max) > 2 * hi) {
      xrange = [Math.max(0, lo - (hi - lo) * 0.05), hi];
      var out = c.total_ms.filter(function (v) { return v > hi; }).length, outc = c.cpu_ms.filter(function (v) { return v > hi; }).length;
      ann.push({ xref: "paper", yref: "paper", x: 1, y: 0.82, xanchor: "right", showarrow: false, align: "right", font: { size: 10, color: "#b42318" },
        text: (out + outc) + " cycle times above " + num(hi, 2) + " ms (max " + num(Math.max(st.max, c.stats.cpu.max), 1) + " ms) off the right edge" });
    }
    plot("cycle-hist", [
      { type: "histogram", x: c.total_ms, name: "gpu attributed", marker: { color: "#4C78A8" }, opacity: 0.75, nbinsx: 50,
        xbins: xrange ? { start: xrange[0], end: xrange[1], size: (xrange[1] - xrange[0]) / 60 } : undefined,
        hovertemplate: "%{x} ms: %{y} cycles<extra>gpu</extra>" },
      { type: "histogram", x: c.cpu_ms, name: "cpu range", marker: { color: "#F58518" }, opacity: 0.5, nbinsx: 50,
        xbins: xrange ? { start: xrange[0], end: xrange[1], size: (xrange[1] - xrange[0]) / 60 } : undefined,
        hovertemplate: "%{x} ms: %{y} cycles<extra>cpu</extra>" },
    ], baseLayout({
      barmode: "overlay", height: 300, margin: { l: 50, r: 10, t: 22, b: 40 }, shapes: shapes, annotations: ann,
      xaxis: { title: { text: "cycle time, ms" }, gridcolor: "#f1f2f5", range: xrange || undefined, autorange: !xrange },
      yaxis: { title: { text: "cycles" }, gridcolor: "#eef0f3" },
      legend: { orientation: "h", x: 1, xanchor: "right", y: 1.16, font: { size: 11 } },
    }));
  }

  // ---------------------------------------------------------------------------------------------- timeline
  var timeline = (function () {
    var W = TL.windows, NW = W.start.length;
    var ops = TL.ops, idle = TL.idle, blk = TL.blocks, rg = TL.ranges;
    ops.S = undelta(ops.s); ops.K = undelta(ops.k); ops.E = cummaxEnd(ops.S, ops.d);
    idle.S = undelta(idle.s); idle.E = cummaxEnd(idle.S, idle.d);
    blk.S = undelta(blk.s); blk.E = cummaxEnd(blk.S, blk.d);
    rg.S = undelta(rg.s); rg.E = cummaxEnd(rg.S, rg.d);
    var la = TL.launches || { r: [], s: [], d: [], n: [], o: [], c: [] };
    la.S = undelta(la.s); la.E = cummaxEnd(la.S, la.d);
    var CAT_DY = 0.8;     // the category lane, below a stream's phase lane

    // Lane layout: y grows downwards; a CPU row has one lane per range depth, a GPU row two lanes.
    var laneY = [], ticks = [], tickText = [], lanes = [], y = 0;
    TL.rows.forEach(function (r, i) {
      laneY[i] = y;
      if (r.kind === "cpu") {
        ticks.push(y); tickText.push(esc(r.label) + (r.api_lane === 0 ? " <i>launch calls</i>" : ""));
        if (r.api_lane > 0) { ticks.push(y + r.api_lane); tickText.push("<i>launch calls</i>"); }
        for (var l = 0; l < r.lanes; l++) lanes.push({ y: y + l, row: i, kind: l === r.api_lane ? "api" : "cpu", lane: l });
        y += r.lanes;
      } else {
        ticks.push(y, y + CAT_DY); tickText.push("<b>" + esc(r.label) + "</b>", "<i>categories</i>");
        lanes.push({ y: y, row: i, kind: "gpu" }, { y: y + CAT_DY, row: i, kind: "cat" });
        y += 1 + CAT_DY;
      }
      y += 0.45;
    });
    var yMax = y;

    // Per-row (and per-lane) index lists, for hit testing under the mouse.
    function byRow(set, lane) {
      var out = {};
      for (var i = 0; i < set.S.length; i++) { var k = lane ? set.r[i] + ":" + set.l[i] : set.r[i]; (out[k] = out[k] || []).push(i); }
      return out;
    }
    var opsRow = byRow(ops), idleRow = byRow(idle), blkRow = byRow(blk), rgLane = byRow(rg, true), apiRow = byRow(la);

    function inWindow(set, a, b) {
      var i0 = upperBound(set.E, a), i1 = lowerBound(set.S, b);
      return [i0, Math.max(i0, i1)];
    }

    // One filled SVG path per colour: a rectangle per item, separated by gaps (fast for any count).
    function rects(name, color, extra) {
      return Object.assign({ type: "scatter", mode: "lines", name: name, x: [], y: [], fill: "toself", fillcolor: color,
        line: { width: 0, color: color, simplify: false }, hoverinfo: "skip", connectgaps: false }, extra || {});
    }
    var minW = 0;
    function rect(t, s, e, yc, h) {
      if (e - s < minW) { var m = (s + e) / 2; s = m - minW / 2; e = m + minW / 2; }
      var x0 = s / 1e6, x1 = e / 1e6, y0 = yc - h / 2, y1 = yc + h / 2;
      t.x.push(x0, x1, x1, x0, x0, null); t.y.push(y0, y0, y1, y1, y0, null);
    }

    // Draws [a, b) at the resolution of `px` pixels: neighbours of one lane and colour closer than a pixel are
    // drawn as one rectangle (the data under the mouse stays op by op), and nothing is thinner than a pixel.
    function build(a, b, px) {
      var byPhase = {}, byCat = {}, idlePh = {}, blkPh = {}, rgPh = {}, n;
      var tol = Math.max(1, (b - a) / Math.max(200, px || 1200));
      minW = tol;
      PH.forEach(function (p, i) {
        var g = "p" + i;
        byPhase[i] = rects(esc(p.name), p.color, { legendgroup: g, legend: "legend" });
        idlePh[i] = rects(esc(p.name) + " (idle)", p.color, { legendgroup: g, legend: "legend", showlegend: false, opacity: 0.4 });
        blkPh[i] = rects(esc(p.name) + " (blocks)", p.color, { legendgroup: g, legend: "legend", showlegend: false, opacity: 0.55 });
        rgPh[i] = rects(esc(p.name) + " (ranges)", p.color, { legendgroup: g, legend: "legend", showlegend: false,
          line: { width: 0.6, color: "#ffffff", simplify: false } });
      });
      rgPh[-1] = rects(esc(TL.grouping.join("/")) + " ranges", "#eef0f4", { legendgroup: "grp", legend: "legend",
        line: { width: 1, color: "#98a2b3", simplify: false } });
      CA.forEach(function (c, i) {
        byCat[i] = rects(esc(c.name), c.color, { legendgroup: "c" + i, legend: "legend2" });
      });
      var apiT = rects("launch calls", "#475467", { legendgroup: "api", legend: "legend" });

      var open = {}, merged = 0;
      function emit(t, key, s, e, yc, h) {
        var o = open[key];
        if (o && s - o.e <= tol) { if (e > o.e) o.e = e; merged++; return; }
        if (o) rect(o.t, o.s, o.e, o.y, o.h);
        open[key] = { t: t, s: s, e: e, y: yc, h: h };
      }
      var r = inWindow(ops, a, b), i;
      n = r[1] - r[0];
      for (i = r[0]; i < r[1]; i++) {
        var s = ops.S[i], e = s + ops.d[i]; if (e <= a) continue;
        var yy = laneY[ops.r[i]], p = ops.p[i], c = ops.c[i];
        if (byPhase[p]) emit(byPhase[p], "p" + ops.r[i] + ":" + p, s, e, yy, 0.8);
        if (byCat[c]) emit(byCat[c], "c" + ops.r[i] + ":" + c, s, e, yy + CAT_DY, 0.5);
      }
      // idle segments: thin in the phase lane (charged to that phase), full in the category lane
      r = inWindow(idle, a, b);
      for (i = r[0]; i < r[1]; i++) {
        var is = idle.S[i], ie = is + idle.d[i], yv = laneY[idle.r[i]];
        if (ie <= a) continue;
        if (idlePh[idle.p[i]]) emit(idlePh[idle.p[i]], "i" + idle.r[i] + ":" + idle.p[i], is, ie, yv, 0.28);
        if (byCat[idle.c[i]]) emit(byCat[idle.c[i]], "c" + idle.r[i] + ":" + idle.c[i], is, ie, yv + CAT_DY, 0.5);
      }
      // aggregated blocks outside the windows with op detail
      r = inWindow(blk, a, b);
      for (i = r[0]; i < r[1]; i++) {
        if (blkPh[blk.p[i]]) emit(blkPh[blk.p[i]], "b" + blk.r[i] + ":" + blk.p[i], blk.S[i], blk.S[i] + blk.d[i], laneY[blk.r[i]] + CAT_DY / 2, 1.5);
      }
      Object.keys(open).forEach(function (k) { var o = open[k]; rect(o.t, o.s, o.e, o.y, o.h); });

      // launch calls (CUDA runtime and driver) on the CPU threads
      r = inWindow(la, a, b);
      for (i = r[0]; i < r[1]; i++) {
        var row = TL.rows[la.r[i]];
        if (row && la.S[i] + la.d[i] > a) emit(apiT, "a" + la.r[i], la.S[i], la.S[i] + la.d[i], laneY[la.r[i]] + row.api_lane, 0.55);
      }
      // CPU ranges
      r = inWindow(rg, a, b);
      for (i = r[0]; i < r[1]; i++) {
        var rs = rg.S[i]; if (rs + rg.d[i] <= a) continue;
        rect(rgPh[rg.p[i]] || rgPh[-1], rs, rs + rg.d[i], laneY[rg.r[i]] + rg.l[i], 0.78);
      }

      // a phase's legend entry sits on its first drawn trace (ops, else ranges, idle, blocks): plotly lists no empty trace
      PH.forEach(function (p, k) {
        var sets = [byPhase, rgPh, idlePh, blkPh], first = null;
        sets.forEach(function (set) { set[k].showlegend = false; set[k].name = esc(p.name); if (!first && set[k].x.length) first = set[k]; });
        if (first && isShown(p.name)) first.showlegend = true;
      });
      var traces = [rgPh[-1], apiT];
      [rgPh, blkPh, idlePh, byPhase].forEach(function (set) { PH.forEach(function (p, k) { traces.push(set[k]); }); });
      CA.forEach(function (c, k) { traces.push(byCat[k]); });
      traces = traces.filter(function (t) { return t.x.length; });
      return { traces: traces, merged: merged, ops: n };
    }

    // ------------------------------------------------------------------ hit testing and the tooltip
    function nearest(list, set, x, tol) {
      // the item of `list` (indices into set, sorted by start) that covers x, or is within tol of it
      if (!list) return -1;
      var lo = 0, hi = list.length;
      while (lo < hi) { var mid = (lo + hi) >> 1; if (set.S[list[mid]] <= x) lo = mid + 1; else hi = mid; }
      var best = -1, bestD = tol;
      for (var k = Math.max(0, lo - 3); k < Math.min(list.length, lo + 2); k++) {
        var j = list[k], s = set.S[j], e = s + set.d[j], dd = x < s ? s - x : (x > e ? x - e : 0);
        if (dd <= bestD) { best = j; bestD = dd; }
      }
      // a long item that began well before x (a range enclosing many others)
      if (best < 0 && set === rg) for (k = lo - 1; k >= 0 && k >= lo - 200; k--) { j = list[k]; if (set.S[j] + set.d[j] >= x) { best = j; break; } }
      return best;
    }
    function hit(gd, px, py) {
      var fl = gd._fullLayout, xa = fl.xaxis, ya = fl.yaxis, sz = fl._size;
      var xp = px - sz.l, yp = py - sz.t;
      if (xp < 0 || yp < 0 || xp > sz.w || yp > sz.h) return null;
      var x = xa.p2c(xp) * 1e6, yv = ya.p2c(yp), tol = Math.abs(xa.p2c(xp + 3) - xa.p2c(xp)) * 1e6;
      var lane = null, dBest = 0.45;
      lanes.forEach(function (L) { var dd = Math.abs(L.y - yv); if (dd < dBest) { dBest = dd; lane = L; } });
      if (!lane) return null;
      var j;
      if (lane.kind === "cpu") { j = nearest(rgLane[lane.row + ":" + lane.lane], rg, x, tol); return j < 0 ? null : { set: "range", i: j }; }
      if (lane.kind === "api") { j = nearest(apiRow[lane.row], la, x, tol); return j < 0 ? null : { set: "api", i: j }; }
      j = nearest(opsRow[lane.row], ops, x, tol);
      if (j >= 0) return { set: "op", i: j };
      j = nearest(idleRow[lane.row], idle, x, 0);
      if (j >= 0) return { set: "idle", i: j };
      j = nearest(blkRow[lane.row], blk, x, 0);
      if (j >= 0) return { set: "block", i: j };
      return null;
    }
    function describe(h) {
      // [title, lines...] as plain text
      var i = h.i, row;
      if (h.set === "op") {
        row = TL.rows[ops.r[i]];
        var out = [S[ops.n[i]]];
        if (S[ops.f[i]]) out.push(S[ops.f[i]]);
        out.push("phase " + phaseName(ops.p[i]) + "  ·  category " + catName(ops.c[i]));
        out.push("duration " + dur(ops.d[i]) + "  ·  start " + num(ops.S[i] / 1e6, 6) + " ms");
        out.push("correlation " + ops.K[i] + "  ·  " + (row ? row.label : ""));
        return out;
      }
      if (h.set === "idle") {
        return [catName(idle.c[i]) + ": the stream sat idle", "charged to phase " + phaseName(idle.p[i]),
          "duration " + dur(idle.d[i]) + "  ·  start " + num(idle.S[i] / 1e6, 6) + " ms",
          catName(idle.c[i]) === "cpu_wait" ? "the next op's launch call had not begun: the GPU waited for the CPU" :
            (catName(idle.c[i]) === "launch" ? "after the next op's launch call began: launch latency" : "")];
      }
      if (h.set === "api") {
        var first = la.o[i];
        return [S[la.n[i]], "launch call on the CPU  ·  " + dur(la.d[i]) + "  ·  start " + num(la.S[i] / 1e6, 6) + " ms",
          "correlation " + ops.K[first] + "  ·  launched " + la.c[i] + (la.c[i] > 1 ? " ops; the first: " : " op: ") + S[ops.n[first]],
          "phase " + phaseName(ops.p[first]) + "  ·  the op started " + dur(Math.max(0, ops.S[first] - la.S[i])) + " after the call began"];
      }
      if (h.set === "block") {
        return [phaseName(blk.p[i]) + (blk.m[i] ? " (mostly)" : "") + ": aggregated", num(blk.o[i], 0) + " ops, busy " + dur(blk.b[i]) +
          " of " + dur(blk.d[i]), "no op detail is embedded for this stretch; the windows with detail are listed under \"jump to\""];
      }
      row = TL.rows[rg.r[i]];
      return [S[rg.n[i]], "range" + (S[rg.dm[i]] ? " in domain " + S[rg.dm[i]] : "") + "  ·  phase " + phaseName(rg.p[i]) + "  ·  depth " + rg.l[i],
        "cpu " + dur(rg.d[i]) + "  ·  start " + num(rg.S[i] / 1e6, 6) + " ms", row ? row.label : ""];
    }
    var tip = el("div", "tip"); tip.style.display = "none"; document.body.appendChild(tip);
    var info = document.getElementById("op-info");
    function fill(box, lines) {
      box.textContent = "";
      lines.forEach(function (t, k) { if (t) box.appendChild(el(k ? "div" : "b", k === 1 && lines.length > 4 ? "mono" : null, t)); });
    }

    var state = { w: 0, width: 1 };
    var slider = document.getElementById("win-slider"), label = document.getElementById("win-label"), badge = document.getElementById("win-detail");
    var widthSel = document.getElementById("win-width"), jump = document.getElementById("win-jump");
    slider.max = String(Math.max(0, NW - 1));
    [1, 2, 3, 5, 10, 20, 50, 100].forEach(function (k) {
      if (k > 1 && k > NW) return;
      var o = el("option", null, k + (k === 1 ? " window" : " windows")); o.value = String(k); widthSel.appendChild(o);
    });
    function windowOption(text, w) { var o = el("option", null, text); o.value = String(w); jump.appendChild(o); }
    windowOption("…", -1);
    var cyc = []; for (var w = 0; w < NW; w++) if (W.kind[w] === "cycle") cyc.push(w);
    if (cyc.length) {
      var byDur = cyc.slice().sort(function (p, q) { return (W.end[p] - W.start[p]) - (W.end[q] - W.start[q]); });
      var pick = function (f) { return byDur[Math.min(byDur.length - 1, Math.floor(f * (byDur.length - 1)))]; };
      windowOption("slowest cycle (" + W.label[pick(1)] + ")", pick(1));
      windowOption("p90 cycle (" + W.label[pick(0.9)] + ")", pick(0.9));
      windowOption("median cycle (" + W.label[pick(0.5)] + ")", pick(0.5));
      windowOption("fastest cycle (" + W.label[pick(0)] + ")", pick(0));
      windowOption("first cycle", cyc[0]);
      windowOption("last cycle", cyc[cyc.length - 1]);
    }
    if (W.kind[0] === "before") windowOption("before the first cycle", 0);
    var first = cyc.length ? cyc[0] : 0, initialWidth = 1;
    state.w = first; state.width = initialWidth; widthSel.value = String(initialWidth);

    var gdReady = null;
    function show(w, width) {
      if (width != null) state.width = width;
      state.w = Math.max(0, Math.min(NW - 1, w | 0));
      slider.value = String(state.w);
      if (widthSel.querySelector('option[value="' + state.width + '"]')) widthSel.value = String(state.width);
      var last = Math.min(NW - 1, state.w + state.width - 1);
      var a = W.start[state.w], b = W.end[last];
      var tb = performance.now();
      var built = build(a, b, plotWidth());
      state.build_ms = performance.now() - tb;
      state.a = a; state.b = b;
      var allDetail = true, anyDetail = false;
      for (var k = state.w; k <= last; k++) { allDetail = allDetail && W.detail[k]; anyDetail = anyDetail || W.detail[k]; }
      label.textContent = (state.width > 1 ? W.label[state.w] + " … " + W.label[last] : W.label[state.w]) + "  ·  " + ms((b - a) / 1e6, 2) +
        "  ·  " + num(built.ops, 0) + " ops";
      badge.textContent = allDetail ? "every op" :
        (anyDetail ? "partly aggregated: some of these windows have no op detail" : "aggregated: no op detail embedded here");
      badge.className = "badge" + (allDetail ? " good" : " warn");
      badge.title = allDetail ? "ops closer than a pixel are drawn as one bar until you zoom in; the tooltip is per op" : "";
      var pad = (b - a) * 0.01;
      var plotH = Math.max(120, yMax * 30), bottom = 104, height = plotH + bottom + 6;
      var layout = baseLayout({
        height: height, hovermode: false, dragmode: "zoom",
        margin: { l: 190, r: 12, t: 6, b: bottom }, showlegend: true,
        legend: { title: { text: "<b>phase</b> " }, orientation: "h", x: 0, y: -50 / plotH, yanchor: "top", font: { size: 11 }, itemdoubleclick: false },
        legend2: { title: { text: "<b>category</b> " }, orientation: "h", x: 0, y: -76 / plotH, yanchor: "top", font: { size: 11 }, itemdoubleclick: false },
        xaxis: { title: { text: "ms since the capture's first event", standoff: 4 }, range: [(a - pad) / 1e6, (b + pad) / 1e6],
          gridcolor: "#f1f2f5", zeroline: false },
        yaxis: { autorange: false, range: [yMax - 0.25, -0.7], tickvals: ticks, ticktext: tickText, fixedrange: true, showgrid: false,
          zeroline: false, tickfont: { size: 11 } },
        uirevision: "w" + state.w + ":" + state.width,
      });
      state.layout = layout;
      var p = Plotly.react("timeline", built.traces, layout, Object.assign({}, CONFIG, { scrollZoom: true, doubleClick: "reset" }));
      if (!gdReady) {
        gdReady = p.then(function (gd) {
          // zoom and pan: draw what is in view again at the new resolution
          var pending = null;
          gd.on("plotly_relayout", function (ev) {
            if (redrawing || !ev) return;
            var r0 = ev["xaxis.range[0]"], r1 = ev["xaxis.range[1]"];
            if (ev["xaxis.range"]) { r0 = ev["xaxis.range"][0]; r1 = ev["xaxis.range"][1]; }
            if (r0 == null || r1 == null) return;
            if (pending) cancelAnimationFrame(pending);
            pending = requestAnimationFrame(function () { pending = null; redraw(r0 * 1e6, r1 * 1e6); });
          });
          function at(ev) { var bb = gd.getBoundingClientRect(); return hit(gd, ev.clientX - bb.left, ev.clientY - bb.top); }
          gd.addEventListener("mousemove", function (ev) {
            var h = at(ev);
            if (!h) { tip.style.display = "none"; gd.style.cursor = ""; return; }
            fill(tip, describe(h));
            tip.style.display = "block";
            var tx = ev.clientX + 14, ty = ev.clientY + 14;
            if (tx + tip.offsetWidth > window.innerWidth - 8) tx = ev.clientX - tip.offsetWidth - 14;
            if (ty + tip.offsetHeight > window.innerHeight - 8) ty = ev.clientY - tip.offsetHeight - 14;
            tip.style.left = tx + "px"; tip.style.top = ty + "px";
          });
          gd.addEventListener("mouseleave", function () { tip.style.display = "none"; });
          gd.addEventListener("click", function (ev) { var h = at(ev); if (h) fill(info, describe(h)); });
          return gd;
        });
        plots.push(gdReady);
      }
      return p;
    }
    var redrawing = false;
    function plotWidth() {
      var gd = document.getElementById("timeline");
      return gd && gd._fullLayout && gd._fullLayout._size ? gd._fullLayout._size.w : Math.max(400, window.innerWidth - 260);
    }
    function redraw(a, b) {
      var gd = document.getElementById("timeline");
      redrawing = true;
      var built = build(a, b, plotWidth());
      var p = Plotly.react(gd, built.traces, gd.layout);
      p.then(function () { redrawing = false; }, function () { redrawing = false; });
      return p;
    }
    slider.addEventListener("input", function () { show(+slider.value); });
    widthSel.addEventListener("change", function () { show(state.w, +widthSel.value); });
    jump.addEventListener("change", function () { var w = +jump.value; if (w >= 0) show(w); jump.value = "-1"; });
    document.getElementById("win-prev").addEventListener("click", function () { show(state.w - 1); });
    document.getElementById("win-next").addEventListener("click", function () { show(state.w + 1); });
    // For tests and scripts: the op named `name`, the window holding time t, an op's position on screen.
    function find(name) { for (var i = 0; i < ops.n.length; i++) if (S[ops.n[i]] === name) return i; return -1; }
    function windowAt(t) { return Math.max(0, upperBound(W.start, t) - 1); }
    function point(i, lane) {
      var gd = document.getElementById("timeline"), fl = gd._fullLayout, sz = fl._size, bb = gd.getBoundingClientRect();
      var yv = laneY[ops.r[i]] + (lane === "cat" ? CAT_DY : 0);
      return { x: bb.left + sz.l + fl.xaxis.c2p((ops.S[i] + ops.d[i] / 2) / 1e6), y: bb.top + sz.t + fl.yaxis.c2p(yv) };
    }
    function launchOf(i) { for (var j = 0; j < la.o.length; j++) if (la.o[j] === i) return j; return -1; }
    function launchPoint(j) {
      var gd = document.getElementById("timeline"), fl = gd._fullLayout, sz = fl._size, bb = gd.getBoundingClientRect();
      var yv = laneY[la.r[j]] + TL.rows[la.r[j]].api_lane;
      return { x: bb.left + sz.l + fl.xaxis.c2p((la.S[j] + la.d[j] / 2) / 1e6), y: bb.top + sz.t + fl.yaxis.c2p(yv) };
    }
    return { show: show, state: state, windows: NW, hit: hit, describe: describe, find: find, windowAt: windowAt, point: point,
      launchOf: launchOf, launchPoint: launchPoint, start: function (i) { return ops.S[i]; } };
  })();

  // ---------------------------------------------------------------------------------------------- cross-check, economics
  function tableOf(rows, box) {
    if (!rows || !rows.length || typeof rows[0] !== "object") return false;
    var keys = []; rows.forEach(function (r) { Object.keys(r).forEach(function (k) { if (keys.indexOf(k) < 0 && typeof r[k] !== "object") keys.push(k); }); });
    var t = el("table", "grid"), h = el("tr");
    keys.forEach(function (k) { h.appendChild(el("th", null, k)); }); t.appendChild(h);
    rows.forEach(function (r) {
      var tr = el("tr");
      keys.forEach(function (k) { var v = r[k]; tr.appendChild(el("td", typeof v === "number" ? "num" : null, typeof v === "number" ? num(v, Math.abs(v) >= 100 ? 1 : 3) : (v == null ? "-" : v))); });
      t.appendChild(tr);
    });
    box.appendChild(t);
    return true;
  }
  function genericPanel(obj, box) {
    if (Array.isArray(obj)) { if (!tableOf(obj, box)) box.appendChild(el("code", "block", JSON.stringify(obj, null, 1))); return; }
    var dl = el("dl", "facts"), any = false;
    Object.keys(obj).forEach(function (k) {
      var v = obj[k];
      if (v == null || typeof v !== "object") { dl.appendChild(el("dt", null, k)); dl.appendChild(el("dd", null, v == null ? "-" : (typeof v === "number" ? num(v, 3) : v))); any = true; }
    });
    if (any) box.appendChild(dl);
    Object.keys(obj).forEach(function (k) {
      var v = obj[k];
      if (v && typeof v === "object") { box.appendChild(el("h3", "muted", k)); genericPanel(v, box); }
    });
  }

  function crosscheck() {
    var box = document.getElementById("crosscheck"), x = D.crosscheck;
    if (x == null) { emptyNote(box, "Not available for this input: analyse a run directory made by `specprof capture` (it holds the tracer's sidecar) to compare nsys with the wall clock."); return; }
    renderCrosscheck(x, box);
  }
  function economics() {
    var box = document.getElementById("economics"), x = D.economics;
    if (x == null) { emptyNote(box, "Not available for this input: needs the tracer's sidecar (accept lengths) and a baseline decode step time."); return; }
    renderEconomics(x, box);
  }
  // analyzer/derived/crosscheck.py CrossCheck: consistency (per phase, nsys vs sidecar per instance), inflation (with vs
  // without nsys, ratio with its interval), accept (accept-length reconciliation), notes. Times in ns.
  function renderCrosscheck(x, box) {
    var cons = Array.isArray(x.consistency) ? x.consistency : [];
    var infl = Array.isArray(x.inflation) ? x.inflation : [];
    if (!cons.length && !infl.length) { genericPanel(x, box); return; }
    if (cons.length) {
      var bad = cons.filter(function (r) { return r.verdict && r.verdict !== "consistent"; });
      var v = el("p", "verdict");
      add(v, el("span", "badge " + (bad.length ? "bad" : "good"), bad.length ? bad.length + " phase(s) distorted" : "consistent"),
        document.createTextNode(bad.length ? "  nsys and the wall clock disagree on " + bad.map(function (r) { return r.phase; }).join(", ") :
          "  nsys's range durations match the tracer's wall clock for every phase, cycle by cycle"));
      box.appendChild(v);
      var names = cons.map(function (r) { return esc(r.phase); });
      var div1 = el("div"); div1.id = "crosscheck-consistency"; box.appendChild(div1);
      plot(div1, [
        { type: "bar", name: "nsys (CPU range)", x: names, y: cons.map(function (r) { return r.nsys_ns / 1e6; }), marker: { color: "#4C78A8" },
          hovertemplate: "%{x}: %{y:.4f} ms per instance<extra>nsys</extra>" },
        { type: "bar", name: "wall clock (sidecar)", x: names, y: cons.map(function (r) { return r.sidecar_ns / 1e6; }), marker: { color: "#9ecae9" },
          customdata: cons.map(function (r) { return [num(r.diff_pct, 2) + "%", esc(r.verdict || "")]; }),
          hovertemplate: "%{x}: %{y:.4f} ms per instance<br>difference %{customdata[0]} · %{customdata[1]}<extra>wall clock</extra>" },
      ], baseLayout({ barmode: "group", height: 250, margin: { l: 56, r: 10, t: 24, b: 40 },
        yaxis: { title: { text: "ms per instance" }, type: "log", gridcolor: "#eef0f3" },
        legend: { orientation: "h", y: 1.18, font: { size: 11 } } }));
    }
    if (infl.length) {
      box.appendChild(el("h3", "muted", "Profiler inflation: the same phase with nsys ÷ without (the interval is the ratio's uncertainty)"));
      var div2 = el("div"); div2.id = "crosscheck-inflation"; box.appendChild(div2);
      var measures = []; infl.forEach(function (r) { if (measures.indexOf(r.measure) < 0) measures.push(r.measure); });
      var colors = ["#E45756", "#4C78A8", "#54A24B", "#B279A2"];
      var traces = measures.map(function (m, k) {
        var rows = infl.filter(function (r) { return r.measure === m && r.ratio != null; });
        return { type: "scatter", mode: "markers", name: esc(m === "gpu" ? "GPU time (CUDA events)" : (m === "cpu" ? "CPU wall clock" : m)),
          y: rows.map(function (r) { return esc(r.phase); }), x: rows.map(function (r) { return r.ratio; }),
          error_x: { type: "data", symmetric: false, array: rows.map(function (r) { return r.ratio_hi != null ? r.ratio_hi - r.ratio : 0; }),
            arrayminus: rows.map(function (r) { return r.ratio_lo != null ? r.ratio - r.ratio_lo : 0; }), color: colors[k % 4], thickness: 1.2, width: 3 },
          marker: { color: colors[k % 4], size: 9, symbol: k ? "diamond" : "circle" },
          customdata: rows.map(function (r) { return [ms(r.with_ns / 1e6), ms(r.without_ns / 1e6), esc(r.verdict || "")]; }),
          hovertemplate: "%{y}: ×%{x:.2f}<br>with nsys %{customdata[0]}, without %{customdata[1]}<br>%{customdata[2]}<extra>" + esc(m) + "</extra>" };
      });
      var nPh = {}; infl.forEach(function (r) { nPh[r.phase] = 1; });
      plot(div2, traces, baseLayout({ height: 70 + 26 * Object.keys(nPh).length, margin: { l: 96, r: 10, t: 8, b: 36 },
        xaxis: { title: { text: "with nsys ÷ without" }, gridcolor: "#eef0f3", zeroline: false },
        yaxis: { automargin: true, autorange: "reversed" }, legend: { orientation: "h", y: -0.35, font: { size: 11 } },
        shapes: [{ type: "line", yref: "paper", y0: 0, y1: 1, x0: 1, x1: 1, line: { color: "#1d2433", width: 1, dash: "dot" } }] }));
    }
    if (x.accept && typeof x.accept === "object") {
      box.appendChild(el("h3", "muted", "Accept length: sidecar against the server log"));
      var a = x.accept, p = el("p");
      add(p, el("span", "badge", a.verdict || "-"), document.createTextNode("  sidecar " + num(a.sidecar_pooled, 3) + " (pooled), server log " + num(a.log_mean, 3)));
      box.appendChild(p);
      var ul = el("ul", "notes"); (a.explanations || []).forEach(function (t) { ul.appendChild(el("li", null, t)); }); box.appendChild(ul);
    }
    if (x.notes && x.notes.length) { var n = el("ul", "notes"); x.notes.forEach(function (t) { n.appendChild(el("li", null, t)); }); box.appendChild(n); }
  }

  // analyzer/derived/economics.py Economics: estimates (one row per source: cycle_ns, accept_len, speedup,
  // break_even_accept_len, verdict), baseline_ns, baseline_source, verdict, notes.
  function renderEconomics(x, box) {
    var rows = Array.isArray(x.estimates) ? x.estimates.filter(function (r) { return r.cycle_ns; }) : [];
    if (!rows.length) { genericPanel(x, box); return; }
    (x.verdict && x.verdict.length ? x.verdict : rows.map(function (r) { return r.verdict; })).forEach(function (t, k) {
      var head = rows[0], wins = head.speedup == null ? null : head.speedup > 1;
      var p = el("p", "verdict");
      if (k === 0) p.appendChild(el("span", "badge " + (wins == null ? "" : (wins ? "good" : "bad")),
        wins == null ? "no verdict" : (wins ? "speculation wins ×" + num(head.speedup, 2) : "speculation loses ×" + num(head.speedup, 2))));
      p.appendChild(document.createTextNode("  " + t));
      box.appendChild(p);
    });
    var base = x.baseline_ns ? x.baseline_ns / 1e6 : null;
    var xs = rows.map(function (r) { return r.cycle_ns / 1e6; });
    var ys = rows.map(function (r) { return r.accept_len; });
    var xmax = Math.max.apply(null, xs) * 1.35, ymax = Math.max.apply(null, ys.filter(function (v) { return v != null; }).concat(base ? [xmax / base] : [1])) * 1.15;
    var traces = [];
    if (base) {
      traces.push({ type: "scatter", mode: "lines", name: "break-even (cycle ÷ baseline step " + num(base, 3) + " ms)", x: [0, xmax], y: [0, xmax / base],
        line: { color: "#1d2433", width: 1.5, dash: "dash" }, fill: "tozeroy", fillcolor: "rgba(228,87,86,0.07)", hoverinfo: "skip" });
      traces.push({ type: "scatter", mode: "lines", x: [0, xmax, xmax, 0], y: [0, xmax / base, Math.max(ymax, xmax / base), Math.max(ymax, xmax / base)],
        fill: "toself", fillcolor: "rgba(84,162,75,0.07)", line: { width: 0 }, hoverinfo: "skip", showlegend: false });
    }
    rows.forEach(function (r, k) {
      traces.push({ type: "scatter", mode: "markers", name: esc(r.source), x: [r.cycle_ns / 1e6], y: [r.accept_len],
        marker: { size: 12, color: r.profiled ? "#F58518" : "#4C78A8", symbol: r.profiled ? "diamond" : "circle" },
        customdata: [[r.break_even_accept_len == null ? "-" : num(r.break_even_accept_len, 3), r.speedup == null ? "-" : "×" + num(r.speedup, 2)]],
        hovertemplate: "cycle %{x:.3f} ms · accept length %{y:.3f}<br>break-even %{customdata[0]} · speedup %{customdata[1]}<extra>" + esc(r.source) + "</extra>" });
    });
    var div = el("div"); div.id = "economics-chart"; box.appendChild(div);
    var ann = base ? [{ x: xmax * 0.12, y: ymax * 0.92, text: "speculation wins", showarrow: false, font: { color: "#16723a", size: 11 } },
      { x: xmax * 0.85, y: ymax * 0.08, text: "speculation loses", showarrow: false, font: { color: "#b42318", size: 11 } }] :
      [{ xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false, font: { size: 11, color: "#667085" },
        text: "no baseline decode step time: no break-even line (--baseline-ms or a baseline run)" }];
    plot(div, traces, baseLayout({ height: 300, margin: { l: 54, r: 12, t: 10, b: 44 }, showlegend: true,
      xaxis: { title: { text: "cycle time, ms" }, range: [0, xmax], gridcolor: "#eef0f3", zeroline: false },
      yaxis: { title: { text: "accept length (tokens per cycle)" }, range: [0, ymax], gridcolor: "#eef0f3" },
      legend: { orientation: "h", y: -0.22, font: { size: 11 } }, annotations: ann }));
    var t = el("table", "grid"), h = el("tr");
    ["source", "cycle ms", "accept len", "tokens/s", "speedup", "break-even"].forEach(function (c, i) { h.appendChild(el("th", i ? "num" : null, c)); });
    t.appendChild(h);
    rows.forEach(function (r) {
      var tr = el("tr");
      [r.source, num(r.cycle_ns / 1e6, 3), num(r.accept_len, 3), num(r.tokens_per_s, 0), r.speedup == null ? "-" : "×" + num(r.speedup, 2),
       num(r.break_even_accept_len, 3)].forEach(function (c, i) { tr.appendChild(el("td", i ? "num" : null, c)); });
      t.appendChild(tr);
    });
    box.appendChild(t);
    var notes = (x.notes || []).concat(x.baseline_source ? ["baseline step: " + x.baseline_source] : []);
    if (notes.length) { var ul = el("ul", "notes"); notes.forEach(function (n) { ul.appendChild(el("li", null, n)); }); box.appendChild(ul); }
  }

  // ---------------------------------------------------------------------------------------------- go
  // What the first screen shows is drawn first; the page answers input from then on (`interactive_ms`), and the
  // panels further down are drawn in a next task (`ready_ms`: every panel drawn).
  function run(f) {
    var t = performance.now();
    try { f(); }
    catch (e) { console.error("specprof report: " + (f.name || "panel") + ": " + (e && e.message)); }
    T[(f.name || "panel") + "_ms"] = performance.now() - t;
  }
  function drawTimeline() { plots.push(timeline.show(timeline.state.w, timeline.state.width)); }
  [header, runFacts, drawTimeline, phaseBars, kernels].forEach(run);
  Promise.all(plots).then(function () {
    T.interactive_ms = performance.now();
    window.specprofInteractive = true;
    return new Promise(function (resolve) { setTimeout(resolve, 0); });
  }).then(function () {
    [cycleSeries, cycleHist, crosscheck, economics].forEach(run);
    return Promise.all(plots);
  }).then(function () {
    T.ready_ms = performance.now();
    T.timeline_build_ms = timeline.state.build_ms;
    window.specprofTimings = T;
    window.specprofReady = true;
    document.body.setAttribute("data-ready", "1");
  });
  window.specprof = { data: D, timeline: timeline, webgl: WEBGL };
  }
})();
