"""Several ranks in one capture: per-rank attribution, skew across ranks, and communication split into
waiting for the slowest rank and transfer (docs/multirank.md).

A capture of a TP=N server holds N processes, each driving its own GPU. A **rank** is one (process, device)
pair that ran GPU work. Ranks are numbered by the tensor-parallel rank of the tracer's sidecar header when
every rank's process has one (distinct), else by the trace's own rank (a one-process Kineto trace that says
`distributedInfo.rank`), else in device order (then process id).

Everything here is a pure function of the analysis tables (integer ns); renderers turn it into ms.

`Ranks` tables:
- `ranks`: rank, pid (the trace's process id), os_pid, device, source (how the rank was numbered), ops,
  streams, first, last, wall (first op start to last op end on the rank), busy (union of the rank's ops),
  attributed (its cycle stream's tiling: the time its phases are
  charged), comm (communication kernels' GPU time), wait, transfer,
  unmatched (comm time of instances that could not be matched across ranks)
- `phases`: rank, phase, instances, ops, cpu, gpu_span, gpu_busy, attributed, side_busy: summary.phase_table over
  the rank's own ranges, ops and streams (attributed on its cycle stream)
- `categories`: rank, phase, category, ns
- `skew`: per phase, attributed ns across ranks (a rank without the phase counts 0): ranks (that had it),
  min, max, mean, skew (max - min), skew_pct (100 (max - min) / max), min_rank, max_rank
- `comm`: one row per communication op: rank, op_id, name, kind (its category: allreduce, all_to_all, ...),
  phase, instance (its k-th position in the matched
  sequence, null when unmatched), start, end, last_start (the latest start of the instance over the ranks),
  wait, transfer, last (this rank arrived last)
- `comm_phases`: rank, phase, comm, wait, transfer, unmatched
- `comm_kinds`: rank, kind, comm, wait, transfer, unmatched (a rank's split per collective kind)
- `collectives`: per kernel name: kind, ranks, instances (matched), unmatched (ops), ns (all ranks), wait, transfer,
  overlap_pct (instances whose kernels all overlap in time: the matching's sanity check), shifts (how many
  instances a rank's sequence had to be shifted to line up, per rank, as text)
- `stragglers`: per rank: last (instances it arrived last in), share (of matched instances), margin_mean,
  margin_max (how much later than the next-latest rank), caused (the other ranks' wait in those instances)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import polars as pl

from specprof.analyzer.core import categories, summary
from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.model.labels import COMMUNICATION
from specprof.analyzer.model.numeric import np

# How far a rank's sequence of one collective may be shifted against the reference rank's to line the k-th
# instances up (a capture window that cuts one rank's first or last kernel off).
MAX_SHIFT = 8

RANK_SCHEMA = {
    "rank": pl.Int64, "pid": pl.Int64, "os_pid": pl.Int64, "device": pl.Int64, "source": pl.Utf8,
    "ops": pl.Int64, "streams": pl.Int64, "first": pl.Int64, "last": pl.Int64, "wall": pl.Int64,
    "busy": pl.Int64, "attributed": pl.Int64, "comm": pl.Int64, "wait": pl.Int64, "transfer": pl.Int64,
    "unmatched": pl.Int64,
}
COMM_SCHEMA = {
    "rank": pl.Int64, "op_id": pl.Int64, "name": pl.Utf8, "kind": pl.Utf8, "phase": pl.Utf8, "instance": pl.Int64,
    "start": pl.Int64, "end": pl.Int64, "last_start": pl.Int64, "wait": pl.Int64, "transfer": pl.Int64,
    "last": pl.Boolean,
}
SKEW_SCHEMA = {
    "phase": pl.Utf8, "ranks": pl.Int64, "min": pl.Int64, "max": pl.Int64, "mean": pl.Float64,
    "skew": pl.Int64, "skew_pct": pl.Float64, "min_rank": pl.Int64, "max_rank": pl.Int64,
}
COLLECTIVE_SCHEMA = {
    "name": pl.Utf8, "kind": pl.Utf8, "ranks": pl.Int64, "instances": pl.Int64, "unmatched": pl.Int64, "ns": pl.Int64,
    "wait": pl.Int64, "transfer": pl.Int64, "overlap_pct": pl.Float64, "shifts": pl.Utf8,
}
STRAGGLER_SCHEMA = {
    "rank": pl.Int64, "last": pl.Int64, "share": pl.Float64, "margin_mean": pl.Float64, "margin_max": pl.Int64,
    "caused": pl.Int64,
}


@dataclass
class Ranks:
    ranks: pl.DataFrame
    phases: pl.DataFrame
    categories: pl.DataFrame
    skew: pl.DataFrame
    comm: pl.DataFrame
    comm_phases: pl.DataFrame
    comm_kinds: pl.DataFrame
    collectives: pl.DataFrame
    stragglers: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    # One cycle breakdown per rank that ran decode cycles (derived/breakdown.py), in rank order.
    breakdowns: list = field(default_factory=list)

    @property
    def count(self) -> int:
        return self.ranks.height

    def straggler(self) -> dict | None:
        """The rank that arrived last most often, or None without matched collectives."""
        s = self.stragglers.filter(pl.col("last") > 0)
        if s.is_empty():
            return None
        return s.sort(["last", "caused"], descending=True).row(0, named=True)

    def breakdown_of(self, rank: int):
        """The cycle breakdown of `rank`, or None."""
        return next((b for b in self.breakdowns if b.rank == rank), None)


def unprofiled_events(inflation: pl.DataFrame | None) -> tuple[pl.DataFrame | None, int | None]:
    """From the cross-check's inflation table: (phase, ns) the mean GPU time per cycle between each phase's CUDA
    events in the run without the profiler, and that run's mean cycle period; (None, None) without such a run."""
    if inflation is None or inflation.is_empty():
        return None, None
    gpu = inflation.filter((pl.col("measure") == "gpu") & (pl.col("phase") != "cycle")
                           & pl.col("without_ns").is_not_null())
    period = inflation.filter((pl.col("measure") == "cpu") & (pl.col("phase") == "period"))["without_ns"]
    period_ns = int(round(period[0])) if period.len() and period[0] is not None else None
    if gpu.is_empty():
        return None, period_ns
    return gpu.select("phase", ns=pl.col("without_ns").round().cast(pl.Int64)), period_ns


def focus(a: Attribution, m: Ranks, rank: int | None) -> Attribution:
    """`a` whose phase, category and cycle tables are those of `rank` alone (with several ranks: every per-phase
    and per-cycle figure is one rank's); `a` itself with one rank."""
    if m.count < 2 or rank is None:
        return a
    row = m.ranks.filter(pl.col("rank") == rank)
    if row.is_empty():
        return a
    pid = row["pid"][0]
    mine = pl.col("rank") == rank
    cycles = a.cycles.filter(pl.col("pid") == pid)
    phases = m.phases.filter(mine).drop("rank")
    return replace(a, phases=phases, categories=m.categories.filter(mine).drop("rank"), cycles=cycles,
                   cycle_phases=a.cycle_phases.join(cycles.select("cycle"), on="cycle", how="semi"))


def os_pid(meta, pid: int) -> int:
    """The operating-system process id of a trace's process (nsys globalPid carries it in bits 24-47)."""
    for p in meta.processes or []:
        if p.get("pid") == pid and p.get("os_pid") is not None:
            return int(p["os_pid"])
    if meta.format == "nsys-sqlite" and pid >= 1 << 24:
        return (pid >> 24) & 0xFFFFFF
    return pid


def sidecar_ranks(files: pl.DataFrame | None) -> dict[int, int]:
    """OS pid -> tensor-parallel rank from the sidecars' headers (analyzer/readers/sidecar.py `files`)."""
    if files is None or files.is_empty():
        return {}
    known = files.filter(pl.col("rank").is_not_null())
    return {int(p): int(r) for p, r in known.select("pid", "rank").unique().rows()}


def _pair_tables(a: Attribution) -> dict[str, pl.DataFrame]:
    """The attribution's per-(process, device) tables (core/summary.py pair_tables): made with it and cached with
    it; made here for an attribution without them."""
    if a.pairs is not None and a.pair_phases is not None and a.pair_categories is not None and a.comm_ops is not None:
        return {"pairs": a.pairs, "pair_phases": a.pair_phases, "pair_categories": a.pair_categories,
                "comm_ops": a.comm_ops}
    return summary.pair_tables(a.ops, a.ranges, a.charges, a.streams, a.grouping, a.phases, a.categories,
                               categories.kinds_of(COMMUNICATION, a.category_parents))


def number_ranks(a: Attribution, tp_ranks: dict[int, int] | None = None,
                 pairs: pl.DataFrame | None = None) -> tuple[pl.DataFrame, list[str]]:
    """One row per (pid, device) with GPU ops: rank, pid, os_pid, device, source, ops, first, last. `pairs`: the
    attribution's (pid, device) table, when the caller has it."""
    notes: list[str] = []
    if pairs is None:
        pairs = _pair_tables(a)["pairs"]
    pairs = pairs.select("pid", "device", "ops", "first", "last").sort("device", "pid")
    meta = a.trace.meta
    pairs = pairs.with_columns(os_pid=pl.Series([None if p is None else os_pid(meta, int(p)) for p in pairs["pid"]],
                                                 dtype=pl.Int64))  # (None: ops whose process the trace lacks)
    tp = tp_ranks or {}
    from_sidecar = [None if p is None else tp.get(int(p)) for p in pairs["os_pid"]]
    if tp and all(r is not None for r in from_sidecar) and len(set(from_sidecar)) == pairs.height:
        ranks, source = from_sidecar, "sidecar"
    else:
        if tp and any(r is not None for r in from_sidecar):
            notes.append("the sidecars give a tensor-parallel rank to only some of the processes that ran GPU work "
                         "(or the same rank twice): ranks are numbered in device order instead")
        if pairs.height == 1 and meta.rank is not None:
            ranks, source = [int(meta.rank)], "trace"
        else:
            ranks, source = list(range(pairs.height)), "device order"
    out = pairs.with_columns(rank=pl.Series(ranks, dtype=pl.Int64), source=pl.lit(source)).sort("rank")
    return out.select("rank", "pid", "os_pid", "device", "source", "ops", "first", "last"), notes


def per_rank(a: Attribution, tp_ranks: dict[int, int] | None = None) -> Ranks:
    """Per-rank attribution, skew across ranks and the communication split of the attribution `a`: the ranks
    numbered, the attribution's per-(process, device) tables relabelled by rank, and the communication matched
    across ranks.

    `tp_ranks`: OS pid -> tensor-parallel rank (from the sidecars, `sidecar_ranks`)."""
    t = _pair_tables(a)
    ranks, notes = number_ranks(a, tp_ranks, t["pairs"])
    if "pids" in a.streams.columns and (shared := int((a.streams["pids"] > 1).sum())):
        notes.append(f"{shared} GPU stream(s) hold ops of several processes: each is counted with the "
                     "process that launched most of its ops")
    key = ranks.select("rank", "pid", "device")
    phase_schema = {"rank": pl.Int64, "phase": pl.Utf8, "instances": pl.Int64, "ops": pl.Int64, "cpu": pl.Int64,
                    "gpu_span": pl.Int64, "gpu_busy": pl.Int64, "attributed": pl.Int64, "side_busy": pl.Int64}
    phases = t["pair_phases"].join(key, on=["pid", "device"], how="inner", maintain_order="left").select(
        list(phase_schema)).cast(phase_schema).sort("rank", maintain_order=True)
    cat_schema = {"rank": pl.Int64, "phase": pl.Utf8, "category": pl.Utf8, "ns": pl.Int64}
    cats = t["pair_categories"].join(key, on=["pid", "device"], how="inner", maintain_order="left").select(
        list(cat_schema)).cast(cat_schema).sort("rank", maintain_order=True)
    kinds = categories.kinds_of(COMMUNICATION, a.category_parents)
    comm, coll, more = split_communication(t["comm_ops"], ranks, kinds)
    notes += more
    split = dict(
        comm=(pl.col("end") - pl.col("start")).sum(), wait=pl.col("wait").sum(), transfer=pl.col("transfer").sum(),
        unmatched=(pl.col("end") - pl.col("start")).filter(pl.col("instance").is_null()).sum())
    per_rank = comm.group_by("rank").agg(**split)
    rank_table = ranks.join(t["pairs"].select("pid", "device", "streams", "busy", "attributed"),
                            on=["pid", "device"], how="left").with_columns(wall=pl.col("last") - pl.col("first"))
    rank_table = rank_table.join(per_rank, on="rank", how="left").with_columns(
        [pl.col(c).fill_null(0).cast(pl.Int64) for c in ("comm", "wait", "transfer", "unmatched")]
    ).select(list(RANK_SCHEMA)).cast(RANK_SCHEMA)
    comm_phases = comm.group_by("rank", "phase").agg(**split).with_columns(
        pl.col("unmatched").fill_null(0)).sort("rank", "comm", descending=[False, True])
    comm_kinds = comm.group_by("rank", "kind").agg(**split).with_columns(
        pl.col("unmatched").fill_null(0)).sort("rank", "comm", "kind", descending=[False, True, False])
    return Ranks(ranks=rank_table, phases=phases, categories=cats, skew=skew(phases, ranks["rank"].to_list()),
                 comm=comm, comm_phases=comm_phases, comm_kinds=comm_kinds, collectives=coll,
                 stragglers=stragglers(comm, ranks["rank"].to_list()), notes=notes)


def skew(phases: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Per phase, attributed ns across ranks (a rank without the phase counts 0)."""
    if len(ranks) < 2 or phases.is_empty():
        return pl.DataFrame(schema=SKEW_SCHEMA)
    grid = phases.select("phase").unique().join(pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int64}),
                                                how="cross")
    full = grid.join(phases.select("rank", "phase", "attributed"), on=["rank", "phase"], how="left").with_columns(
        had=pl.col("attributed").is_not_null(), attributed=pl.col("attributed").fill_null(0))
    out = full.sort("rank").group_by("phase").agg(
        ranks=pl.col("had").sum().cast(pl.Int64),
        min=pl.col("attributed").min(), max=pl.col("attributed").max(), mean=pl.col("attributed").mean(),
        min_rank=pl.col("rank").get(pl.col("attributed").arg_min()),
        max_rank=pl.col("rank").get(pl.col("attributed").arg_max()),
    ).with_columns(skew=pl.col("max") - pl.col("min")).with_columns(
        skew_pct=pl.when(pl.col("max") > 0).then(100.0 * pl.col("skew") / pl.col("max")).otherwise(0.0))
    return out.select(list(SKEW_SCHEMA)).cast(SKEW_SCHEMA).sort(["max", "phase"], descending=[True, False])


def _best_shift(ref_s, ref_e, s, e, limit: int) -> tuple[int, int]:
    """The shift d (pair ref[k] with other[k + d]) that makes the most pairs overlap in time; ties: smallest |d|.
    Returns (d, overlapping pairs)."""
    best, best_n = 0, -1
    for d in sorted(range(-limit, limit + 1), key=abs):
        lo, hi = max(0, -d), min(len(ref_s), len(s) - d)
        if hi <= lo:
            continue
        a_s, a_e = ref_s[lo:hi], ref_e[lo:hi]
        b_s, b_e = s[lo + d:hi + d], e[lo + d:hi + d]
        n = int(np.count_nonzero(np.maximum(a_s, b_s) < np.minimum(a_e, b_e)))
        if n > best_n:
            best, best_n = d, n
    return best, max(best_n, 0)


def split_communication(ops: pl.DataFrame, ranks: pl.DataFrame,
                        kinds: list[str] | None = None) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """Match the k-th instance of each communication kernel across ranks and split each rank's kernel time
    into wait (it ran before the last rank's kernel of that instance started) and transfer (the rest).

    Communication kernels: the ops whose category is in `kinds` (`communication` and its kinds; the
    default rules' when None); an op's kind is its category.

    Matching: per kernel name, each rank's kernels in start order; the k-th of one rank goes with the k-th of
    every other, after shifting a rank's sequence by the offset (within +-MAX_SHIFT) that makes the most
    pairs overlap in time against the reference rank (the lowest rank that ran the kernel): a capture window
    can cut a rank's first kernel off. Instances not present on every rank that ran the kernel stay
    unmatched (their time is neither wait nor transfer). All ranks share the trace's clock."""
    notes: list[str] = []
    key = ranks.select("rank", "pid", "device")
    kinds = categories.kinds_of(COMMUNICATION) if kinds is None else kinds
    if "kind" in ops.columns:  # the attribution's communication ops already (summary.COMM_OP_SCHEMA)
        c = ops.filter(pl.col("kind").is_in(kinds)).join(key, on=["pid", "device"], how="inner").select(
            "rank", "op_id", "name", "kind", "phase", "start", "end")
    else:
        c = (ops.filter(pl.col("category").cast(pl.Utf8).is_in(kinds))
             .join(key, on=["pid", "device"], how="inner")
             .select("rank", "op_id", name=pl.col("name").cast(pl.Utf8), kind=pl.col("category").cast(pl.Utf8),
                     phase=pl.col("phase").cast(pl.Utf8), start="start", end="end"))
    c = c.sort("rank", "name", "start", "op_id")
    if c.is_empty():
        return pl.DataFrame(schema=COMM_SCHEMA), pl.DataFrame(schema=COLLECTIVE_SCHEMA), notes
    rows, coll_rows = [], []
    for (name,), g in c.group_by(["name"], maintain_order=True):
        by_rank = {int(r): part for (r,), part in g.group_by(["rank"], maintain_order=True)}
        order = sorted(by_rank)
        seq = {r: (by_rank[r]["start"].to_numpy(), by_rank[r]["end"].to_numpy()) for r in order}
        ref = order[0]
        shifts = {ref: 0}
        overlapping = {}
        limit = min(MAX_SHIFT, max(len(s) for s, _ in seq.values()))
        for r in order[1:]:
            shifts[r], overlapping[r] = _best_shift(*seq[ref], *seq[r], limit)
        # instance k pairs ref[k] with r[k + shift_r]; valid where every rank has that index
        lo = max(-shifts[r] for r in order)
        hi = min(len(seq[r][0]) - shifts[r] for r in order)
        n = max(0, hi - lo) if len(order) > 1 else 0
        starts = np.full((len(order), max(n, 0)), 0, dtype=np.int64)
        ends = np.zeros_like(starts)
        for i, r in enumerate(order):
            if n:
                starts[i] = seq[r][0][lo + shifts[r]:hi + shifts[r]]
                ends[i] = seq[r][1][lo + shifts[r]:hi + shifts[r]]
        if n:
            last_start = starts.max(axis=0)
            last_rank_i = starts.argmax(axis=0)
            overlap = int(np.count_nonzero(last_start < ends.min(axis=0)))
        for i, r in enumerate(order):
            part = by_rank[r]
            k = np.full(part.height, -1, dtype=np.int64)
            ls = np.zeros(part.height, dtype=np.int64)
            if n:
                idx = np.arange(lo, hi) + shifts[r]
                k[idx] = np.arange(n)
                ls[idx] = last_start
            dur = part["end"].to_numpy() - part["start"].to_numpy()
            matched = k >= 0
            wait = np.where(matched, np.clip(ls - part["start"].to_numpy(), 0, dur), 0)
            last = np.zeros(part.height, dtype=bool)
            if n:
                last[idx] = last_rank_i == i
            rows.append(part.with_columns(
                instance=pl.Series(np.where(matched, k, 0), dtype=pl.Int64),
                last_start=pl.Series(ls, dtype=pl.Int64), wait=pl.Series(wait, dtype=pl.Int64),
                transfer=pl.Series(np.where(matched, dur - wait, 0), dtype=pl.Int64),
                last=pl.Series(last & matched, dtype=pl.Boolean), _m=pl.Series(matched)).with_columns(
                instance=pl.when(pl.col("_m")).then(pl.col("instance")),
                last_start=pl.when(pl.col("_m")).then(pl.col("last_start"))).drop("_m"))
        total = sum(len(seq[r][0]) for r in order)
        coll_rows.append({
            "name": name, "kind": g["kind"][0], "ranks": len(order), "instances": n,
            "unmatched": total - n * len(order),
            "ns": int(sum(int((seq[r][1] - seq[r][0]).sum()) for r in order)), "wait": 0, "transfer": 0,
            "overlap_pct": (100.0 * overlap / n) if n else None,
            "shifts": ", ".join(f"rank {r}: {shifts[r]:+d}" for r in order[1:] if shifts[r]) or None,
        })
        if len(order) < ranks.height:
            notes.append(f"communication kernel {name[:80]!r} ran on {len(order)} of {ranks.height} ranks: matched "
                         "across those only")
    comm = pl.concat(rows).select(list(COMM_SCHEMA)).cast(COMM_SCHEMA).sort("rank", "start")
    sums = comm.group_by("name").agg(w=pl.col("wait").sum(), t=pl.col("transfer").sum())
    coll = (pl.DataFrame(coll_rows, schema=COLLECTIVE_SCHEMA).join(sums, on="name", how="left")
            .with_columns(wait=pl.col("w").fill_null(0), transfer=pl.col("t").fill_null(0)).drop("w", "t")
            .select(list(COLLECTIVE_SCHEMA)).sort("ns", descending=True))
    bad = coll.filter(pl.col("unmatched") > 0)
    if bad.height:
        notes.append(f"{int(bad['unmatched'].sum())} communication kernel(s) could not be matched across ranks "
                     "(the capture window holds a different number of instances per rank): their time is counted "
                     "as unmatched, neither wait nor transfer")
    return comm, coll, notes


def stragglers(comm: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Per rank: how often it arrived last at a matched collective, by how much, and the wait it caused."""
    m = comm.filter(pl.col("instance").is_not_null())
    if m.is_empty() or len(ranks) < 2:
        return pl.DataFrame(schema=STRAGGLER_SCHEMA)
    # per instance: the latest start, the next-latest start, the sum of every rank's wait
    inst = m.group_by("name", "instance").agg(
        last_rank=pl.col("rank").filter(pl.col("last")).first(),
        second=pl.col("start").sort(descending=True).get(1, null_on_oob=True),
        last_start=pl.col("last_start").first(),
        caused=pl.col("wait").sum())
    inst = inst.with_columns(margin=pl.col("last_start") - pl.col("second"))
    total = inst.height
    per = inst.group_by(rank="last_rank").agg(
        last=pl.len().cast(pl.Int64), margin_mean=pl.col("margin").mean().cast(pl.Float64),
        margin_max=pl.col("margin").max(), caused=pl.col("caused").sum())
    grid = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int64})
    return grid.join(per, on="rank", how="left").with_columns(
        last=pl.col("last").fill_null(0), caused=pl.col("caused").fill_null(0),
        share=pl.col("last").fill_null(0) / total).select(list(STRAGGLER_SCHEMA)).cast(STRAGGLER_SCHEMA)
