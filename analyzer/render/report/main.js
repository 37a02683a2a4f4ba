// The report's entry point: reads the data block, builds the context and the panels (analyzer/render/report/), and
// draws what the first screen shows first. Every name in the data came from someone else's program: it reaches
// the page only through textContent, or entity-escaped (esc) where plotly renders it as a label. No markup is
// ever built from data.
var T = { start_ms: performance.now() };

// The data block is JSON, or for big reports gzip'd JSON in base64 (half the file, and far less for the
// HTML parser to read), inflated by the browser's own DecompressionStream.
function loadData() {
  var node = document.getElementById("specprof-data");
  if (node.getAttribute("type") === "application/json") return Promise.resolve(JSON.parse(node.textContent));
  if (typeof DecompressionStream === "undefined") return Promise.reject(new Error("this browser has no DecompressionStream: open the report in a current Chrome, Edge, Firefox or Safari"));
  var bin = atob(node.textContent.trim()), bytes = new Uint8Array(bin.length);
  for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text().then(JSON.parse);
}

function app(D) {
  var R = reportContext(D), plots = R.plots;
  var timeline = R.timeline = makeTimeline(R);
  var head = headerPanels(R), cycles = cyclesPanels(R), checks = checksPanels(R);
  var header = head.header, runFacts = head.runFacts, phaseBars = phasesPanel(R).phaseBars,
    kernels = kernelsPanel(R).kernels, cycleSeries = cycles.cycleSeries, cycleHist = cycles.cycleHist,
    crosscheck = checks.crosscheck, economics = checks.economics;

  // What the first screen shows is drawn first; the page answers input from then on (`interactive_ms`), and the
  // panels further down are drawn in a next task (`ready_ms`: every panel drawn). Each panel's drawing time is
  // `<panel>_ms` in window.specprofTimings.
  function run(f) {
    var t = performance.now();
    try { f(); }
    catch (e) { console.error("specprof report: " + (f.name || "panel") + ": " + (e && e.message)); }
    T[(f.name || "panel") + "_ms"] = performance.now() - t;
  }
  function drawTimeline() { plots.push(timeline.show(timeline.state.w, timeline.state.width)); }
  [header, runFacts, drawTimeline, phaseBars, kernels].forEach(run);
  Promise.all(plots).then(function () {
    T.interactive_ms = performance.now();
    window.specprofInteractive = true;
    return new Promise(function (resolve) { setTimeout(resolve, 0); });
  }).then(function () {
    [cycleSeries, cycleHist, crosscheck, economics].forEach(run);
    return Promise.all(plots);
  }).then(function () {
    T.ready_ms = performance.now();
    T.timeline_build_ms = timeline.state.build_ms;
    window.specprofTimings = T;
    window.specprofReady = true;
    document.body.setAttribute("data-ready", "1");
  });
  window.specprof = { data: D, timeline: timeline, webgl: R.WEBGL };
}

loadData().then(function (D) {
  T.parse_ms = performance.now() - T.start_ms;
  app(D);
}).catch(function (e) {
  console.error("specprof report: " + (e && e.message));
  var h = document.getElementById("subtitle");
  if (h) h.textContent = "The report's data could not be read: " + (e && e.message);
});
