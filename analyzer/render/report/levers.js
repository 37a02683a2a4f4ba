// Panel "What to do next": the levers table (analyzer/derived/levers.py; the JSON contract's `levers`) and the
// per-position acceptance chart (analyzer/derived/acceptance.py; `acceptance`), drawn as the terminal shows them.
function leversPanel(R) {
  var D = R.D, el = R.el, add = R.add, num = R.num, pct = R.pct, esc = R.esc, plot = R.plot, baseLayout = R.baseLayout,
    legendAbove = R.legendAbove, emptyNote = R.emptyNote;

  function ci(pair, d, scale) {
    if (!pair) return "";
    scale = scale || 1;
    return " (" + num(pair[0] * scale, d) + "–" + num(pair[1] * scale, d) + ")";
  }
  function acceptanceChart(acc, box, k) {
    var ps = acc.positions || [];
    box.appendChild(el("h3", "muted", "Acceptance per draft position (" + (acc.group ? acc.group + ": " : "") + num(acc.rounds, 0) + " request-rounds, K=" + acc.steps +
      "): 1 + the sum of P(at least i accepted) = " + num(acc.accept_len, 3) + ", the accept length"));
    var div = el("div"); div.id = k ? "acceptance-chart-" + k : "acceptance-chart"; box.appendChild(div);
    var xs = ps.map(function (p) { return "position " + p.position; });
    function bars(key, name, color) {
      return { type: "bar", name: name, x: xs, y: ps.map(function (p) { return p[key]; }), marker: { color: color },
        error_y: { type: "data", symmetric: false, color: "#1d2433", thickness: 1, width: 3,
          array: ps.map(function (p) { return p[key + "_ci"] ? p[key + "_ci"][1] - p[key] : 0; }),
          arrayminus: ps.map(function (p) { return p[key + "_ci"] ? p[key] - p[key + "_ci"][0] : 0; }) },
        customdata: ps.map(function (p) { return [ci(p[key + "_ci"], 1, 100)]; }),
        hovertemplate: "%{x}: %{y:.1%}%{customdata[0]}<extra>" + esc(name) + "</extra>" };
    }
    plot(div, [bars("at_least", "P(at least i accepted)", "#4C78A8"), bars("rate", "rate given 1..i-1 accepted", "#9ecae9")],
      baseLayout({ barmode: "group", height: 260, margin: { l: 56, t: 10, b: 40 }, legend: legendAbove(),
        yaxis: { title: { text: "share of request-rounds" }, range: [0, 1], tickformat: ".0%", gridcolor: "#eef0f3" } }));
  }
  function leversTable(lv, box) {
    box.appendChild(el("h3", "muted", "Levers: what each change would give, largest gain first (" + (lv.group ? lv.group + ", " : "") + "from the cycle measured by the " + lv.source +
      "; now cycle " + num(lv.cycle_ms, 3) + " ms, accept length " + num(lv.accept_len, 3) +
      (lv.speedup == null ? "" : ", speedup ×" + num(lv.speedup, 2)) + "; phases' " + lv.basis + ")"));
    var t = el("table", "grid"), h = el("tr");
    ["lever", "cycle ms", "accept len", "tokens/s (95% CI)", "speedup (95% CI)", "gain"].forEach(function (k) { h.appendChild(el("th", null, k)); });
    t.appendChild(h);
    (lv.rows || []).forEach(function (r) {
      var tr = el("tr");
      tr.title = r.held || "";
      tr.appendChild(el("td", null, r.lever));
      tr.appendChild(el("td", "num", r.cycle_ms == null ? "-" : num(r.cycle_ms, 3)));
      tr.appendChild(el("td", "num", r.accept_len == null ? "-" : num(r.accept_len, 3)));
      tr.appendChild(el("td", "num", r.tokens_per_s == null ? "-" : num(r.tokens_per_s, 0) + ci(r.tokens_per_s_ci, 0)));
      tr.appendChild(el("td", "num", r.speedup == null ? "-" : "×" + num(r.speedup, 2) + ci(r.speedup_ci, 2)));
      tr.appendChild(el("td", "num", r.kind === "steps" ? "needs a sweep" : (r.gain == null ? "-" : (r.gain >= 0 ? "+" : "") + pct(r.gain, 1))));
      t.appendChild(tr);
    });
    box.appendChild(t);
    var ul = el("ul", "notes");
    ul.appendChild(el("li", null, "each row changes one thing and holds the rest (hover a row for what it holds): a phase's saving holds its share of the cycle and the accept length; an acceptance lever holds the cycle; the intervals carry the measured cycle's, accept length's and plain step's (docs/economics.md, \"Levers\")"));
    box.appendChild(ul);
  }
  function levers() {
    var box = document.getElementById("levers"), A = D.analysis || {};
    var lvs = A.levers || [], accs = A.acceptance || [];
    if (!lvs.length && !accs.length) { emptyNote(box, "Not available for this input: needs a speculative run's sidecar (accept counts per draft position); the levers' speedups need a baseline (--baseline RUN)."); return; }
    // one table and one chart per batch-size group and K where the run spans several (`group`), else one
    lvs.forEach(function (lv) { leversTable(lv, box); });
    accs.forEach(function (acc, k) { acceptanceChart(acc, box, k); });
  }
  return { levers: levers };
}
