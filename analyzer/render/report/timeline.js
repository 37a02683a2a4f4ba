// Panel "Timeline": CPU threads with their ranges and each GPU stream's ops by phase and by category, window by
// window (cycles), op by op where the view model has the detail, else as blocks; hit testing and details.
function makeTimeline(R) {
  var TL = R.TL, S = R.S, PH = R.PH, CA = R.CA, plots = R.plots, CONFIG = R.CONFIG, esc = R.esc, el = R.el,
    num = R.num, ms = R.ms, dur = R.dur, undelta = R.undelta, cummaxEnd = R.cummaxEnd, lowerBound = R.lowerBound,
    upperBound = R.upperBound, phaseName = R.phaseName, catName = R.catName, isShown = R.isShown,
    baseLayout = R.baseLayout;
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
  // the cycle windows to jump to: picked once, in derived/views.py (window_picks)
  var P = W.picks || {};
  if (P.first != null) {
    windowOption("slowest cycle (" + W.label[P.slowest] + ")", P.slowest);
    windowOption("p90 cycle (" + W.label[P.p90] + ")", P.p90);
    windowOption("median cycle (" + W.label[P.median] + ")", P.median);
    windowOption("fastest cycle (" + W.label[P.fastest] + ")", P.fastest);
    windowOption("first cycle", P.first);
    windowOption("last cycle", P.last);
  }
  if (W.kind[0] === "before") windowOption("before the first cycle", 0);
  var first = P.first != null ? P.first : 0, initialWidth = 1;
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
    // Room below the plot for both legends whole, however many rows their entries wrap to at this width (a
    // fixed margin showed 11 of 20 entries at 1500 px and hid the last ones, "(unattributed)" among them).
    var rows = legendRows(built.traces, plotWidth());
    var plotH = Math.max(120, yMax * 30), top1 = 44, top2 = top1 + rows.legend * ROW_PX + 8;
    var bottom = top2 + rows.legend2 * ROW_PX + 12, height = plotH + bottom + 6;
    var layout = baseLayout({
      height: height, hovermode: false, dragmode: "zoom",
      margin: { l: MARGIN_L, r: R.TOOLBAR_PX, t: 6, b: bottom }, showlegend: true,
      // tracegroupgap 0: each entry is a legend group of its own, and plotly would add the groups' gap to each row
      legend: { title: { text: "<b>phase</b> " }, orientation: "h", x: 0, y: -top1 / plotH, yanchor: "top", font: { size: 11 },
        itemdoubleclick: false, tracegroupgap: 0 },
      legend2: { title: { text: "<b>category</b> " }, orientation: "h", x: 0, y: -top2 / plotH, yanchor: "top", font: { size: 11 },
        itemdoubleclick: false, tracegroupgap: 0 },
      xaxis: { title: { text: "ms since the capture's start", standoff: 4 }, range: [(a - pad) / 1e6, (b + pad) / 1e6],
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
  // Rows each horizontal legend wraps to at `width` px: entries of about 7 px a character plus the symbol, after
  // the title (an estimate on the safe side: a row too many leaves a blank line, a row too few hides entries).
  var ROW_PX = 20;
  function legendRows(traces, width) {
    var out = { legend: 0, legend2: 0 }, x = { legend: 0, legend2: 0 }, title = { legend: 56, legend2: 76 };
    traces.forEach(function (t) {
      if (t.showlegend === false || !t.name) return;
      var key = t.legend === "legend2" ? "legend2" : "legend", w = 46 + 7 * String(t.name).length;
      if (!out[key] || x[key] + w > width) { out[key] += 1; x[key] = title[key]; }
      x[key] += w;
    });
    out.legend = Math.max(1, out.legend); out.legend2 = Math.max(1, out.legend2);
    return out;
  }
  var redrawing = false;
  // The plotting area's width: the chart's box less its margins (the legends' rows are counted for it before
  // plotly draws at that width: at first, and for a printout).
  var MARGIN_L = 190;
  function plotWidth() {
    var gd = document.getElementById("timeline");
    return Math.max(200, (gd && gd.clientWidth ? gd.clientWidth : window.innerWidth - 80) - MARGIN_L - R.TOOLBAR_PX);
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
}
