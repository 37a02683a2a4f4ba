"""The analysis pipeline: Trace -> projection -> accounting -> summaries, as one result object."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import polars as pl

from analyzer import accounting, categories, progress, projection, summary
from analyzer.errors import SpecprofError
from analyzer.trace import Trace

DEFAULT_GROUPING = ("cycle",)
TRACER_DOMAIN = "specprof"
ALL_DOMAINS = "*"  # in `domains`: every range is a phase candidate, whatever its domain


@dataclass
class Analysis:
    trace: Trace
    grouping: tuple[str, ...]
    ops: pl.DataFrame  # projected, categorised ops
    ranges: pl.DataFrame  # ranges with depth, parent, cycle and their GPU projection
    # The tiling of every stream, summed: attributed ns per (device, stream, cycle, phase, category)
    # (accounting.CHARGE_SCHEMA). The segments themselves are built on demand (`segments`).
    charges: pl.DataFrame
    phases: pl.DataFrame
    categories: pl.DataFrame
    cycles: pl.DataFrame
    cycle_phases: pl.DataFrame
    launch: pl.DataFrame
    streams: pl.DataFrame
    devices: pl.DataFrame
    kernels: pl.DataFrame
    unattributed: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    # Category -> its parent (`allreduce` -> `communication`), from the rules that made `categories`.
    category_parents: dict[str, str] = field(default_factory=categories.default_parents)
    # Filled by analyzer.runs.enrich when sidecars are given (None otherwise): analyzer.crosscheck.CrossCheck
    # and analyzer.economics.Economics; their fields are documented there and in docs/crosscheck.md and
    # docs/economics.md.
    crosscheck: object | None = None
    economics: object | None = None
    # Filled by analyzer.runs.enrich (or analyzer.multirank.analyze): analyzer.multirank.MultiRank, per-rank
    # attribution, skew and the communication wait/transfer split (docs/multirank.md).
    multirank: object | None = None
    # The cpu_wait pieces (accounting.SEGMENT_SCHEMA); with `ops` (which carry prev_end) they give the
    # segments. `segments` builds the whole tiling once and keeps it; `segments_between` a window of it.
    waits: pl.DataFrame | None = field(default=None, repr=False)
    _segments: pl.DataFrame | None = field(default=None, repr=False)

    @property
    def segments(self) -> pl.DataFrame:
        """Every stream's tiling into segments (accounting.SEGMENT_SCHEMA), sorted by (device, stream,
        start). Built on first use (a large trace has about two segments per op)."""
        if self._segments is None:
            self._segments = accounting.tile(self.ops, self.waits)
        return self._segments

    def segments_between(self, t0: int, t1: int) -> pl.DataFrame:
        """The segments that overlap [t0, t1) (unclipped), without building the whole tiling."""
        if self._segments is not None:
            return self._segments.filter((pl.col("end") > t0) & (pl.col("start") < t1))
        return accounting.tile(self.ops, self.waits, window=(t0, t1))


def resolve(path: str) -> str:
    """The trace file for `path`: the file itself, or the export inside a run directory."""
    if not os.path.isdir(path):
        return path
    exports = sorted(f for f in os.listdir(path) if f.endswith(".sqlite"))
    if len(exports) == 1:
        return os.path.join(path, exports[0])
    if not exports:
        from analyzer.ranks import kineto_traces

        traces = kineto_traces(path)  # a run directory of a torch.profiler capture
        if len(traces) == 1:
            return traces[0]
        raise SpecprofError(f"{path}: a directory with no nsys SQLite export (*.sqlite) in it; give "
                            "an export, or a run directory made by `specprof capture`"
                            + (" (its PyTorch-profiler traces are several ranks: give them to "
                               "`specprof analyze`)" if traces else ""), path)
    raise SpecprofError(f"{path}: a directory with several exports ({', '.join(exports)}); give one", path)


def manifest(path: str) -> dict | None:
    """What `specprof capture` recorded about the run (`manifest.json`, specprof.run/1) for a run
    directory, or for an export inside one; None when there is none or it cannot be read."""
    import json

    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    try:
        with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load(path: str, cache: bool = False) -> Trace:
    """Read a trace file (or a run directory's export), choosing the reader by content.

    With `cache`, an nsys export's parsed tables are kept as Parquet beside it (analyzer/cache.py)
    and read from there the next time."""
    path = resolve(path)
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            head = fh.read(16)
        body = head.lstrip()
        if (head[:2] == b"\x1f\x8b" or body[:1] in (b"{", b"[")
                or path.endswith((".json", ".json.gz"))):
            try:
                from analyzer.readers.kineto import read_kineto
            except ImportError:
                raise SpecprofError(
                    f"{path}: looks like a PyTorch-profiler (Kineto) trace, which this version "
                    "cannot read yet; give an nsys SQLite export", path) from None
            return read_kineto(path)
    from analyzer.readers.nsys_sqlite import read_nsys_sqlite

    if not cache:
        return read_nsys_sqlite(path)
    from analyzer import cache as parsed

    with progress.step("reading the cache"):
        trace = parsed.load(path)
    if trace is None:
        trace = read_nsys_sqlite(path)
        with progress.step("writing the cache"):
            parsed.store(path, trace)
    return trace


def analyze(trace: Trace, grouping: tuple[str, ...] = DEFAULT_GROUPING,
            rules: list[categories.Rule] | None = None,
            domains: tuple[str, ...] = ()) -> Analysis:
    """Attribute every nanosecond of GPU time in `trace` to a phase and a category."""
    if trace.ops.is_empty():
        raise SpecprofError(
            f"{trace.meta.path}: the trace has no GPU operations (no kernels, memcpys or memsets); "
            "capture with CUDA tracing on (`nsys profile -t cuda,nvtx ...`)",
            trace.meta.path,
        )
    notes = list(trace.meta.notes)
    if ALL_DOMAINS in domains:
        domains = ()
    elif not domains:
        # The tracer's own ranges define the phases when they are there: NCCL's NVTX ranges (or any
        # library's) inside a phase would otherwise take its GPU work away from it.
        present = set(trace.ranges["domain"].unique().to_list())
        if TRACER_DOMAIN in present and len(present) > 1:
            others = ", ".join(sorted(d or "(default)" for d in present - {TRACER_DOMAIN}))
            notes.append(f"phases come from the specprof tracer's ranges (NVTX domain {TRACER_DOMAIN}); "
                         f"ranges of other domains ({others}) are left out: --all-domains keeps them")
            kept = trace.ranges.filter(pl.col("domain") == TRACER_DOMAIN)
            trace = Trace(ops=trace.ops, api=trace.api, ranges=kept, marks=trace.marks, meta=trace.meta,
                          collectives=trace.collectives)
    if domains:
        kept = trace.ranges.filter(pl.col("domain").is_in(domains))
        notes.append(f"phases from NVTX domains {', '.join(domains)} only "
                     f"({kept.height} of {trace.ranges.height} ranges)")
        trace = Trace(ops=trace.ops, api=trace.api, ranges=kept, marks=trace.marks, meta=trace.meta,
                      collectives=trace.collectives)
    if trace.ranges.is_empty():
        notes.append("no phases found: the trace has no NVTX (or record_function) ranges, so every "
                     "op is unattributed; per-kernel and per-category results still hold. Run the "
                     "workload under `specprof capture` to get phase ranges")
    with progress.step("projecting ranges onto GPU ops"):
        p = projection.project(trace, grouping)
    rules = rules if rules is not None else categories.default_rules()
    with progress.step("categorising kernels"):
        ops = categories.categorize(p["ops"], rules)
    if (note := categories.graph_note(ops)) is not None:
        notes.append(note)
    ranges, timeline = p["ranges"], p["timeline"]
    del p  # (the projected ops without categories, and the timeline, are not held past their use)
    with progress.step("accounting every nanosecond"):
        ops = accounting.with_prev_end(ops)
        waits = accounting.cpu_waits(ops, ranges, timeline, grouping)
        del timeline
        charged = accounting.charges(ops, waits)
    tables = {}
    with progress.step("summarising", 9, "tables") as step:
        scanned = accounting.range_scan(ops)  # each range's own ops in one pass, where the C scan is built
        proj = projection.range_projection(ranges, ops, scanned)
        ranges = ranges.join(proj, on="range_id", how="left")
        step.advance()
        per_range = summary.range_busy(ops, scanned)
        del scanned
        tables["cycles"], tables["cycle_phases"] = summary.cycle_table(ranges, ops, charged, grouping, per_range)
        step.advance()
        if trace.meta.skipped:
            for reason, n in trace.meta.skipped.items():
                notes.append(f"{n} rows not used: {reason.replace('_', ' ')}")
        for name, make in (("phases", lambda: summary.phase_table(ranges, proj, ops, charged, grouping, per_range)),
                           ("categories", lambda: summary.category_table(charged)),
                           ("launch", lambda: summary.launch_table(ops)),
                           ("streams", lambda: summary.stream_table(ops, charged)),
                           ("devices", lambda: summary.device_table(ops)),
                           ("kernels", lambda: summary.top_kernels(ops)),
                           ("unattributed", lambda: summary.unattributed_table(ops))):
            tables[name] = make()
            step.advance()
    return Analysis(
        trace=trace,
        grouping=grouping,
        ops=ops,
        ranges=ranges,
        charges=charged,
        notes=notes,
        category_parents=categories.parents(rules),
        waits=waits,
        **tables,
    )
