"""Terminal text for the cross-check, the economics, the sweep and the comparison. Names are sanitised."""

from __future__ import annotations

from analyzer.compare import Comparison
from analyzer.crosscheck import FLOOR_NS, GT_FLOOR_NS, GT_TOLERANCE, TOLERANCE, CrossCheck
from analyzer.economics import Economics
from analyzer.render.terminal import clean, table
from analyzer.sweep import Sweep


def _ms(ns, digits: int = 3) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.{digits}f}"


def _us(ns) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f}"


def _x(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}x"


def _f(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _bullets(lines) -> str:
    return "\n".join(f"- {clean(line)}" for line in lines)


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
        lag = f"; nsys stamped the marks {_us(r['mark_lag_ns'])} us after their readings" \
            if r["mark_lag_ns"] is not None else ""
        head.append(
            f"  {clean(r['path'])}: clocks aligned by {how}{lag}; {r['matched_cycles']:,} of "
            f"{r['sidecar_cycles']:,} sidecar cycles are in the capture (indices {r['first_index']}.."
            f"{r['last_index']}); cycle starts agree to {_us(r['residual_p50_ns'])} us (p50), "
            f"{_us(r['residual_max_ns'])} us (max)")
    rows = [[clean(r["phase"], 32), f"{r['instances']:,}", _ms(r["nsys_ns"]), _ms(r["sidecar_ns"]),
             _us(r["diff_ns"]), "-" if r["diff_pct"] is None else f"{r['diff_pct']:+.2f}%",
             _us(r["abs_diff_p90_ns"]), _us(r["tolerance_ns"]), r["verdict"]]
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
        for r in c.inflation.iter_rows(named=True):
            verdict = r["verdict"]
            if verdict in ("inflated", "shorter"):
                verdict += f" {(r['ratio'] - 1) * 100:+.0f}%"
            rows.append([r["measure"], clean(r["phase"], 32), _ms(r["with_ns"]), _ms(r["without_ns"]),
                         _x(r["ratio"]), f"{r['ratio_lo']:.2f}..{r['ratio_hi']:.2f}", verdict])
        base = ", ".join(clean(p) for p in c.baseline)
        parts.append(
            f"Profiler inflation: this run under {c.profiler} against the same workload without it ({base})\n"
            "  mean ms per cycle; cpu: the phase call's host wall clock (sidecar); gpu: CUDA events around the "
            "phase (the tracer's --gpu-events, or the reference engine's ground truth);\n  cycle: the cycle call; period: cycle start to next cycle start (what "
            "throughput sees)\n"
            + table(["measure", "phase", f"with {c.profiler}", "without", "ratio", "95% CI", "verdict"], rows,
                "llrrrrl"))
    if c.ground_truth is not None and c.ground_truth.height:
        rows = [[clean(r["phase"], 32), f"{r['instances']:,}", str(r["stream"]), _ms(r["attributed_ns"]),
                 _ms(r["events_ns"]), _us(r["diff_ns"]), "-" if r["diff_pct"] is None else f"{r['diff_pct']:+.2f}%",
                 _us(r["abs_diff_max_ns"]), _us(r["tolerance_ns"]), r["verdict"]]
                for r in c.ground_truth.iter_rows(named=True)]
        parts.append(
            "Ground truth: attributed time per phase instance against CUDA events recorded in-stream at the phase's "
            "boundaries (same run)\n  on the stream the phase ran on (the events'); within when the means differ "
            f"by at most {GT_TOLERANCE:.0%} or {GT_FLOOR_NS / 1e6:.1f} ms\n"
            + table(["phase", "inst", "stream", "attributed ms", "events ms", "diff us", "diff", "|diff| max us",
                     "tolerance us", "verdict"], rows, "lrrrrrrrrl"))
    if c.accept is not None:
        a = c.accept
        parts.append(f"Accept length: sidecar {a.sidecar_pooled:.3f} vs server log "
                     f"{(a.log_weighted if a.log_weighted is not None else a.log_mean):.3f} "
                     f"(gap {a.gap:+.3f}): {a.verdict}\n" + _bullets(a.explanations))
    if c.notes:
        parts.append("Cross-check notes\n" + _bullets(c.notes))
    return "\n\n".join(parts)


def economics(e: Economics) -> str:
    rows = [[clean(r["source"]), f"{r['cycles']:,}", _ms(r["cycle_ns"]), _f(r["accept_len"]),
             _f(r["tokens_per_s"], 0), _ms(r["baseline_ns"]), _x(r["speedup"]), _f(r["break_even_accept_len"])]
            for r in e.estimates.iter_rows(named=True)]
    base = f"baseline step {_ms(e.baseline_ns)} ms ({clean(e.baseline_source)})" if e.baseline_ns else \
        "no baseline step time (give --baseline-ms MS or --baseline RUN)"
    text = ("Economics: does speculation pay? (accept length includes the bonus token; " + base + ")\n"
            + table(["cycle measured by", "cycles", "cycle ms", "accept len", "tokens/s", "baseline ms", "speedup",
                     "break-even accept len"], rows, "lrrrrrrr"))
    if e.verdict:
        text += "\n" + _bullets(e.verdict)
    if e.notes:
        text += "\n" + _bullets(e.notes)
    return text


def sweep(s: Sweep) -> str:
    runs = [[clean(r["path"], 40), str(r["steps"]), str(r["tokens"]), f"{r['cycles']:,}", _f(r["accept_len"]),
             _ms(r["draft_ns"]), _ms(r["verify_ns"]), _ms(r["rest_ns"]), _ms(r["cycle_ns"]),
             _ms(r["period_unprofiled_ns"])]
            for r in s.runs.iter_rows(named=True)]
    parts = ["Runs (means per cycle; draft, verify, rest and cycle: attributed GPU ms under nsys)\n" + table(
        ["run", "K", "tokens", "cycles", "accept len", "draft", "verify", "rest", "cycle", "period w/o nsys"],
        runs, "lrrrrrrrrr")]
    fits = []
    for r in s.fits.iter_rows(named=True):
        per = "token" if r["x"] == "tokens" else "step"
        runs_ci = "-" if r["per_unit_runs_lo_ns"] is None else \
            f"{r['per_unit_runs_lo_ns'] / 1e6:.4f}..{r['per_unit_runs_hi_ns'] / 1e6:.4f}"
        fits.append([r["name"], _ms(r["fixed_ns"], 4), f"{_ms(r['fixed_lo_ns'], 4)}..{_ms(r['fixed_hi_ns'], 4)}",
                     f"{r['per_unit_ns'] / 1e6:.4f} /{per}",
                     f"{r['per_unit_lo_ns'] / 1e6:.4f}..{r['per_unit_hi_ns'] / 1e6:.4f}", runs_ci,
                     _ms(r["lack_of_fit_ns"], 4)])
    parts.append("Fits: time = fixed + per_unit x (verify tokens | draft steps), least squares over cycles\n"
                 "  95% CI from the per-cycle scatter; 'runs' CI from the run means (run-to-run uncertainty); "
                 "lack of fit: the largest run mean's distance from the line\n"
                 + table(["fit", "fixed ms", "95% CI", "per unit ms", "95% CI", "runs 95% CI", "lack of fit ms"],
                         fits, "lrrrrrr"))
    acc = [[str(r["position"]), f"{r['reached']:,}", f"{r['accepted']:,}", _f(r["rate"])]
           for r in s.acceptance.iter_rows(named=True)]
    parts.append(f"Acceptance per draft position (pooled over the runs that drafted it; pooled {s.pooled_rate:.3f})\n"
                 + table(["position", "reached", "accepted", "rate"], acc))
    pred = [[("* " if r["steps"] == s.recommended_steps else "  ") + str(r["steps"]), str(r["tokens"]),
             _f(r["accept_len"]), _ms(r["cycle_ns"]), _f(r["tokens_per_s"], 0), _f(r["tokens_per_s_per_request"], 1),
             "measured" if r["measured"] else ("extrapolated" if r["extrapolated"] else "interpolated")]
            for r in s.predictions.iter_rows(named=True)]
    basis = "cycle period without nsys" if s.basis == "cycle_unprofiled" else "attributed GPU time under nsys"
    parts.append(f"Predicted throughput (cycle from the fit of the {basis})\n" + table(
        ["K", "tokens", "accept len", "cycle ms", "tokens/s", "per request", "K is"], pred, "rrrrrrl"))
    parts.append(f"Recommendation: K = {s.recommended_steps}\n" + _bullets(s.reasoning))
    if s.notes:
        parts.append("Notes\n" + _bullets(s.notes))
    return "\n\n".join(parts) + "\n"


def compare(c: Comparison, limit: int = 40) -> str:
    unit = "per cycle" if c.unit == "cycle" else "per run"
    change = c.change_pct
    head = (f"A: {clean(c.a_path)} ({c.a_cycles:,} cycles)\nB: {clean(c.b_path)} ({c.b_cycles:,} cycles)\n"
            f"Total attributed GPU time {unit}: A {_ms(c.a_total_ns)} ms, B {_ms(c.b_total_ns)} ms"
            + ("" if change is None else f": B is {abs(change):.1f}% {'slower' if change > 0 else 'faster'}"))
    ph = [[clean(r["phase"], 40), _ms(r["a_ns"]), _ms(r["b_ns"]), f"{r['diff_ns'] / 1e6:+,.3f}", _x(r["ratio"], 3)]
          for r in c.phases.iter_rows(named=True)]
    cats = [[clean(r["phase"], 40), clean(r["category"]), _ms(r["a_ns"]), _ms(r["b_ns"]),
             f"{r['diff_ns'] / 1e6:+,.3f}", _x(r["ratio"], 3)]
            for r in c.categories.head(limit).iter_rows(named=True)]
    text = (head + f"\n\nPhases (attributed ms {unit})\n" + table(["phase", "A", "B", "B - A", "B / A"], ph)
            + f"\n\nPhase x category (attributed ms {unit}, largest first)\n"
            + table(["phase", "category", "A", "B", "B - A", "B / A"], cats, "llrrrr"))
    if c.notes:
        text += "\n\nNotes\n" + _bullets(c.notes)
    return text + "\n"
