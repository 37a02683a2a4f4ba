// The page's header (the run, its command line, headline tiles) and the panel "The run" (what was captured,
// how, and on what).
function headerPanels(R) {
  var D = R.D, PH = R.PH, el = R.el, add = R.add, num = R.num, ms = R.ms, pct = R.pct;

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

  return { header: header, runFacts: runFacts };
}
