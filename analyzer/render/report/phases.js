// Panel "Where the capture's GPU time went, per phase": attributed time per phase over the capture, by category.
function phasesPanel(R) {
  var D = R.D, CA = R.CA, esc = R.esc, num = R.num, ms = R.ms, pct = R.pct, SHOWN = R.SHOWN, OTHER = R.OTHER, plot = R.plot,
    baseLayout = R.baseLayout, legendAbove = R.legendAbove, choices = R.choices;

  function phaseBars() {
    // the bars, their shares and per-instance times: derived/views.py phase_bars (the last one stacks the phases
    // the chart leaves out)
    var bars = D.chart.bars.map(function (b) { return Object.assign({}, b, { name: b.name == null ? OTHER : b.name }); });
    var names = bars.map(function (p) { return esc(p.name); });
    var traces = CA.map(function (c) {
      var tot = bars.map(function (p) { return p.by_category_ms[c.name] || 0; });
      return {
        // an idle kind: its own colour, hatched over (cpu_wait grey, launch orange: told apart in the legend too)
        type: "bar", name: esc(c.name), x: names, y: tot, marker: { color: c.color,
          line: { color: c.idle ? "#667085" : c.color, width: c.idle ? 0.6 : 0 },
          pattern: c.idle ? { shape: "/", fillmode: "overlay", fgcolor: "#475467", size: 6, solidity: 0.15 } : undefined },
        customdata: bars.map(function (p) {
          var per = p.by_category_per_instance_ms[c.name];
          return [pct(p.by_category_share[c.name] || 0), p.per_instance_ms != null ? ms(per || 0) : "-"];
        }),
        hovertemplate: "<b>%{x}</b><br>" + esc(c.name) + ": %{y:,.3f} ms (%{customdata[0]} of the phase)<br>per instance %{customdata[1]}<extra></extra>",
      };
    });
    var totals = bars.map(function (p) { return p.attributed_ms; });
    traces.push({ type: "scatter", mode: "text", x: names, y: totals, text: totals.map(function (t) { return num(t, 1); }),
      textposition: "top center", showlegend: false, hoverinfo: "skip", textfont: { size: 11, color: "#475467" } });
    var perI = CA.map(function (c) { return bars.map(function (p) { return p.by_category_per_instance_ms[c.name] || 0; }); });
    var perIT = bars.map(function (p) { return p.per_instance_ms || 0; });
    var maxT = Math.max.apply(null, totals.concat([0]));
    var gd = document.getElementById("phase-bars");
    // the labels above the bars: on the last trace (the totals) only, never on the bars' segments
    function labels(values, d) { return traces.map(function (t, i) { return i === CA.length ? values.map(function (v) { return num(v, d); }) : null; }); }
    choices(gd, [
      ["total", function () {
        Plotly.update(gd, { y: traces.slice(0, CA.length).map(function (t) { return t.y; }).concat([totals]),
          text: labels(totals, 1) }, { "yaxis.title.text": "attributed ms (total)", "yaxis.range": [0, maxT * 1.12 || 1] });
      }],
      ["per instance", function () {
        Plotly.update(gd, { y: perI.concat([perIT]), text: labels(perIT, 3) },
          { "yaxis.title.text": "attributed ms per instance", "yaxis.range": [0, Math.max.apply(null, perIT.concat([0])) * 1.12 || 1] });
      }]]);
    plot(gd, traces, baseLayout({
      barmode: "stack", height: 380, margin: { l: 64, t: 10, b: 40 },
      yaxis: { title: { text: "attributed ms (total)" }, gridcolor: "#eef0f3", range: [0, maxT * 1.12 || 1] },
      xaxis: { automargin: true },
      legend: legendAbove(),
    }));
  }

  return { phaseBars: phaseBars };
}
