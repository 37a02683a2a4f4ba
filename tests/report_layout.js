// What overflows or covers what in a drawn report page (tests/test_report_layout.py): returns a list of problems,
// each a line of text, empty when the page is sound.
//  - the page scrolls sideways, or a panel (section.card) is wider than its box, or anything in a panel reaches
//    past the panel's edges;
//  - in each plotly chart, the toolbar (modebar) covers the plotting area or any label: a legend entry or title,
//    an annotation, an axis title, a tick label, a button; and a legend entry covers the plotting area or any of
//    those labels (or an entry of another legend).
(() => {
  const out = [];
  const box = e => { const r = e.getBoundingClientRect(); return { left: r.left, right: r.right, top: r.top, bottom: r.bottom, w: r.width, h: r.height }; };
  const name = e => (e.id ? "#" + e.id : e.tagName.toLowerCase() + "." + String(e.className && e.className.baseVal !== undefined ? e.className.baseVal : e.className).split(" ")[0]);
  const meet = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  const text = e => (e.textContent || "").trim().slice(0, 40);

  const doc = document.documentElement;
  if (doc.scrollWidth > window.innerWidth) out.push("the page scrolls sideways: " + doc.scrollWidth + " px in " + window.innerWidth);
  document.querySelectorAll("section.card").forEach(card => {
    if (card.scrollWidth > card.clientWidth + 1) out.push(card.id + ": content " + card.scrollWidth + " px wide in " + card.clientWidth);
    const c = box(card);
    card.querySelectorAll("*").forEach(e => {
      if (e.ownerSVGElement) return;  // drawn inside an <svg>, which clips it: the <svg> itself is checked
      const r = box(e);
      if (!r.w || !r.h || getComputedStyle(e).visibility === "hidden") return;
      if (r.right > c.right + 1 || r.left < c.left - 1) out.push(card.id + ": " + name(e) + " '" + text(e) + "' reaches past the panel (" +
        Math.round(r.left) + "-" + Math.round(r.right) + " in " + Math.round(c.left) + "-" + Math.round(c.right) + ")");
    });
  });

  document.querySelectorAll(".js-plotly-plot").forEach(gd => {
    const id = gd.id || (gd.closest("section") || {}).id;
    const all = sel => [...gd.querySelectorAll(sel)].map(e => ({ what: sel + " '" + text(e) + "'", r: box(e) })).filter(x => x.r.w && x.r.h);
    const area = [...gd.querySelectorAll(".nsewdrag")].map(e => ({ what: "the plotting area", r: box(e) }));
    const legends = all("g.legend .traces").concat(all("g.legend2 .traces"), all(".legendtitletext"));
    const labels = all("g.annotation").concat(all(".xtitle"), all(".ytitle"), all(".xtick text"), all(".ytick text"),
      all("g.updatemenu-button"));
    const bar = gd.querySelector(".modebar");
    if (bar) {
      const b = { what: "the toolbar", r: box(bar) };
      area.concat(legends, labels).forEach(x => { if (meet(b.r, x.r)) out.push(id + ": the toolbar covers " + x.what); });
    }
    legends.forEach(l => {
      area.concat(labels).forEach(x => { if (meet(l.r, x.r)) out.push(id + ": legend entry " + l.what + " meets " + x.what); });
    });
    const ls = all("g.legend .traces"), l2 = all("g.legend2 .traces");
    ls.forEach(a => l2.forEach(b => { if (meet(a.r, b.r)) out.push(id + ": legend entries " + a.what + " and " + b.what + " meet"); }));
    const svg = gd.querySelector(".main-svg");
    if (svg) {
      const s = box(svg);
      legends.concat(labels).forEach(x => {
        if (x.r.left < s.left - 1 || x.r.right > s.right + 1 || x.r.top < s.top - 1 || x.r.bottom > s.bottom + 1)
          out.push(id + ": " + x.what + " is cut off by the chart's edge");
      });
    }
  });
  return out;
})()
