"""The HTML report: one self-contained file (plotly.js inlined, no network) that renders an Analysis.

Python builds a view model (plain JSON: the analysis tables, columnar, with times in integer
nanoseconds relative to the capture's start (TraceMeta.start_ns), and display-only downsampling for big captures);
the app in `report/` draws it in the browser: one module per panel (`breakdown.js`, `timeline.js`, `phases.js`,
`kernels.js`, `cycles.js`, `checks.js`, `levers.js`, `header.js`), the context they share (`common.js`) and the entry point (`main.js`),
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

from specprof.analyzer import safe_files
from specprof.analyzer.core.categories import kinds_of
from specprof.analyzer.derived import views
from specprof.analyzer.derived.analysis import Analysis
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.labels import COMMUNICATION, IDLE_CATEGORIES, IN_CYCLE, UNATTRIBUTED
from specprof.analyzer.render import json as json_doc
from specprof.analyzer.render.format import cut, ms, ms_or_null

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
        safe_files.replace(path, text)  # a new file renamed over `path`: a link there is refused
    except OSError as exc:
        raise SpecprofError(f"{path}: cannot write the report ({exc.strerror})", path) from None
    return path


REPORT_MODULES = ("common.js", "timeline.js", "header.js", "breakdown.js", "phases.js", "kernels.js", "cycles.js",
                  "checks.js", "levers.js", "main.js")


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
    return resources.files("specprof.analyzer.render").joinpath(name).read_text(encoding="utf-8")


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
    split = views.chart_phases(a.phase_rows)
    vm = {
        "schema": SCHEMA,
        "facts": _facts(a, manifest),
        "notes": [_cut(n, 2000) for n in a.notes],
        "phases": phases,
        "categories": cats,
        "chart": _chart(a, split),
        "cycles": _cycles(a, t0, split["hidden"]),
        "kernels": _kernels(a),
        "streams": _streams(a),
        "timeline": _timeline(a, t0, [p["name"] for p in phases], [c["name"] for c in cats]),
        "crosscheck": _optional(a.crosscheck),
        "economics": _optional(a.economics),
        "whole_run": _optional(getattr(a, "whole_run", None)),
        # The JSON contract (docs/json.md; its cycles are `cycles` above): the numbers the page shows are these.
        "analysis": json_doc.document(a),
    }
    return vm


def _cut(text, n: int = NAME_CHARS) -> str:
    return cut(text, n)


def _origin(a: Analysis) -> int:
    return a.trace.meta.start_ns  # the capture's start: the one origin of every time shown


def _phase_list(a: Analysis) -> list[dict]:
    rows = a.phase_rows
    out, spare = [], iter(OTHER_PHASE_COLORS * (1 + rows.height // len(OTHER_PHASE_COLORS)))
    for r in rows.iter_rows(named=True):
        name = r["phase"]
        color = PHASE_COLORS.get(name) or next(spare)
        out.append({
            "name": _cut(name), "color": color, "instances": r["instances"], "ops": r["ops"],
            "cpu_ms": ms(r["cpu"]), "gpu_span_ms": ms(r["gpu_span"]), "gpu_busy_ms": ms(r["gpu_busy"]),
            "attributed_ms": ms(r["attributed"]), "busy_ms": ms(r["busy"]),
            "pseudo": name in (IN_CYCLE, UNATTRIBUTED),
        })
    return out


def _category_list(a: Analysis) -> list[dict]:
    kinds = set(kinds_of(COMMUNICATION, a.category_parents))
    order = views.category_order(a.categories, kinds)
    ns_of = views.category_totals(a.categories)
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
    tot = a.totals
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
        "streams": a.streams.height, "devices": a.devices.height,
        "attributed_ms": ms(tot["attributed"]), "device_wall_ms": ms(tot["device_wall"]),
        "device_busy_ms": ms(tot["device_busy"]), "device_busy_share": tot["device_busy_share"],
        "unattributed_ms": ms(tot["unattributed_attributed"]), "unattributed_share": tot["unattributed_share"],
        "unattributed_ops": tot["unattributed_ops"],
        "capture_wall_ms": ms(cap["wall"]),
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _streams(a: Analysis) -> list[dict]:
    return [{"device": r["device"], "stream": r["stream"], "role": r["role"], "ops": r["ops"], "wall_ms": ms(r["wall"]),
             "busy_ms": ms(r["busy"]), "cpu_wait_ms": ms(r["cpu_wait"]), "launch_ms": ms(r["launch"]),
             "idle_ms": ms(r["idle"]), "overlapped_ms": ms(r["overlapped"]), "busy_share": r["busy_share"],
             "cpu_wait_share": r["cpu_wait_share"], "launch_share": r["launch_share"], "idle_share": r["idle_share"]}
            for r in views.streams(a.streams).iter_rows(named=True)]


def _kernels(a: Analysis) -> list[dict]:
    return [{"phase": _cut(r["phase"]), "name": _cut(r["short_name"]), "category": r["category"],
             "count": r["count"], "ms": ms(r["ns"]), "phase_busy_ms": ms(r["phase_busy"]),
             "busy_share": r["busy_share"]}
            for r in views.kernels(a.kernels, a.attribution.phases).iter_rows(named=True)]


def _chart(a: Analysis, split: dict) -> dict:
    """The phases the charts draw by name and the per-phase chart's bars (derived/views.py), in ms."""
    def bar(b):
        return {"name": None if b["name"] is None else _cut(b["name"]), "members": [_cut(m) for m in b["members"]],
                "instances": b["instances"], "attributed_ms": ms(b["attributed"]),
                "per_instance_ms": None if b["per_instance"] is None else ms(b["per_instance"]),
                "by_category_ms": {_cut(c): ms(v) for c, v in b["ns"].items()},
                "by_category_share": {_cut(c): v for c, v in b["share"].items()},
                "by_category_per_instance_ms": {_cut(c): ms(v) for c, v in b["per_instance_ns"].items()}}
    return {"shown": [_cut(p) for p in split["shown"]], "hidden": [_cut(p) for p in split["hidden"]],
            "bars": [bar(b) for b in views.phase_bars(a.phase_rows, a.categories, split)]}


def _cycles(a: Analysis, t0: int, hidden: list[str]) -> dict:
    """Per cycle: start (ns from t0), CPU range duration, attributed ms per phase on the cycle stream and in total
    (the cycle's length there); the statistics over the breakdown's decode cycles (derived/views.py)."""
    c = a.cycles
    if c.is_empty():
        return {"n": 0}
    data = views.cycle_table(c, a.cycle_phases, a.phases["phase"].to_list(), cpu=True, idle=views.idle_cycles(a))
    cols = [p for p in data.columns if p not in ("cycle", "index", "pid", "start", "end", "total", "cpu")]
    st = views.cycle_stats(data, views.shown_cycles(a), ["total", "cpu"])
    stats = {label: {k: ms(v) for k, v in st[label].items() if k != "n"} for label in ("total", "cpu")}
    hist = views.cycle_hist_range(data, st)
    return {
        "n": data.height,
        "index": data["index"].to_list(),
        "pid": data["pid"].to_list(),
        "start": (data["start"] - t0).to_list(),
        "cpu_ms": [ms(x) for x in data["cpu"].to_list()],
        "total_ms": [ms(x) for x in data["total"].to_list()],
        "phases": {_cut(p): [ms(x) for x in data[p].to_list()] for p in cols},
        "other_ms": [ms(x) for x in views.hidden_sum(data, hidden).to_list()] if hidden else None,
        "stats": stats,
        "stats_cycles": st["total"]["n"],
        "hist": {"clip": hist["clip"], "lo_ms": ms_or_null(hist["lo"]), "hi_ms": ms_or_null(hist["hi"]),
                 "above": hist["above"], "max_ms": ms_or_null(hist["max"])},
    }


# ----------------------------------------------------------------------------------------------
# The timeline


def _timeline(a: Analysis, t0: int, phase_names: list[str], cat_names: list[str]) -> dict:
    """The timeline's tables (derived/views.py `timeline`), encoded for the page: columns of numbers, times from
    `t0` as differences, names as indices into `strings`."""
    tl = views.timeline(a.ops, a.segments, a.ranges, a.cycles, t0, DETAIL_OPS, BLOCKS, RANGES, SLICE_OPS, MAX_LANES)
    windows, d_ops, launches, idle, blocks, keep = (tl[k] for k in ("windows", "ops", "launches", "idle", "blocks",
                                                                    "ranges"))
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

    # Rows: CPU threads (that hold ranges or launched ops), then GPU streams, labelled.
    meta = a.trace.meta
    proc_names = {p.get("pid"): p.get("name") for p in meta.processes}
    os_pids = {p.get("pid"): p.get("os_pid") for p in meta.processes}
    rows = []
    for pid, tid, range_lanes, api in tl["cpu_rows"].select("pid", "tid", "range_lanes", "api").iter_rows():
        pname = proc_names.get(pid) or "process"
        tname = meta.threads.get(tid) or ""
        # nsys global ids carry the OS pid/tid in their low 24 bits
        os_pid = os_pids.get(pid) or (pid >> 24 & 0xFFFFFF if pid > 1 << 24 else pid)
        os_tid = tid & 0xFFFFFF if tid > 1 << 24 else tid
        label = f"CPU {pname} {os_pid}" + (f" · {tname} {os_tid}" if tname and tname != pname else f" · {os_tid}")
        rows.append({"kind": "cpu", "label": _cut(label, 60), "lanes": range_lanes + api,
                     "api_lane": range_lanes if api else -1, "pid": pid, "tid": tid})
    gpu_names = {g.get("device"): g.get("name") for g in meta.gpus}
    for dev, stream in tl["gpu_rows"].select("device", "stream").iter_rows():
        rows.append({"kind": "gpu", "label": f"GPU {dev} · stream {stream}", "lanes": 2, "device": dev,
                     "stream": stream, "gpu": _cut(gpu_names.get(dev) or "", 60)})

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
    idle_cols = {
        "r": idle["row"].to_list(),
        "s": _delta(idle["start"].to_numpy() - t0),
        "d": (idle["end"] - idle["start"]).to_list(),
        "p": [phase_ix.get(_cut(p), -1) for p in idle["phase"].to_list()],
        "c": [cat_ix.get(c, -1) for c in idle["category"].to_list()],
    }
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
    if keep is not None:
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
        "end": tl["t_end"] - t0,
        "rows": rows,
        "strings": list(strings),
        "windows": {"start": (windows["start"] - t0).to_list(), "end": (windows["end"] - t0).to_list(),
                    "label": windows["label"].to_list(), "kind": windows["kind"].to_list(),
                    "ops": windows["ops"].to_list(), "detail": windows["detail"].to_list(),
                    "picks": tl["picks"]},
        "ops": op_cols, "idle": idle_cols, "blocks": block_cols, "ranges": range_cols, "launches": launch_cols,
        "grouping": list(a.grouping),
        "budget": {"detail_ops": DETAIL_OPS, "blocks": BLOCKS, "ranges": RANGES},
    }


def _delta(values) -> list[int]:
    """Integers as differences from the previous one (the first from 0): short numbers in the JSON."""
    from specprof.analyzer.model.numeric import np

    arr = np.asarray(values, dtype=np.int64)
    if arr.size == 0:
        return []
    return np.diff(arr, prepend=0).tolist()


# ----------------------------------------------------------------------------------------------
# Cross-check and economics: drawn when the analysis carries them (analyzer/derived/crosscheck.py,
# analyzer/derived/economics.py); converted to plain JSON here without interpretation.


PANEL_SKIP = ("pairs", "rounds", "every_round")  # per-instance and per-request-round tables: too long to embed; the panels draw
# the per-phase ones, and per-position acceptance (`analysis.acceptance`) the request-rounds
PANEL_ROWS = 500
NESTED_SKIP = ("members",)  # the batch-size groups' cycles (derived/groups.py): per cycle, drawn by no panel


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
        return {f.name: _plain(getattr(obj, f.name), depth + 1) for f in dataclasses.fields(obj)
                if f.name not in NESTED_SKIP}
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

