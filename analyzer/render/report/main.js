// The report's entry point: reads the data block, builds the context and the panels (analyzer/render/report/), and
// draws what the first screen shows first. Every name in the data came from someone else's program: it reaches
// the page only through textContent, or entity-escaped (esc) where plotly renders it as a label. No markup is
// ever built from data.
var T = { start_ms: performance.now() };

// The data block is JSON, or for big reports gzip'd JSON in base64 (half the file, and far less for the HTML
// parser to read), inflated here. All of it synchronously, as the page loads: every chart is drawn before the
// load event, so a screenshot, a printout or a PDF taken when the page has loaded holds them all (the browser's own
// DecompressionStream answers only later, in promises).
function loadData() {
  var node = document.getElementById("specprof-data");
  if (node.getAttribute("type") === "application/json") return JSON.parse(node.textContent);
  var bin = atob(node.textContent.trim()), bytes = new Uint8Array(bin.length);
  for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return JSON.parse(new TextDecoder().decode(gunzip(bytes)));
}

// One gzip member (RFC 1952) inflated (RFC 1951): stored, fixed and dynamic Huffman blocks. Each Huffman code is
// a table indexed by the next bits of input, entries `symbol << 4 | code length`.
function gunzip(src) {
  var n = src.length;
  function bad(what) { return new Error("the report's data block is damaged (" + what + ")"); }
  if (n < 18 || src[0] !== 0x1f || src[1] !== 0x8b || src[2] !== 8) throw bad("not gzip");
  var flg = src[3], ip = 10;
  if (flg & 4) ip += 2 + (src[ip] | src[ip + 1] << 8);
  if (flg & 8) while (ip < n && src[ip++]) { /* file name */ }
  if (flg & 16) while (ip < n && src[ip++]) { /* comment */ }
  if (flg & 2) ip += 2;
  var size = (src[n - 4] | src[n - 3] << 8 | src[n - 2] << 16 | src[n - 1] << 24) >>> 0;
  var out = new Uint8Array(size), op = 0, buf = 0, cnt = 0;
  function need(k) { while (cnt < k) { if (ip >= n) throw bad("cut short"); buf |= src[ip++] << cnt; cnt += 8; } }
  function bits(k) { need(k); var v = buf & ((1 << k) - 1); buf >>>= k; cnt -= k; return v; }
  function table(lengths) {
    var max = 0, i, count = new Uint16Array(16), next = new Uint16Array(16);
    for (i = 0; i < lengths.length; i++) { count[lengths[i]]++; if (lengths[i] > max) max = lengths[i]; }
    count[0] = 0;
    for (var code = 0, b = 1; b < 16; b++) { code = (code + count[b - 1]) << 1; next[b] = code; }
    var t = new Int32Array(1 << max);
    for (i = 0; i < lengths.length; i++) {
      var len = lengths[i];
      if (!len) continue;
      for (var c = next[len]++, r = 0, k = 0; k < len; k++) { r = (r << 1) | (c & 1); c >>= 1; }
      for (var j = r; j < t.length; j += 1 << len) t[j] = i << 4 | len;
    }
    return { t: t, max: max, mask: (1 << max) - 1 };
  }
  function decode(h) {
    need(h.max);
    var e = h.t[buf & h.mask], len = e & 15;
    if (!len) throw bad("no such code");
    buf >>>= len; cnt -= len;
    return e >> 4;
  }
  var LB = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258],
    LE = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0],
    DB = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145,
      8193, 12289, 16385, 24577],
    DE = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13],
    ORDER = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];
  var fixed = null, last;
  do {
    last = bits(1);
    var type = bits(2), lit, dst, i;
    if (type === 0) {  // stored: from the next byte boundary, LEN and NLEN, then LEN bytes
      ip -= cnt >> 3; buf = 0; cnt = 0;
      var len = src[ip] | src[ip + 1] << 8;
      ip += 4;
      if (ip + len > n || op + len > size) throw bad("stored block too long");
      out.set(src.subarray(ip, ip + len), op); ip += len; op += len;
      continue;
    }
    if (type === 1) {
      if (!fixed) {
        var fl = new Uint8Array(288);
        fl.fill(8, 0, 144); fl.fill(9, 144, 256); fl.fill(7, 256, 280); fl.fill(8, 280, 288);
        fixed = [table(fl), table(new Uint8Array(30).fill(5))];
      }
      lit = fixed[0]; dst = fixed[1];
    } else if (type === 2) {
      var nl = bits(5) + 257, nd = bits(5) + 1, nc = bits(4) + 4, cl = new Uint8Array(19);
      for (i = 0; i < nc; i++) cl[ORDER[i]] = bits(3);
      var ch = table(cl), lens = new Uint8Array(nl + nd);
      for (i = 0; i < nl + nd;) {
        var s = decode(ch);
        if (s < 16) { lens[i++] = s; continue; }
        var v = 0, rep;
        if (s === 16) { if (!i) throw bad("repeat first"); v = lens[i - 1]; rep = 3 + bits(2); }
        else rep = s === 17 ? 3 + bits(3) : 11 + bits(7);
        if (i + rep > nl + nd) throw bad("lengths overrun");
        lens.fill(v, i, i + rep); i += rep;
      }
      lit = table(lens.subarray(0, nl)); dst = table(lens.subarray(nl));
    } else throw bad("block type 3");
    for (;;) {
      var sym = decode(lit);
      if (sym < 256) { if (op >= size) throw bad("too long"); out[op++] = sym; continue; }
      if (sym === 256) break;
      sym -= 257;
      if (sym >= 29) throw bad("length code");
      var length = LB[sym] + bits(LE[sym]), d = decode(dst);
      if (d >= 30) throw bad("distance code");
      var dist = DB[d] + bits(DE[d]);
      if (dist > op || op + length > size) throw bad("distance");
      for (var k = 0; k < length; k++, op++) out[op] = out[op - dist];
    }
  } while (!last);
  if (op !== size) throw bad("length");
  return out;
}

function app(D) {
  var R = reportContext(D), plots = R.plots;
  var timeline = R.timeline = makeTimeline(R);
  var head = headerPanels(R), cycles = cyclesPanels(R), checks = checksPanels(R);
  var header = head.header, runFacts = head.runFacts, breakdown = breakdownPanel(R).breakdown,
    phaseBars = phasesPanel(R).phaseBars, kernels = kernelsPanel(R).kernels, cycleSeries = cycles.cycleSeries,
    cycleHist = cycles.cycleHist, crosscheck = checks.crosscheck, economics = checks.economics,
    levers = leversPanel(R).levers;

  // Every panel is drawn here, as the page loads, the first screen's first (`interactive_ms`: from then on the page
  // would answer input; `ready_ms`: every panel drawn). Each panel's drawing time is `<panel>_ms` in
  // window.specprofTimings.
  function run(f) {
    var t = performance.now();
    try { f(); }
    catch (e) { console.error("specprof report: " + (f.name || "panel") + ": " + (e && e.message)); }
    T[(f.name || "panel") + "_ms"] = performance.now() - t;
  }
  function drawTimeline() { plots.push(timeline.show(timeline.state.w, timeline.state.width)); }
  [header, runFacts, breakdown, drawTimeline, phaseBars, kernels].forEach(run);
  T.interactive_ms = performance.now();
  window.specprofInteractive = true;
  [cycleSeries, cycleHist, crosscheck, economics, levers].forEach(run);
  T.drawn_ms = performance.now();
  Promise.all(plots).then(function () {
    T.ready_ms = performance.now();
    T.timeline_build_ms = timeline.state.build_ms;
    window.specprofTimings = T;
    window.specprofReady = true;
    document.body.setAttribute("data-ready", "1");
  });
  // Printing (and a PDF): while the page prints it is laid out at the paper's width (page.html's print style), and
  // each chart is drawn again at its panel's width then; afterwards at the screen's again.
  if (window.matchMedia) window.matchMedia("print").addEventListener("change", function () {
    document.querySelectorAll(".js-plotly-plot").forEach(function (gd) {
      Plotly.relayout(gd, { autosize: true });
      // the timeline's legends wrap to as many rows as the new width needs: its layout is made again for it; the
      // others are drawn once more at the new width (after the resize alone, plotly left a legend where its
      // margin had been)
      if (gd.id === "timeline") timeline.show(timeline.state.w, timeline.state.width);
      else Plotly.redraw(gd);
    });
  });
  window.specprof = { data: D, timeline: timeline, webgl: R.WEBGL };
}

(function () {
  var D;
  try { D = loadData(); }
  catch (e) {
    console.error("specprof report: " + (e && e.message));
    var h = document.getElementById("subtitle");
    if (h) h.textContent = "The report's data could not be read: " + (e && e.message);
    return;
  }
  T.parse_ms = performance.now() - T.start_ms;
  app(D);
})();
