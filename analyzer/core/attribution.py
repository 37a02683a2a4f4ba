"""The attribution of a trace's GPU time: Trace -> projection -> accounting -> summaries, as one result.

`attribute(trace)` charges every nanosecond of every GPU stream once, to a phase and a category
(docs/attribution.md); `Attribution` holds the tables it makes. Everything here is a pure function of the
Trace and the options.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from specprof.analyzer import progress
from specprof.analyzer.core import accounting, categories, projection, summary
from specprof.analyzer.core.window import renumber_cycles
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.labels import COMMUNICATION
from specprof.analyzer.model.trace import Trace

DEFAULT_GROUPING = ("cycle",)
TRACER_DOMAIN = "specprof"
ALL_DOMAINS = "*"  # in `domains`: every range is a phase candidate, whatever its domain


@dataclass
class Attribution:
    trace: Trace
    grouping: tuple[str, ...]
    ops: pl.DataFrame  # projected, categorised ops
    ranges: pl.DataFrame  # ranges with depth, parent, cycle and their GPU projection
    # The tiling of every stream, summed: attributed ns per (device, stream, cycle, phase, category)
    # (accounting.CHARGE_SCHEMA). The segments themselves are built on demand (`segments`). `phases`,
    # `categories` and `cycle_phases` hold the cycle streams' charges only (`streams.role`, `home_charges`).
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
    # The cpu_wait pieces (accounting.SEGMENT_SCHEMA); with `ops` (which carry prev_end) they give the
    # segments. `segments` builds the whole tiling once and keeps it.
    waits: pl.DataFrame | None = field(default=None, repr=False)
    # Per (process, device) pair, whatever the ranks' numbering (summary.pair_tables): `pairs`, `pair_phases`,
    # `pair_categories`, `comm_ops`; None where the attribution was made without them (derived/ranks.py makes them).
    pairs: pl.DataFrame | None = field(default=None, repr=False)
    pair_phases: pl.DataFrame | None = field(default=None, repr=False)
    pair_categories: pl.DataFrame | None = field(default=None, repr=False)
    comm_ops: pl.DataFrame | None = field(default=None, repr=False)
    _segments: pl.DataFrame | None = field(default=None, repr=False)

    @property
    def home_charges(self) -> pl.DataFrame:
        """The charges of the cycle streams (summary.on_cycle_streams): what `phases` and `cycle_phases` sum."""
        return summary.on_cycle_streams(self.charges, self.streams)

    @property
    def segments(self) -> pl.DataFrame:
        """Every stream's tiling into segments (accounting.SEGMENT_SCHEMA), sorted by (device, stream,
        start). Built on first use (a large trace has about two segments per op)."""
        if self._segments is None:
            self._segments = accounting.tile(self.ops, self.waits)
        return self._segments


def attribute(trace: Trace, grouping: tuple[str, ...] = DEFAULT_GROUPING,
              rules: list[categories.Rule] | None = None,
              domains: tuple[str, ...] = ()) -> Attribution:
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
                          collectives=trace.collectives, syncs=trace.syncs)
    if domains:
        kept = trace.ranges.filter(pl.col("domain").is_in(domains))
        notes.append(f"phases from NVTX domains {', '.join(domains)} only "
                     f"({kept.height} of {trace.ranges.height} ranges)")
        trace = Trace(ops=trace.ops, api=trace.api, ranges=kept, marks=trace.marks, meta=trace.meta,
                      collectives=trace.collectives, syncs=trace.syncs)
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
        # Each rank's phases are charged on the stream its cycles ran on; the other streams are side streams.
        tables["streams"] = summary.stream_table(ops, charged)
        home = summary.on_cycle_streams(charged, tables["streams"])
        side = charged.join(home.select("device", "stream").unique(), on=["device", "stream"], how="anti")
        tables["cycles"], tables["cycle_phases"] = summary.cycle_table(ranges, ops, home, grouping, per_range)
        # A window's cycles keep their numbers in the whole trace (core/window.py).
        tables["cycles"] = renumber_cycles(tables["cycles"], trace.meta.extra.get("cycle_index_offset"))
        step.advance()
        if trace.meta.skipped:
            for reason, n in trace.meta.skipped.items():
                notes.append(f"{n} rows not used: {reason.replace('_', ' ')}")
        for name, make in (("phases", lambda: summary.phase_table(ranges, proj, ops, home, grouping, per_range, side)),
                           ("categories", lambda: summary.category_table(home)),
                           ("launch", lambda: summary.launch_table(ops)),
                           ("devices", lambda: summary.device_table(ops)),
                           ("kernels", lambda: summary.top_kernels(ops)),
                           ("unattributed", lambda: summary.unattributed_table(ops))):
            tables[name] = make()
            step.advance()
        parents = categories.parents(rules)
        tables.update(summary.pair_tables(ops, ranges, charged, tables["streams"], grouping, tables["phases"],
                                          tables["categories"], categories.kinds_of(COMMUNICATION, parents)))
        step.advance()
    return Attribution(
        trace=trace,
        grouping=grouping,
        ops=ops,
        ranges=ranges,
        charges=charged,
        notes=notes,
        category_parents=parents,
        waits=waits,
        **tables,
    )
