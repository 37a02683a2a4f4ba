// Panels "Cross-check: nsys against the wall clock" and "Does speculation pay?": the analysis's cross-check and
// economics, drawn as tables (a generic table for fields they do not know).
function checksPanels(R) {
  var D = R.D, esc = R.esc, el = R.el, add = R.add, num = R.num, ms = R.ms, plot = R.plot, baseLayout = R.baseLayout,
    legendAbove = R.legendAbove, emptyNote = R.emptyNote;

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
      ], baseLayout({ barmode: "group", height: 250, margin: { l: 56, t: 10, b: 40 },
        yaxis: { title: { text: "ms per instance" }, type: "log", gridcolor: "#eef0f3" },
        legend: legendAbove() }));
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
      plot(div2, traces, baseLayout({ height: 100 + 26 * Object.keys(nPh).length, margin: { l: 96, t: 10, b: 40 },
        xaxis: { title: { text: "with nsys ÷ without" }, gridcolor: "#eef0f3", zeroline: false },
        yaxis: { automargin: true, autorange: "reversed" }, legend: legendAbove(),
        shapes: [{ type: "line", yref: "paper", y0: 0, y1: 1, x0: 1, x1: 1, line: { color: "#1d2433", width: 1, dash: "dot" } }] }));
    }
    if (x.accept && typeof x.accept === "object") {
      box.appendChild(el("h3", "muted", "Accept-length cross-check over the whole run: the sidecar against the server log (the economics' accept length is over the cycles compared)"));
      var a = x.accept, p = el("p");
      // the server log's accept length as the terminal and the JSON give it (log_weighted when known)
      var J = (D.analysis && D.analysis.crosscheck && D.analysis.crosscheck.accept) || {};
      add(p, el("span", "badge", a.verdict || "-"), document.createTextNode("  sidecar " + num(a.sidecar_pooled, 3) + " (pooled), server log " + num(J.log_accept_len, 3)));
      box.appendChild(p);
      var ul = el("ul", "notes"); (a.explanations || []).forEach(function (t) { ul.appendChild(el("li", null, t)); }); box.appendChild(ul);
    }
    if (x.notes && x.notes.length) { var n = el("ul", "notes"); x.notes.forEach(function (t) { n.appendChild(el("li", null, t)); }); box.appendChild(n); }
  }

  // analyzer/derived/economics.py Economics: estimates (one row per source: cycle_ns, accept_len, speedup,
  // break_even_accept_len, verdict), baseline_ns, baseline_source, verdict, notes.
  // A 95 % interval " (lo-hi)", or "" when unknown (economics.py: the `_lo`/`_hi` columns of each estimate).
  function ci(lo, hi, d, scale) {
    if (lo == null || hi == null) return "";
    scale = scale || 1;
    return " (" + num(lo / scale, d) + "–" + num(hi / scale, d) + ")";
  }
  function renderEconomics(x, box) {
    var rows = Array.isArray(x.estimates) ? x.estimates.filter(function (r) { return r.cycle_ns; }) : [];
    if (!rows.length) { genericPanel(x, box); return; }
    (x.verdict && x.verdict.length ? x.verdict : rows.map(function (r) { return r.verdict; })).forEach(function (t, k) {
      // the verdict as the speedup's interval words it (economics.py `outcome`: wins, loses, a wash)
      var head = rows[0], v = head.outcome == null ? null : head.outcome, sp = head.speedup == null ? "" : "×" + num(head.speedup, 2) + ci(head.speedup_lo, head.speedup_hi, 2);
      var p = el("p", "verdict");
      if (k === 0) p.appendChild(el("span", "badge " + (v == null || v === "wash" ? "" : (v === "wins" ? "good" : "bad")),
        v == null ? "no verdict" : (v === "wash" ? "a wash " + sp : "speculation " + v + " " + sp)));
      p.appendChild(document.createTextNode("  " + t));
      box.appendChild(p);
    });
    batchGroups(box);
    var base = x.baseline_ns ? x.baseline_ns / 1e6 : null;
    var xs = rows.map(function (r) { return r.cycle_ns / 1e6; });
    var ys = rows.map(function (r) { return r.accept_len; });
    var xmax = Math.max.apply(null, xs) * 1.35, ymax = Math.max.apply(null, ys.filter(function (v) { return v != null; }).concat(base ? [xmax / base] : [1])) * 1.15;
    var traces = [];
    if (base) {
      var blo = x.baseline_lo_ns ? x.baseline_lo_ns / 1e6 : null, bhi = x.baseline_hi_ns ? x.baseline_hi_ns / 1e6 : null;
      if (blo && bhi) {  // the break-even line's own 95 % band: the baseline step's interval
        traces.push({ type: "scatter", mode: "lines", name: "break-even 95% band (baseline step " + num(blo, 3) + "–" + num(bhi, 3) + " ms)",
          x: [0, xmax, xmax, 0], y: [0, xmax / bhi, xmax / blo, 0], fill: "toself", fillcolor: "rgba(29,36,51,0.13)",
          line: { width: 0 }, hoverinfo: "skip" });
      }
      traces.push({ type: "scatter", mode: "lines", name: "break-even (cycle ÷ baseline step " + num(base, 3) + " ms)", x: [0, xmax], y: [0, xmax / base],
        line: { color: "#1d2433", width: 1.5, dash: "dash" }, fill: "tozeroy", fillcolor: "rgba(228,87,86,0.07)", hoverinfo: "skip" });
      traces.push({ type: "scatter", mode: "lines", x: [0, xmax, xmax, 0], y: [0, xmax / base, Math.max(ymax, xmax / base), Math.max(ymax, xmax / base)],
        fill: "toself", fillcolor: "rgba(84,162,75,0.07)", line: { width: 0 }, hoverinfo: "skip", showlegend: false });
    }
    rows.forEach(function (r, k) {
      var color = r.profiled ? "#F58518" : "#4C78A8";
      // 95 % intervals as error bars: the cycle's (x) and the accept length's (y)
      var ex = r.cycle_lo_ns != null && r.cycle_hi_ns != null ?
        { type: "data", symmetric: false, array: [(r.cycle_hi_ns - r.cycle_ns) / 1e6], arrayminus: [(r.cycle_ns - r.cycle_lo_ns) / 1e6], color: color, thickness: 1.2, width: 4 } : { visible: false };
      var ey = r.accept_len != null && r.accept_len_lo != null && r.accept_len_hi != null ?
        { type: "data", symmetric: false, array: [r.accept_len_hi - r.accept_len], arrayminus: [r.accept_len - r.accept_len_lo], color: color, thickness: 1.2, width: 4 } : { visible: false };
      traces.push({ type: "scatter", mode: "markers", name: esc(r.source), x: [r.cycle_ns / 1e6], y: [r.accept_len], error_x: ex, error_y: ey,
        marker: { size: 12, color: color, symbol: r.profiled ? "diamond" : "circle" },
        customdata: [[r.break_even_accept_len == null ? "-" : num(r.break_even_accept_len, 3) + ci(r.break_even_lo, r.break_even_hi, 3),
                      r.speedup == null ? "-" : "×" + num(r.speedup, 2) + ci(r.speedup_lo, r.speedup_hi, 2),
                      ci(r.cycle_lo_ns, r.cycle_hi_ns, 3, 1e6), ci(r.accept_len_lo, r.accept_len_hi, 3)]],
        hovertemplate: "cycle %{x:.3f} ms%{customdata[2]} · accept length %{y:.3f}%{customdata[3]}<br>break-even %{customdata[0]} · speedup %{customdata[1]}<br>(95% intervals)<extra>" + esc(r.source) + "</extra>" });
    });
    var div = el("div"); div.id = "economics-chart"; box.appendChild(div);
    var ann = base ? [{ x: xmax * 0.12, y: ymax * 0.92, text: "speculation wins", showarrow: false, font: { color: "#16723a", size: 11 } },
      { x: xmax * 0.85, y: ymax * 0.08, text: "speculation loses", showarrow: false, font: { color: "#b42318", size: 11 } }] :
      [{ xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false, font: { size: 11, color: "#667085" },
        text: "no baseline decode step time: no break-even line (--baseline-ms or a baseline run)" }];
    // The legend sits above the plot (it wraps to more rows on a narrow page and the top margin grows with it),
    // so it never meets the x-axis title below; the height leaves the y-axis title room for its whole length.
    plot(div, traces, baseLayout({ height: 380, margin: { l: 60, t: 10, b: 48 }, showlegend: true,
      xaxis: { title: { text: "cycle time, ms", standoff: 8 }, range: [0, xmax], gridcolor: "#eef0f3", zeroline: false,
        automargin: true },
      yaxis: { title: { text: "accept length (tokens per cycle)", font: { size: 12 }, standoff: 8 }, range: [0, ymax],
        gridcolor: "#eef0f3", automargin: true },
      legend: legendAbove(), annotations: ann }));
    // The table: one column per point (source), one row per figure, each with its 95 % interval in brackets
    // (docs/economics.md, "Intervals"); a column per source keeps it as narrow as the chart on any page width.
    // "break-even ≤ K+1": whether a cycle of K draft steps can reach the break-even at all (K + 1 tokens per
    // request at most), whatever this run's accept length: not whether speculation pays here.
    var t = el("table", "grid figures"), h = el("tr");
    h.appendChild(el("th", null, ""));
    rows.forEach(function (r) { h.appendChild(el("th", "num src", r.source)); });
    t.appendChild(h);
    [["cycle ms (95% CI)", function (r) { return num(r.cycle_ns / 1e6, 3) + ci(r.cycle_lo_ns, r.cycle_hi_ns, 3, 1e6); }],
     ["accept len (95% CI)", function (r) { return r.accept_len == null ? "-" : num(r.accept_len, 3) + ci(r.accept_len_lo, r.accept_len_hi, 3); }],
     ["tokens/s (95% CI)", function (r) { return r.tokens_per_s == null ? "-" : num(r.tokens_per_s, 0) + ci(r.tokens_per_s_lo, r.tokens_per_s_hi, 0); }],
     ["speedup (95% CI)", function (r) { return r.speedup == null ? "-" : "×" + num(r.speedup, 2) + ci(r.speedup_lo, r.speedup_hi, 2); }],
     ["break-even (95% CI)", function (r) { return r.break_even_accept_len == null ? "-" : num(r.break_even_accept_len, 3) + ci(r.break_even_lo, r.break_even_hi, 3); }],
     ["K", function (r) { return r.draft_steps == null ? "-" : String(r.draft_steps); }],
     ["break-even ≤ K+1", function (r) { return r.break_even_reachable == null ? "-" : (r.break_even_reachable ? "yes" : "no"); }]
    ].forEach(function (f) {
      var tr = el("tr");
      tr.appendChild(el("th", null, f[0]));
      rows.forEach(function (r) { tr.appendChild(el("td", "num", f[1](r))); });
      t.appendChild(tr);
    });
    box.appendChild(t);
    var notes = (x.notes || []).concat(x.baseline_source ? ["baseline step: " + x.baseline_source] : []);
    if (notes.length) { var ul = el("ul", "notes"); notes.forEach(function (n) { ul.appendChild(el("li", null, n)); }); box.appendChild(ul); }
  }

  // The economics per batch size and K (the JSON's economics.batch_groups, docs/json.md; derived/groups.py), drawn
  // where the run's cycles fall in several groups: one row per group of the headline source (the first one's), in
  // the JSON's order; the crossover in words is the economics' verdict, above. Intervals wrap under their figure.
  function batchGroups(box) {
    var g = D.analysis && D.analysis.economics ? D.analysis.economics.batch_groups : null;
    if (!g || !g.several || !Array.isArray(g.groups) || !g.groups.length) return;
    var src = g.groups[0].source;
    box.appendChild(el("h3", "muted", "Per batch size and K: cycles grouped by the batch they ran and the draft steps K their verify checked, measured by the " + src + "; the baseline is the plain run's step at the same batch sizes (95% intervals)"));
    var t = el("table", "grid figures"); t.id = "economics-batch-groups";
    var h = el("tr");
    ["batch", "K", "cycles", "cycle ms", "accept len", "tokens/s", "plain step ms", "speedup", "time"].forEach(function (c, k) {
      h.appendChild(el("th", k > 1 ? "num" : null, c)); });
    t.appendChild(h);
    g.groups.forEach(function (r) {
      if (r.source !== src) return;
      var ci2 = function (v, d) { return Array.isArray(v) ? ci(v[0], v[1], d) : ""; };
      var tr = el("tr");
      [r.batch_group + (r.exact ? "" : " (bucket)"), r.steps == null ? "-" : String(r.steps), num(r.cycles, 0),
       num(r.cycle_ms, 3) + ci2(r.cycle_ms_ci, 3), r.accept_len == null ? "-" : num(r.accept_len, 2) + ci2(r.accept_len_ci, 2),
       r.tokens_per_s == null ? "-" : num(r.tokens_per_s, 0) + ci2(r.tokens_per_s_ci, 0),
       r.baseline_steps ? num(r.baseline_ms, 3) : "none at this size",
       r.speedup == null ? "-" : "×" + num(r.speedup, 2) + ci2(r.speedup_ci, 2),
       r.time_share == null ? "-" : num(100 * r.time_share, 0) + "%"].forEach(function (v, k) {
        tr.appendChild(el("td", k > 1 ? "num" : null, v)); });
      t.appendChild(tr);
    });
    box.appendChild(t);
    if (g.notes && g.notes.length) { var ul = el("ul", "notes"); g.notes.forEach(function (n) { ul.appendChild(el("li", null, n)); }); box.appendChild(ul); }
  }

  return { crosscheck: crosscheck, economics: economics };
}
