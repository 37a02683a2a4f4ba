// Panel "Where a decode cycle goes": one decode cycle of the headline rank on the stream its phases run on, per
// phase in ms per cycle and as a share of the cycle, under nsys and, when the run has a twin without the profiler,
// without it, side by side. Every number is the JSON contract's `cycle_breakdown` (derived/breakdown.py), the one
// the terminal's first table prints.
function breakdownPanel(R) {
  var D = R.D, PH = R.PH, el = R.el, add = R.add, esc = R.esc, num = R.num, pct = R.pct, plot = R.plot,
    baseLayout = R.baseLayout, emptyNote = R.emptyNote;
  var UNTIMED = "(not timed by events)", UNTIMED_COLOR = "#e4e7ec";

  function ratio(x) { return x == null ? "-" : num(x, 2) + "x"; }
  function msOr(x) { return x == null ? "-" : num(x, 3); }

  function breakdown() {
    var box = document.getElementById("breakdown"), A = D.analysis || {}, B = A.cycle_breakdown;
    var help = document.getElementById("breakdown-help");
    if (!B) {
      help.textContent = "The mean decode cycle, phase by phase, in ms per cycle and as a share of the cycle.";
      emptyNote(box, "No decode cycles to break down: the trace has fewer than two `cycle` ranges with decode work " +
        "(the timeline and the per-phase totals below still hold every op).");
      return;
    }
    // the column without nsys, as the terminal has it: `ratio` is null without it (docs/json.md)
    var without = B.ratio != null, several = A.shown && A.shown.ranks > 1;
    help.textContent = "The mean decode cycle (" + num(B.cycles, 0) + " cycles" + (several ? " of rank " + B.rank + ", " + B.why : "") +
      ", on device " + B.device + " stream " + B.stream + ", the stream its phases run on), phase by phase: ms per cycle and share " +
      "of the cycle; each phase's times add up to the cycle. " + (without ?
        "Without nsys: the same phases between their CUDA events in the run without the profiler (its period, start to " +
        "start): the shares to act on are those without nsys." :
        "Every figure is under nsys: the run has no twin without the profiler (RUN/no-nsys/) with the phases' CUDA events.") +
      " The same numbers as the terminal's first table.";

    // the chart: one stacked bar per run, a segment per phase
    var color = {}; PH.forEach(function (p) { color[p.name] = p.color; });
    var runs = without ? ["without nsys", "under nsys"] : ["under nsys"];
    var traces = B.phases.map(function (r) {
      var xs = without ? [r.unprofiled_ms_per_cycle, r.ms_per_cycle] : [r.ms_per_cycle];
      var shares = without ? [r.unprofiled_share, r.share] : [r.share];
      return { type: "bar", orientation: "h", name: esc(r.phase), y: runs, x: xs, marker: { color: color[r.phase] || "#98a2b3" },
        text: xs.map(function (x, i) { return x == null ? "" : esc(r.phase) + " " + num(x, 3) + " ms · " + pct(shares[i]); }),
        textposition: "inside", insidetextanchor: "middle", textfont: { size: 11 },
        customdata: xs.map(function (x, i) { return [msOr(x), pct(shares[i])]; }),
        hovertemplate: "<b>" + esc(r.phase) + "</b> %{y}<br>%{customdata[0]} ms per cycle, %{customdata[1]} of the cycle<extra></extra>" };
    });
    if (without) {
      traces.push({ type: "bar", orientation: "h", name: UNTIMED, y: runs, x: [B.untimed_unprofiled_ms, null],
        marker: { color: UNTIMED_COLOR, line: { color: "#98a2b3", width: 0.6 } },
        customdata: [[msOr(B.untimed_unprofiled_ms), pct(B.untimed_unprofiled_share)], ["-", "-"]],
        hovertemplate: "<b>" + UNTIMED + "</b> %{y}<br>%{customdata[0]} ms per cycle, %{customdata[1]} of the cycle<extra></extra>" });
    }
    var div = el("div"); div.id = "breakdown-chart"; box.appendChild(div);
    var ann = runs.map(function (run, i) {
      var total = i === 0 && without ? B.cycle_ms.unprofiled_mean : B.cycle_ms.mean;
      return { xref: "paper", x: 0, xanchor: "right", y: run, showarrow: false, font: { size: 11, color: "#475467" },
        text: "<b>" + run + "</b><br>" + num(total, 3) + " ms" };
    });
    plot(div, traces, baseLayout({ barmode: "stack", height: 70 + 52 * runs.length, margin: { l: 110, t: 10, b: 36 },
      xaxis: { title: { text: "ms per decode cycle", standoff: 4 }, gridcolor: "#eef0f3", zeroline: false },
      // the table below is the legend: a swatch beside each phase's name
      yaxis: { showticklabels: false, fixedrange: true, autorange: "reversed" }, showlegend: false,
      uniformtext: { mode: "hide", minsize: 10 }, annotations: ann, bargap: 0.3 }));

    // the table: the terminal's, row for row
    var t = el("table", "grid breakdown"), h = el("tr");
    var heads = ["phase", "ms/cycle", "share", "GPU busy ms", "GPU busy"].concat(without ? ["without nsys ms", "ratio", "share without"] : []);
    heads.forEach(function (x, i) { h.appendChild(el("th", i ? "num" : null, x)); });
    t.appendChild(h);
    function row(cells, cls) {
      var tr = el("tr", cls);
      cells.forEach(function (x, i) {
        var td = el("td", i ? "num" : null);
        if (i === 0 && color[x]) { var sw = el("span", "swatch"); sw.style.background = color[x]; td.appendChild(sw); }
        td.appendChild(document.createTextNode(x));
        tr.appendChild(td);
      });
      t.appendChild(tr);
    }
    B.phases.forEach(function (r) {
      row([r.phase, num(r.ms_per_cycle, 3), pct(r.share || 0), num(r.gpu_busy_ms_per_cycle, 3), pct(r.gpu_busy_share)]
        .concat(without ? [msOr(r.unprofiled_ms_per_cycle), ratio(r.ratio), pct(r.unprofiled_share)] : []));
    });
    color[UNTIMED] = UNTIMED_COLOR;
    if (without) row([UNTIMED, "-", "-", "-", "-", msOr(B.untimed_unprofiled_ms), "-", pct(B.untimed_unprofiled_share)]);
    row(["cycle", num(B.cycle_ms.mean, 3), "100.0%", num(B.gpu_busy_ms_per_cycle, 3), pct(B.gpu_busy_share)]
      .concat(without ? [msOr(B.cycle_ms.unprofiled_mean), ratio(B.ratio), "100.0%"] : []), "total");
    box.appendChild(add(el("div", "tablebox"), t));
    box.appendChild(el("p", "muted", "cycle " + num(B.cycle_ms.mean, 3) + " ms mean, " + num(B.cycle_ms.median, 3) + " median, " +
      num(B.cycle_ms.p90, 3) + " p90 under nsys; GPU busy: the part of a phase's time the GPU ran its ops."));
  }

  return { breakdown: breakdown };
}
