"""Time accounting: tile every GPU stream's timeline, charging each nanosecond exactly once.

Between a stream's first op start and last op end, every instant is one of:
- busy: an op runs; charged to the op's phase and category (ops that overlap on one stream are
  clipped so that no instant counts twice);
- cpu_wait: the stream is idle and the op that comes next had not been launched yet (its launch
  API call had not begun): the GPU waited for the CPU. Charged to the phase whose range was
  innermost-open on the launching thread at that instant (split at range boundaries); where only
  a grouping range (cycle) or none was open, to the next op's phase;
- launch: idle after the next op's launch call began (launch latency, or a dependency inside a
  CUDA graph): charged to the next op's phase;
- idle: idle before an op whose launch is not in the capture (no way to split the gap).

So over all phases the segments of one stream sum to its wall time.
"""

from __future__ import annotations

import polars as pl

from specprof.analyzer.core.projection import I64_MIN, lookup
from specprof.analyzer.model.columns import ArrowStream, _scan, by_rank, collect, dense_key  # (_scan: the optional C module, or None)
from specprof.analyzer.model.labels import CPU_WAIT, IDLE, IN_CYCLE, LAUNCH, UNATTRIBUTED

# The one-pass C scan is used where it is built; False: polars alone (the tests compare the two).
USE_SCAN = True

SEGMENT_SCHEMA = {
    "device": pl.Int64,
    "stream": pl.Int64,
    "start": pl.Int64,
    "end": pl.Int64,
    "phase": pl.Categorical,
    "category": pl.Categorical,
    "cycle": pl.Int64,
    "op_id": pl.Int64,  # the op the segment belongs to (busy) or precedes (idle kinds)
}

# The tiling, aggregated: attributed ns per (device, stream, cycle, phase, category). Every summary
# of attributed time is a group-by of this small table.
CHARGE_SCHEMA = {
    "device": pl.Int64,
    "stream": pl.Int64,
    "cycle": pl.Int64,
    "phase": pl.Categorical,
    "category": pl.Categorical,
    "ns": pl.Int64,
}

# The tiling is kept compact: the ops carry `prev_end` (the end of the latest op before them on their
# stream), from which each op's busy piece and the launch and idle pieces of the gap before it follow
# (expressions below); only the cpu_wait pieces, split at range boundaries, are a table of their own
# (`waits`, SEGMENT_SCHEMA). `tile` expands both into the segments on demand.
_GAP = pl.col("prev_end").is_not_null() & (pl.col("start") > pl.col("prev_end"))
_BUSY_START = pl.max_horizontal("start", pl.col("prev_end").fill_null(pl.col("start")))
# The launch call's start, clamped into the gap, splits it.
_SPLIT = pl.min_horizontal(pl.max_horizontal("launch_start", "prev_end"), "start")


def with_prev_end(ops: pl.DataFrame) -> pl.DataFrame:
    """Add `prev_end`: the latest end of the ops before each op on its (device, stream), in
    (start, end, op_id) order; null for a stream's first op. Keeps the row order."""
    if "prev_end" in ops.columns:
        ops = ops.drop("prev_end")
    # A window over one packed integer key: over the two columns polars hashes row-encoded pairs
    # (0.9 s and 0.65 GB transient at 11 M ops, against 0.5 s and a few MB).
    key = combined_key(ops, ["device", "stream"])
    in_order = _in_op_order(ops)
    if in_order and key is not None:
        scanned = scan_groups(ops, key, want_prev=True)
        if scanned is not None:
            return ops.with_columns(scanned[1].alias("prev_end"))
    prev = pl.col("end").cum_max().shift(1).over(key if key is not None else pl.struct("device", "stream"))
    if in_order:
        return ops.with_columns(prev_end=prev)
    order = ops.select("device", "stream", "start", "end", "op_id").with_row_index("_row").sort(
        "start", "end", "op_id").with_columns(prev_end=prev).sort("_row")
    return ops.with_columns(order.get_column("prev_end"))


def inside_note(ops: pl.DataFrame) -> str | None:
    """A note on the ops (with `prev_end`: `with_prev_end`) that lie wholly inside an earlier op on their stream:
    a stream runs its ops one after another (one may begin before the last ends, never end before it), so the
    earlier op's times are damaged; each instant it spans is charged to it alone. None when there are none."""
    inside = ops.filter(pl.col("end") < pl.col("prev_end")).select("device", "stream")
    if inside.is_empty():
        return None
    where = inside.unique(maintain_order=True).head(3).rows()
    streams = ", ".join(f"device {d} stream {s}" for d, s in where) + (", ..." if inside.n_unique() > 3 else "")
    return (f"{inside.height:,} GPU ops lie wholly inside an earlier op on their stream ({streams}): a stream runs "
            "its ops one after another, so that op's times are damaged; the time it spans is charged to it alone, "
            "and the phases and cycles it covers show none of their own there")


def _starts_ascending(df: pl.DataFrame) -> bool:
    """Whether `start` ascends: polars' sorted flag when set (the reader sets it on the ops), else one pass."""
    if df.get_column("start").flags["SORTED_ASC"]:
        return True
    return bool(df.select((pl.col("start") >= pl.col("start").shift(1)).fill_null(True).all()).item())


def _in_op_order(ops: pl.DataFrame, slice_rows: int = 1 << 20) -> bool:
    """Whether rows are in (start, end, op_id) order (the readers' op_id order): one pass, a slice at a time (each
    slice with the row before it; the shifted columns of all the rows at once are 0.27 GB at 11 M ops)."""
    if ops.height < 2:
        return True
    up = pl.col("start").shift(1)
    same = pl.col("start") == up
    end_up = pl.col("end").shift(1)
    ok = (pl.col("start") > up) | (same & ((pl.col("end") > end_up) | (
        (pl.col("end") == end_up) & (pl.col("op_id") > pl.col("op_id").shift(1)))))
    cols = ops.select("start", "end", "op_id")
    return all(cols.slice(max(i - 1, 0), slice_rows + (i > 0)).select((ok | up.is_null()).all()).item()
               for i in range(0, ops.height, slice_rows))


# The cpu_wait gaps are split at range boundaries a slice of them at a time: the binary searches, the pieces and
# their gathers then hold one slice's columns, not the whole's (at 11 M ops, 1.7 M gaps: 0.45 GB less transient).
WAIT_SLICE = 1 << 18


def cpu_waits(ops: pl.DataFrame, ranges: pl.DataFrame, tl: pl.DataFrame,
              grouping: tuple[str, ...] = ("cycle",), slice_rows: int = WAIT_SLICE) -> pl.DataFrame:
    """The cpu_wait pieces (SEGMENT_SCHEMA), in (op_id, start) order: each gap's part before its launch call
    began, split at the range boundaries on the launching thread. `ops` must carry prev_end (`with_prev_end`)."""
    gaps = ops.lazy().filter(_GAP & pl.col("launch_start").is_not_null()).select(
        "device", "stream", "op_id", "launch_tid", "prev_end", op_cycle="cycle", split=_SPLIT,
    ).filter(pl.col("split") > pl.col("prev_end")).rename({"prev_end": "a", "split": "b"}).pipe(collect)
    if gaps.is_empty():
        return pl.DataFrame(schema=SEGMENT_SCHEMA)
    open_ranges = _OpenRanges(ranges, tl, grouping)
    pieces = pl.concat([open_ranges.split(gaps.slice(i, slice_rows)) for i in range(0, gaps.height, slice_rows)])
    del gaps, open_ranges
    return _fill_wait_cycles(ops, pieces)


def stream_cycle(ops: pl.DataFrame, slice_rows: int = 1 << 20) -> pl.Series:
    """Each op's cycle on its stream: its own, or where it has none (launched between cycles, by the engine's
    code outside every range), the cycle of the latest op before it on its (device, stream) that has one: the
    time between two cycles belongs to the cycle it follows, as a cycle's period does (start to next start).
    Null before a stream's first cycle. `ops` in op (start) order.

    Computed a slice of the ops at a time, each stream's last cycle carried from one slice to the next (the same
    values as one forward fill over all the ops, which holds a key, a row index and a result for every op: 0.3 GB
    at 11 M ops, and keeps the queries that use it off the streaming engine)."""
    key = combined_key(ops, ["device", "stream"])
    key = key if key is not None else pl.struct("device", "stream")
    carry, out = None, []
    for i in range(0, max(ops.height, 1), slice_rows):
        part = ops.slice(i, slice_rows).select("cycle", k=key)
        part = part.with_columns(cycle=pl.coalesce("cycle", pl.col("cycle").forward_fill().over("k")))
        last = part.filter(pl.col("cycle").is_not_null()).group_by("k", maintain_order=True).agg(
            carried=pl.col("cycle").last())
        if carry is not None:
            part = part.join(carry, on="k", how="left", maintain_order="left").with_columns(
                cycle=pl.coalesce("cycle", "carried"))
            last = pl.concat([carry, last]).unique("k", keep="last", maintain_order=True)
        carry = last
        out.append(part.get_column("cycle"))
    return pl.concat(out).rechunk() if len(out) > 1 else out[0]


def _fill_wait_cycles(ops: pl.DataFrame, waits: pl.DataFrame) -> pl.DataFrame:
    """The cpu_wait pieces with no range open and no cycle (the engine between cycles, before an op launched outside
    every range) take the stream cycle (`stream_cycle`) of the op they precede. (A piece of a range outside every
    cycle, a prefill before the first cycle, stays in none.)"""
    if waits.is_empty() or not waits.get_column("cycle").has_nulls() or not ops.get_column("cycle").is_not_null().any():
        return waits
    loose = pl.col("cycle").is_null() & (pl.col("phase").cast(pl.Utf8) == UNATTRIBUTED)
    need = waits.filter(loose).select("op_id").unique()
    if need.is_empty():
        return waits
    cyc = ops.select("op_id").with_columns(stream_cycle(ops).alias("filled")).join(need, on="op_id", how="semi")
    return waits.join(cyc, on="op_id", how="left", maintain_order="left").with_columns(
        cycle=pl.when(loose).then(pl.coalesce("cycle", "filled")).otherwise(pl.col("cycle"))).drop(
        "filled").cast(SEGMENT_SCHEMA)


def charges(ops: pl.DataFrame, waits: pl.DataFrame) -> pl.DataFrame:
    """Attributed ns per (device, stream, cycle, phase, category): the tiling summed (CHARGE_SCHEMA)."""
    keys = ["device", "stream", "cycle", "phase"]
    if ops.is_empty():
        return pl.DataFrame(schema=CHARGE_SCHEMA)
    # (every piece has the cycle it belongs to on its stream: `stream_cycle`)
    per_op = ops.lazy().with_columns(stream_cycle(ops)).select(
        *keys, "category",
        busy=(pl.col("end") - _BUSY_START).clip(lower_bound=0),
        launch=pl.when(_GAP & pl.col("launch_start").is_not_null()).then(pl.col("start") - _SPLIT).otherwise(0),
        idle=pl.when(_GAP & pl.col("launch_start").is_null()).then(pl.col("start") - pl.col("prev_end")).otherwise(0),
    )
    # One group-by over the ops (by the keys and category), then the gaps' sums per key from its rows.
    by_category = collect(per_op.group_by(*keys, "category").agg(
        ns=pl.col("busy").sum(), launch=pl.col("launch").sum(), idle=pl.col("idle").sum())).lazy()
    busy = by_category.select(*keys, "category", "ns")
    gaps = by_category.group_by(keys).agg(pl.col("launch").sum(), pl.col("idle").sum())
    cat = pl.Categorical
    parts = [
        busy.select(*keys, pl.col("category").cast(cat), "ns"),
        gaps.select(*keys, category=pl.lit(LAUNCH).cast(cat), ns=pl.col("launch")),
        gaps.select(*keys, category=pl.lit(IDLE).cast(cat), ns=pl.col("idle")),
        waits.lazy().group_by(keys).agg(ns=(pl.col("end") - pl.col("start")).sum()).select(
            *keys, category=pl.lit(CPU_WAIT).cast(cat), ns="ns"),
    ]
    out = pl.concat([p.cast({k: v for k, v in CHARGE_SCHEMA.items()}) for p in parts]).filter(pl.col("ns") > 0)
    return collect(out).sort("device", "stream", "cycle", "phase", "category", nulls_last=False)


def tile(ops: pl.DataFrame, waits: pl.DataFrame) -> pl.DataFrame:
    """The segments (SEGMENT_SCHEMA) tiling every stream, sorted by (device, stream, start): each op's busy piece
    and the launch and idle pieces of the gap before it (from `prev_end`, `with_prev_end`), and the cpu_wait
    pieces `waits` (`cpu_waits`)."""
    if ops.is_empty():
        return pl.DataFrame(schema=SEGMENT_SCHEMA)
    o = ops.lazy().with_columns(stream_cycle(ops))
    cols = ["device", "stream", "phase", "cycle", "op_id"]
    busy = o.select(*cols, "category", start=_BUSY_START, end=pl.col("end")).filter(pl.col("end") > pl.col("start"))
    gaps = o.filter(_GAP)
    unknown = gaps.filter(pl.col("launch_start").is_null()).select(
        *cols, start="prev_end", end="start", category=pl.lit(IDLE))
    launch = gaps.filter(pl.col("launch_start").is_not_null()).select(
        *cols, start=_SPLIT, end="start", category=pl.lit(LAUNCH)).filter(pl.col("end") > pl.col("start"))
    parts = [busy, launch, unknown, waits.lazy()]
    out = pl.concat([p.select(list(SEGMENT_SCHEMA)).cast(SEGMENT_SCHEMA) for p in parts])
    return out.sort("device", "stream", "start").collect()


class _OpenRanges:
    """What the split of cpu_wait gaps at range boundaries looks up, made once for all the slices: the launching
    threads' timelines (`projection.timeline`: (tid, t, state, row) in (tid, t) order, one row per instant, a
    sentinel row at the smallest time first per thread) and the ranges' phase and cycle.

    A timeline row is found by one binary search over a key that orders the rows as they lie: the thread's rank
    among the timeline's threads above a code of the time. The code is the time itself (offset) where both fit
    in `BITS` bits, else the time's rank among the timeline's times. (An as-of join per slice would hash the
    whole timeline by thread each time, and sort the slice twice.)"""

    BITS = 62

    def __init__(self, ranges: pl.DataFrame, tl: pl.DataFrame, grouping: tuple[str, ...]):
        tid, t = tl.get_column("tid"), tl.get_column("t")
        self.tids = tid.drop_nulls().unique().sort()
        real = t.filter(t > I64_MIN)
        self.lo, self.hi = (real.min(), real.max()) if real.len() else (0, 0)
        self.tid_bits = (self.tids.len() + 1).bit_length()
        self.times = None
        self.t_bits = (self.hi - self.lo + 3).bit_length()
        if self.tid_bits + self.t_bits > self.BITS or self.lo - 2 < I64_MIN or self.hi + 1 >= 1 << 63:
            self.times = real.unique().sort()
            self.t_bits = (2 * self.times.len() + 2).bit_length()
        keys, row = self._keys(tid, pl.when(t == I64_MIN).then(0).otherwise(self._code(t, exact=True)), rows=True), \
            tl.get_column("row")
        if not keys.is_sorted():  # (tl is in (tid, t) order, null threads first; else the keys are put in order)
            order = keys.arg_sort()
            keys, row = keys.gather(order), row.gather(order)
        self.keys, self.row = keys, row
        # A timeline row's time, state and the next boundary on its thread: `row` is the position in tl (sorted
        # by thread, time), so these are gathers.
        same = pl.col("tid") == pl.col("tid").shift(-1)
        self.rows = tl.select("t", "state", t_next=pl.when(same).then(pl.col("t").shift(-1)))
        self.info = ranges.select("range_id", s_name=pl.col("phase").cast(pl.Categorical), s_cycle="cycle",
                                  s_group=pl.col("phase").is_in(grouping))

    def _code(self, x: pl.Series, exact: bool = False) -> pl.Expr:
        """The code of times `x` (a timeline's own times with `exact`): t <= x and t < x for a timeline time t
        are code(t) <= code(x) and code(t) < code(x); 0 is kept for the sentinel."""
        if self.times is None:  # the time itself, clipped to one past the timeline's ends
            return pl.lit(x).clip(self.lo - 1, self.hi + 1) - (self.lo - 2)
        below = self.times.search_sorted(x, side="left").cast(pl.Int64)  # timeline times before x
        if exact:
            return pl.lit(2 * below + 2)
        upto = self.times.search_sorted(x, side="right").cast(pl.Int64)
        return pl.lit(2 * below + 1 + (upto - below))

    def _keys(self, tid: pl.Series, code: pl.Expr, rows: bool = False) -> pl.Series:
        """Thread rank (1 up; 0: a timeline row of no thread) above the time's code; null for a thread that has
        no timeline rows (or none)."""
        r = self.tids.search_sorted(tid, side="left").cast(pl.Int64)
        known = (r < self.tids.len()) & (self.tids.gather(r.clip(0, max(self.tids.len() - 1, 0))) == tid)
        prefix = pl.when(pl.lit(known)).then(pl.lit(r) + 1).otherwise(0 if rows else None)
        return pl.select(prefix * (1 << self.t_bits) + code).to_series()

    def _find(self, tid: pl.Series, x: pl.Series, strict: bool) -> pl.Series:
        """The tl row of the last boundary on thread `tid` at or before (`strict`: before) each time `x`, as an
        as-of lookup backward by thread; null where the thread has no timeline rows."""
        if self.tids.is_empty():
            return pl.Series([None] * x.len(), dtype=pl.Int64)
        keys = self._keys(tid, self._code(x))
        at = self.keys.search_sorted(keys.fill_null(0), side="left" if strict else "right").cast(pl.Int64) - 1
        return self.row.gather(at.zip_with(keys.is_not_null(), pl.Series([None], dtype=pl.Int64)))

    def split(self, waits: pl.DataFrame) -> pl.DataFrame:
        """Split each cpu_wait interval [a, b) on thread launch_tid at the range boundaries inside it: the pieces
        (SEGMENT_SCHEMA), in (op_id, start) order."""
        tid = waits.get_column("launch_tid")
        w = waits.drop("launch_tid").with_columns(first=self._find(tid, waits.get_column("a"), strict=False),
                                                  last=self._find(tid, waits.get_column("b"), strict=True))
        # A thread with no ranges at all has no timeline rows: one piece, nothing open. Most waits lie
        # within one timeline row; only the others are exploded into one piece per row they cross.
        w = w.with_columns(pl.col("first").fill_null(-1), pl.col("last").fill_null(-1))
        one = w.filter(pl.col("first") == pl.col("last")).drop("last").rename({"first": "row"})
        many = w.filter(pl.col("first") != pl.col("last")).with_columns(
            row=pl.int_ranges("first", pl.col("last") + 1)).explode("row").drop("first", "last")
        pieces = pl.concat([one, many.with_columns(pl.col("row").fill_null(-1))])
        del w, one, many
        at = pieces.get_column("row")
        at = at.zip_with(at >= 0, pl.Series([None], dtype=at.dtype))
        pieces = pieces.with_columns(self.rows.select(pl.all().gather(at)))
        pieces = pieces.with_columns(
            start=pl.max_horizontal("a", pl.col("t").fill_null(pl.col("a"))),
            end=pl.min_horizontal("b", pl.col("t_next").fill_null(pl.col("b"))),
        ).filter(pl.col("end") > pl.col("start"))
        state, info = pieces.get_column("state"), self.info
        pieces = pieces.with_columns(s_name=lookup(info, state, "s_name"), s_cycle=lookup(info, state, "s_cycle"),
                                     s_group=lookup(info, state, "s_group").fill_null(False))
        # What the launching thread was doing while the GPU waited: inside a phase, that phase; inside a cycle
        # but no phase (the worker's own code around its phases), the cycle itself; in no range at all (the
        # engine's code between cycles: scheduling, result processing not traced as a phase), no phase.
        pieces = pieces.with_columns(
            phase=pl.when(pl.col("s_group")).then(pl.lit(IN_CYCLE, dtype=pl.Categorical))
            .when(pl.col("s_name").is_null()).then(pl.lit(UNATTRIBUTED, dtype=pl.Categorical))
            .otherwise(pl.col("s_name")),
            # The cycle open at that instant: the grouping range itself, the cycle around the open
            # range (none when that range is outside every cycle), or, with nothing open, the next op's.
            cycle=pl.when(pl.col("s_group")).then(pl.col("state"))
            .when(pl.col("s_name").is_not_null()).then(pl.col("s_cycle"))
            .otherwise(pl.col("op_cycle")),
            category=pl.lit(CPU_WAIT, dtype=pl.Categorical),
        )
        return pieces.select(list(SEGMENT_SCHEMA)).sort("op_id", "start").cast(SEGMENT_SCHEMA)


def union_length(df: pl.DataFrame, by: list[str], where: pl.Expr | None = None) -> pl.DataFrame:
    """Length of the union of [start, end) intervals per group `by`: (by..., busy), the groups in no particular
    order; `where`: over the rows it selects only.

    Where the C scan is built and the rows are in start order (the ops are), one pass of it over the rows, the
    rows `where` leaves out skipped in place (not copied); else `union_by_polars`, its twin (the tests hold the
    two equal)."""
    if df.is_empty():
        return pl.DataFrame(schema={**{k: df.schema[k] for k in by}, "busy": pl.Int64})
    if _scan is not None and USE_SCAN and _starts_ascending(df):
        key = combined_key(df, by)
        scanned = scan_groups(df, key, where=where) if key is not None else None
        if scanned is None and all(df.schema[k].is_integer() for k in by):
            # values spread too wide for one key (process ids, 2^24 apart): numbered by rank instead, so that the
            # scan runs where polars' path would sort a copy of the rows (1.2 GB at 11 M ops)
            packed = dense_key(df, by, cap=max(4 * df.height, 1 << 20))
            scanned = scan_groups(df, packed[0], where=where) if packed is not None else None
        if scanned is not None:
            first, busy = scanned[0].get_column("first_row"), scanned[0].get_column("busy")
            return df.select(pl.col(by).gather(first)).with_columns(busy=busy)
    return union_by_polars(df, by, where)


def union_by_polars(df: pl.DataFrame, by: list[str], where: pl.Expr | None = None) -> pl.DataFrame:
    """`union_length` in polars: the rows (those `where` selects) in start order, then per group a running max of
    the ends: each interval adds what it reaches past the ends before it."""
    rows = df.lazy() if where is None else df.lazy().filter(where)
    reach = pl.max_horizontal("start", pl.col("end").cum_max().shift(1).fill_null(pl.col("start")))
    # (in memory: a group's rows keep their order there, which the running max needs)
    return rows.select(*by, "start", "end").sort("start").group_by(by).agg(
        busy=(pl.col("end") - reach).clip(lower_bound=0).sum().cast(pl.Int64)).collect()


def range_scan(ops: pl.DataFrame) -> pl.DataFrame | None:
    """Per innermost range of the ops (range_id; the ops of no range as one group, range_id null), in one
    pass of the C scan: `busy` (the union of its ops' intervals), `gpu_start`, `gpu_end`, `gpu_ops` and
    `gpu_launches` (its ops that begin a launch: a range's ops are its launch calls' ops). None where the
    scan is not built, the ops are not in start order or carry no `launch_first` (then the callers'
    polars paths compute the same: summary.range_busy, projection.range_projection)."""
    if _scan is None or not USE_SCAN or ops.is_empty() or "launch_first" not in ops.columns or \
            not _starts_ascending(ops):  # (start order is all the scan needs; the sorted flag says it at once)
        return None
    key = combined_key(ops, ["range_id"])
    scanned = scan_groups(ops, key, flags=ops.get_column("launch_first").fill_null(False)) if key is not None else None
    if scanned is None:
        return None
    g = scanned[0]
    first = g.get_column("first_row")
    return ops.select(pl.col("range_id").gather(first), gpu_start=pl.col("start").gather(first)).with_columns(
        busy=g.get_column("busy"), gpu_end=g.get_column("last_end"), gpu_ops=g.get_column("rows"),
        gpu_launches=g.get_column("flagged"))


def scan_groups(df: pl.DataFrame, key: pl.Expr | pl.Series, want_prev: bool = False, where: pl.Expr | None = None,
                flags: pl.Series | None = None) -> tuple[pl.DataFrame, pl.Series | None] | None:
    """One pass of the C scan (analyzer/_scan.c) over `df`'s rows, in their order (start order), grouped
    by the integer `key` (an expression, or a column of df's length), over the rows `where` selects (all by default; the others are skipped, not
    copied): per group that occurs, in key order, `first_row` (its first row), `busy` (the length of
    the union of its rows' [start, end)), `rows`, `last_end` (the largest end) and `flagged` (its rows
    whose `flags` value is true; 0 without flags); with `want_prev`, per row the largest end of the
    earlier rows of its group, null for a group's first row (and a skipped row). None where the scan is not built or
    the keys are too sparse for its table (then the caller's polars path does the same)."""
    if _scan is None or not USE_SCAN or df.is_empty():
        return None
    # One key column; the rows `where` leaves out get null, which the scan skips.
    if isinstance(key, pl.Series) and where is None:
        k = key.cast(pl.Int64)
    else:  # (on the streaming engine: the key's intermediate columns are held a morsel at a time, not for every row)
        key = pl.lit(key) if isinstance(key, pl.Series) else key
        k = collect(df.lazy().select((key if where is None else pl.when(where).then(key)).cast(pl.Int64).alias("k")))
        k = k.get_column("k")
    lo, hi = k.min(), k.max()
    if lo is None:  # no row in any group
        return pl.DataFrame(schema={c: pl.Int64 for c in ("first_row", "busy", "rows", "last_end", "flagged")}), \
            (pl.Series("prev_end", [None] * df.height, pl.Int64) if want_prev else None)
    if (where is None and k.has_nulls()) or hi - lo + 1 > max(4 * df.height, 1 << 20):
        return None
    if lo < 0:  # (the scan skips negative keys)
        k, hi, lo = k - lo, hi - lo, 0
    k = k.rechunk()  # (the chunks freed before the scan allocates its results)
    cols = [k, df.get_column("start").cast(pl.Int64).rechunk(), df.get_column("end").cast(pl.Int64).rechunk()]
    if any(c.has_nulls() for c in cols[1:]):
        return None
    flag_stream = None if flags is None else flags.cast(pl.Boolean).rechunk().__arrow_c_stream__()
    groups, prev = _scan.groups(*(c.__arrow_c_stream__() for c in cols), int(lo), int(hi - lo + 1), want_prev,
                                flag_stream)
    out = pl.DataFrame(ArrowStream(groups)).rename(
        {"c0": "first_row", "c1": "busy", "c2": "rows", "c3": "last_end", "c4": "flagged"})
    return out, (None if prev is None else pl.DataFrame(ArrowStream(prev)).to_series())


def combined_key(df: pl.DataFrame, by: list[str]) -> pl.Expr | None:
    """One Int64 expression that takes one value per distinct tuple of the columns `by` (integers or
    categoricals; null is a value of its own), when their ranges fit in 62 bits; else None."""
    parts = []
    for k in by:
        dt = df.schema[k]
        if dt == pl.Categorical:
            code = pl.col(k).to_physical().cast(pl.Int64)
            physical = df.get_column(k).to_physical()
            lo, hi = physical.min(), physical.max()
            if lo is not None and hi - lo > 1024:
                # codes of the process-wide string cache, spread wide (a phase's name interned after thousands
                # of kernel names): numbered by rank (null stays null), so that the packed key stays dense
                # enough for the C scan
                values = physical.unique().drop_nulls().sort().cast(pl.Int64)
                code = pl.when(code.is_null()).then(None).otherwise(by_rank(code, values))
            parts.append(code)
        elif dt.is_integer():
            parts.append(pl.col(k).cast(pl.Int64))
        else:
            return None
    if len(parts) == 1 and df.schema[by[0]].is_integer():
        return parts[0].fill_null(pl.col(by[0]).min().fill_null(0) - 1)
    stats = collect(df.lazy().select(*[e.min().alias(f"lo{i}") for i, e in enumerate(parts)],
                                     *[e.max().alias(f"hi{i}") for i, e in enumerate(parts)])).row(0, named=True)
    expr, bits = pl.lit(0, pl.Int64), 0
    for i, e in enumerate(parts):
        lo, hi = stats[f"lo{i}"], stats[f"hi{i}"]
        lo, hi = (0, 0) if lo is None else (int(lo), int(hi))
        width = (hi - lo + 2).bit_length()  # values lo..hi, and null
        if bits + width > 62:
            return None
        code = (e - lo).fill_null(hi - lo + 1)
        expr = expr + (code * (1 << bits))
        bits += width
    return expr
