// Panel "Top kernels per phase": the kernels that cost each phase most.
function kernelsPanel(R) {
  var D = R.D, PH = R.PH, CA = R.CA, el = R.el, add = R.add, num = R.num, ms = R.ms, pct = R.pct, SHOWN = R.SHOWN,
    OTHER = R.OTHER, isShown = R.isShown, emptyNote = R.emptyNote;

  function kernels() {
    var box = document.getElementById("kernels");
    if (!D.kernels.length) { emptyNote(box, "No kernels."); return; }
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
        add(td, sw, document.createTextNode(k.phase + "  "), el("span", "muted", "busy " + ms(k.phase_busy_ms, 2)));
        g.appendChild(td); t.appendChild(g); last = k.phase;
      }
      var r = el("tr");
      r.appendChild(el("td", "kname mono", k.name));
      var ct = el("td", "cat"), cs = el("span", "swatch"); cs.style.background = color[k.category] || "#999";
      add(ct, cs, document.createTextNode(k.category));
      r.appendChild(ct);
      r.appendChild(el("td", "num", num(k.count, 0)));
      r.appendChild(el("td", "num", num(k.ms, 3)));
      var share = k.busy_share || 0;
      var bt = el("td"), bar = el("div", "bar");
      bar.style.width = Math.max(1, Math.round(90 * share)) + "px"; bar.style.background = color[k.category] || "#999";
      bt.title = pct(share) + " of the phase's busy time";
      add(bt, bar); r.appendChild(bt);
      t.appendChild(r);
    });
    box.appendChild(t);
    if (OTHER) box.appendChild(el("p", "muted", SHOWN.hidden.length + " smaller phases not listed: `specprof analyze --json` or `--csv` has every phase's kernels."));
  }

  return { kernels: kernels };
}
