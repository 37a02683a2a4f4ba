// The page's header (the run, its command line, headline tiles) and the panel "The run" (what was captured,
// how, and on what).
function headerPanels(R) {
  var D = R.D, PH = R.PH, el = R.el, add = R.add, num = R.num, ms = R.ms, pct = R.pct;

  function header() {
    var f = D.facts, c = D.cycles;
    var base = String(f.source || "").split("/").pop();
    document.getElementById("title").textContent = "specprof · " + (base || "trace");
    document.getElementById("subtitle").textContent = (f.source || "") + "  ·  " + format(f) + "  ·  generated " + f.generated;
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
    // The headline numbers are the JSON contract's (D.analysis): one rank's decode cycle on the stream its phases
    // run on, and the run without the profiler beside it.
    var A = D.analysis || {}, B = A.cycle_breakdown, several = A.shown && A.shown.ranks > 1;
    var streams = (A.streams || []).map(function (s) {
      return "device " + s.device + " stream " + s.stream + " (" + s.role + "): busy " + ms(s.busy_ms, 1) +
        (s.role === "side" ? ", " + ms(s.overlapped_ms, 1) + " of it while the cycle stream was busy" : "");
    }).join("\n");
    if (B) {
      var where = "device " + B.device + " stream " + B.stream + (several ? ", rank " + B.rank + " (" + B.why + ")" : "");
      tile(ms(B.cycle_ms.median, 2), "cycle p50" + (several ? " · rank " + B.rank : ""),
           "median length of one decode cycle on the stream its phases run on (" + where + "); mean " +
           ms(B.cycle_ms.mean, 2) + ", p90 " + ms(B.cycle_ms.p90, 2) + " under the profiler");
      if (B.cycle_ms.unprofiled_mean != null) tile(ms(B.cycle_ms.unprofiled_mean, 2), "cycle without nsys",
           "mean period of the same workload run without the profiler (its sidecar)");
    }
    tile(ms(A.capture_wall_ms != null ? A.capture_wall_ms : f.capture_wall_ms, 1), "capture wall",
         "first GPU op start to last op end; GPU time per stream:\n" + streams);
    tile(pct(f.device_busy_share), "GPU busy", "union of ops over the devices' wall time");
    if (B) {
      // the largest phase and the pseudo-phases' share: picked and summed in derived/views.py (breakdown_summary)
      var top = B.largest_phase, unprof = top && top.unprofiled;
      if (top) tile(top.phase + " " + pct(top.share), "largest phase" + (unprof ? " (without nsys)" : ""),
                    "share of one decode cycle" + (unprof ? " in the run without the profiler (its CUDA events)" : " under the profiler"));
      tile(pct(B.outside_share, 1), "outside every phase", "share of the decode cycle charged to (unattributed) (the engine between cycles) and (cycle) (the worker between its phases); " +
           num(f.unattributed_ops, 0) + " ops no range claims");
    } else {
      tile(pct(f.unattributed_share, 2), "unattributed", num(f.unattributed_ops, 0) + " ops no range claims");
    }
    var est = D.economics && Array.isArray(D.economics.estimates) ? D.economics.estimates[0] : null;
    if (est && est.speedup != null) tile("×" + num(est.speedup, 2), "speculation speedup" +
      (est.speedup_lo != null && est.speedup_hi != null ? " (95% CI " + num(est.speedup_lo, 2) + "–" + num(est.speedup_hi, 2) + ")" : ""),
      est.source + ": " + (est.verdict || ""));
    else if (est && est.accept_len != null) tile(num(est.accept_len, 2), "accept length", est.source || "");
    // two versions of nsys can meet in one run: the one that recorded the capture (the run's manifest) and the one
    // that exported it to SQLite (the export's own metadata); the card is the exporter's
    if (f.nsys_version) tile(f.nsys_version, "nsys export", "the nsys that exported the SQLite file" +
      (f.nsys_banner ? "; the capture was recorded by " + f.nsys_banner + " (The run)" : ""));
    else tile(f.tool_version || "-", "tool");
  }
  // the trace's format and the version of the tool that wrote it, named as what it is
  function format(f) {
    if (f.nsys_version) return (f.format || "") + ", exported by nsys " + f.nsys_version;
    return (f.format || "") + (f.tool_version ? " " + f.tool_version : "");
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
    row("format", format(f));
    row("recorded by", f.nsys_banner);
    (f.gpus || []).forEach(function (g) {
      row("GPU " + g.device, [g.name, g.memory, g.driver ? "driver " + g.driver : null].filter(Boolean).join(" · "));
    });
    row("command", f.command, true);
    row("nsys flags", f.nsys_flags, true);
    row("preset", f.preset);
    var shape = (D.analysis || {}).draft_shape;  // the draft's shape as the JSON gives it (chain or tree)
    if (shape) row("draft", shape.description);
    var v = f.versions || {};
    row("versions", Object.keys(v).map(function (k) { return k + " " + v[k]; }).join(", "));
    row("host", f.host);
    row("captured", f.start ? f.start + (f.end ? " → " + f.end : "") : null);
    row("contents", num(f.ops, 0) + " GPU ops on " + f.streams + " stream(s), " + num(f.ranges, 0) + " ranges, " +
        num(f.cycles, 0) + " cycles");
    var A = D.analysis || {};
    row("GPU time", "capture wall " + ms(A.capture_wall_ms, 1) + "; devices busy " + ms(f.device_busy_ms, 1) +
        " of " + ms(f.device_wall_ms, 1) + "; each stream is tiled on its own, and a rank's phases are charged on its cycle stream");
    if (A.shown && A.shown.ranks > 1) row("tables of", "rank " + A.shown.rank + " (" + A.shown.why + "), device " +
        A.shown.device + " stream " + A.shown.stream + "; " + A.shown.ranks + " ranks in all");
    row("unattributed", ms(f.unattributed_ms) + " on the cycle stream (" + num(f.unattributed_ops, 0) + " ops no range claims)");
    box.appendChild(dl);
    if (D.streams.length) {
      var t = el("table", "grid"), h = el("tr");
      ["device", "stream", "role", "ops", "wall ms", "busy", "cpu_wait", "launch", "idle", "overlapped ms"].forEach(function (x, i) { h.appendChild(el("th", i > 2 ? "num" : null, x)); });
      t.appendChild(h);
      D.streams.forEach(function (s) {
        var r = el("tr");
        [s.device, s.stream, s.role, num(s.ops, 0), num(s.wall_ms, 1), pct(s.busy_share), pct(s.cpu_wait_share),
         pct(s.launch_share), pct(s.idle_share), s.role === "side" ? num(s.overlapped_ms, 3) : "-"].forEach(function (x, i) { r.appendChild(el("td", i > 2 ? "num" : null, x)); });
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

  return { header: header, runFacts: runFacts };
}
