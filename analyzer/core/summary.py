"""Summaries: group-bys over the projected ops, the ranges and the charges (the tiling, summed).

Every table a user sees (phases, categories, cycles, launch overhead, streams, top kernels) is
built here from the core tables; renderers only render these.
"""

from __future__ import annotations

import polars as pl

from specprof.analyzer.core.accounting import union_length, with_prev_end
from specprof.analyzer.core.projection import phase_of_ops, range_projection
from specprof.analyzer.model.columns import collect, first_distinct
from specprof.analyzer.model.labels import IDLE_CATEGORIES, IN_CYCLE, UNATTRIBUTED
from specprof.analyzer.model.stats import QUANTILE

TEXT_KEYS = ("phase", "category", "short_name", "reason", "api")


def _text(df: pl.DataFrame) -> pl.DataFrame:
    """Small result tables carry plain strings (the big ones are dictionary-encoded)."""
    return df.with_columns([pl.col(c).cast(pl.Utf8) for c in TEXT_KEYS if c in df.columns])


def range_busy(ops: pl.DataFrame, scanned: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per innermost range instance, the union of its own ops' intervals: (range_id, busy). Ops of no
    range are one group of their own (null range_id). `ops` in op_id (start) order; `scanned`:
    `accounting.range_scan(ops)` when the caller has it."""
    if scanned is not None:
        return scanned.select("range_id", "busy")
    return union_length(ops, ["range_id"])


def phase_table(ranges: pl.DataFrame, proj: pl.DataFrame, ops: pl.DataFrame,
                charges: pl.DataFrame, grouping: tuple[str, ...],
                per_range: pl.DataFrame | None = None, side: pl.DataFrame | None = None,
                where: pl.Expr | None = None) -> pl.DataFrame:
    """One row per phase: instances, cpu, gpu span, gpu busy, attributed, side_busy (all ns totals).

    `ops` in op_id (start) order, with prev_end; `charges` from accounting.charges, of the cycle streams
    (`on_cycle_streams`): attributed is the phase's tiling there; `side`: the charges of the side streams, whose
    busy pieces are `side_busy` (the phase's work on other streams, which its attributed time does not hold);
    `per_range`: `range_busy(ops)` when the caller has it already; `where`: of the ops, only those it selects
    (selected in place, not copied: `pair_tables`).
    """
    # (the columns needed first, then the rows: ranges carry names and other text)
    phases = ranges.select("range_id", "phase", "start", "end").filter(~pl.col("phase").is_in(grouping))
    inst = _text(phases.join(proj, on="range_id", how="left").group_by("phase").agg(
        instances=pl.len().cast(pl.Int64),
        cpu=(pl.col("end") - pl.col("start")).sum(),
        gpu_span=(pl.col("gpu_end") - pl.col("gpu_start")).fill_null(0).sum(),
        gpu_ops=pl.col("gpu_ops").sum(),
    ))
    # Busy: per innermost range instance, the union of its own ops' intervals. An op's phase
    # follows from its range: the range's phase, or (cycle) for a grouping range (left out here).
    # (All ops go in, the ones of no range as one group of their own: no filtered copy of the ops.)
    if per_range is None:
        per_range = range_busy(ops) if where is None else union_length(ops, ["range_id"], where=where)
    per_range = per_range.filter(pl.col("range_id").is_not_null()).join(
        ranges.select("range_id", "phase", "name").filter(~pl.col("name").is_in(grouping)).drop("name"),
        on="range_id", how="inner")
    busy_inst = _text(per_range.group_by("phase").agg(gpu_busy=pl.col("busy").sum()))
    # Ops outside any phase range have no instances of their own: one union per pseudo-phase
    # (and per stream, so that concurrent streams do not hide each other), over those ops in place.
    loose = pl.col("phase").is_in([IN_CYCLE, UNATTRIBUTED])
    loose_busy = _text(union_length(ops, ["phase", "device", "stream"], where=loose if where is None else loose & where)
                       .group_by("phase").agg(gpu_busy=pl.col("busy").sum()))
    busy = pl.concat([busy_inst.filter(~pl.col("phase").is_in([IN_CYCLE, UNATTRIBUTED])), loose_busy])
    attributed = _text(charges.group_by("phase").agg(attributed=pl.col("ns").sum()))
    side_busy = _text((side if side is not None else charges.clear()).filter(
        ~pl.col("category").cast(pl.Utf8).is_in(IDLE_CATEGORIES)).group_by("phase").agg(side_busy=pl.col("ns").sum()))
    op_counts = _text(collect((ops.lazy() if where is None else ops.lazy().filter(where)).group_by("phase").agg(
        ops=pl.len().cast(pl.Int64))))
    names = pl.concat([inst.select("phase"), attributed.select("phase"), op_counts.select("phase")]).unique()
    out = (
        names.join(inst, on="phase", how="left")
        .join(busy, on="phase", how="left")
        .join(attributed, on="phase", how="left")
        .join(op_counts, on="phase", how="left")
        .join(side_busy, on="phase", how="left")
        .with_columns(
            pl.col("instances").fill_null(0), pl.col("cpu").fill_null(0),
            pl.col("gpu_span").fill_null(0), pl.col("gpu_busy").fill_null(0),
            pl.col("attributed").fill_null(0), pl.col("ops").fill_null(0), pl.col("side_busy").fill_null(0),
        )
        .drop("gpu_ops")
    )
    order = pl.when(pl.col("phase") == UNATTRIBUTED).then(2).when(pl.col("phase") == IN_CYCLE).then(1).otherwise(0)
    # ties (phases with equal time, often 0) in name order: the same input gives the same table
    return out.sort(order, pl.col("attributed"), pl.col("phase"), descending=[False, True, False])


def category_table(charges: pl.DataFrame) -> pl.DataFrame:
    """Attributed ns per (phase, category)."""
    return _text(charges.group_by("phase", "category").agg(ns=pl.col("ns").sum())).sort(
        "phase", "ns", descending=[False, True])


def cycle_table(ranges: pl.DataFrame, ops: pl.DataFrame, charges: pl.DataFrame,
                grouping: tuple[str, ...], per_range: pl.DataFrame | None = None
                ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The cycles (one row each, in order per process) and a long table cycle x phase.

    `per_range`: `range_busy(ops)` when the caller has it already (it is reused: see `_cycle_busy`)."""
    cycles = ranges.select("range_id", "name", "pid", "start", "end").filter(pl.col("name").is_in(grouping)).sort(
        "pid", "start").with_columns(
        index=pl.int_range(pl.len()).over("pid").cast(pl.Int64)
    ).select(cycle="range_id", pid="pid", index="index", start="start", end="end")
    if cycles.is_empty():
        empty = pl.DataFrame(schema={"cycle": pl.Int64, "phase": pl.Utf8, "attributed": pl.Int64,
                                     "gpu_busy": pl.Int64, "cpu": pl.Int64})
        return cycles, empty
    att = _text(charges.filter(pl.col("cycle").is_not_null()).group_by("cycle", "phase").agg(
        attributed=pl.col("ns").sum()))
    busy = _text(_cycle_busy(ranges, ops, grouping, per_range).rename({"busy": "gpu_busy"}))
    cpu = _text(ranges.lazy().filter(pl.col("cycle").is_not_null() & ~pl.col("phase").is_in(grouping)).group_by(
        "cycle", "phase").agg(cpu=(pl.col("end") - pl.col("start")).sum()).collect())
    keys = pl.concat([att.select("cycle", "phase"), busy.select("cycle", "phase"),
                      cpu.select("cycle", "phase")]).unique()
    long = (
        keys.join(att, on=["cycle", "phase"], how="left")
        .join(busy, on=["cycle", "phase"], how="left")
        .join(cpu, on=["cycle", "phase"], how="left")
        .with_columns(pl.col("attributed").fill_null(0), pl.col("gpu_busy").fill_null(0),
                      pl.col("cpu").fill_null(0))
        .sort("cycle", "phase")
    )
    return cycles, long


def _cycle_busy(ranges: pl.DataFrame, ops: pl.DataFrame, grouping: tuple[str, ...],
                per_range: pl.DataFrame | None) -> pl.DataFrame:
    """GPU busy per (cycle, phase): the union of the ops with that cycle and phase, cycle not null.

    An op's cycle and phase follow from its innermost range, so where a (cycle, phase) has one range
    instance (the usual case: one draft, one verify per cycle), its union is that range's, already
    in `per_range`; only the ops of pairs with several instances are unioned again."""
    if per_range is None:
        return union_length(ops, ["cycle", "phase"]).filter(pl.col("cycle").is_not_null())
    owner = ranges.select("range_id", "cycle", phase=phase_of_ops(grouping).cast(ops.schema["phase"])).filter(
        pl.col("cycle").is_not_null())
    inst = per_range.join(owner, on="range_id", how="inner").with_columns(
        n=pl.len().over("cycle", "phase"))
    single = inst.filter(pl.col("n") == 1).select("cycle", "phase", "busy")
    several = inst.filter(pl.col("n") > 1)
    if several.is_empty():
        return single
    redo = collect(ops.lazy().select("range_id", "cycle", "phase", "start", "end").filter(
        pl.col("range_id").is_in(several.get_column("range_id").implode())))
    again = union_length(redo, ["cycle", "phase"]).filter(pl.col("cycle").is_not_null())
    return pl.concat([single, again.select("cycle", "phase", "busy")])


def launch_table(ops: pl.DataFrame) -> pl.DataFrame:
    """Per phase: launch API calls, CPU time inside them, and launch latency percentiles.

    Per launch (one API call; a CUDA-graph launch counts once, measured to its first node):
    - `latency`: first op start minus launch call start, as NVIDIA defines it. When the stream was
      still busy with earlier work, this includes the time the launch sat in the queue.
    - `queued`: the stream was still busy when the call began (the launch was off the critical path).
    - `idle_latency`: first op start minus max(launch call start, the stream's previous op end): how
      long the stream sat idle because of the launch path itself.

    `ops` in op_id (start) order; with prev_end (accounting.with_prev_end) or without.
    """
    if "prev_end" not in ops.columns:
        ops = with_prev_end(ops)
    # The launch's first op (in start order): its phase, start and previous op end on its stream. The
    # projection marks it (launch_first) where it numbered the launch calls; else the first op of each
    # (pid, correlation). Only the launches' rows are copied.
    if "launch_first" in ops.columns:
        first = ops.get_column("launch_first")
    else:
        first = first_distinct(ops.select("pid", "correlation"), ["pid", "correlation"]) & \
            ops.get_column("launch_start").is_not_null()
    launched_at = pl.col("launch_start")
    # The launches' rows, on the streaming engine: the sums from the ops a morsel at a time, then each percentile's
    # values (a phase and one value per launch) one at a time, not every derived value of every launch at once.
    rows = ops.select("phase", "start", "prev_end", "launch_start", "launch_end").with_columns(
        first.alias("_first")).lazy().filter(pl.col("_first"))
    latency = pl.col("start") - launched_at
    idle_latency = (pl.col("start") - pl.max_horizontal(launched_at, pl.col("prev_end").fill_null(launched_at))).clip(
        lower_bound=0)
    out = collect(rows.group_by("phase").agg(
        launches=pl.len().cast(pl.Int64),
        api_ns=(pl.col("launch_end") - launched_at).sum(),
        queued=(pl.col("prev_end").fill_null(launched_at) > launched_at).sum().cast(pl.Int64),
        latency_max=latency.max(),
    ))
    for name, value in (("latency", latency), ("idle_latency", idle_latency)):
        values = collect(rows.select("phase", value.alias(name)))
        out = out.join(values.lazy().group_by("phase").agg(
            pl.col(name).quantile(q, QUANTILE).round().cast(pl.Int64).alias(f"{name}_p{round(q * 100)}")
            for q in (0.5, 0.9)).collect(), on="phase", how="left", nulls_equal=True)
        del values
    return _text(out.select("phase", "launches", "api_ns", "queued", "latency_p50", "latency_p90", "latency_max",
                            "idle_latency_p50", "idle_latency_p90")).sort("api_ns", descending=True)


def stream_table(ops: pl.DataFrame, charges: pl.DataFrame) -> pl.DataFrame:
    """Per (device, stream): wall, busy (its tiling's busy pieces), the idle kinds, and its role.

    - pid: the process that launched most of its ops (a stream belongs to one process: with its device, one rank);
      pids: how many processes launched ops on it;
    - role: `cycle` for the stream each (pid, device) ran its cycles on (the most GPU-busy time inside cycles;
      without cycles, the most busy time), `side` for the others. A phase's time is its tiling on the cycle stream
      (`on_cycle_streams`); a side stream's work is reported as busy time and what it overlapped;
    - overlapped: the side stream's busy time during which its rank's cycle stream was busy too (0 on a cycle
      stream)."""
    per = collect(ops.lazy().group_by("device", "stream", "pid").agg(
        first=pl.col("start").min(), last=pl.col("end").max(), ops=pl.len().cast(pl.Int64)))
    walls = per.group_by("device", "stream").agg(
        first=pl.col("first").min(), last=pl.col("last").max(), ops=pl.col("ops").sum(),
        pids=pl.len().cast(pl.Int64),
        pid=pl.col("pid").sort_by(pl.col("ops"), pl.col("pid"), descending=[True, False]).first())
    c = charges.group_by("device", "stream", "category").agg(pl.col("ns").sum()).with_columns(
        kind=pl.when(pl.col("category").cast(pl.Utf8).is_in(IDLE_CATEGORIES)).then(pl.col("category").cast(pl.Utf8))
        .otherwise(pl.lit("busy")))
    kinds = c.group_by("device", "stream").agg(
        *[(pl.col("ns") * (pl.col("kind") == k)).sum().alias(k) for k in ("busy", *IDLE_CATEGORIES)]
    )
    in_cycles = charges.filter(pl.col("cycle").is_not_null() & ~pl.col("category").cast(pl.Utf8).is_in(
        IDLE_CATEGORIES)).group_by("device", "stream").agg(cycle_busy=pl.col("ns").sum())
    out = walls.join(kinds, on=["device", "stream"], how="left").join(
        in_cycles, on=["device", "stream"], how="left").with_columns(
        [pl.col(k).fill_null(0) for k in ("busy", *IDLE_CATEGORIES, "cycle_busy")]).with_columns(
        wall=pl.col("last") - pl.col("first"))
    best = out.sort(["cycle_busy", "busy", "stream"], descending=[True, True, False]).group_by(
        "device", "pid").first().select("device", "stream", is_cycle=pl.lit(True))
    out = out.join(best, on=["device", "stream"], how="left").with_columns(
        role=pl.when(pl.col("is_cycle")).then(pl.lit("cycle")).otherwise(pl.lit("side"))).drop("is_cycle", "cycle_busy")
    return _overlaps(ops, out).sort("device", "stream")


def _overlaps(ops: pl.DataFrame, streams: pl.DataFrame) -> pl.DataFrame:
    """`streams` with `overlapped`: each side stream's busy time that its rank's cycle stream was busy during."""
    home = streams.filter(pl.col("role") == "cycle").select("device", "pid", home="stream", home_busy="busy")
    side = streams.filter(pl.col("role") == "side").join(home, on=["device", "pid"], how="left")
    rows = []
    for device, stream, home_stream, busy, home_busy in side.select(
            "device", "stream", "home", "busy", "home_busy").iter_rows():
        if home_stream is None or not busy:
            rows.append((device, stream, 0))
            continue
        both = (pl.col("device") == device) & pl.col("stream").is_in([stream, home_stream])
        union = int(union_length(ops, ["device"], where=both)["busy"].sum() or 0)
        rows.append((device, stream, max(0, int(busy) + int(home_busy) - union)))
    over = pl.DataFrame(rows, schema={"device": pl.Int64, "stream": pl.Int64, "overlapped": pl.Int64}, orient="row")
    return streams.join(over, on=["device", "stream"], how="left").with_columns(pl.col("overlapped").fill_null(0))


def on_cycle_streams(charges: pl.DataFrame, streams: pl.DataFrame) -> pl.DataFrame:
    """The charges of the cycle streams only (`stream_table`'s role): where each rank's phases ran, so that no
    phase is charged the idle time of a stream that ran none of its work."""
    keep = streams.filter(pl.col("role") == "cycle").select("device", "stream")
    if keep.height == streams.height:
        return charges
    return charges.join(keep, on=["device", "stream"], how="semi")


def device_table(ops: pl.DataFrame) -> pl.DataFrame:
    """Per device: wall (first to last op on any stream) and the union of all its ops."""
    walls = collect(ops.lazy().group_by("device").agg(first=pl.col("start").min(), last=pl.col("end").max(),
                                                      streams=pl.col("stream").n_unique().cast(pl.Int64)))
    busy = union_length(ops, ["device"])
    return walls.join(busy, on="device", how="left").with_columns(
        wall=pl.col("last") - pl.col("first")).sort("device")


def top_kernels(ops: pl.DataFrame, per_phase: int = 5) -> pl.DataFrame:
    """The kernels with the most GPU time, per phase."""
    k = _text(collect(ops.lazy().group_by("phase", "short_name", "category").agg(
        count=pl.len().cast(pl.Int64), ns=(pl.col("end") - pl.col("start")).sum())))
    return k.sort("phase", "ns", descending=[False, True]).group_by("phase", maintain_order=True).head(per_phase)


def unattributed_table(ops: pl.DataFrame) -> pl.DataFrame:
    """Ops no range claims, by reason: ops and their GPU time."""
    return _text(collect(ops.lazy().select("unattributed", "start", "end").filter(
        pl.col("unattributed").is_not_null()).group_by(reason="unattributed").agg(
        ops=pl.len().cast(pl.Int64), ns=(pl.col("end") - pl.col("start")).sum()))).sort("reason")


PAIR_PHASE_SCHEMA = {"pid": pl.Int64, "device": pl.Int64, "phase": pl.Utf8, "instances": pl.Int64, "ops": pl.Int64,
                     "cpu": pl.Int64, "gpu_span": pl.Int64, "gpu_busy": pl.Int64, "attributed": pl.Int64,
                     "side_busy": pl.Int64}
PAIR_CATEGORY_SCHEMA = {"pid": pl.Int64, "device": pl.Int64, "phase": pl.Utf8, "category": pl.Utf8, "ns": pl.Int64}
COMM_OP_SCHEMA = {"pid": pl.Int64, "device": pl.Int64, "op_id": pl.Int64, "name": pl.Utf8, "kind": pl.Utf8,
                  "phase": pl.Utf8, "start": pl.Int64, "end": pl.Int64}


# A (process, device) pair holding more than this share of the ops is summarised over the ops in place (each query
# selects its rows); a smaller one over a copy of its rows (a query then reads its rows only).
IN_PLACE_SHARE = 0.5


def pair_tables(ops: pl.DataFrame, ranges: pl.DataFrame, charges: pl.DataFrame, streams: pl.DataFrame,
                grouping: tuple[str, ...], phases: pl.DataFrame, categories: pl.DataFrame,
                communication: list[str]) -> dict[str, pl.DataFrame]:
    """What the per-rank analysis needs of each (process, device) pair that ran GPU work, whatever the ranks'
    numbering (derived/ranks.py numbers them): computed once with the attribution, and cached with it.

    - `pairs`: pid, device, ops, first, last, streams, busy (union of the pair's ops), attributed (its cycle
      stream's tiling);
    - `pair_phases` (PAIR_PHASE_SCHEMA), `pair_categories` (PAIR_CATEGORY_SCHEMA): `phase_table` and
      `category_table` over the pair's own ranges, ops and streams, charged on its cycle stream;
    - `comm_ops` (COMM_OP_SCHEMA): the communication ops (categories `communication`, the kinds of it).
    `phases`, `categories`: the whole capture's, which are the pair's when one process holds every range."""
    pairs = collect(ops.lazy().group_by("pid", "device").agg(
        ops=pl.len().cast(pl.Int64), first=pl.col("start").min(), last=pl.col("end").max())).sort("device", "pid")
    busy = union_length(ops, ["pid", "device"])
    home = streams.filter(pl.col("role") == "cycle")
    attributed = charges.join(home.select("device", "stream", "pid"), on=["device", "stream"], how="inner").group_by(
        "pid", "device").agg(attributed=pl.col("ns").sum())
    counts = streams.group_by("pid", "device").agg(streams=pl.len().cast(pl.Int64))
    pairs = pairs.join(counts, on=["pid", "device"], how="left").join(busy, on=["pid", "device"], how="left").join(
        attributed, on=["pid", "device"], how="left").with_columns(
        [pl.col(c).fill_null(0).cast(pl.Int64) for c in ("streams", "busy", "attributed")])
    ranges = ranges.drop([c for c in ("gpu_start", "gpu_end", "gpu_ops", "gpu_launches") if c in ranges.columns])
    whole = pairs.height == 1 and ranges.filter(pl.col("pid") != pairs["pid"][0]).is_empty()
    ph_rows, cat_rows = [], []
    for pid, device, n_ops in pairs.select("pid", "device", "ops").iter_rows():
        mine = (pl.col("pid") == pid) & (pl.col("device") == device)
        if whole:
            ph, cats = phases, categories
        else:
            if n_ops > IN_PLACE_SHARE * ops.height:  # selected in place, not copied (a copy is chunked, and the C
                own, where = ops, mine  # scan would copy its columns again into one chunk each: 0.26 GB at 11 M ops)
            else:  # only the columns phase_table and range_projection read, not every column of the pair's ops
                cols = [c for c in ("range_id", "start", "end", "phase", "device", "stream", "correlation",
                                    "launch_first") if c in ops.columns]
                own, where = ops.lazy().filter(mine).select(cols).collect(), None
            mine_streams = streams.filter(mine)
            ch = charges.join(mine_streams.filter(pl.col("role") == "cycle").select("device", "stream"),
                              on=["device", "stream"], how="semi")
            side = charges.join(mine_streams.filter(pl.col("role") == "side").select("device", "stream"),
                                on=["device", "stream"], how="semi")
            rng = ranges.filter(pl.col("pid") == pid)
            ph = phase_table(rng, range_projection(rng, own, where=where), own, ch, grouping, side=side, where=where)
            cats = category_table(ch)
        key = [pl.lit(pid, dtype=pl.Int64).alias("pid"), pl.lit(device, dtype=pl.Int64).alias("device")]
        ph_rows.append(ph.select(*key, pl.all()).select(list(PAIR_PHASE_SCHEMA)).cast(PAIR_PHASE_SCHEMA))
        cat_rows.append(cats.select(*key, pl.all()).select(list(PAIR_CATEGORY_SCHEMA)).cast(PAIR_CATEGORY_SCHEMA))
    comm = collect(ops.lazy().filter(pl.col("category").cast(pl.Utf8).is_in(communication)).select(
        "pid", "device", "op_id", name=pl.col("name").cast(pl.Utf8), kind=pl.col("category").cast(pl.Utf8),
        phase=pl.col("phase").cast(pl.Utf8), start="start", end="end")).cast(COMM_OP_SCHEMA)
    return {"pairs": pairs,
            "pair_phases": pl.concat(ph_rows) if ph_rows else pl.DataFrame(schema=PAIR_PHASE_SCHEMA),
            "pair_categories": pl.concat(cat_rows) if cat_rows else pl.DataFrame(schema=PAIR_CATEGORY_SCHEMA),
            "comm_ops": comm}
