"""Plain text for the terminal: the analysis (with its per-rank, cross-check and economics sections), several
traces side by side, the sweep, the comparison, the results store's run list, and the commands' one-line
messages. Names from traces are untrusted: printed sanitised (format.clean)."""

from __future__ import annotations

import os

import polars as pl

from specprof.analyzer.derived import views
from specprof.analyzer.derived.adaptive_config import AdaptiveConfig
from specprof.analyzer.derived.analysis import Analysis
from specprof.analyzer.derived.compare import Comparison
from specprof.analyzer.derived.crosscheck import FLOOR_NS, GT_FLOOR_NS, GT_TOLERANCE, TOLERANCE, CrossCheck
from specprof.analyzer.derived.economics import Economics
from specprof.analyzer.derived.whole_run import PARTS as WHOLE_RUN_PARTS
from specprof.analyzer.derived.ranks import Ranks
from specprof.analyzer.derived.sweep import UNITS, Sweep, contradicts, negative_fixed
from specprof.analyzer.model.labels import IDLE_CATEGORIES, IN_CYCLE, UNATTRIBUTED
from specprof.analyzer.render.format import bullets, clean, f_ms, f_ms_or_dash, f_num, f_us, f_x, pct, table
from specprof.analyzer.render.names import distinct


def header(a: Analysis) -> str:
    meta = a.trace.meta
    gpus = ", ".join(f"{g['device']}: {g['name'] or 'GPU'}" for g in meta.gpus) or "none"
    tot = a.totals
    cap = views.capture(a.ops, a.streams)
    per_stream = "; ".join(
        f"device {r['device']} stream {r['stream']} ({r['role']}) {f_ms(r['busy'])}"
        + (f", {f_ms(r['overlapped'])} of it while the cycle stream was busy" if r["role"] == "side" else "")
        for r in cap["streams"])
    lines = [
        f"specprof analysis of {clean(meta.path)}",
        f"  format {meta.format}, {clean(meta.tool_version or 'unknown version')}; GPUs {clean(gpus)}",
        f"  {a.ops.height:,} GPU ops on {a.streams.height} stream(s), {a.ranges.height:,} ranges, "
        f"{a.cycles.height:,} cycles; capture wall time {f_ms(cap['wall'])} ms (first GPU op to last)",
        f"  GPU busy ms per stream: {per_stream}",
        f"  unattributed: {tot['unattributed_ops']:,} ops, {f_ms(tot['unattributed_ns'])} ms of GPU op time",
        "  time 0: the capture's start (its first event: a GPU op, API call, range or mark); start ms, --time-window and the "
        "report's timeline count from it",
    ]
    shape = a.draft_shape.description
    if shape:  # the draft's shape, chain or tree, beside what the capture holds
        lines.insert(3, f"  draft: {clean(shape)}")
    scope = _scope(a)
    if scope:
        lines.append(f"  per-phase and per-cycle tables: {scope}")
    if tot["gpu_busy"] and a.cycles.height:
        # GPU work that no phase launched: outside every range, or in a cycle but between its phases.
        lines.append(f"  GPU busy time outside every phase: {f_ms(tot['outside_busy'])} ms of "
                     f"{f_ms(tot['gpu_busy'])} ms ({pct(tot['outside_share'])}; {UNATTRIBUTED}: launched between "
                     f"cycles, {IN_CYCLE}: in a cycle between its phases)")
    return "\n".join(lines)


def _all_ranks(a: Analysis) -> str:
    """The label of a table over every rank (launches and kernels are counted over all of them)."""
    return f", summed over all {a.ranks.count} ranks" if a.ranks is not None and a.ranks.count > 1 else ""


def _scope(a: Analysis) -> str | None:
    """Which rank and stream the per-phase tables are of, when it is not obvious (several ranks or streams)."""
    b = a.cycle_breakdown
    several = a.ranks is not None and a.ranks.count > 1
    if b is None or (not several and a.streams.height < 2):
        return None
    who = f"rank {b.rank} ({b.why}), " if several else ""
    return (f"{who}on its cycle stream (device {b.device} stream {b.stream}); side streams' work is their busy "
            "time above, never their idle time")


def _shown_phases(a: Analysis, limit: int) -> pl.DataFrame:
    """The `limit` phases with the most attributed time, plus the pseudo-phases, in table order (their views)."""
    return views.shown_phases(a.phase_rows, limit)


def _more(a: Analysis, shown: pl.DataFrame) -> str:
    hidden = a.phases.height - shown.height
    return f"\n({hidden:,} more phases with less time: --phases N shows more, --json shows all)" if hidden else ""


def phases(a: Analysis, limit: int = 20) -> str:
    side = bool(a.totals["side_busy"])
    rows = []
    shown = _shown_phases(a, limit)
    for r in shown.iter_rows(named=True):
        top = ", ".join(f"{c['category']} {pct(c['share'])}" for c in (r["top_busy"] or []))
        inst = r["instances"] or 0
        rows.append([
            r["phase"], f"{inst:,}" if inst else "-", f"{r['ops']:,}", f_ms(r["cpu"]), f_ms(r["gpu_span"]),
            f_ms(r["gpu_busy"]), f_ms(r["attributed"]), f_ms_or_dash(r["per_instance"]), pct(r["share"]),
            pct(r["idle_share"]), *([f_ms(r["side_busy"])] if side else []), top,
        ])
        rows[-1][0] = clean(rows[-1][0], 48)
    t = table(["phase", "inst", "ops", "cpu ms", "gpu span ms", "gpu busy ms", "attributed ms",
               "per inst ms", "share", "idle", *(["side busy ms"] if side else []), "top busy categories"], rows,
              "lrrrrrrrrr" + ("r" if side else "") + "l")
    note = ("; side busy: the phase's work on side streams, not in its attributed time" if side else "")
    return ("Phases (totals over instances; attributed: the phase's time on the cycle stream, busy and idle; share: of "
            f"that stream's time{note})\n" + t + _more(a, shown))


def categories(a: Analysis, limit: int = 20) -> str:
    order = views.category_order(a.categories)
    wide = views.category_pivot(a.categories, _shown_phases(a, limit)["phase"].to_list(), order)
    rows = [[clean(r["phase"], 48)] + [f_ms(r[c]) for c in order] + [f_ms(r["total"])]
            for r in wide.iter_rows(named=True)]
    t = table(["phase"] + order + ["total"], rows)
    return ("Attributed ms by category on the cycle stream (cpu_wait: GPU idle waiting for the CPU; launch: idle "
            "after the launch call)\n" + t)


def cycles(a: Analysis, limit: int = 10) -> str:
    if a.cycles.is_empty():
        return "Cycles: no `cycle` ranges in this trace."
    data = views.cycle_table(a.cycles, a.cycle_phases, a.phases["phase"].to_list(), idle=views.idle_cycles(a))
    phase_cols = [c for c in data.columns if c not in ("cycle", "index", "pid", "start", "end", "total")]
    origin = a.trace.meta.start_ns
    rows = [[str(r["index"]), f_ms(r["start"] - origin, 3)] + [f_ms(r[p]) for p in phase_cols] + [f_ms(r["total"])]
            for r in data.head(limit).iter_rows(named=True)]
    keep = views.shown_cycles(a)
    st = views.cycle_stats(data, keep, phase_cols + ["total"])
    stats = [[label, ""] + [f_ms(st[c][label]) for c in phase_cols + ["total"]] for label in ("mean", "p50", "p90", "max")]
    t = table(["cycle", "start ms"] + phase_cols + ["total"], rows + [["", ""] + [""] * (len(phase_cols) + 1)] + stats)
    shown = data.head(limit).height
    over = (f"; statistics over the {keep.height:,} decode cycles of the breakdown" if keep is not None else "")
    return (f"Per cycle: attributed ms per phase on the cycle stream, total: the cycle's length there (first {shown} "
            f"of {data.height:,} cycles; --show-cycles N shows more; start ms from the capture's start{over})\n" + t)


def launch(a: Analysis, limit: int = 20) -> str:
    rows = [[r["phase"], f"{r['launches']:,}", pct(r["queued_share"]), f_ms(r["api_ns"]),
             f_us(r["latency_p50"]), f_us(r["latency_p90"]), f_us(r["latency_max"]),
             f_us(r["idle_latency_p50"]), f_us(r["idle_latency_p90"])]
            for r in views.launch(a.launch).head(limit).iter_rows(named=True)]
    for row in rows:
        row[0] = clean(row[0], 48)
    return (f"Launch overhead{_all_ranks(a)} (api cpu: time inside launch calls; latency: first op start - launch call start, "
            "queueing included;\n idle latency: the part after the stream drained; queued: launched while the "
            "stream was still busy)\n"
            + table(["phase", "launches", "queued", "api cpu ms", "latency p50 us", "p90 us", "max us",
                     "idle latency p50 us", "p90 us"], rows))


def streams(a: Analysis) -> str:
    rows = [[str(r["device"]), str(r["stream"]), r["role"], f"{r['ops']:,}", f_ms(r["wall"]), f_ms(r["busy"]),
             f_ms(r["cpu_wait"]), f_ms(r["launch"]), f_ms(r["idle"]), pct(r["busy_share"]),
             "-" if r["role"] == "cycle" else f_ms(r["overlapped"])]
            for r in views.streams(a.streams).iter_rows(named=True)]
    return ("GPU streams (each stream tiled on its own: its own wall time; cycle: the stream a rank's phases run on; "
            "side: busy time is its work, overlapped: the part while the cycle stream was busy)\n"
            + table(["device", "stream", "role", "ops", "wall ms", "busy ms", "cpu_wait ms", "launch ms", "idle ms",
                     "busy %", "overlapped ms"], rows, "rrlrrrrrrrr"))


def kernels(a: Analysis, limit: int = 20) -> str:
    shown = _shown_phases(a, limit).select("phase")
    rows = [[clean(r["phase"], 48), clean(r["short_name"], 60), r["category"], f"{r['count']:,}", f_ms(r["ns"])]
            for r in views.kernels_of(a.kernels, shown).iter_rows(named=True)]
    return f"Top kernels per phase{_all_ranks(a)}\n" + table(["phase", "kernel", "category", "count", "gpu ms"], rows, "lllrr")


def unattributed(a: Analysis) -> str:
    if a.unattributed.is_empty():
        return "Unattributed: none (every op was launched inside a range)."
    why = {"no_launch_record": "launch not in the capture (the export starts after it)",
           "no_enclosing_range": "launched outside every range"}
    rows = [[why.get(r["reason"], r["reason"]), f"{r['ops']:,}", f_ms(r["ns"])]
            for r in a.unattributed.iter_rows(named=True)]
    return (f"Unattributed ops (phase {UNATTRIBUTED}; ops in a cycle outside any phase are {IN_CYCLE})\n"
            + table(["reason", "ops", "gpu op ms"], rows, "lrr"))


def ranks(m: Ranks | None, phase_limit: int = 20) -> str | None:
    """The Ranks section (None with fewer than two ranks: the rest of the output is that one rank)."""
    if m is None or m.count < 2:
        return None
    v = views.ranks_view(m.ranks, m.comm_kinds, m.collectives)
    rows = [[str(r["rank"]), str(r["os_pid"]), str(r["device"]), f"{r['ops']:,}", f_ms(r["wall"]), f_ms(r["busy"]),
             pct(r["busy_share"]), f_ms(r["comm"]), f_ms(r["wait"]), f_ms(r["transfer"]), f_ms(r["unmatched"])]
            for r in v["ranks"].iter_rows(named=True)]
    source = m.ranks["source"][0]
    out = [f"Ranks: {m.count} (process, device) pairs, numbered by {source} (docs/multirank.md)",
           table(["rank", "pid", "device", "ops", "wall ms", "busy ms", "busy", "comm ms", "wait ms",
                  "transfer ms", "unmatched ms"], rows),
           "  comm = wait (the rank's collective kernel ran before the last rank's started) + transfer (the rest)"
           " + unmatched"]
    sk = m.skew.head(phase_limit)
    rows = [[clean(r["phase"], 48), str(r["ranks"]), f_ms(r["min"]), f_ms(r["max"]), f_ms(r["skew"]),
             f"{r['skew_pct']:.1f}%", str(r["min_rank"]), str(r["max_rank"])] for r in sk.iter_rows(named=True)]
    out += ["", "Skew across ranks (attributed ms per phase; a rank without the phase counts 0)",
            table(["phase", "ranks", "min ms", "max ms", "skew ms", "skew", "min rank", "max rank"], rows, "lrrrrrrr")]
    if m.skew.height > sk.height:
        out.append(f"({m.skew.height - sk.height:,} more phases: --phases N shows more, --json shows all)")
    if m.comm_kinds.height:
        rows = [[str(r["rank"]), clean(r["kind"], 24), f_ms(r["comm"]), f_ms(r["wait"]), f_ms(r["transfer"]),
                 pct(r["wait_share"]), f_ms(r["unmatched"])] for r in v["comm_kinds"].iter_rows(named=True)]
        out += ["", "Communication per rank and kind",
                table(["rank", "kind", "comm ms", "wait ms", "transfer ms", "wait", "unmatched ms"], rows,
                      "llrrrrr")]
    if m.collectives.height:
        rows = [[clean(r["name"], 60), clean(r["kind"], 24), f"{r['instances']:,}", f"{r['unmatched']:,}",
                 f_ms(r["ns"]), f_ms(r["wait"]), f_ms(r["transfer"]), pct(r["wait_share"]),
                 "-" if r["overlap_pct"] is None else f"{r['overlap_pct']:.0f}%"]
                for r in v["collectives"].iter_rows(named=True)]
        out += ["", "Collectives (k-th kernel of a name on each rank matched; ms summed over ranks)",
                table(["kernel", "kind", "instances", "unmatched", "ms", "wait ms", "transfer ms", "wait",
                       "overlap"], rows, "llrrrrrrr")]
        rows = [[str(r["rank"]), f"{r['last']:,}", "-" if r["share"] is None else f"{100 * r['share']:.0f}%",
                 f_us(r["margin_mean"]), f_us(r["margin_max"]), f_ms(r["caused"])]
                for r in m.stragglers.iter_rows(named=True)]
        out += ["", "Stragglers (arrived last at a matched collective; margin: later than the next-latest rank)",
                table(["rank", "last", "share", "margin mean us", "max us", "others' wait ms"], rows)]
        top = m.straggler()
        if top is not None:
            n = v["instances"]
            out.append(f"  straggler: rank {top['rank']}, last at {top['last']:,} of {n:,}"
                       f" collectives, by {f_us(top['margin_mean'])} us on average; the other ranks waited "
                       f"{f_ms(top['caused'])} ms for it")
            worst = views.most_waited_for(m.stragglers)
            if worst is not None and worst["rank"] != top["rank"] and worst["caused"] > top["caused"]:
                out.append(f"  but rank {worst['rank']} made the others wait longest: {f_ms(worst['caused'])} ms "
                           f"({worst['last']:,} times last, by {f_us(worst['margin_mean'])} us on average)")
    else:
        out += ["", "Collectives: no communication kernels in this capture (nothing to split into wait and transfer)."]
    if m.notes:
        out += [""] + [f"- {clean(n)}" for n in m.notes]
    return "\n".join(out)


def crosscheck(c: CrossCheck) -> str:
    parts = []
    head = [f"Cross-check: the trace's CPU ranges ({c.profiler}) against the tracer's sidecar (same run, same "
            "instances)"]
    for r in c.alignment.iter_rows(named=True):
        if r["method"] == "none":
            head.append(f"  {clean(r['path'])}: not aligned")
            continue
        how = ("clock-sync marks" if r["method"] == "clock_sync marks" else
               "the sequence of cycle durations (no clock-sync mark inside the capture)")
        lag = f"; nsys stamped the marks {f_us(r['mark_lag_ns'])} us after their readings" \
            if r["mark_lag_ns"] is not None else ""
        head.append(
            f"  {clean(r['path'])}: clocks aligned by {how}{lag}; {r['matched_cycles']:,} of "
            f"{r['sidecar_cycles']:,} sidecar cycles are in the capture (indices {r['first_index']}.."
            f"{r['last_index']}); cycle starts agree to {f_us(r['residual_p50_ns'])} us (p50), "
            f"{f_us(r['residual_max_ns'])} us (max)")
    rows = [[clean(r["phase"], 32), f"{r['instances']:,}", f_ms_or_dash(r["nsys_ns"]), f_ms_or_dash(r["sidecar_ns"]),
             f_us(r["diff_ns"]), "-" if r["diff_pct"] is None else f"{r['diff_pct']:+.2f}%",
             f_us(r["abs_diff_p90_ns"]), f_us(r["tolerance_ns"]), r["verdict"]]
            for r in c.consistency.iter_rows(named=True)]
    if rows:
        head.append(f"  verdict: consistent when the means differ by at most {TOLERANCE:.0%} or "
                    f"{FLOOR_NS / 1e3:.0f} us (the NVTX push/pop around the tracer's stamps)")
        parts.append("\n".join(head) + "\n" + table(
            ["phase", "inst", "trace ms", "sidecar ms", "diff us", "diff", "|diff| p90 us", "tolerance us",
             "verdict"], rows, "lrrrrrrrl"))
    else:
        parts.append("\n".join(head) + "\n  no instance could be paired: nothing to compare (see the notes)")
    if c.inflation is not None and c.inflation.height:
        rows = []
        for r in views.inflation_rows(c.inflation).iter_rows(named=True):
            verdict = r["verdict"]
            if verdict in ("inflated", "shorter", "within noise", "noise"):
                verdict += f" {r['inflation_pct']:+.0f}%"
            if verdict.startswith("noise"):
                verdict += " (faster under the profiler: run-to-run)"
            rows.append([r["measure"], clean(r["phase"], 32), f_ms_or_dash(r["with_ns"]), f_ms_or_dash(r["without_ns"]),
                         f_x(r["ratio"]), f"{r['ratio_lo']:.2f}..{r['ratio_hi']:.2f}", verdict])
        base = ", ".join(clean(p) for p in c.baseline)
        parts.append(
            f"Profiler inflation: this run under {c.profiler} against the same workload without it ({base})\n"
            "  mean ms per cycle; cpu: the phase call's host wall clock (sidecar); gpu: CUDA events around the "
            "phase (the tracer's --gpu-events, or the reference engine's ground truth);\n  cycle: the cycle call; "
            "period: cycle start to next cycle start (what throughput sees)\n"
            + table(["measure", "phase", f"with {c.profiler}", "without", "ratio", "95% CI", "verdict"], rows,
                "llrrrrl"))
    if c.ground_truth is not None and c.ground_truth.height:
        rows = [[clean(r["phase"], 32), f"{r['instances']:,}", str(r["stream"]), f_ms_or_dash(r["attributed_ns"]),
                 f_ms_or_dash(r["events_ns"]), f_us(r["diff_ns"]),
                 "-" if r["diff_pct"] is None else f"{r['diff_pct']:+.2f}%", f_us(r["abs_diff_max_ns"]),
                 f_us(r["tolerance_ns"]), r["verdict"]]
                for r in c.ground_truth.iter_rows(named=True)]
        parts.append(
            "Ground truth: attributed time per phase instance against CUDA events recorded in-stream at the phase's "
            "boundaries (same run)\n  on the stream the phase ran on (the events'); within when the means differ "
            f"by at most {GT_TOLERANCE:.0%} or {GT_FLOOR_NS / 1e6:.1f} ms\n"
            + table(["phase", "inst", "stream", "attributed ms", "events ms", "diff us", "diff", "|diff| max us",
                     "tolerance us", "verdict"], rows, "lrrrrrrrrl"))
    if c.accept is not None:
        parts.append(accept_check(c.accept))
    if c.notes:
        parts.append("Cross-check notes\n" + bullets(c.notes))
    return "\n\n".join(parts)


def accept_check(a) -> str:
    """The cross-check's accept length against the server log (crosscheck.py `AcceptCheck`)."""
    return (f"Accept length cross-check over the whole run: sidecar {a.sidecar_pooled:.3f} vs server log "
            f"{a.log_accept_len:.3f} (gap {a.gap:+.3f}): {a.verdict}\n"
            "  (the sidecar's accept counts against SGLang's log; the economics' "
            "accept length, below, is over the cycles they compare)\n" + bullets(a.explanations))


def _ci(lo, hi, digits: int) -> str:
    return "" if lo is None or hi is None else f" ({lo:.{digits}f}-{hi:.{digits}f})"


def economics(e: Economics) -> str:
    rows = [[clean(r["source"]), f"{r['cycles']:,}", f_ms_or_dash(r["cycle_ns"]), f_num(r["accept_len"]),
             f_num(r["tokens_per_s"], 0), f_ms_or_dash(r["baseline_ns"]), f_x(r["speedup"]) + _ci(r["speedup_lo"], r["speedup_hi"], 2),
             f_num(r["break_even_accept_len"]) + _ci(r["break_even_lo"], r["break_even_hi"], 3),
             "-" if r["draft_steps"] is None else str(r["draft_steps"]),
             "-" if r["break_even_reachable"] is None else ("yes" if r["break_even_reachable"] else "no")]
            for r in e.estimates.iter_rows(named=True)]
    g = e.groups
    head = ""
    if g is not None and g.several:
        head = batch_groups(g) + "\n\n"
    base = f"baseline step {f_ms_or_dash(e.baseline_ns)} ms ({clean(e.baseline_source)})" if e.baseline_ns else \
        "no baseline step time (give --baseline-ms MS or --baseline RUN)"
    text = head + ("Economics: does speculation pay? (accept length includes the bonus token; " + base + ")\n"
            + table(["cycle measured by", "cycles", "cycle ms", "accept len", "tokens/s", "baseline ms",
                     "speedup (95% CI)", "break-even accept len", "K", "break-even <= K+1"], rows, "lrrrrrrrrl"))
    if e.verdict:
        text += "\n" + bullets(e.verdict)
    if e.notes:
        text += "\n" + bullets(e.notes)
    return text


def acceptance(acc) -> str:
    """Per-position acceptance (derived/acceptance.py)."""
    rows = [[str(r["position"]), f"{r['reached']:,}", f"{r['accepted']:,}",
             pct(r["at_least"]) + _ci(_pc(r["at_least_lo"]), _pc(r["at_least_hi"]), 1),
             ("-" if r["rate"] is None else pct(r["rate"])) + _ci(_pc(r["rate_lo"]), _pc(r["rate_hi"]), 1)]
            for r in acc.positions.iter_rows(named=True)]
    where = "" if acc.group is None else f"{acc.group}: "
    return (f"Acceptance per draft position ({where}{acc.rounds:,} request-rounds, K={acc.steps}; the cycles the accept "
            f"length is measured over): 1 + the sum of P(at least i accepted) = {acc.accept_len:.3f}, the accept "
            "length\n" + table(["position", "reached", "accepted", "P(at least i accepted) (95% CI)",
                                 "rate given 1..i-1 accepted (95% CI)"], rows, "rrrrr"))


def _pc(x):
    return None if x is None else 100 * x


def levers(lv) -> str:
    """What each lever would give (derived/levers.py), largest gain first."""
    rows = [[clean(r["lever"], 60), f_ms_or_dash(r["cycle_ns"]), f_num(r["accept_len"]),
             ("-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:,.0f}")
             + _ci(r["tokens_per_s_lo"], r["tokens_per_s_hi"], 0),
             ("-" if r["speedup"] is None else f_x(r["speedup"])) + _ci(r["speedup_lo"], r["speedup_hi"], 2),
             "needs a sweep" if r["kind"] == "steps" else ("-" if r["gain"] is None else f"{100 * r['gain']:+.1f}%")]
            for r in lv.rows.iter_rows(named=True)]
    now = (f"now cycle {f_ms(lv.cycle_ns)} ms, accept length {lv.accept_len:.3f}"
           + ("" if lv.speedup is None else f", speedup {f_x(lv.speedup)}"))
    where = "" if lv.group is None else f"{lv.group}, "
    return (f"Levers: what each change would give, largest gain first ({where}from the cycle measured by the {lv.source}; "
            f"{now}; phases' {lv.basis}; docs/economics.md, \"Levers\")\n"
            + table(["lever", "cycle ms", "accept len", "tokens/s (95% CI)", "speedup (95% CI)", "gain"], rows,
                    "lrrrrr")
            + "\n" + bullets(["each row changes one thing and holds the rest: a phase's saving holds its share of "
                               "the cycle and the accept length; an acceptance lever holds the cycle; the intervals "
                               "carry the measured cycle's, accept length's and plain step's"]))


def whole_run(w) -> str:
    rows = [[side, clean(r.path), f"{r.requests:,}", f"{r.tokens:,}", f_ms_or_dash(r.wall_ns), f_num(r.tokens_per_s, 0)]
            + ([f_ms_or_dash(r.split.parts[p]) for p in WHOLE_RUN_PARTS] if r.split is not None
               else ["-"] * len(WHOLE_RUN_PARTS))
            for side, runs in (("run", w.runs), ("baseline", w.baseline)) for r in runs]
    text = ("Whole run as the client saw it (client.json: output tokens over the client's wall clock for the whole "
            "workload; its parts measured by the sidecar; docs/economics.md)\n"
            + table(["side", "client records", "requests", "tokens", "wall ms", "tokens/s"]
                    + [f"{p} ms" for p in WHOLE_RUN_PARTS], rows, "llrrrr" + "r" * len(WHOLE_RUN_PARTS)))
    return text + ("\n" + bullets(w.lines) if w.lines else "")


def batch_groups(g) -> str:
    """The economics per batch size and K (derived/groups.py BatchGroups): the headline where a run has several."""
    rows = [[clean(r["source"]), clean(r["batch_group"]) + ("" if r["exact"] else " (bucket)"),
             "-" if r["steps"] is None else str(r["steps"]), f"{r['cycles']:,}",
             f_ms_or_dash(r["cycle_ns"]) + _ci_ms(r["cycle_lo_ns"], r["cycle_hi_ns"]),
             f_num(r["accept_len"]) + _ci(r["accept_len_lo"], r["accept_len_hi"], 2),
             f_num(r["tokens_per_s"], 0) + _ci(r["tokens_per_s_lo"], r["tokens_per_s_hi"], 0),
             f_ms_or_dash(r["baseline_ns"]) if r["baseline_steps"] else "none at this size",
             f_x(r["speedup"]) + _ci(r["speedup_lo"], r["speedup_hi"], 2),
             f_num(r["break_even_accept_len"]) + _ci(r["break_even_lo"], r["break_even_hi"], 2),
             "-" if r["time_share"] is None else f"{100 * r['time_share']:.0f}%"]
            for r in g.rows.iter_rows(named=True)]
    text = ("Economics per batch size and K (cycles grouped by the batch they ran and the draft steps K their verify "
            "checked; the baseline is the plain run's step at the same batch sizes; 95% intervals)\n"
            + table(["cycle measured by", "batch", "K", "cycles", "cycle ms", "accept len", "tokens/s",
                     "plain step ms", "speedup", "break-even accept len", "time"], rows, "llrrrrrrrrr"))
    return text  # the crossover in words is the economics' verdict, below


def _ci_ms(lo, hi) -> str:
    return "" if lo is None or hi is None else f" ({f_ms_or_dash(lo)}-{f_ms_or_dash(hi)})"


def sync_timers(t) -> str:
    rows = [[clean(r["phase"], 32), f"{r['instances']:,}", f_ms_or_dash(r["events_ns"]), f_ms_or_dash(r["timer_ns"]),
             "-" if r["inflation_pct"] is None else f"{r['inflation_pct']:+.1f}%"] for r in t.phases.iter_rows(named=True)]
    text = ("Synchronize timers: what torch.cuda.synchronize() before and after every phase would add (estimated "
            f"from this capture's timeline, {t.cycles:,} cycles; docs/economics.md)\n"
            f"  cycle {f_ms_or_dash(t.cycle_ns)} ms -> {f_ms_or_dash(t.synced_cycle_ns)} ms with the timers "
            f"({t.cycle_inflation_pct:+.1f}%, {t.syncs_per_cycle:g} synchronize calls per cycle, one's own cost "
            f"{t.sync_ns / 1e3:.1f} us; at most {f_ms_or_dash(t.bound_ns)} ms: the host's period + the GPU's work, "
            "nothing overlapped); per phase, its GPU time as in-stream events read it against what the timer would "
            "read\n"
            + table(["phase", "inst", "events ms", "timer ms", "timer reads"], rows, "lrrrr"))
    if t.notes:
        text += "\n" + bullets(t.notes)
    return text


def sync_calls(c) -> str:
    rows = [["(no phase)" if r["phase"] is None else clean(r["phase"], 32), clean(r["call"], 32), f"{r['calls']:,}",
             f_ms_or_dash(r["total_ns"]), f_ms_or_dash(r["mean_ns"]), f"{r['own_ns'] / 1e3:.1f}"]
            for r in c.phases.iter_rows(named=True)]
    own = "-" if c.own_ns is None else f"{c.own_ns / 1e3:.1f} us"
    text = (f"Synchronize calls in the capture: {c.calls:,}, {f_ms_or_dash(c.total_ns)} ms in all; one call's own "
            f"cost {own} (from when the GPU was done to the call's return; docs/economics.md)\n"
            + table(["phase", "call", "calls", "total ms", "mean ms", "own us"], rows, "llrrrr"))
    if c.warning:
        text += "\n" + bullets(["warning: " + c.warning])
    return text


def cycle_breakdown(a: Analysis) -> str | None:
    b = a.cycle_breakdown
    if b is None:
        return None
    bs = a.breakdown_summary
    unprof = bs["unprofiled"]
    rows = []
    for r in b.phases.iter_rows(named=True):
        row = [clean(r["phase"], 32), f_ms(r["ns_per_cycle"]), f"{100 * (r['share'] or 0):.1f}%",
               f_ms(r["busy_ns_per_cycle"]), "-" if r["busy_share"] is None else f"{100 * r['busy_share']:.1f}%"]
        if unprof:
            u = r["unprofiled_ns_per_cycle"]
            row += ["-" if u is None else f_ms(u), "-" if r["ratio"] is None else f_x(r["ratio"]),
                    "-" if r["unprofiled_share"] is None else f"{100 * r['unprofiled_share']:.1f}%"]
        rows.append(row)
    last = ["cycle", f_ms(b.mean_ns), "100.0%", f_ms(bs["busy_ns_per_cycle"]), pct(bs["busy_share"])]
    heads, align = ["phase", "ms/cycle", "share", "GPU busy ms", "GPU busy"], "lrrrr"
    if unprof:
        rows.append(["(not timed by events)", "-", "-", "-", "-", f_ms(bs["untimed_ns"]), "-",
                     pct(bs["untimed_share"])])
        last += [f_ms(b.unprofiled_mean_ns), f_x(bs["ratio"]), "100.0%"]
        heads += ["without nsys ms", "ratio", "share without"]
        align += "rrr"
    rows.append(last)
    m = a.ranks
    several = m is not None and m.count > 1
    who = f"rank {b.rank} ({b.why}): " if several else ""
    text = (f"Where a decode cycle goes ({who}{b.cycles:,} cycles on device {b.device} stream {b.stream}, the stream "
            f"its phases run on):\n  cycle {f_ms(b.mean_ns)} ms mean, {f_ms(b.median_ns)} median, "
            f"{f_ms(b.p90_ns)} p90; each phase's time per cycle and its share add up to the cycle; GPU busy: the "
            "part of it the GPU ran the phase's ops")
    if b.idle_ns:
        text += (f"\n  idle: {f_ms(b.idle_ns)} ms after {b.idle_gaps:,} cycles while no request ran (between requests, "
                 "between load levels): in no cycle, phase or share")
    if unprof:
        text += ("\n  without nsys: the same phases between their CUDA events in the run without the profiler "
                 "(its period, start to start); the shares to act on are those without nsys")
    text += "\n" + table(heads, rows, align)
    if several:
        text += "\n" + _rank_lines(a)
    return text


def _rank_lines(a: Analysis) -> str:
    """One line per rank after the headline: its cycle, and its collectives' wait against transfer."""
    m = a.ranks
    lines = []
    split = {r["rank"]: r for r in m.ranks.iter_rows(named=True)}
    for b in m.breakdowns:
        r = split.get(b.rank, {})
        top = views.real_phases(b.phases, 2)
        phases = ", ".join(f"{clean(p, 24)} {f_ms(n)}" for p, n in top.select("phase", "ns_per_cycle").rows())
        comm = (f"; collectives {f_ms(r['comm'])} ms: wait {f_ms(r['wait'])}, transfer {f_ms(r['transfer'])}"
                if r.get("comm") else "")
        lines.append(f"  rank {b.rank} (device {b.device} stream {b.stream}): cycle {f_ms(b.mean_ns)} ms mean over "
                     f"{b.cycles:,} cycles ({phases}){comm}")
    sk = views.real_phases(m.skew, 1)
    if sk.height:
        r = sk.row(0, named=True)
        lines.append(f"  skew: {clean(r['phase'], 24)} differs by {f_ms(r['skew'])} ms ({r['skew_pct']:.1f}%) "
                     "across ranks (the Ranks section has every phase)")
    if a.trace.meta.format == "nsys-sqlite":
        lines.append("  skew and wait were measured under nsys, which slows each rank's host differently")
    return "\n".join(lines)


# The words the summary and the tables use, one short key each (printed under the summary).
LEGEND = (
    "key: cycle period = one decode cycle, start to next start (what tokens/s sees); sidecar = the tracer's record "
    "of each cycle;",
    "  twin = the same workload run without nsys (RUN/no-nsys); cpu_wait = GPU idle waiting for the host; launch = "
    "GPU idle after a launch call;",
    "  break-even = the accept length at which speculation ties plain decoding (a cycle accepts at most K+1)")


def _answer_lines(ans: dict) -> list[str]:
    c, p, t = ans["cycle"], ans["pays"], ans["trust"]
    lines = []
    if c is not None and c["phases"]:
        phases = ", ".join(f"{clean(r['phase'], 24)} {pct(r['share'], 0)} ({f_ms(r['ns'])} ms)" for r in c["phases"])
        untimed = (f", not timed by events {pct(c['untimed_share'], 0)}"
                   if c["untimed_share"] is not None and c["untimed_share"] >= 0.05 else "")
        lines.append(f"  where a cycle goes ({c['basis']}): cycle period {f_ms(c['period_ns'])} ms; {phases}{untimed}")
    if p["speedup"] is not None:
        word = {"wins": "pays", "loses": "does not pay", "wash": "a wash"}.get(p["outcome"], "?")
        lines.append(f"  does speculation pay: {word}, {f_x(p['speedup'])}{_ci(p['speedup_lo'], p['speedup_hi'], 2)} "
                     f"against plain decoding (accept length {f_num(p['accept_len'])}, cycle period "
                     f"{f_ms_or_dash(p['cycle_ns'])} ms, plain step {f_ms_or_dash(p['baseline_ns'])} ms; "
                     f"{clean(p['source'])})")
    else:
        lines.append(f"  does speculation pay: not known ({p['why']})")
    trust = []
    if t["ground_truth_pct"] is not None:
        trust.append(f"attributed GPU time within {t['ground_truth_pct']:.1f}% of in-stream CUDA events"
                     + ("" if t["ground_truth_within"] else " (some phases outside tolerance)"))
    if t["period_ratio"] is not None:
        trust.append(f"nsys stretched the cycle period {f_x(t['period_ratio'])}"
                     + _ci(t["period_ratio_lo"], t["period_ratio_hi"], 2))
    lines.append("  how far to trust it: " + ("; ".join(trust) if trust else "no in-stream events or run without "
                                                                               "nsys to check against"))
    lines.append(f"  next: {clean(ans['next'])}")
    return lines


def summary(a: Analysis) -> str | None:
    """The answer first: at most 10 lines (derived/answer.py), then the one-line key to the words used."""
    if a.answer is None:
        return None
    path = a.data.path or (a.trace.meta.path if a.traced else "")
    return "\n".join([f"Summary of {clean(path)}", *_answer_lines(a.answer),
                      *("  " + line for line in LEGEND)])


def sidecar_header(a: Analysis) -> str:
    """The header of a run without nsys: its sidecars, its cycles, its draft."""
    d = a.data
    lines = [f"specprof analysis of {clean(d.path or '')}",
             f"  a run without nsys: {d.sidecars.files.height} sidecar(s), {d.sidecars.cycles.height:,} cycles, no "
             "trace" + ("; its phases timed by in-stream CUDA events" if a.cycle_breakdown is not None else
                        "; no CUDA events (capture with --gpu-events to time its phases)")]
    if a.draft_shape.description:
        lines.append(f"  draft: {clean(a.draft_shape.description)}")
    return "\n".join(lines)


def events_breakdown(a: Analysis) -> str | None:
    """Where a decode cycle goes in a run without nsys: each phase between its CUDA events, and the period."""
    b, bs = a.cycle_breakdown, a.breakdown_summary
    if b is None:
        return None
    rows = [[clean(r["phase"], 32), f_ms_or_dash(r["unprofiled_ns_per_cycle"]),
             "-" if r["unprofiled_share"] is None else f"{100 * r['unprofiled_share']:.1f}%"]
            for r in b.phases.iter_rows(named=True)]
    rows.append(["(not timed by events)", f_ms_or_dash(bs["untimed_ns"]), pct(bs["untimed_share"])])
    rows.append(["period", f_ms_or_dash(b.unprofiled_mean_ns), "100.0%"])
    return (f"Where a decode cycle goes (without nsys: {b.cycles:,} cycles with CUDA events):\n"
            "  each phase's GPU time between its CUDA events, per cycle, and its share of the period (cycle start to "
            "next start); the numbers an nsys capture of this workload shows as its column without nsys\n"
            + table(["phase", "ms/cycle", "share of period"], rows, "lrr"))


def render_sidecars(a: Analysis, brief: bool = False) -> str:
    """A run without nsys: what its sidecars show, and once, in one line, what needs a capture under nsys."""
    first = summary(a)
    if brief:
        return (first or sidecar_header(a)) + "\n"
    parts = ([first] if first else []) + [sidecar_header(a)]
    breakdown = events_breakdown(a)
    if breakdown:
        parts.append(breakdown)
    if a.crosscheck is not None and a.crosscheck.accept is not None:
        parts.append(accept_check(a.crosscheck.accept))
    if a.economics is not None:
        parts.append(economics(a.economics))
    parts.append(f"Needs nsys: {a.needs_nsys}")
    notes = a.notes + (a.crosscheck.notes if a.crosscheck is not None else [])
    if notes:
        parts.append("Notes\n" + "\n".join(f"- {clean(n)}" for n in notes))
    return "\n\n".join(parts) + "\n"


def render(a: Analysis, cycle_limit: int = 10, phase_limit: int = 20, brief: bool = False) -> str:
    if not a.traced:
        return render_sidecars(a, brief)
    first = summary(a)
    if brief:
        return (first or header(a)) + "\n"
    parts = ([first] if first else []) + [header(a)]
    breakdown = cycle_breakdown(a)
    if breakdown:
        parts.append(breakdown)
    parts += [phases(a, phase_limit), categories(a, phase_limit), cycles(a, cycle_limit),
             launch(a, phase_limit), streams(a), unattributed(a), kernels(a, phase_limit)]
    per_rank = ranks(a.ranks, phase_limit)
    if per_rank:
        parts.append(per_rank)
    if a.crosscheck is not None:
        parts.append(crosscheck(a.crosscheck))
    if a.economics is not None:
        parts.append(economics(a.economics))
    for acc in getattr(a, "acceptance", None) or []:
        parts.append(acceptance(acc))
    for lv in getattr(a, "levers", None) or []:
        parts.append(levers(lv))
    if getattr(a, "whole_run", None) is not None:
        parts.append(whole_run(a.whole_run))
    if getattr(a, "sync_timers", None) is not None:
        parts.append(sync_timers(a.sync_timers))
    if getattr(a, "sync_calls", None) is not None:
        parts.append(sync_calls(a.sync_calls))
    if a.notes:
        parts.append("Notes\n" + "\n".join(f"- {clean(n)}" for n in a.notes))
    return "\n\n".join(parts) + "\n"


def _label(d, i: int, ranks: bool) -> str:
    return f"rank {d.rank}" if ranks else f"#{i + 1}"


def traces(digests, summary: pl.DataFrame, skew: pl.DataFrame | None, phase_limit: int = 20, why: str = "") -> str:
    """Several traces side by side: one row per trace (`summary`), the skew across them when they are ranks of one
    run (`skew` not None), then each one's own text. `digests`: each trace's rank, path and `text` (its terminal
    text), in the order of `summary`'s rows; `why`: why they are (or are not) ranks of one run."""
    ranks = skew is not None
    traces, _ = distinct([d.path for d in digests])
    rows = [[_label(d, i, ranks), clean(traces[i], 48), f"{row['ops']:,}", f_ms(row["wall"]), f_ms(row["busy"]),
             pct(row["busy_share"]), f_ms(row["cpu_wait"]), f_ms(row["launch"]), f_ms(row["idle"]),
             f_ms(row["communication"]), row["top_phase"] or "-"]
            for i, (d, row) in enumerate(zip(digests, views.traces_view(summary).iter_rows(named=True)))]
    head = (f"specprof analysis of {len(digests)} traces, ranks of one run ({why}; each on its own clock)" if ranks
            else f"specprof analysis of {len(digests)} runs, each on its own, side by side (not ranks of one run: "
                 f"{why})")
    out = [head, "",
           table(["rank" if ranks else "run", "trace", "GPU ops", "wall ms", "busy ms", "busy", "cpu_wait ms",
                  "launch ms", "idle ms", "comm ms", "top phase"], rows, "llrrrrrrrrl"),
           "  wall, busy and the idle kinds are summed over each trace's GPU streams (docs/attribution.md)"]
    sk = skew.head(phase_limit) if ranks else pl.DataFrame()
    if sk.height:
        names = [_label(d, i, ranks) for i, d in enumerate(digests)]
        rows = [[clean(r["phase"], 48), str(r["ranks"]), f_ms(r["min"]), f_ms(r["max"]), f_ms(r["skew"]),
                 f"{r['skew_pct']:.1f}%", names[r["min_rank"]], names[r["max_rank"]]]
                for r in sk.iter_rows(named=True)]
        out += ["", "Skew across the ranks (attributed ms per phase; a rank without the phase counts 0; "
                "docs/multirank.md)",
                table(["phase", "ranks", "min ms", "max ms", "skew ms", "skew", "min", "max"], rows, "lrrrrrll")]
    for i, d in enumerate(digests):
        out += ["", "=" * 100, f"{_label(d, i, ranks)}: {clean(d.path)}", "=" * 100, d.text]
    return "\n".join(out)


def sweep(s: Sweep) -> str:
    basis = {"events_unprofiled": "CUDA events without nsys", "gpu_busy": "GPU-busy ms under nsys"}[s.phase_basis]
    names, prefix = distinct(s.runs["path"].to_list())
    runs = [[clean(name, 40), str(r["steps"]), str(r["tokens"]), f"{r['cycles']:,}", f_num(r["accept_len"]),
             r["accept_source"] or "-", f_ms_or_dash(r["draft_ns"]), f_ms_or_dash(r["verify_ns"]),
             f_ms_or_dash(r["rest_ns"]), f_ms_or_dash(r["cycle_ns"]), f_ms_or_dash(r["period_unprofiled_ns"])]
            for name, r in zip(names, s.runs.iter_rows(named=True))]
    parts = [f"Runs (means per cycle; draft and verify: {basis}; rest and cycle: {s.cycle_source})\n"
             + (f"  runs in {clean(prefix)}\n" if prefix else "")
             + table(["run", "K", "tokens", "cycles", "accept len", "from", "draft", "verify", "rest", "cycle",
                      "period w/o nsys"], runs, "lrrrrlrrrrr")]
    fits = []
    for r in s.fits.iter_rows(named=True):
        per = UNITS[r["x"]]
        verdict = ("CONTRADICTS: fixed < 0" if negative_fixed(r) else "CONTRADICTS: per unit < 0") \
            if contradicts(r) else ("yes" if r["resolvable"] else "NOT resolvable")
        runs_ci = "-" if r["per_unit_runs_lo_ns"] is None else \
            f"{r['per_unit_runs_lo_ns'] / 1e6:.4f}..{r['per_unit_runs_hi_ns'] / 1e6:.4f}"
        fits.append([r["name"], f_ms_or_dash(r["fixed_ns"], 4), f"{f_ms_or_dash(r['fixed_lo_ns'], 4)}..{f_ms_or_dash(r['fixed_hi_ns'], 4)}",
                     f"{r['per_unit_ns'] / 1e6:.4f} /{per}",
                     f"{r['per_unit_lo_ns'] / 1e6:.4f}..{r['per_unit_hi_ns'] / 1e6:.4f}", runs_ci,
                     f_ms_or_dash(r["lack_of_fit_ns"], 4), verdict])
    draft_x = s.fit("draft")["x"]
    parts.append("Fits: time = fixed + per_unit x (verify tokens | "
                 + ("draft forward passes, K - 1 per cycle | rest and cycle: draft steps K" if draft_x == "forwards"
                    else "draft steps") + "), least squares over cycles\n"
                 "  95% CI from the per-cycle scatter; 'runs' CI from the run means (run-to-run uncertainty); "
                 "lack of fit: the largest run mean's distance from the line;\n  per unit: resolvable when its "
                 "honest interval (the runs' when there is one) lies above zero; CONTRADICTS: a fixed or per-unit "
                 "cost negative beyond it (nothing is predicted from it)\n"
                 + table(["fit", "fixed ms", "95% CI", "per unit ms", "95% CI", "runs 95% CI", "lack of fit ms",
                          "per unit"], fits, "lrrrrrrl"))
    if s.acceptance.height:
        acc = [[str(r["position"]), f"{r['reached']:,}", f"{r['accepted']:,}",
                f"assumed {s.pooled_rate:.3f}" if r["assumed"] else f_num(r["rate"])]
               for r in s.acceptance.iter_rows(named=True)]
        over = "their twins' without nsys" if s.basis == "cycle_unprofiled" else "their captures' under nsys"
        parts.append(f"Acceptance per draft position (pooled over the runs that drafted it, over the cycles their "
                     f"accept lengths are over: {over}; pooled {s.pooled_rate:.3f})\n" + table(["position", "reached", "accepted", "rate"], acc))
    if s.predictions.height:
        pred = [[("* " if r["steps"] == s.recommended_steps else "  ") + str(r["steps"]), str(r["tokens"]),
                 f_num(r["accept_len"]), f_num(r["predicted_accept_len"]), f_ms_or_dash(r["cycle_ns"]),
                 f_num(r["tokens_per_s"], 0),
                 f_num(r["tokens_per_s_per_request"], 1) + _ci(r["tokens_per_s_per_request_lo"],
                                                               r["tokens_per_s_per_request_hi"], 1),
                 ("measured" if r["measured"] else ("extrapolated" if r["extrapolated"] else "interpolated"))
                 + (", assumed acceptance" if r["assumed"] else "")]
                + ([f_x(r["speedup"]) + _ci(r["speedup_lo"], r["speedup_hi"], 2)] if s.baseline_ns else [])
                for r in s.predictions.iter_rows(named=True)]
        cycle = "cycle period without nsys" if s.basis == "cycle_unprofiled" else "attributed GPU time under nsys"
        parts.append(f"Throughput per K (each row from one accept length and one cycle: at a measured K its run's own, "
                     f"measured, as `analyze` gives them; elsewhere the accept length of the nearest measured K (the one "
                     f"below first) plus the model's change from it, and the cycle from the fit of the {cycle}; "
                     f"'predicted': the model's accept "
                     "length at every K, beside)\n" + table(
                         ["K", "tokens", "accept len", "predicted", "cycle ms", "tokens/s", "per request (95% CI)",
                          "K is"] + (["vs plain (95% CI)"] if s.baseline_ns else []), pred, "rrrrrrrlr"))
    head = f"Recommendation: K = {s.recommended_steps}" if s.recommended_steps is not None else \
        "No recommendation: the cost models alone"
    if s.tied_steps:
        head += (" (not told apart from K = " + ", ".join(map(str, s.tied_steps))
                 + " within the 95% intervals)")
    if s.beats_plain is False:
        head = f"Recommendation: plain decoding (the best step count, K = {s.recommended_steps}, loses to it)"
    elif s.recommended_steps is not None and s.baseline_ns and s.beats_plain is None:
        head += " (against plain decoding: a wash)"
    parts.append(head + "\n" + bullets(s.reasoning))
    if s.notes:
        parts.append("Notes\n" + bullets(s.notes))
    return "\n\n".join(parts) + "\n"


def compare(c: Comparison, limit: int = 40) -> str:
    unit = "per cycle" if c.unit == "cycle" else "per phase instance"
    change = c.change_pct
    (a, b), _ = distinct([c.a_path, c.b_path])
    head = (f"A: {clean(a)}, {c.a_cycles:,} cycles ({clean(c.a_path)})\n"
            f"B: {clean(b)}, {c.b_cycles:,} cycles ({clean(c.b_path)})\n"
            f"Total attributed GPU time {unit}: A {f_ms_or_dash(c.a_total_ns)} ms, B {f_ms_or_dash(c.b_total_ns)} ms"
            + ("" if change is None else f": B is {abs(change):.1f}% {'slower' if change > 0 else 'faster'}"))
    ph = [[clean(r["phase"], 40), f_ms_or_dash(r["a_ns"]), f_ms_or_dash(r["b_ns"]), f"{r['diff_ns'] / 1e6:+,.3f}", f_x(r["ratio"], 3)]
          for r in c.phases.iter_rows(named=True)]
    cats = [[clean(r["phase"], 40), clean(r["category"]), f_ms_or_dash(r["a_ns"]), f_ms_or_dash(r["b_ns"]),
             f"{r['diff_ns'] / 1e6:+,.3f}", f_x(r["ratio"], 3)]
            for r in c.categories.head(limit).iter_rows(named=True)]
    text = (head + f"\n\nPhases (attributed ms {unit})\n" + table(["phase", "A", "B", "B - A", "B / A"], ph)
            + f"\n\nPhase x category (attributed ms {unit}, largest first)\n"
            + table(["phase", "category", "A", "B", "B - A", "B / A"], cats, "llrrrr"))
    if c.notes:
        text += "\n\nNotes\n" + bullets(c.notes)
    return text + "\n"


def drafters(d) -> str:
    """Two drafters side by side (derived/drafters.py)."""
    def one(x):
        return [clean(x["draft_model"] or "-", 50), f_num(x.get("accept_len")) + _ci(x.get("accept_len_lo"),
                                                                                  x.get("accept_len_hi"), 3),
                f_ms_or_dash(x.get("cycle_ns")), f_ms_or_dash(x.get("draft_ns")),
                ("-" if x.get("tokens_per_s") is None else f"{x['tokens_per_s']:,.0f}")
                + _ci(x.get("tokens_per_s_lo"), x.get("tokens_per_s_hi"), 0),
                ("-" if x.get("speedup") is None else f_x(x["speedup"])) + _ci(x.get("speedup_lo"),
                                                                               x.get("speedup_hi"), 2)]
    sides = [["A"] + one(d.a), ["B"] + one(d.b)]
    pos = [[str(r["position"]),
            (pct(r["a_at_least"]) + _ci(_pc(r["a_at_least_lo"]), _pc(r["a_at_least_hi"]), 1)) if r["a_drafted"]
            else "not drafted",
            (pct(r["b_at_least"]) + _ci(_pc(r["b_at_least_lo"]), _pc(r["b_at_least_hi"]), 1)) if r["b_drafted"]
            else "not drafted",
            "-" if r["at_least_diff"] is None else f"{100 * r['at_least_diff']:+.1f}",
            ("-" if r["a_rate"] is None else pct(r["a_rate"])) + _ci(_pc(r["a_rate_lo"]), _pc(r["a_rate_hi"]), 1),
            ("-" if r["b_rate"] is None else pct(r["b_rate"])) + _ci(_pc(r["b_rate_lo"]), _pc(r["b_rate_hi"]), 1)]
           for r in d.positions.iter_rows(named=True)]
    basis = d.a.get("draft_basis") or "-"
    return ("Two drafters (one target and workload, different draft models; each run's economics headline; draft: "
            f"draft and draft_extend ms per cycle, {basis})\n"
            + table(["", "draft model", "accept len (95% CI)", "cycle ms", "draft ms", "tokens/s (95% CI)",
                     "speedup (95% CI)"], sides, "llrrrrr")
            + "\n\nAcceptance per draft position, A against B\n"
            + table(["position", "A: P(at least i)", "B: P(at least i)", "B - A points", "A: rate given 1..i-1",
                     "B: rate given 1..i-1"], pos, "rrrrrr")
            + "\n" + bullets(d.verdict) + "\n")


def runs(listed: pl.DataFrame, db_path: str) -> str:
    """The results store's run list."""
    if listed.is_empty():
        return f"{clean(db_path)}: no runs stored yet (`specprof analyze RUN --db {clean(db_path)}` adds one)"
    rows = [[f"@{r['id']}", (r["imported_at"] or "")[:19], clean(r["path"], 60), r["format"], str(r["ranks"]),
             f"{r['cycles']:,}", f_ms(r["wall_ns"]),
             f_ms_or_dash(r["per_cycle_ns"]),
             "-" if r["steps"] is None else str(r["steps"]),
             "-" if r["accept_len"] is None else f"{r['accept_len']:.3f}",
             "-" if r["speedup"] is None else f"{r['speedup']:.3f}x"]
            for r in views.runs_view(listed).iter_rows(named=True)]
    return (f"{listed.height:,} run(s) in {clean(db_path)} (docs/store.md; @ID names a run for compare and sweep)\n"
            + table(["run", "imported (UTC)", "path", "format", "ranks", "cycles", "wall ms", "per cycle ms",
                     "steps", "accept len", "speedup"], rows, "lllrrrrrrrr"))


def stored(db_path: str, runs_stored: list[tuple[str, int, bool]]) -> list[str]:
    """What `specprof analyze --db` says of each run: stored, or already there."""
    return [f"specprof: {path} " + (f"stored as run @{run_id} in {db_path}" if created else
                                   f"already in {db_path} as run @{run_id} (same trace and options)")
            for path, run_id, created in runs_stored]


def report_written(path: str) -> str:
    return f"specprof: report written to {path}"


def slower(c: Comparison, pct_limit: float) -> str:
    """Why `specprof compare --fail-if-slower PCT` failed."""
    return (f"specprof: B is {c.change_pct:.1f}% slower than A per {'cycle' if c.unit == 'cycle' else 'phase instance'} "
            f"(more than {pct_limit:g}%)")


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def cache_info(root: str, entries, total: int, bound: int) -> str:
    """`specprof cache info`: the cache folder, its size (`total` bytes) against the bound, and each entry (its
    export, or its folder where its stamp cannot say; broken and unfinished ones said so)."""
    lines = [f"specprof cache: {clean(root)}",
             f"  {len(entries)} export(s), {_gb(total)} of " + (f"{_gb(bound)} at most (SPECPROF_CACHE_MAX_GB)"
                                                               if bound else "no size bound")]
    for e in reversed(entries):  # most recently used first
        state = (" (broken: its stamp cannot be read; `specprof cache clear` removes it)" if e.broken else
                 "" if e.complete else " (a write going on, or one cut short)")
        if e.elsewhere:
            state += f" (in {clean(e.folder)}, not where its export's cache is kept)"
        lines.append(f"  {_gb(e.bytes):>10}  {clean(e.export or os.path.basename(e.folder))}{state}")
    lines.append("  `specprof cache clear` removes it all; SPECPROF_CACHE_DIR moves it; --no-cache skips it")
    return "\n".join(lines)


def cache_cleared(root: str, n: int, size: int) -> str:
    return f"specprof cache: removed {n} export(s), {_gb(size)}, from {clean(root)}"


def exported(path: str, counts: dict) -> str:
    """`specprof export`: where the Perfetto trace went and what it holds."""
    return (f"specprof: wrote {clean(path)}: {counts['ops']:,} GPU ops, {counts['segments']:,} attributed segments, "
            f"{counts['ranges']:,} ranges, {counts['launches']:,} launch calls with their flows, on "
            f"{counts['tracks']:,} tracks; open it at https://ui.perfetto.dev")


def _interval_x(lo, hi) -> str:
    return "-" if lo is None or hi is None else f"{lo:.2f}-{hi:.2f}x"


def adaptive_config(c: AdaptiveConfig, path: str) -> str:
    """The adaptive config written for SGLang: one row per batch-size threshold with the measured speedup of its
    K, then every (batch size, K) measured."""
    rows = [[str(r["threshold"]), r["batch_group"], str(r["steps"]),
             f_x(r["speedup"]) + ("" if r["steps"] == r["measured_steps"] else f" (K={r['measured_steps']})"),
             _interval_x(r["speedup_lo"], r["speedup_hi"]), r["why"]]
            for r in c.choices.iter_rows(named=True)]
    names, prefix = distinct(c.candidates["run"].to_list())
    measured = [[r["batch_group"], str(r["steps"]), clean(name, 40), f"{r['cycles']:,}", f_num(r["tokens_per_s"], 1),
                 "-" if r["tokens_per_s_lo"] is None else f"{r['tokens_per_s_lo']:.1f}-{r['tokens_per_s_hi']:.1f}",
                 f_x(r["speedup"]), _interval_x(r["speedup_lo"], r["speedup_hi"]), "*" if r["chosen"] else ""]
                for name, r in zip(names, c.candidates.iter_rows(named=True))]
    parts = [f"Adaptive config written to {clean(path)} (--speculative-adaptive-config; start the server with "
             f"--speculative-adaptive --speculative-num-steps {c.server_steps})\n"
             + table(["batch >=", "group", "K", "speedup", "95% interval", "why"], rows, "rlrrrl"),
             "Measured (each run's cycles without the profiler where it has them; speedup against the plain run at "
             "the same batch sizes; * the K written)\n" + (f"  runs in {clean(prefix)}\n" if prefix else "")
             + table(["group", "K", "run", "cycles", "tokens/s", "95% interval", "speedup", "95% interval", ""],
                     measured, "lrlrrrrrl")]
    if c.notes:
        parts.append("Notes\n" + bullets(c.notes))
    return "\n\n".join(parts) + "\n"
