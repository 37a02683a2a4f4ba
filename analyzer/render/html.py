"""The HTML report: one self-contained file (plotly.js inlined, no network) that renders an Analysis.

Python builds a view model (plain JSON: the analysis tables, columnar, with times in integer
nanoseconds relative to the capture's start (TraceMeta.start_ns), and display-only downsampling for big captures);
the app in `report/` draws it in the browser: one module per panel (`timeline.js`, `phases.js`, `kernels.js`,
`cycles.js`, `checks.js`, `header.js`), the context they share (`common.js`) and the entry point (`main.js`),
put together here into the page's one script. What each panel shows: docs/report.md.

Names (kernels, ranges, threads, the command line) come from other people's programs. They travel
only inside the JSON data block, escaped so that nothing in them can close the <script> element
(`<`, `>`, `&`, U+2028 and U+2029 are written as \\u escapes), and the page puts them on screen as
text (DOM textContent, or entity-escaped for plotly's labels): never as markup.

Scale: op-by-op detail is embedded for at most DETAIL_OPS ops, chosen as whole windows (cycles):
all of them when they fit, else the first ones, the slowest, the fastest, the median and evenly
spaced others. Outside those windows a stream is drawn as blocks: runs of consecutive time charged
to one phase, merged further into fixed time bins when there are more than BLOCKS of them.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import gzip
import hashlib
import html as htmlmod
import json
import math
import os
import re
import shlex
from importlib import resources

import polars as pl

from analyzer.core.categories import kinds_of
from analyzer.derived import views
from analyzer.derived.analysis import Analysis
from analyzer.errors import SpecprofError
from analyzer.model.labels import COMMUNICATION, IDLE_CATEGORIES, IN_CYCLE, UNATTRIBUTED
from analyzer.render import json as json_doc
from analyzer.render.format import cut, ms

SCHEMA = "specprof.report/1"
DETAIL_OPS = 150_000  # ops embedded one by one (with the idle segments between them)
BLOCKS = 60_000  # aggregated GPU blocks outside the detailed windows
RANGES = 100_000  # CPU ranges embedded
MAX_LANES = 4  # nesting depths of CPU ranges drawn per thread (deeper ones go on the last lane)
SLICE_OPS = 2_000  # without cycles, windows are time slices of about this many ops
NAME_CHARS = 240  # names longer than this are cut for display
COMPRESS_ABOVE = 500_000  # data blocks longer than this (characters of JSON) are embedded gzip'd

PHASE_COLORS = {
    "draft": "#4C78A8", "verify": "#F58518", "draft_extend": "#54A24B", "accept": "#B279A2",
    "prefill": "#9D755D", IN_CYCLE: "#BAB0AC", UNATTRIBUTED: "#E45756",
}
OTHER_PHASE_COLORS = ["#72B7B2", "#EECA3B", "#FF9DA6", "#79706E", "#D67195", "#439894", "#83BCB6",
                      "#B6992D", "#8CD17D", "#A0CBE8", "#FFBE7D", "#F1CE63", "#86BCB6", "#D4A6C8"]
CATEGORY_COLORS = {
    "gemm": "#3B528B", "attention": "#21918C", "moe": "#5EC962", "norm": "#E3C620",
    "elementwise": "#8FBC3F", "memcpy": "#8C564B", "memset": "#C49C94", "cuda_graph": "#6A51A3",
    "other": "#7F7F7F", "cpu_wait": "#CFCFCF", "launch": "#FDBF6F", "idle": "#EEEEEE",
    # communication by kind: reds, drawn side by side after the compute
    "allreduce": "#D62728", "all_to_all": "#E6550D", "allgather": "#FB6A4A", "reduce_scatter": "#A50F15",
    "p2p": "#FC9272", "communication": "#67000D",
}
# A kind of communication of the user's own rules: these reds, in turn.
OTHER_COMMUNICATION_COLORS = ["#CB181D", "#EF3B2C", "#99000D", "#F4A582"]
OTHER_CATEGORY_COLORS = ["#440154", "#9467BD", "#17BECF", "#BCBD22", "#2CA02C", "#FF7F0E"]


# ----------------------------------------------------------------------------------------------
# Entry points


def render(a: Analysis, manifest: dict | None = None) -> str:
    """The report as one HTML document (a str). `manifest`: the run directory's manifest.json."""
    return page(view_model(a, manifest))


def write(a: Analysis, path: str, manifest: dict | None = None) -> str:
    """Write the report to `path`; returns the path."""
    text = render(a, manifest)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise SpecprofError(f"{path}: cannot write the report ({exc.strerror})", path) from None
    return path


REPORT_MODULES = ("common.js", "timeline.js", "header.js", "phases.js", "kernels.js", "cycles.js", "checks.js",
                  "main.js")


def app_script() -> str:
    """The report's app: its modules (analyzer/render/report/) in one strict-mode function, whose scope they
    share (each declares one factory function; main.js calls them)."""
    modules = "\n".join(_resource(f"report/{name}") for name in REPORT_MODULES)
    return f'(function () {{\n"use strict";\n{modules}\n}})();\n'


def page(vm: dict) -> str:
    """Put the view model, the app and plotly.js into the page template."""
    template = _resource("page.html")
    app = app_script()
    plotly_js = _plotly_js()
    for name, code in (("plotly.js", plotly_js), ("the report's app", app)):
        if "</script" in code.lower() or "<!--" in code:
            raise SpecprofError(f"{name} holds '</script' or '<!--' and cannot be inlined", name)
    title = f"specprof report: {os.path.basename(vm['facts']['source'] or '') or 'trace'}"
    # The page runs only its own two scripts (by hash): no other script, no network.
    csp = ("default-src 'none'; script-src " + " ".join(_sha256(code) for code in (plotly_js, app))
           + " 'unsafe-eval'; style-src 'unsafe-inline'; img-src data: blob:; font-src data:")
    data, datatype = embed_data(vm)
    values = {"CSP": csp, "TITLE": htmlmod.escape(title), "DATA": data, "DATATYPE": datatype, "PLOTLY": plotly_js,
              "APP": app}
    # One pass over the template: text put in is never searched for placeholders again.
    return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: values[m.group(1)], template)


def _sha256(code: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode("ascii") + "'"


def embed_data(value) -> tuple[str, str]:
    """The view model as the page's data block and its type: JSON, or above COMPRESS_ABOVE characters gzip'd JSON
    in base64 (a third of the size; the page inflates it with the browser's DecompressionStream)."""
    text = embed_json(value)
    if len(text) <= COMPRESS_ABOVE:
        return text, "application/json"
    packed = gzip.compress(text.encode("ascii"), compresslevel=6, mtime=0)
    return base64.b64encode(packed).decode("ascii"), "application/gzip;base64"


def read_data(page: str) -> dict:
    """The view model embedded in a report page (for tests and scripts)."""
    m = re.search(r'<script type="([^"]+)" id="specprof-data">(.*?)</script>', page, re.S)
    if m is None:
        raise ValueError("no specprof data block in this page")
    body = m.group(2) if m.group(1) == "application/json" else gzip.decompress(base64.b64decode(m.group(2))).decode()
    return json.loads(body)


def embed_json(value) -> str:
    """JSON that is safe inside <script type="application/json">: no '<', '>', '&', U+2028, U+2029."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _resource(name: str) -> str:
    return resources.files("analyzer.render").joinpath(name).read_text(encoding="utf-8")


def _plotly_js() -> str:
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:  # pragma: no cover - plotly is a dependency
        raise SpecprofError("the HTML report needs the plotly package (pip install plotly)", "plotly") from None
    return get_plotlyjs()


# ----------------------------------------------------------------------------------------------
# The view model


def view_model(a: Analysis, manifest: dict | None = None) -> dict:
    """Everything the page draws, as JSON-able data (integer ns relative to `t0`, or ms where noted)."""
    t0 = _origin(a)
    phases = _phase_list(a)
    cats = _category_list(a)
    vm = {
        "schema": SCHEMA,
        "facts": _facts(a, manifest),
        "notes": [_cut(n, 2000) for n in a.notes],
        "phases": phases,
        "categories": cats,
        "cycles": _cycles(a, t0),
        "kernels": _kernels(a),
        "streams": _streams(a),
        "timeline": _timeline(a, t0, [p["name"] for p in phases], [c["name"] for c in cats]),
        "crosscheck": _optional(a.crosscheck),
        "economics": _optional(a.economics),
        # The JSON contract (docs/json.md; its cycles are `cycles` above): the numbers the page shows are these.
        "analysis": json_doc.document(a),
    }
    return vm


def _cut(text, n: int = NAME_CHARS) -> str:
    return cut(text, n)


def _origin(a: Analysis) -> int:
    return a.trace.meta.start_ns  # the capture's start: the one origin of every time shown


def _phase_list(a: Analysis) -> list[dict]:
    names = a.phases["phase"].to_list()
    busy = a.categories.filter(~pl.col("category").is_in(IDLE_CATEGORIES)).group_by("phase").agg(
        busy=pl.col("ns").sum())
    busy_of = dict(busy.iter_rows())
    out, spare = [], iter(OTHER_PHASE_COLORS * (1 + len(names) // len(OTHER_PHASE_COLORS)))
    for r in a.phases.iter_rows(named=True):
        name = r["phase"]
        color = PHASE_COLORS.get(name) or next(spare)
        out.append({
            "name": _cut(name), "color": color, "instances": r["instances"], "ops": r["ops"],
            "cpu_ms": ms(r["cpu"]), "gpu_span_ms": ms(r["gpu_span"]), "gpu_busy_ms": ms(r["gpu_busy"]),
            "attributed_ms": ms(r["attributed"]), "busy_ms": ms(busy_of.get(name, 0)),
            "pseudo": name in (IN_CYCLE, UNATTRIBUTED),
        })
    return out


def _category_list(a: Analysis) -> list[dict]:
    kinds = set(kinds_of(COMMUNICATION, a.category_parents))
    order = views.category_order(a.categories, kinds)
    ns_of = dict(a.categories.group_by("category").agg(ns=pl.col("ns").sum()).iter_rows())
    spare = iter(OTHER_CATEGORY_COLORS * (1 + len(order)))
    spare_comm = iter(OTHER_COMMUNICATION_COLORS * (1 + len(order)))
    # per phase, ms by category
    by_phase: dict[str, dict[str, float]] = {}
    for ph, cat, ns in a.categories.select("phase", "category", "ns").iter_rows():
        by_phase.setdefault(cat, {})[_cut(ph)] = ms(ns)
    return [{"name": _cut(c), "color": CATEGORY_COLORS.get(c) or next(spare_comm if c in kinds else spare),
             "idle": c in IDLE_CATEGORIES,
             "total_ms": ms(ns_of.get(c, 0)), "by_phase": by_phase.get(c, {})} for c in order]


def _facts(a: Analysis, manifest: dict | None) -> dict:
    meta = a.trace.meta
    m = manifest or {}
    total = int(a.phases["attributed"].sum() or 0)
    un = a.phases.filter(pl.col("phase") == UNATTRIBUTED)
    un_ns = int(un["attributed"].sum() or 0) if un.height else 0
    un_ops = int(a.unattributed["ops"].sum() or 0) if a.unattributed.height else 0
    gpus = [{"device": g.get("device"), "name": g.get("name")} for g in meta.gpus]
    for g in m.get("gpus") or []:
        match = next((x for x in gpus if x["device"] == g.get("index")), None)
        extra = {"driver": g.get("driver_version"), "memory": g.get("memory_total")}
        if match is None:
            gpus.append({"device": g.get("index"), "name": g.get("name"), **extra})
        else:
            match.update({k: v for k, v in extra.items() if v})
            match["name"] = match.get("name") or g.get("name")
    nsys = m.get("nsys") or {}
    command = m.get("command") or []
    argv = nsys.get("argv") or []
    flags = argv[1:len(argv) - len(command)] if command and argv[-len(command):] == command else argv[1:]
    dev = a.devices
    wall = int(dev["wall"].sum() or 0) if dev.height else 0
    busy = int(dev["busy"].sum() or 0) if dev.height else 0
    cap = views.capture(a.ops, a.streams)
    versions = {k: v for k, v in (m.get("versions") or {}).items() if v}
    return {
        "source": meta.path, "format": meta.format,
        "nsys_version": meta.tool_version if meta.format == "nsys-sqlite" else None,
        "tool_version": meta.tool_version, "nsys_banner": nsys.get("version"),
        "gpus": gpus, "command": shlex.join(map(str, command)) if command else None,
        "nsys_flags": shlex.join(map(str, flags)) if flags else None,
        "preset": m.get("preset"), "host": m.get("host"), "start": m.get("start"), "end": m.get("end"),
        "versions": versions,
        "ops": a.ops.height, "ranges": a.ranges.height, "cycles": a.cycles.height,
        "streams": a.streams.height, "devices": dev.height,
        "attributed_ms": ms(total), "device_wall_ms": ms(wall), "device_busy_ms": ms(busy),
        "unattributed_ms": ms(un_ns), "unattributed_share": (un_ns / total) if total else 0.0,
        "unattributed_ops": un_ops,
        "capture_wall_ms": ms(cap["wall"]),
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _streams(a: Analysis) -> list[dict]:
    return [{"device": r["device"], "stream": r["stream"], "role": r["role"], "ops": r["ops"], "wall_ms": ms(r["wall"]),
             "busy_ms": ms(r["busy"]), "cpu_wait_ms": ms(r["cpu_wait"]), "launch_ms": ms(r["launch"]),
             "idle_ms": ms(r["idle"]), "overlapped_ms": ms(r["overlapped"])} for r in a.streams.iter_rows(named=True)]


def _kernels(a: Analysis) -> list[dict]:
    return [{"phase": _cut(r["phase"]), "name": _cut(r["short_name"]), "category": r["category"],
             "count": r["count"], "ms": ms(r["ns"])} for r in a.kernels.iter_rows(named=True)]


def _cycles(a: Analysis, t0: int) -> dict:
    """Per cycle: start (ns from t0), CPU range duration, attributed ms per phase on the cycle stream and in total
    (the cycle's length there); the statistics over the breakdown's decode cycles (derived/views.py)."""
    c = a.cycles
    if c.is_empty():
        return {"n": 0}
    data = views.cycle_table(c, a.cycle_phases, a.phases["phase"].to_list())
    cols = [p for p in data.columns if p not in ("cycle", "index", "pid", "start", "end", "total")]
    data = data.with_columns(cpu=pl.col("end") - pl.col("start"))
    keep = views.shown_cycles(a)
    st = views.cycle_stats(data, keep, ["total", "cpu"])
    stats = {label: {k: ms(v) for k, v in st[label].items() if k != "n"} for label in ("total", "cpu")}
    return {
        "n": data.height,
        "index": data["index"].to_list(),
        "pid": data["pid"].to_list(),
        "start": (data["start"] - t0).to_list(),
        "cpu_ms": [ms(x) for x in data["cpu"].to_list()],
        "total_ms": [ms(x) for x in data["total"].to_list()],
        "phases": {_cut(p): [ms(x) for x in data[p].to_list()] for p in cols},
        "stats": stats,
        "stats_cycles": st["total"]["n"],
    }


# ----------------------------------------------------------------------------------------------
# The timeline


def _windows(a: Analysis, t0: int, t_end: int) -> pl.DataFrame:
    """The windows the cycle selector steps through: (start, end, label, kind), covering the capture."""
    if a.cycles.height:
        byi = a.cycles.group_by("index").agg(start=pl.col("start").min(), cycles=pl.col("cycle")).sort("index")
        starts = byi["start"].to_list()
        last_ids = byi["cycles"][-1].to_list()
        last_end = a.segments.filter(pl.col("cycle").is_in(last_ids))["end"].max()
        last_end = max(int(last_end or 0), int(a.cycles.filter(pl.col("cycle").is_in(last_ids))["end"].max()))
        ends = starts[1:] + [last_end]
        rows = [(s, e, f"cycle {i}", "cycle") for i, s, e in zip(byi["index"].to_list(), starts, ends)]
        if starts[0] > t0:
            rows.insert(0, (t0, starts[0], "before cycle 0", "before"))
        if t_end > last_end:
            rows.append((last_end, t_end, "after the last cycle", "after"))
    else:
        n = max(1, min(500, math.ceil(a.ops.height / SLICE_OPS)))
        width = max(1, math.ceil((t_end - t0) / n))
        rows = [(t0 + i * width, min(t_end, t0 + (i + 1) * width), f"slice {i}", "slice") for i in range(n)]
    return pl.DataFrame(rows, schema={"start": pl.Int64, "end": pl.Int64, "label": pl.Utf8, "kind": pl.Utf8},
                        orient="row").with_row_index("w").with_columns(pl.col("w").cast(pl.Int64))


def _assign(df: pl.DataFrame, windows: pl.DataFrame, col: str = "start") -> pl.DataFrame:
    """Add `w`: the window whose start is the last one at or before df[col]."""
    return df.sort(col).join_asof(windows.select("w", w_start="start"), left_on=col, right_on="w_start",
                                  strategy="backward").with_columns(pl.col("w").fill_null(0)).drop("w_start")


def _choose_detail(windows: pl.DataFrame, counts: dict[int, int], budget: int) -> set[int]:
    """The windows embedded op by op: all when they fit, else a priority list filled up to the budget."""
    total = sum(counts.values())
    ws = windows["w"].to_list()
    if total <= budget:
        return set(ws)
    cyc = windows.filter(pl.col("kind") == "cycle").with_columns(dur=pl.col("end") - pl.col("start"))
    order: list[int] = []
    first = cyc["w"].head(5).to_list() if cyc.height else ws[:5]
    order += first
    if cyc.height:
        by_dur = cyc.sort("dur")
        order += by_dur["w"].tail(3).reverse().to_list()  # slowest
        order += by_dur["w"].head(1).to_list()  # fastest
        order.append(by_dur["w"][by_dur.height // 2])  # median
        order.append(by_dur["w"][min(by_dur.height - 1, int(by_dur.height * 0.9))])  # p90
    # then evenly spaced, coarse to fine
    step = len(ws)
    while step >= 1:
        order += ws[::step]
        step //= 2
    chosen: set[int] = set()
    used = 0
    for w in order:
        if w in chosen:
            continue
        n = counts.get(w, 0)
        if used + n <= budget:
            chosen.add(w)
            used += n
    return chosen


def _timeline(a: Analysis, t0: int, phase_names: list[str], cat_names: list[str]) -> dict:
    ops, segs, ranges = a.ops, a.segments, a.ranges
    t_end = int(max(ops["end"].max(), ranges["end"].max() if ranges.height else 0))
    windows = _windows(a, t0, t_end)
    phase_ix = {p: i for i, p in enumerate(phase_names)}
    cat_ix = {c: i for i, c in enumerate(cat_names)}
    strings: dict[str, int] = {}

    def sid(values: pl.Series) -> list[int]:
        out = []
        for v in values.to_list():
            v = _cut(v)
            if v not in strings:
                strings[v] = len(strings)
            out.append(strings[v])
        return out

    # Which windows get op detail.
    o = _assign(ops.select("start", "end", "device", "stream", "pid", "correlation", "name", "short_name", "phase",
                           "category", "kind", "launch_start", "launch_end", "launch_tid", "launch_name"), windows)
    counts = dict(o.group_by("w").agg(n=pl.len()).iter_rows())
    detail = _choose_detail(windows, counts, DETAIL_OPS)
    in_detail = pl.col("w").is_in(sorted(detail))
    d_ops = o.filter(in_detail).sort("start").with_row_index("i")
    # The launch calls of the detailed ops (a CUDA-graph launch once), with the first op each launched.
    launches = d_ops.filter(pl.col("launch_start").is_not_null()).group_by("pid", "launch_tid", "correlation").agg(
        start=pl.col("launch_start").first(), end=pl.col("launch_end").first(), name=pl.col("launch_name").first(),
        first_op=pl.col("i").min(), ops=pl.len()).rename({"launch_tid": "tid"}).sort("start")

    # Rows: CPU threads (that hold ranges or launched ops), then GPU streams.
    meta = a.trace.meta
    proc_names = {p.get("pid"): p.get("name") for p in meta.processes}
    os_pids = {p.get("pid"): p.get("os_pid") for p in meta.processes}
    keys_schema = {"pid": pl.Int64, "tid": pl.Int64}
    threads = pl.concat([ranges.select("pid", "tid").cast(keys_schema), launches.select("pid", "tid").cast(keys_schema)]
                        ).unique().sort("pid", "tid")
    depth_of = (ranges.group_by("pid", "tid").agg(d=pl.col("depth").max()) if ranges.height
                else pl.DataFrame(schema={"pid": pl.Int64, "tid": pl.Int64, "d": pl.Int64}))
    depth_map = {(p, t): min(MAX_LANES, int(d or 0) + 1) for p, t, d in depth_of.iter_rows()}
    api_threads = set(launches.select("pid", "tid").unique().iter_rows())
    rows, cpu_row = [], {}
    for pid, tid in threads.iter_rows():
        cpu_row[(pid, tid)] = len(rows)
        pname = proc_names.get(pid) or "process"
        tname = meta.threads.get(tid) or ""
        # nsys global ids carry the OS pid/tid in their low 24 bits
        os_pid = os_pids.get(pid) or (pid >> 24 & 0xFFFFFF if pid > 1 << 24 else pid)
        os_tid = tid & 0xFFFFFF if tid > 1 << 24 else tid
        label = f"CPU {pname} {os_pid}" + (f" · {tname} {os_tid}" if tname and tname != pname else f" · {os_tid}")
        range_lanes = depth_map.get((pid, tid), 0)
        api = (pid, tid) in api_threads
        rows.append({"kind": "cpu", "label": _cut(label, 60), "lanes": range_lanes + api,
                     "api_lane": range_lanes if api else -1, "pid": pid, "tid": tid})
    gpu_row = {}
    gpu_names = {g.get("device"): g.get("name") for g in meta.gpus}
    for dev, stream in ops.select("device", "stream").unique().sort("device", "stream").iter_rows():
        gpu_row[(dev, stream)] = len(rows)
        rows.append({"kind": "gpu", "label": f"GPU {dev} · stream {stream}", "lanes": 2, "device": dev,
                     "stream": stream, "gpu": _cut(gpu_names.get(dev) or "", 60)})

    gpu_key = pl.DataFrame([(d, s, r) for (d, s), r in gpu_row.items()],
                           schema={"device": pl.Int64, "stream": pl.Int64, "row": pl.Int64}, orient="row")
    cpu_key = pl.DataFrame([(p, t, r) for (p, t), r in cpu_row.items()],
                           schema={"pid": pl.Int64, "tid": pl.Int64, "row": pl.Int64}, orient="row")

    d_ops = d_ops.join(gpu_key, on=["device", "stream"], how="left").sort("i")
    launches = launches.with_columns(pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64)).join(
        cpu_key, on=["pid", "tid"], how="left").sort("start")
    launch_cols = {
        "r": launches["row"].to_list(),
        "s": _delta(launches["start"].to_numpy() - t0),
        "d": (launches["end"] - launches["start"]).to_list(),
        "n": sid(launches["name"].fill_null("launch")),
        "o": launches["first_op"].to_list(),
        "c": launches["ops"].to_list(),
    }
    starts = d_ops["start"].to_numpy() - t0
    corr = d_ops["correlation"].fill_null(-1).to_numpy()
    names = d_ops["short_name"].fill_null(d_ops["name"]).fill_null(d_ops["kind"])
    full = d_ops["name"].fill_null("")
    op_cols = {
        "r": d_ops["row"].to_list(),
        "s": _delta(starts),
        "d": (d_ops["end"] - d_ops["start"]).to_list(),
        "n": sid(names),
        "f": sid(pl.Series(values=[f if f != n else "" for f, n in zip(full.to_list(), names.to_list())])),
        "p": [phase_ix.get(_cut(p), -1) for p in d_ops["phase"].to_list()],
        "c": [cat_ix.get(c, -1) for c in d_ops["category"].to_list()],
        "k": _delta(corr),
    }

    sg = _assign(segs.select("device", "stream", "start", "end", "phase", "category"), windows)
    idle = sg.filter(in_detail & pl.col("category").is_in(IDLE_CATEGORIES)).join(
        gpu_key, on=["device", "stream"], how="left").sort("start")
    idle_cols = {
        "r": idle["row"].to_list(),
        "s": _delta(idle["start"].to_numpy() - t0),
        "d": (idle["end"] - idle["start"]).to_list(),
        "p": [phase_ix.get(_cut(p), -1) for p in idle["phase"].to_list()],
        "c": [cat_ix.get(c, -1) for c in idle["category"].to_list()],
    }

    blocks = views.timeline_blocks(sg.filter(~in_detail), gpu_key, t0, BLOCKS)
    block_cols = {
        "r": blocks["row"].to_list(),
        "s": _delta(blocks["start"].to_numpy() - t0),
        "d": (blocks["end"] - blocks["start"]).to_list(),
        "p": [phase_ix.get(_cut(p), -1) for p in blocks["phase"].to_list()],
        "b": blocks["busy"].to_list(),
        "o": blocks["ops"].to_list(),
        "m": blocks["mixed"].to_list(),
    }

    range_cols = {"r": [], "l": [], "s": [], "d": [], "n": [], "p": [], "dm": []}
    if ranges.height:
        rg = _assign(ranges.select("pid", "tid", "start", "end", "name", "domain", "depth", "phase"), windows)
        keep = rg.filter(in_detail)
        rest = rg.filter(~in_detail)
        for max_depth in (1, 0):
            if keep.height + rest.filter(pl.col("depth") <= max_depth).height <= RANGES:
                keep = pl.concat([keep, rest.filter(pl.col("depth") <= max_depth)])
                break
        keep = keep.head(RANGES).sort("start")
        keep = keep.join(cpu_key, on=["pid", "tid"], how="left").sort("start")
        range_cols = {
            "r": keep["row"].to_list(),
            "l": keep["depth"].clip(0, MAX_LANES - 1).to_list(),
            "s": _delta(keep["start"].to_numpy() - t0),
            "d": (keep["end"] - keep["start"]).to_list(),
            "n": sid(keep["name"]),
            "p": [phase_ix.get(_cut(p), -1) if p not in a.grouping else -1 for p in keep["phase"].to_list()],
            "dm": sid(keep["domain"].fill_null("")),
        }

    return {
        "t0_ns": t0,
        "end": t_end - t0,
        "rows": rows,
        "strings": list(strings),
        "windows": {"start": (windows["start"] - t0).to_list(), "end": (windows["end"] - t0).to_list(),
                    "label": windows["label"].to_list(), "kind": windows["kind"].to_list(),
                    "ops": [counts.get(w, 0) for w in windows["w"].to_list()],
                    "detail": [w in detail for w in windows["w"].to_list()]},
        "ops": op_cols, "idle": idle_cols, "blocks": block_cols, "ranges": range_cols, "launches": launch_cols,
        "grouping": list(a.grouping),
        "budget": {"detail_ops": DETAIL_OPS, "blocks": BLOCKS, "ranges": RANGES},
    }


def _delta(values) -> list[int]:
    """Integers as differences from the previous one (the first from 0): short numbers in the JSON."""
    import numpy as np

    arr = np.asarray(values, dtype=np.int64)
    if arr.size == 0:
        return []
    return np.diff(arr, prepend=0).tolist()


# ----------------------------------------------------------------------------------------------
# Cross-check and economics: drawn when the analysis carries them (analyzer/derived/crosscheck.py,
# analyzer/derived/economics.py); converted to plain JSON here without interpretation.


PANEL_SKIP = ("pairs",)  # per-instance tables: too long to embed, and the panels draw the per-phase ones
PANEL_ROWS = 500


def _optional(obj):
    if obj is None:
        return None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name not in PANEL_SKIP}
    return _plain(obj)


def _plain(obj, depth: int = 0):
    if depth > 8:
        return None
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, pl.DataFrame):
        return [_plain(r, depth + 1) for r in obj.head(PANEL_ROWS).iter_rows(named=True)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name), depth + 1) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v, depth + 1) for v in obj[:PANEL_ROWS]]
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        try:
            return _plain(obj.to_dict(), depth + 1)
        except TypeError:
            pass
    if hasattr(obj, "item"):
        try:
            return _plain(obj.item(), depth + 1)
        except (TypeError, ValueError):
            pass
    return str(obj)

