// Panel "Where the GPU time went, per phase": attributed time per phase, by category.
function phasesPanel(R) {
  var CA = R.CA, esc = R.esc, num = R.num, ms = R.ms, pct = R.pct, SHOWN = R.SHOWN, OTHER = R.OTHER, plot = R.plot,
    baseLayout = R.baseLayout;

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

  return { phaseBars: phaseBars };
}
