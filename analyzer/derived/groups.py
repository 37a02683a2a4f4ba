"""Does speculation pay at each batch size, and with which step count K (docs/economics.md, "Per batch size").

A server's batch size follows its traffic, and an adaptive server (SGLang's --speculative-adaptive) changes K with
it: a cycle at batch 1 and one at batch 16 are different things. So the sidecar's decode cycles are grouped by
batch size and by the K their verify checked, and every measure of the economics is made once per group, against
the plain run's step at the same batch sizes (`batch_groups`).

Groups of batch size: an exact size where it has at least MIN_GROUP_CYCLES decode cycles; the other sizes pooled
into buckets, SGLang's adaptive thresholds where the run has them, else powers of two (1, 2, 3-4, 5-8, 9-16, ...),
each bucket's edges narrowed to leave out the exact sizes (`edges_of`). A plain run's cycles join the groups of the
speculative run by their batch size: a group the plain run has no cycle in has no baseline (said, never borrowed).

A group's cycle period: start to start of consecutive cycles, the period belonging to the earlier (a decode cycle's),
the periods longer than IDLE_GAP_FACTOR x its group's median left out as idle (economics.py). Idle: the time between
two cycles when the server had no running request (a gap longer than IDLE_GAP_FACTOR x the process's median decode
period: between requests, between ramp levels), counted once (`idle_of`), in no cycle.

`BatchGroups`:
- `rows`: one row per (source, group): `source`, `profiled` (as `Economics.estimates`), `batch_group` (the group
  in words: "8", "3-4"; `batch` is the mean requests per cycle in it), `batch_lo`, `batch_hi`, `exact` (one batch size), `steps` (K; 0 where the draft was skipped;
  null for a run that does not draft), and every column of an estimate (economics.py ESTIMATE_SCHEMA) measured over
  the group's cycles against the plain step of its batch sizes, plus `time_share` (of the run's time in cycles:
  cycles x period over the groups' sum) and `baseline_steps` (plain steps measured at these sizes; 0: none).
- `phases`: source, profiled, batch_group, steps, phase, instances, ns_per_cycle, lo_ns, hi_ns: each phase's host time per
  cycle from the sidecar's phase ranges (under the profiler and without it), with its 95 % interval.
- `crossover`: sentences, the headline source's: where speculation pays and where it loses, by batch size.
- `weighted_speedup`: the traffic-weighted mean speedup over the groups that have a baseline (each group weighted by
  the run's time in it: sum(cycles x accept length x plain step) / sum(cycles x cycle period)); None with one group.
- `idle_ns`, `idle_gaps`: the run's idle time outside every cycle (headline source), and in how many gaps.
- `notes`: how the groups were made, groups without a baseline.
- `members`: the headline source's decode cycles of each group (batch_group, steps, file, index): per-position
  acceptance and the levers per group (derived/acceptance.py, derived/levers.py) take a group's cycles from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from specprof.analyzer.derived import crosscheck as cc
from specprof.analyzer.derived import economics as econ
from specprof.analyzer.derived.intervals import mean_measure

MIN_GROUP_CYCLES = 10  # a batch size with fewer decode cycles joins a bucket
POWER_EDGES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # bucket upper edges: 1, 2, 3-4, 5-8, ...

GROUP_SCHEMA = {"batch_group": pl.Utf8, "batch_lo": pl.Int64, "batch_hi": pl.Int64, "exact": pl.Boolean,
                "steps": pl.Int64}
ROW_SCHEMA = {**GROUP_SCHEMA, **econ.ESTIMATE_SCHEMA, "time_share": pl.Float64, "baseline_steps": pl.Int64}
PHASE_SCHEMA = {"source": pl.Utf8, "profiled": pl.Boolean, "batch_group": pl.Utf8, "steps": pl.Int64, "phase": pl.Utf8,
                "instances": pl.Int64, "ns_per_cycle": pl.Int64, "lo_ns": pl.Int64, "hi_ns": pl.Int64}


@dataclass
class BatchGroups:
    rows: pl.DataFrame
    phases: pl.DataFrame
    crossover: list[str] = field(default_factory=list)
    weighted_speedup: float | None = None
    idle_ns: int = 0
    idle_gaps: int = 0
    notes: list[str] = field(default_factory=list)
    # the headline source's decode cycles of each group: batch_group, steps, file, index (the sidecar's cycle)
    members: pl.DataFrame | None = None

    @property
    def several(self) -> bool:
        """The headline source's cycles fall in more than one group (batch size or K) of MIN_GROUP_CYCLES cycles
        or more (a run's few cycles at other sizes, while its load rises or drains, make no second group)."""
        if not self.rows.height:
            return False
        head = self.rows["source"][0]
        return self.rows.filter((pl.col("source") == head) & (pl.col("cycles") >= MIN_GROUP_CYCLES)).height > 1


def edges_of(sizes: pl.DataFrame, thresholds: list[int] | None = None) -> list[tuple[int, int, bool]]:
    """The batch-size groups (lo, hi, exact) for decode cycles counted per size (`sizes`: batch_size, cycles):
    exact sizes with MIN_GROUP_CYCLES cycles or more, the rest in buckets whose upper edges are `thresholds`
    (SGLang's adaptive config's) or powers of two, narrowed to leave the exact sizes out."""
    counts = {int(b): int(n) for b, n in sizes.iter_rows() if b is not None}
    exact = {b for b, n in counts.items() if n >= MIN_GROUP_CYCLES}
    uppers = sorted(set(thresholds or POWER_EDGES))
    groups = [(b, b, True) for b in exact]
    buckets: dict = {}
    for b in counts:
        if b in exact:
            continue
        hi = next((u for u in uppers if b <= u), None)
        lo = max([u for u in uppers if u < b], default=0) + 1
        if hi is None:
            lo, hi = uppers[-1] + 1, max(counts)
        buckets[(lo, hi)] = True
    for lo, hi in buckets:
        while lo in exact and lo < hi:
            lo += 1
        while hi in exact and hi > lo:
            hi -= 1
        groups.append((lo, hi, False))
    return sorted(groups)


def _label(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def grouped(cycles: pl.DataFrame, edges: list[tuple[int, int, bool]], steps: int | None) -> pl.DataFrame:
    exact = {a for a, b, x in edges if x}
    """`cycles` with the group columns (GROUP_SCHEMA) added: its batch-size group by `edges`, its K (the cycle's
    own, else `steps`, the run's; null for a plain step). A cycle in no group has null `batch`."""
    lo = pl.lit(None, dtype=pl.Int64)
    hi = pl.lit(None, dtype=pl.Int64)
    # an exact size wins over a bucket around it (a bucket's edges are narrowed to leave exact sizes out, but an
    # exact size inside it stays inside its range)
    for a, b, _ in reversed([e for e in edges if e[2]] + [e for e in edges if not e[2]]):
        inside = pl.col("batch_size").is_between(a, b)
        lo = pl.when(inside).then(pl.lit(a, dtype=pl.Int64)).otherwise(lo)
        hi = pl.when(inside).then(pl.lit(b, dtype=pl.Int64)).otherwise(hi)
    k = pl.when(pl.col("verify")).then(pl.coalesce(pl.col("steps"), pl.lit(steps, dtype=pl.Int64))) \
        .otherwise(pl.lit(None, dtype=pl.Int64))
    out = cycles.with_columns(batch_lo=lo, batch_hi=hi, steps=k)
    return out.with_columns(
        batch=pl.when(pl.col("batch_lo") == pl.col("batch_hi")).then(pl.col("batch_lo").cast(pl.Utf8))
        .otherwise(pl.col("batch_lo").cast(pl.Utf8) + "-" + pl.col("batch_hi").cast(pl.Utf8)),
        exact=pl.col("batch_lo").is_in(list(exact)) & (pl.col("batch_lo") == pl.col("batch_hi")))


def group_periods(cycles: pl.DataFrame) -> pl.DataFrame:
    """Start-to-start periods of consecutive cycles per sidecar file (economics.cycle_periods' rule), of the decode
    cycles with a group: file, index, batch, steps, period, gap (the next cycle's start less this one's end), idle
    (the period is longer than IDLE_GAP_FACTOR x its group's median)."""
    p = (cycles.sort("file", "start")
         .with_columns(period=pl.col("start").shift(-1).over("file") - pl.col("start"),
                       gap=pl.col("start").shift(-1).over("file") - pl.col("end"))
         .filter(pl.col("period").is_not_null() & pl.col("decode") & pl.col("batch").is_not_null()))
    return p.select("file", "index", "batch", "batch_lo", "steps", "period", "gap").with_columns(
        idle=pl.col("period") > econ.IDLE_GAP_FACTOR * pl.col("period").median().over("batch", "steps"))


def idle_of(cycles: pl.DataFrame) -> tuple[int, int]:
    """(idle ns, gaps): the time between consecutive cycles of a sidecar file during which the server ran no cycle
    and had no running request: a gap (next start less this end) longer than IDLE_GAP_FACTOR x the file's median
    decode period (a running request's next step is launched within a period)."""
    c = cycles.sort("file", "start").with_columns(
        period=pl.col("start").shift(-1).over("file") - pl.col("start"),
        gap=pl.col("start").shift(-1).over("file") - pl.col("end"))
    c = c.with_columns(median=pl.col("period").filter(pl.col("decode")).median().over("file"))
    idle = c.filter(pl.col("gap").is_not_null() & (pl.col("gap") > econ.IDLE_GAP_FACTOR * pl.col("median")))
    return int(idle["gap"].sum() or 0), idle.height


def _phases(source: str, profiled: bool, sides_phases: pl.DataFrame, kept: pl.DataFrame) -> list[dict]:
    ph = sides_phases.filter(pl.col("in_cycle")).join(
        kept.select("file", cycle="index", batch="batch", steps="steps"), on=["file", "cycle"])
    if not ph.height:
        return []
    per = ph.group_by("file", "cycle", "batch", "steps", "name").agg(ns=(pl.col("end") - pl.col("start")).sum()) \
        .join(kept.select("batch", "batch_lo").unique(), on="batch", how="left").sort(
            "batch_lo", "steps", "name", "file", "cycle", nulls_last=True)
    out = []
    for (batch, steps, name), g in per.group_by("batch", "steps", "name", maintain_order=True):
        m = mean_measure(g["ns"].to_numpy())
        lo = hi = None
        if m.half is not None and math.isfinite(m.half):
            lo, hi = max(0, int(round(m.lo))), int(round(m.hi))  # a time is not negative
        out.append({"source": source, "profiled": profiled, "batch_group": batch, "steps": steps, "phase": name,
                    "instances": g.height, "ns_per_cycle": int(round(m.value)), "lo_ns": lo, "hi_ns": hi})
    return out


@dataclass
class _Source:
    all: pl.DataFrame  # every cycle of the sidecars
    cycles: pl.DataFrame  # the cycles compared (crosscheck.window_cycles)
    runs: pl.DataFrame | None  # file, run: the repeated twin of each file
    phases: pl.DataFrame


def _source(sides, first: int | None, last: int | None, twin: bool) -> _Source:
    """Under the profiler, the cycles its trace holds (the capture window); a run without it (twin, or a plain run's
    sidecars), every cycle: grouped by batch size, all of its traffic compares like with like."""
    return _Source(sides.cycles, sides.cycles if twin else cc.window_cycles(sides, first, last),
                   econ.run_of(sides.files) if twin else None, sides.phases)


def adaptive_edges(keys) -> list[int] | None:
    """The bucket upper edges (`edges_of`'s `thresholds`) of SGLang's adaptive config whose batch-size keys are
    `keys`: a key is the smallest batch size of its K, so each bucket ends below the next key (keys 1, 3, 9: batches
    1-2, 3-8, 9 and above); None without two keys."""
    uppers = sorted({int(k) - 1 for k in keys or () if int(k) > 1})
    return uppers or None


def batch_groups(sources: list[tuple], plain=None, steps: int | None = None,
                 thresholds: list[int] | None = None, pooling: str | None = None) -> BatchGroups | None:
    """The economics per batch-size group and K. `sources`: (source, profiled, Sidecars, twin) of the run, headline
    first (twin: the sidecars are the run's twins without the profiler, their repeats each a run), over the cycles
    compared (the sidecar's capture window, else `first`..`last` given as `sources`' 5th and 6th items); `plain`: the
    plain run's Sidecars (its twins without nsys where it has them: then `plain_twin` is the 2nd item of a tuple),
    or None; `steps`: the run's K where a cycle does not say; `thresholds`: SGLang's adaptive batch-size thresholds
    (`adaptive_edges`); `pooling`: how the buckets were made, in words (else said from `thresholds`).
    None without a decode cycle compared."""
    measured = [(s[0], s[1], _source(s[2], s[4] if len(s) > 4 else None, s[5] if len(s) > 5 else None, s[3]))
                for s in sources]
    if plain is not None and not isinstance(plain, tuple):
        plain = (plain, False)
    if plain is not None:
        ps = _source(plain[0], None, None, plain[1])
        plain = (ps.all, ps.cycles, ps.runs)
    head = measured[0][2]
    kept0 = head.cycles.filter(pl.col("decode"))
    if not kept0.height:
        return None
    edges = edges_of(kept0.group_by("batch_size").agg(pl.len()).select("batch_size", "len"), thresholds)
    notes = []
    if any(not e[2] for e in edges):
        notes.append(f"batch sizes with fewer than {MIN_GROUP_CYCLES} decode cycles are pooled into buckets ("
                     + (pooling or ("SGLang's adaptive thresholds" if thresholds else "powers of two")) + "): "
                     + ", ".join(_label(a, b) for a, b, x in edges if not x))
    base = {}
    if plain is not None:
        every, kept, runs = plain
        g = grouped(every, edges, None)
        keep = kept.select("file", "index")
        p = group_periods(g).join(keep, on=["file", "index"], how="semi").filter(~pl.col("idle"))
        if runs is not None:
            p = p.join(runs, on="file", how="left")
        for (batch,), part in p.group_by("batch", maintain_order=True):
            base[batch] = mean_measure(part["period"].to_numpy(),
                                       part["run"].to_list() if runs is not None else None)
    rows, phase_rows, missing = [], [], set()
    members = None
    for source, profiled, x in measured:
        g_all = grouped(x.all, edges, steps)
        g_kept = g_all.join(x.cycles.select("file", "index"), on=["file", "index"], how="semi").filter(
            pl.col("decode") & pl.col("batch").is_not_null())
        p = group_periods(g_all).join(g_kept.select("file", "index"), on=["file", "index"], how="semi")
        if members is None:
            members = g_kept.select(batch_group="batch", steps="steps", file="file", index="index")
        busy = p.filter(~pl.col("idle"))
        if x.runs is not None:
            busy = busy.join(x.runs, on="file", how="left")
        part_rows = []
        for (batch, k), cyc in g_kept.group_by("batch", "steps", maintain_order=True):
            per = busy.filter((pl.col("batch") == batch) & (pl.col("steps").eq_missing(k)))
            m = mean_measure(per["period"].to_numpy(), per["run"].to_list() if x.runs is not None else None) \
                if per.height else None
            accept = econ.accept_measure(cyc, x.runs)
            _, mean_batch, _ = econ.accept_stats(cyc)
            if mean_batch is None:
                mean_batch = float(cyc["batch_size"].mean())
            b = base.get(batch)
            if b is None and plain is not None:
                missing.add(batch)
            row = econ.estimate(source, profiled, m.n if m else 0, int(round(m.value)) if m else None,
                                accept.value if accept else None, mean_batch, int(round(b.value)) if b else None,
                                k, m, accept, b)
            row["cycles"] = cyc.height
            lo, hi = cyc["batch_lo"][0], cyc["batch_hi"][0]
            part_rows.append({"batch_group": batch, "batch_lo": lo, "batch_hi": hi, "exact": cyc["exact"][0], "steps": k,
                              **row, "baseline_steps": b.n if b else 0})
        time = [r["cycles"] * r["cycle_ns"] if r["cycle_ns"] else 0 for r in part_rows]
        total = sum(time)
        for r, t in zip(part_rows, time):
            r["time_share"] = t / total if total else None
        rows.extend(part_rows)
        phase_rows.extend(_phases(source, profiled, x.phases, g_kept))
    table = pl.DataFrame(rows, schema=ROW_SCHEMA, orient="row").sort(
        "profiled", "batch_lo", "steps", nulls_last=True, maintain_order=True)
    order = {s: i for i, (s, _, _) in enumerate(measured)}
    table = table.with_columns(o=pl.col("source").replace_strict(order, return_dtype=pl.Int64)).sort(
        "o", "batch_lo", "steps", nulls_last=True).drop("o")
    for batch in sorted(missing, key=lambda s: int(s.split("-")[0])):
        notes.append(f"the baseline has no plain decode step at batch {batch}: no speedup there (a step at "
                     "another batch size is not one at this)")
    out = BatchGroups(table, pl.DataFrame(phase_rows, schema=PHASE_SCHEMA, orient="row"), notes=notes, members=members)
    out.idle_ns, out.idle_gaps = idle_of(grouped(head.all, edges, steps).join(
        head.cycles.select("file"), on="file", how="semi"))
    if out.several:
        out.crossover, out.weighted_speedup = crossover(table.filter(pl.col("source") == measured[0][0]))
    return out


def _k(k) -> str:
    return "" if k is None else f" (K={k})"


def crossover(rows: pl.DataFrame) -> tuple[list[str], float | None]:
    """Sentences saying at which batch sizes speculation pays (by the speedup's interval), and the traffic-weighted
    mean speedup over the groups with a baseline; `rows`: one source's groups, by batch size."""
    words = {"wins": "pays", "loses": "loses", "wash": "neither pays nor loses"}
    runs: list[list[dict]] = []
    for r in rows.iter_rows(named=True):
        if r["outcome"] is None:
            continue
        if runs and runs[-1][-1]["outcome"] == r["outcome"]:
            runs[-1].append(r)
        else:
            runs.append([r])
    parts = []
    for run in runs:
        lo, hi = run[0]["batch_lo"], run[-1]["batch_hi"]
        where = f"batch {_label(lo, hi)}"
        ks = sorted({r["steps"] for r in run if r["steps"] is not None})
        kk = "" if not ks else " (K=" + ", ".join(map(str, ks)) + ")"
        s = [r["speedup"] for r in run]
        val = f"{min(s):.2f}x" if len(run) == 1 or min(s) == max(s) else f"{min(s):.2f}-{max(s):.2f}x"
        parts.append(f"{words[run[0]['outcome']]} at {where}{kk}: {val}")
    out = []
    if parts:
        out.append("per batch size, speculation " + "; ".join(parts))
    for a, b in zip(runs, runs[1:]):
        if {a[0]["outcome"], b[0]["outcome"]} == {"wins", "loses"}:
            out.append(f"crossover between batch {a[-1]['batch_hi']} and batch {b[0]['batch_lo']}: "
                       f"speculation {words[a[0]['outcome']]} below, {words[b[0]['outcome']]} above")
    with_base = rows.filter(pl.col("speedup").is_not_null() & pl.col("cycle_ns").is_not_null())
    weighted = None
    if with_base.height:
        num = (with_base["cycles"] * with_base["accept_len"] * with_base["baseline_ns"]).sum()
        den = (with_base["cycles"] * with_base["cycle_ns"]).sum()
        weighted = float(num / den) if den else None
    if weighted is not None:
        left = rows.height - with_base.height
        out.append(f"traffic-weighted mean speedup over the run's batch sizes (each weighted by the run's time at it"
                   f"): {weighted:.2f}x" + (f", {left} group(s) without a baseline left out" if left else ""))
    return out, weighted


POOLED = ("baseline_tokens_per_s", "speedup", "speedup_lo", "speedup_hi", "break_even_accept_len", "break_even_lo",
          "break_even_hi", "break_even_reachable", "outcome")


def economics_groups(e: econ.Economics, sidecars, twin, first: int | None, last: int | None, step,
                     steps: int | None, profiler: str = "nsys", thresholds: list[int] | None = None,
                     pooling: str | None = None) -> BatchGroups | None:
    """`batch_groups` of a run (its sidecars under the profiler, `twin` those without it or None) against the plain
    run of `step` (a BaselineStep; its sidecars, where it was measured from them), and, where the run spans several
    groups, the economics `e` made to say so: its verdict the crossover, its estimates' pooled speedup and
    break-even (a mean over unlike batch sizes) left out."""
    sources = []
    if twin is not None:
        sources.append((f"sidecar without {profiler}", False, twin, True, first, last))
    if sidecars is not None:  # None: a run without the profiler alone (its sidecars are `twin`)
        sources.append((f"sidecar under {profiler}", True, sidecars, False, first, last))
    plain = getattr(step, "sidecars", None) if step is not None else None
    g = batch_groups(sources, (plain, True) if plain is not None else None, steps, thresholds, pooling)
    if g is None or not g.several:
        return g
    if step is not None and plain is None:
        g.notes.append("the baseline step was not measured from a plain run's sidecars (--baseline-ms, or a trace): "
                       "it is one step time, not one per batch size; each group's speedup sets it against that")
    n = g.rows.filter(pl.col("source") == g.rows["source"][0]).height
    e.estimates = e.estimates.with_columns(
        *[pl.lit(None, dtype=e.estimates.schema[c]).alias(c) for c in POOLED],
        verdict=pl.lit(f"the run spans {n} batch-size and K groups: its pooled cycle is a mean over unlike batch "
                       "sizes; see the per-batch-size table"))
    e.verdict = list(g.crossover) + [v for v in e.verdict[1:] if not v.startswith(("beware", "with the cycle"))]
    e.notes = e.notes + g.notes  # the intervals note holds for the per-group intervals too
    g.notes = []
    if g.idle_ns:
        e.notes.append(f"idle: {g.idle_ns / 1e9:.3f} s in {g.idle_gaps} gaps with no running request (between "
                       "requests, between ramp levels), outside every cycle")
    return g
