"""Verify cost model over runs with different numbers of draft steps (docs/economics.md, "Sweep").

From runs at K = K1, K2, ... draft steps (verify of K+1 tokens for a chain draft), per cycle:

    verify time = fixed + per_token x tokens        draft time = fixed + per_forward x forward passes
                                                    (SGLang: K - 1 per cycle; per_step x steps where the engine
                                                    is not known)
    rest        = fixed + per_step x steps           (everything else in the cycle: draft re-extend, accept, gaps)

fitted by ordinary least squares on per-cycle observations (numpy only). Verify and draft are fitted on the
GPU time between the tracer's CUDA events in the runs without nsys when every run has them (the phases as
the server runs them), else on their GPU-busy time under nsys (the kernels themselves: the profiler's
stretching of the launch gaps left out, which made the fits on attributed time under nsys wander). Two 95%
intervals are given: `ci95` from the per-cycle scatter (t with n - 2 degrees of freedom), and `ci95_runs` from
a fit of the run means (t with runs - 2 degrees of freedom; null with fewer than three runs). Cycles of one run
share that run's conditions (clocks, placement), so the first interval understates the run-to-run
uncertainty whenever the run means stray from the line; `lack_of_fit_ns` says by how much they do. A
per-unit cost whose honest interval (the runs' when there is one) includes zero is `resolvable` false: "not
resolvable from these runs", never a finding.

Throughput for other K comes from the measured acceptance per draft position: p_i = P(draft i accepted |
drafts 1..i-1 accepted), pooled over the runs that drafted position i; then
E[accept length](K) = 1 + sum_{i<=K} prod_{j<=i} p_j (the 1 is the bonus token). Positions no run drafted are
assumed to accept at the pooled rate of the measured ones (said in the output). Without accept counts (no
sidecar), accept lengths given per run (`--accept`, a server log) give the throughput at the measured K only;
without either, the cost models stand alone. The cycle time for K comes from the cycle fit: the cycle period
measured without nsys when every run has a baseline sidecar, else the per-cycle attributed GPU time under nsys.
Each throughput row takes one accept length and one cycle: at a measured K its run's own (with intervals),
elsewhere the model's. The recommendation is the K with the most tokens/s among the measured ones (among every
predicted K with `extrapolate`), and says which measured K it is not told apart from within the intervals.
A fit with a per-unit or fixed cost negative beyond its honest interval contradicts the model: nothing is then
predicted.

`Sweep` holds integer ns; only renderers turn them into ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from specprof.analyzer.derived import economics as econ
from specprof.analyzer.derived.intervals import t975
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.numeric import np

FIT_SCHEMA = {
    "name": pl.Utf8, "x": pl.Utf8, "source": pl.Utf8, "fixed_ns": pl.Float64, "per_unit_ns": pl.Float64,
    "fixed_lo_ns": pl.Float64, "fixed_hi_ns": pl.Float64, "per_unit_lo_ns": pl.Float64,
    "per_unit_hi_ns": pl.Float64, "fixed_runs_lo_ns": pl.Float64, "fixed_runs_hi_ns": pl.Float64,
    "per_unit_runs_lo_ns": pl.Float64, "per_unit_runs_hi_ns": pl.Float64, "n": pl.Int64, "runs": pl.Int64,
    "lack_of_fit_ns": pl.Float64, "lack_of_fit_run": pl.Int64, "lack_of_fit_mean_ns": pl.Float64,
    "lack_of_fit_line_ns": pl.Float64,
}


@dataclass
class Line:
    """y = intercept + slope x, with 95% half-widths (inf when there are too few points)."""

    intercept: float
    slope: float
    intercept_hw: float
    slope_hw: float
    n: int

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x


def fit_line(x, y) -> Line:
    """Ordinary least squares with 95% intervals (t, n - 2 degrees of freedom). Needs two distinct x values."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if len(x) != len(y) or len(np.unique(x)) < 2:
        raise SpecprofError("a straight-line fit needs at least two different x values (runs with different "
                            "numbers of draft steps)")
    xm = x.mean()
    sxx = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - y.mean())).sum() / sxx)
    intercept = float(y.mean() - slope * xm)
    dof = len(x) - 2
    if dof < 1:
        return Line(intercept, slope, math.inf, math.inf, len(x))
    resid = y - (intercept + slope * x)
    s2 = float((resid**2).sum() / dof)
    t = t975(dof)
    return Line(intercept, slope, t * math.sqrt(s2 * (1 / len(x) + xm**2 / sxx)), t * math.sqrt(s2 / sxx), len(x))


def fit_row(name: str, xname: str, source: str, x, y, run, owner=None) -> dict:
    """A row of `Sweep.fits`: per-cycle fit, run-means fit and lack of fit (x, y per cycle; run: the group each
    cycle's run mean is over; owner: the sweep's run of each cycle, when the groups are finer, repeated twins)."""
    per = fit_line(x, y)
    df = pl.DataFrame({"x": np.asarray(x, dtype=float), "y": np.asarray(y, dtype=float), "run": run,
                       "owner": run if owner is None else owner})
    means = df.group_by("run").agg(pl.col("x").first(), pl.col("y").mean(), pl.col("owner").first()) \
        .sort("x", "run")
    runs = means.height
    line = per.at(means["x"].to_numpy())
    worst = int(np.abs(means["y"].to_numpy() - line).argmax())
    lof = float(abs(means["y"][worst] - line[worst]))
    by_runs = fit_line(means["x"], means["y"]) if runs >= 3 else None
    row = {"name": name, "x": xname, "source": source, "fixed_ns": per.intercept, "per_unit_ns": per.slope,
           "fixed_lo_ns": per.intercept - per.intercept_hw, "fixed_hi_ns": per.intercept + per.intercept_hw,
           "per_unit_lo_ns": per.slope - per.slope_hw, "per_unit_hi_ns": per.slope + per.slope_hw,
           "fixed_runs_lo_ns": None, "fixed_runs_hi_ns": None, "per_unit_runs_lo_ns": None,
           "per_unit_runs_hi_ns": None, "n": per.n, "runs": runs, "lack_of_fit_ns": lof,
           "lack_of_fit_run": int(means["owner"][worst]), "lack_of_fit_mean_ns": float(means["y"][worst]),
           "lack_of_fit_line_ns": float(line[worst])}
    if by_runs is not None:
        row.update(fixed_runs_lo_ns=by_runs.intercept - by_runs.intercept_hw,
                   fixed_runs_hi_ns=by_runs.intercept + by_runs.intercept_hw,
                   per_unit_runs_lo_ns=by_runs.slope - by_runs.slope_hw,
                   per_unit_runs_hi_ns=by_runs.slope + by_runs.slope_hw)
    return row


def acceptance(counts: pl.DataFrame) -> pl.DataFrame:
    """Per draft position i (1..K): request-rounds that reached it (drafts 1..i-1 all accepted, and the run
    drafted i), how many accepted it, and the rate. `counts`: steps (K of the run), correct (per request-round).
    """
    kmax = int(counts["steps"].max()) if counts.height else 0
    rows = []
    for i in range(1, kmax + 1):
        drafted = counts.filter(pl.col("steps") >= i)
        reached = drafted.filter(pl.col("correct") >= i - 1).height
        accepted = drafted.filter(pl.col("correct") >= i).height
        rows.append((i, reached, accepted, accepted / reached if reached else None, reached == 0))
    return pl.DataFrame(rows, schema={"position": pl.Int64, "reached": pl.Int64, "accepted": pl.Int64,
                                      "rate": pl.Float64, "assumed": pl.Boolean}, orient="row")


def position_rates(acc: pl.DataFrame, kmax: int) -> tuple[list[float], float]:
    """Rates for positions 1..kmax: measured where reached, else the pooled rate of the measured positions."""
    measured = acc.filter(pl.col("reached") > 0)
    pooled = float(measured["accepted"].sum() / measured["reached"].sum()) if measured.height else 0.0
    known = {r["position"]: r["rate"] for r in measured.iter_rows(named=True)}
    return [known.get(i, pooled) for i in range(1, kmax + 1)], pooled


def expected_accept_len(rates: list[float], steps: int) -> float:
    """1 + sum over i <= steps of prod_{j <= i} p_j: the bonus token plus the expected accepted drafts."""
    total, survive = 1.0, 1.0
    for p in rates[:steps]:
        survive *= p
        total += survive
    return total


@dataclass
class Sweep:
    """The cost model (see the module docstring). Tables:
    - runs: path, steps, tokens (verify tokens), forwards (draft forward passes per cycle, or null), cycles,
      accept_len (measured: the sidecar's counts over the cycles its cycle is over, the twin's without nsys on the
      period basis, as `analyze` heads with; or given), accept_source, batch, draft_ns, verify_ns (means per cycle on the fits' basis), rest_ns, cycle_ns
      (attributed under the profiler), period_unprofiled_ns (mean period without nsys, or null)
    - fits: FIT_SCHEMA rows named verify (x = tokens), draft (x = forwards, its forward passes, where every run's
      engine says how many it runs per K; else steps), rest, cycle, cycle_unprofiled (x = steps); lack_of_fit_run
      is the run whose mean strays most (lack_of_fit_mean_ns against the line's lack_of_fit_line_ns)
    - acceptance: position, reached, accepted, rate, assumed (no request-round reached it: its rate is the
      pooled one, assumed; empty without accept counts)
    - predictions: steps, tokens, accept_len and cycle_ns (the row's one accept length and one cycle: at a measured
      K its run's own, else predicted from the acceptance per position and the cycle fit), predicted_accept_len,
      fit_cycle_ns (the model's, beside; null when not predicted), measured_accept_len, tokens_per_s,
      tokens_per_s_per_request with its 95% interval _lo/_hi (at a measured K), measured (a run had this K),
      extrapolated (K outside the measured range), assumed (uses an assumed position's acceptance), speedup,
      speedup_lo, speedup_hi (against the baseline; the interval at measured K); empty without any accept
      length. Only the measured K when the model is contradicted or fewer than 3 step counts were measured.
    """

    runs: pl.DataFrame
    fits: pl.DataFrame
    acceptance: pl.DataFrame
    predictions: pl.DataFrame
    recommended_steps: int | None  # None: no accept length, the cost models alone
    basis: str  # which cycle fit the predictions use: "cycle_unprofiled" or "cycle"
    phase_basis: str  # what verify and draft were fitted on: "events_unprofiled" or "gpu_busy"
    fixed_share: float  # verify's fixed part over verify time at the recommended (or largest measured) K
    pooled_rate: float | None
    extrapolate: bool = False
    reasoning: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    model_ok: bool = True  # no fit contradicts the model and no K-independent work drifts: predictions allowed
    contradictions: list[str] = field(default_factory=list)  # the fits whose per-unit cost is negative
    drift: str | None = None  # the K-independent work that moved between runs, in words
    baseline_ns: int | None = None  # the plain-decode step the speedups are against
    baseline_source: str | None = None
    beats_plain: bool | None = None  # the best K against the baseline: None without one, or a wash
    tied_steps: list[int] = field(default_factory=list)  # measured K the recommended one is not told apart from
    # what the rest and cycle columns are per run: a trace's attributed time, or (runs made without nsys) the events'
    # and the period's
    cycle_source: str = "attributed GPU ms under nsys"

    @property
    def best(self) -> dict | None:
        """The predictions row of the recommended K."""
        rows = self.predictions.filter(pl.col("steps") == self.recommended_steps)
        return rows.row(0, named=True) if rows.height else None

    def fit(self, name: str) -> dict:
        return self.fits.filter(pl.col("name") == name).row(0, named=True)


PHASE_BASES = {
    "events_unprofiled": "GPU time between CUDA events at the phase boundaries of the run without nsys",
    "gpu_busy": "GPU-busy time per cycle under nsys (the phase's ops running; the profiler's stretching of "
                "launch gaps left out)",
}


def resolvable(row: dict) -> bool:
    """Whether a fit's per-unit cost is told apart from zero: its honest 95% interval (from the run means with
    three runs or more, else from the cycles) lies above zero."""
    lo = row["per_unit_runs_lo_ns"] if row["per_unit_runs_lo_ns"] is not None else row["per_unit_lo_ns"]
    return lo is not None and lo > 0


def sweep(runs: pl.DataFrame, cycles: pl.DataFrame, counts: pl.DataFrame, periods: pl.DataFrame | None,
          max_steps: int | None = None, events: pl.DataFrame | None = None, extrapolate: bool = False,
          extend: pl.DataFrame | None = None, baseline=None, baseline_source: str | None = None,
          tree_topk: int = 1, cycle_source: str | None = None) -> Sweep:
    """The cost model from per-run and per-cycle tables.

    runs: run (id), path, steps, tokens, batch (mean requests per cycle, or null), accept_len (measured or
      given, or null), accept_source, rest_ns, cycle_ns, period_unprofiled_ns (means per run); the run means of
      draft and verify are added here, on the basis they are fitted on
    cycles: run, draft_ns, verify_ns, total_ns (per-cycle attributed GPU time under nsys; total = the cycle),
      draft_busy_ns, verify_busy_ns (GPU-busy time of the phase per cycle)
    counts: run, steps, cycle, correct, twin (one row per request-round with accept counts, of the cycles the
      run's accept length is over: its twin's without nsys when the basis is the period without nsys, the
      repeated twin's folder in `twin`; else the capture's, `twin` null; may be empty)
    periods: run, period_ns (cycle periods without nsys) or None
    events: run, draft_ns, verify_ns (per cycle of the run without nsys, from the tracer's CUDA events) or None
    extrapolate: recommend among every predicted K, not only the measured ones
    extend: run, ns (draft_extend's time per cycle, on the phases' basis) or None: K-independent work, whose
      drift between runs shows they differ by more than K
    baseline: the plain-decode step (economics.Measure) or None; baseline_source: where it came from
    tree_topk: the widest draft tree among the runs (SGLang's --speculative-eagle-topk; 1: chains)
    """
    notes: list[str] = []
    if runs["steps"].n_unique() < 2:
        raise SpecprofError("specprof sweep needs runs with at least two different numbers of draft steps")
    if "forwards" not in runs.columns:
        runs = runs.with_columns(forwards=pl.lit(None, dtype=pl.Int64))
    # the draft's unit: its forward passes where every run's engine says how many it runs per K (SGLang: K - 1),
    # else the draft steps K
    draft_x = "forwards" if runs["forwards"].null_count() == 0 and (runs["forwards"] != runs["steps"]).any() \
        else "steps"
    cyc = cycles.join(runs.select("run", "steps", "tokens", "forwards"), on="run").with_columns(
        rest_ns=pl.col("total_ns") - pl.col("draft_ns") - pl.col("verify_ns"))
    if events is not None and events.height and events["run"].n_unique() == runs.height:
        phase_basis = "events_unprofiled"
        ph = events.join(runs.select("run", "steps", "tokens", "forwards"), on="run")
    else:
        phase_basis = "gpu_busy"
        ph = cyc.select("run", "steps", "tokens", "forwards", draft_ns="draft_busy_ns", verify_ns="verify_busy_ns")
        if events is not None and events.height:
            notes.append("only some runs have CUDA events without nsys: verify and draft are fitted on GPU-busy "
                         "time under nsys for all")
    # (`cycle_source`: runs made without nsys, whose `cycles` are their CUDA events and periods)
    src = cycle_source or "attributed GPU time per cycle under nsys"
    fits = [
        fit_row("verify", "tokens", PHASE_BASES[phase_basis], ph["tokens"], ph["verify_ns"], ph["run"]),
        fit_row("draft", draft_x, PHASE_BASES[phase_basis], ph[draft_x], ph["draft_ns"], ph["run"]),
        fit_row("rest", "steps", src, cyc["steps"], cyc["rest_ns"], cyc["run"]),
        fit_row("cycle", "steps", src, cyc["steps"], cyc["total_ns"], cyc["run"]),
    ]
    basis = "cycle"
    if periods is not None and periods.height and periods["run"].n_unique() == runs.height:
        p = periods.join(runs.select("run", "steps"), on="run")
        group = p["run"]
        if "twin" in p.columns and p["twin"].null_count() == 0 and p["twin"].n_unique() > p["run"].n_unique():
            # repeated twins (RUN/no-nsys, RUN/no-nsys-2, ...): each is a run of its own for the run-means fit,
            # so that its interval holds the run-to-run noise
            group = (p["run"] * 1_000_000 + p["twin"].rank("dense").cast(pl.Int64)).alias("run")
            notes.append("the cycle without nsys is fitted over every repeated twin: each counts as a run in "
                         "the 'runs' interval, which so holds the run-to-run noise")
        fits.append(fit_row("cycle_unprofiled", "steps", "cycle period without nsys (baseline sidecars)",
                            p["steps"], p["period_ns"], group, p["run"]))
        basis = "cycle_unprofiled"
    elif periods is not None and periods.height:
        notes.append("only some runs have a baseline sidecar (without nsys): predictions use the cycle time "
                     "measured under nsys for all")
    fit_table = pl.DataFrame(fits, schema=FIT_SCHEMA, orient="row").with_columns(
        resolvable=pl.Series([resolvable(r) for r in fits], dtype=pl.Boolean))
    means = ph.group_by("run").agg(pl.col("draft_ns").mean().round().cast(pl.Int64),
                                   pl.col("verify_ns").mean().round().cast(pl.Int64))
    runs = runs.join(means, on="run", how="left")

    acc = acceptance(counts)
    kmax_measured = int(runs["steps"].max())
    kmin_measured = int(runs["steps"].min())
    top = max_steps or min(16, kmax_measured + 2)
    cycle_fit = fit_table.filter(pl.col("name") == basis).row(0, named=True)
    batch = runs["batch"].drop_nulls().mean()
    measured = {r["steps"]: r["accept_len"] for r in runs.iter_rows(named=True)}
    rates, pooled = position_rates(acc, top) if acc.height and acc["reached"].sum() > 0 else ([], None)
    last_seen = int(acc.filter(pl.col("reached") > 0)["position"].max() or 0) if acc.height else 0
    # Is the model physical, and tested? Per-unit costs are at least 0; work that does not depend on K does
    # not move with K; and a line through two step counts tests nothing.
    drift = extend_drift(extend, runs) if extend is not None else None
    contradictions = [r["name"] for r in fit_table.iter_rows(named=True) if contradicts(r)]
    # a negative slope within its interval of zero contradicts nothing, but predicts a cycle that shrinks with K
    negative = cycle_fit["per_unit_ns"] < 0 and basis not in contradictions
    model_ok = not contradictions and drift is None and not negative
    if negative:
        notes.append(f"{basis}: its cost per step comes out negative ({_per_unit_text(fit_table, basis)}), within "
                     "its interval of zero: the runs do not tell the cost per step, and nothing is predicted "
                     "from it")
    steps_measured = runs["steps"].n_unique()
    predict = model_ok and steps_measured >= 3 and tree_topk == 1
    if tree_topk > 1:
        notes.append(f"tree drafts (--speculative-eagle-topk {tree_topk}): verify's token count is the tree's "
                     "(--speculative-num-draft-tokens), not K + 1, and how it grows with K is the user's choice: "
                     "nothing is predicted beyond the measured step counts")
    if contradictions or drift:
        notes.append("the fits contradict the cost model (" + ", ".join(
            f"{n}: {_per_unit_text(fit_table, n)}" for n in contradictions)
            + (("; " if contradictions else "") + drift if drift else "")
            + "): nothing is predicted from them; the step counts are compared only as measured")
    elif steps_measured < 3:
        notes.append(f"{steps_measured} step counts: a line through two points cannot show whether the costs are "
                     "straight in K; 3 or more step counts are needed to predict the ones not measured")
    per_run = {r["steps"]: r for r in runs.iter_rows(named=True)}
    rows = []
    if rates and predict:
        candidates = range(1, top + 1)
    elif rates or all(v is not None for v in measured.values()):
        candidates = sorted(measured)
        if not rates:
            notes.append("no accept counts per draft position (no sidecar): predictions only at the measured step "
                         "counts, from their given accept lengths")
    else:
        candidates = []
    own = _measured(runs, counts, periods, cyc, basis)
    for k in candidates:
        # one accept length and one cycle per row: at a measured K its run's own (as `analyze` gives them), else the
        # model's (the acceptance per position, the cycle fit)
        predicted = expected_accept_len(rates, k) if rates and predict else None
        fitted = cycle_fit["fixed_ns"] + cycle_fit["per_unit_ns"] * k if model_ok else None
        L_m = C_m = None
        if k in per_run:
            r = per_run[k]
            L_m, C_m = own[k]
            L = measured[k] if measured[k] is not None else predicted
            c = C_m.value if C_m is not None else (r["period_unprofiled_ns"] if basis == "cycle_unprofiled"
                                                    else r["cycle_ns"])
        else:
            L, c = _anchored(k, predicted, measured, rates if predict else None), fitted
        if L is None or c is None:
            continue
        c = int(round(c))  # integer ns, as `analyze` pairs them: the same tokens/s from the same two numbers
        per_req = L / (c / 1e9) if c > 0 else None
        b = per_run[k]["batch"] if k in per_run and per_run[k]["batch"] is not None else batch  # the run's own
        lo = hi = None
        if per_req is not None and C_m is not None:
            rl = L_m.rel if L_m is not None else (0.0 if measured[k] is not None else None)
            lo, hi = econ.band(per_req, rl, C_m.rel)
        rows.append((k, _verify_tokens(runs, k), L, predicted, measured.get(k), c,
                     None if fitted is None else int(round(fitted)),
                     per_req * b if per_req and b else None, per_req, lo, hi, k in measured,
                     not kmin_measured <= k <= kmax_measured, bool(rates) and predict and k > last_seen))
    pred = pl.DataFrame(rows, schema=PREDICTION_SCHEMA, orient="row")
    pred = _against_baseline(pred, baseline, own)
    if extrapolate and not predict:
        notes.append("--extrapolate: nothing is predicted from these runs, so the recommendation stays among the "
                     "measured step counts")
    choose = pred if extrapolate and predict else pred.filter(pl.col("measured"))
    best = choose.sort("tokens_per_s_per_request", descending=True, nulls_last=True).row(0, named=True) \
        if choose.height else None
    verify = fit_table.filter(pl.col("name") == "verify").row(0, named=True)
    at_tokens = best["tokens"] if best else _verify_tokens(runs, kmax_measured)
    v_at = verify["fixed_ns"] + verify["per_unit_ns"] * at_tokens
    fixed_share = verify["fixed_ns"] / v_at if v_at > 0 else float("nan")
    ties = tied(pred, best, own)
    reasoning = _reasoning(fit_table, basis, phase_basis, pred, best, rates, pooled, kmax_measured, fixed_share,
                           at_tokens, extrapolate and predict, last_seen, model_ok, predict, ties)
    beats_plain = None
    if best is not None and baseline is not None:
        reasoning.append(_against_plain(best, baseline, baseline_source))
        if best["speedup"] is not None:
            lo, hi = best["speedup_lo"], best["speedup_hi"]
            beats_plain = None if lo is not None and lo <= 1 <= hi else best["speedup"] > 1
    for r in fit_table.iter_rows(named=True):
        half = (r["per_unit_hi_ns"] - r["per_unit_lo_ns"]) / 2
        spread = float(runs["steps"].max() - runs["steps"].min())
        if r["runs"] >= 3 and r["lack_of_fit_ns"] > max(half * spread, 0.01 * abs(r["fixed_ns"])):
            k = runs.filter(pl.col("run") == r["lack_of_fit_run"])["steps"]
            notes.append(
                f"{r['name']}: the K={k[0] if k.len() else '?'} run's mean lies {r['lack_of_fit_ns'] / 1e6:.3f} ms "
                f"from the line ({r['lack_of_fit_mean_ns'] / 1e6:.3f} against {r['lack_of_fit_line_ns'] / 1e6:.3f} "
                "ms), more than the per-cycle interval allows: that run differs from the others by more than its "
                "K (its own conditions: clocks, placement, the profiler), or the cost is not straight in K; the "
                "'runs' interval is the honest one" + ("" if r["resolvable"] else
                                                       ", and with it the cost per unit is not resolvable")
                + ("; the predictions do not use this fit (they use the cycle without nsys)"
                   if r["name"] == "cycle" and basis == "cycle_unprofiled" else ""))
    if rates and acc.filter(pl.col("assumed")).height:
        never = acc.filter(pl.col("assumed"))["position"].to_list()
        notes.append(f"positions {', '.join(map(str, never))} were never reached (no request-round had every draft "
                     f"before them accepted): their acceptance is assumed, the pooled rate of the measured positions "
                     f"({pooled:.3f}), and marked so")
    if rates and predict and kmax_measured < top:
        notes.append(f"positions {kmax_measured + 1}..{top} were never drafted: their acceptance is assumed to be "
                     f"the pooled rate of the measured positions ({pooled:.3f}); real acceptance usually falls "
                     "with depth, so predictions beyond K=" f"{kmax_measured} are optimistic")
    return Sweep(**({"cycle_source": "CUDA events and the period without nsys"} if cycle_source else {}),
                 runs=runs, fits=fit_table, acceptance=acc, predictions=pred,
                 recommended_steps=int(best["steps"]) if best else None, basis=basis, phase_basis=phase_basis,
                 fixed_share=fixed_share, pooled_rate=pooled, extrapolate=extrapolate, reasoning=reasoning,
                 notes=notes, model_ok=model_ok, contradictions=contradictions, drift=drift,
                 baseline_ns=None if baseline is None else int(round(baseline.value)),
                 baseline_source=baseline_source, beats_plain=beats_plain, tied_steps=sorted(t[0] for t in ties))


PREDICTION_SCHEMA = {"steps": pl.Int64, "tokens": pl.Int64, "accept_len": pl.Float64,
                     "predicted_accept_len": pl.Float64, "measured_accept_len": pl.Float64, "cycle_ns": pl.Int64,
                     "fit_cycle_ns": pl.Int64, "tokens_per_s": pl.Float64, "tokens_per_s_per_request": pl.Float64,
                     "tokens_per_s_per_request_lo": pl.Float64, "tokens_per_s_per_request_hi": pl.Float64,
                     "measured": pl.Boolean, "extrapolated": pl.Boolean, "assumed": pl.Boolean}
# draft_extend re-runs the draft over the accepted tokens: the same work at every K when the runs accept alike.
# Run means further apart than this (and than their intervals) are drift between the runs, not cost.
DRIFT_TOLERANCE = 0.10


UNITS = {"tokens": "token", "steps": "step", "forwards": "forward"}  # a fit's x, and its unit in the JSON keys
UNIT_WORDS = {"tokens": "token", "steps": "step", "forwards": "draft forward pass"}


def _anchored(k: int, predicted: float | None, measured: dict, rates) -> float | None:
    """The accept length at an unmeasured K: the model's, anchored on the nearest measured K (the one below
    first): measured there plus the model's change from there to K. So a row never reads fewer tokens per cycle
    than a measured K with fewer chain steps (the model's pooled rates can sit below one run's own: K=5 read
    2.440 beside K=4's measured 2.481 on the dense sweep). The model's own value where no K is measured."""
    if predicted is None or not rates:
        return predicted
    known = [m for m in measured if measured[m] is not None]
    if not known:
        return predicted
    below = [m for m in known if m < k]
    k0 = max(below) if below else min(known)
    return measured[k0] + (predicted - expected_accept_len(rates, k0))


def honest(row: dict, part: str) -> tuple[float | None, float | None]:
    """A fit's honest 95% interval of `part` ("per_unit" or "fixed"): the runs' when there is one, else the
    cycles'."""
    if row[f"{part}_runs_lo_ns"] is not None:
        return row[f"{part}_runs_lo_ns"], row[f"{part}_runs_hi_ns"]
    return row[f"{part}_lo_ns"], row[f"{part}_hi_ns"]


def negative_fixed(row: dict) -> bool:
    """A fit whose fixed cost (its time at zero units) is negative beyond its honest 95% interval."""
    hi = honest(row, "fixed")[1]
    return hi is not None and hi < 0


def contradicts(row: dict) -> bool:
    """A fit whose per-unit cost, or fixed cost, is negative beyond its honest 95% interval (the runs' when there
    is one): time cannot fall as work is added, nor be negative with none; the runs differ by something else, or
    the unit counted is not the work done."""
    hi = honest(row, "per_unit")[1]
    return (hi is not None and hi < 0) or negative_fixed(row)


def _fixed_interval(row: dict, unit: float, digits: int) -> str:
    lo, hi = honest(row, "fixed")
    which = "runs" if row["fixed_runs_lo_ns"] is not None else "cycles"
    return f"95% CI {lo / unit:.{digits}f}..{hi / unit:.{digits}f} from the {which}"


def _per_unit_text(fits: pl.DataFrame, name: str) -> str:
    r = fits.filter(pl.col("name") == name).row(0, named=True)
    if honest(r, "per_unit")[1] is not None and honest(r, "per_unit")[1] >= 0 and negative_fixed(r):
        return (f"a fixed cost of {r['fixed_ns'] / 1e6:+.3f} ms, {_fixed_interval(r, 1e6, 3)}, "
                + fixed_cause(r))
    return f"{r['per_unit_ns'] / 1e6:+.3f} ms per {UNIT_WORDS[r['x']]}, {_interval(r, 1e6, 3)}"


def fixed_cause(row: dict) -> str:
    """Why a fit's fixed cost comes out negative beyond its interval, in words: its likely cause."""
    if row["name"] == "draft" and row["x"] == "steps":
        return ("a draft that costs less than nothing at K = 0: the engine likely runs fewer draft forward passes "
                "than K (an EAGLE draft whose first token comes from the draft re-extend before it runs K - 1, as "
                "SGLang's does); the traced command lines do not name such an engine, so the draft is fitted over "
                "K")
    return ("a time below zero with no work: the runs differ by more than their " + UNIT_WORDS[row["x"]]
            + " count (drift between the runs), or the cost grows faster than a straight line")


def extend_drift(extend: pl.DataFrame, runs: pl.DataFrame) -> str | None:
    """draft_extend (run, ns per cycle) is K-independent work: when the runs' means differ by more than
    DRIFT_TOLERANCE and beyond their 95% intervals, while their accept lengths agree within it, the runs differ
    by something other than K (run-to-run drift): the sentence that says so, else None."""
    per = []
    for r in runs.iter_rows(named=True):
        v = extend.filter(pl.col("run") == r["run"])["ns"].to_numpy()
        m = econ.mean_measure(v) if len(v) else None
        if m is not None and m.value > 0:
            per.append((r["steps"], r["accept_len"], m))
    if len(per) < 2:
        return None
    lo = min(per, key=lambda x: x[2].value)
    hi = max(per, key=lambda x: x[2].value)
    accepts = [a for _, a, _ in per if a is not None]
    if accepts and (max(accepts) - min(accepts)) > DRIFT_TOLERANCE * min(accepts):
        return None  # more accepted tokens is more work for draft_extend: not K-independent here
    if hi[2].value - lo[2].value > max(DRIFT_TOLERANCE * lo[2].value, (hi[2].half or 0) + (lo[2].half or 0)):
        return (f"draft_extend does the same work at every K here, yet reads {hi[2].value / 1e6:.3f} ms at "
                f"K={hi[0]} and {lo[2].value / 1e6:.3f} ms at K={lo[0]}: the runs differ by something other than K "
                "(run-to-run drift: measure the step counts in one launch window, interleaved)")
    return None


def _measured(runs: pl.DataFrame, counts: pl.DataFrame, periods: pl.DataFrame | None, cyc: pl.DataFrame,
              basis: str) -> dict:
    """Per measured K: (its accept length, its cycle) as Measures with their 95% intervals, the cycle on the
    basis the predictions use (the period without nsys, its repeated twins' spread in the interval; else the
    attributed cycle under nsys); the accept length None without accept counts per cycle."""
    out = {}
    for r in runs.iter_rows(named=True):
        run = r["run"]
        if basis == "cycle_unprofiled" and periods is not None:
            mine = periods.filter(pl.col("run") == run)
            twins = mine["twin"].to_list() if "twin" in mine.columns and mine["twin"].null_count() == 0 else None
            c = econ.mean_measure(mine["period_ns"].to_numpy(), twins)
        else:
            c = econ.mean_measure(cyc.filter(pl.col("run") == run)["total_ns"].to_numpy())
        L = None
        if "cycle" in counts.columns:
            mine = counts.filter(pl.col("run") == run)
            L = econ.rounds_accept(mine) if mine.height else None
        out[r["steps"]] = (L, c)
    return out


def _against_baseline(pred: pl.DataFrame, baseline, own: dict) -> pl.DataFrame:
    """The predictions with speedup, speedup_lo, speedup_hi against the plain-decode step `baseline` (a
    Measure, or None), from each row's own accept length and cycle; 95% intervals at the measured K from their
    runs' cycles and accept counts (`own`: `_measured`)."""
    cols = {"speedup": pl.Float64, "speedup_lo": pl.Float64, "speedup_hi": pl.Float64}
    if baseline is None or not pred.height:
        return pred.with_columns([pl.lit(None, dtype=t).alias(c) for c, t in cols.items()])
    out = []
    for r in pred.iter_rows(named=True):
        s = lo = hi = None
        if r["accept_len"] is not None and r["cycle_ns"]:
            # the row's own accept length and cycle, against the step in integer ns (as `analyze` takes it)
            s = r["accept_len"] * int(round(baseline.value)) / r["cycle_ns"]
            if r["measured"]:  # as measured: the run's own, as `analyze` says them, with their intervals
                L, c = own[r["steps"]]
                rl = L.rel if L is not None else (0.0 if r["measured_accept_len"] is not None else None)
                rb = baseline.rel if baseline.half is not None else 0.0
                lo, hi = econ.band(s, rl, rb, c.rel if c is not None else None)
        out.append({**r, "speedup": s, "speedup_lo": lo, "speedup_hi": hi})
    return pl.DataFrame(out, schema={**pred.schema, **cols}, orient="row")


def _against_plain(best: dict, baseline, source: str | None) -> str:
    s, lo, hi = best["speedup"], best["speedup_lo"], best["speedup_hi"]
    if s is None:
        return "against plain decoding: no accept length at the best K, so no speedup"
    ci = "" if lo is None else f" ({lo:.2f}-{hi:.2f})"
    where = f" (baseline step {baseline.value / 1e6:.3f} ms, {source})" if source else ""
    if lo is not None and lo <= 1 <= hi:
        word = f"a wash against plain decoding: {s:.2f}x{ci}, the 95% interval holds 1"
    elif s > 1:
        word = f"speculation wins against plain decoding: {s:.2f}x{ci}"
    else:
        word = (f"speculation loses against plain decoding: {s:.2f}x{ci}; no measured K beats plain decoding"
                if lo is not None or s < 1 else f"{s:.2f}x")
    return f"at the best K={best['steps']}, {word}{where}"


def _verify_tokens(runs: pl.DataFrame, k: int) -> int:
    """Verify tokens for K steps: as the runs do it (tokens - steps is constant for a chain draft: 1)."""
    extra = (runs["tokens"] - runs["steps"]).unique()
    return k + (int(extra[0]) if extra.len() == 1 else 1)


def _interval(row: dict, unit: float, digits: int) -> str:
    lo, hi = row["per_unit_runs_lo_ns"], row["per_unit_runs_hi_ns"]
    which = "runs"
    if lo is None:
        lo, hi, which = row["per_unit_lo_ns"], row["per_unit_hi_ns"], "cycles"
    return f"95% CI {lo / unit:.{digits}f}..{hi / unit:.{digits}f} from the {which}"


def verify_in_words(v: dict, fixed_share: float, at_tokens: int) -> str:
    """Verify's cost as the user needs it: how much of it is fixed, so what cutting draft tokens saves."""
    ms = 1e6
    if contradicts(v) and (honest(v, "per_unit")[1] or 0) >= 0:
        return (f"verify's fixed cost comes out negative ({v['fixed_ns'] / ms:+.3f} ms, {_fixed_interval(v, ms, 3)}): "
                + fixed_cause(v) + "; verify's fixed share is not told")
    if contradicts(v):
        return (f"verify's cost per token comes out negative ({v['per_unit_ns'] / ms:+.4f} ms per token, "
                f"{_interval(v, ms, 4)}): verifying more tokens cannot take less time, so these runs differ by "
                "more than their token counts, and verify's fixed share is not told")
    if v["resolvable"]:
        share = f"{fixed_share:.0%}"
        return (f"verify is {share} fixed cost at {at_tokens} tokens: " + (
            "cutting draft tokens barely changes it" if fixed_share >= 0.9 else
            f"each verified token adds {v['per_unit_ns'] / ms:.4f} ms"))
    hi = v["per_unit_runs_hi_ns"] if v["per_unit_runs_hi_ns"] is not None else v["per_unit_hi_ns"]
    top = v["fixed_ns"] + max(hi, 0.0) * at_tokens
    least = v["fixed_ns"] / top if top > 0 else float("nan")
    return (f"verify is at least {least:.0%} fixed cost at {at_tokens} tokens (with the per-token cost at the top of "
            "its interval): " + ("cutting draft tokens barely changes it" if least >= 0.9 else
                                  "how much a verified token costs is not told by these runs"))


def _ci_text(lo, hi, digits: int) -> str:
    return "" if lo is None else f" ({lo:.{digits}f}-{hi:.{digits}f})"


def tied(pred: pl.DataFrame, best: dict | None, own: dict) -> list[tuple[int, float, float, float]]:
    """The measured K whose tokens/s the best measured K's is not told apart from: (K, best over it, the ratio's 95%
    interval), when that interval holds 1 (delta method over both runs' accept lengths and cycles: acceptance's
    own uncertainty counts, not only the cycle's). Empty when the best K was not measured."""
    if best is None or not best["measured"] or not best["tokens_per_s_per_request"]:
        return []

    def rels(row):
        L, c = own[row["steps"]]
        return [L.rel if L is not None else (0.0 if row["measured_accept_len"] is not None else None),
                c.rel if c is not None else None]

    out = []
    for r in pred.filter(pl.col("measured") & (pl.col("steps") != best["steps"])).iter_rows(named=True):
        if not r["tokens_per_s_per_request"]:
            continue
        ratio = best["tokens_per_s_per_request"] / r["tokens_per_s_per_request"]
        lo, hi = econ.band(ratio, *rels(best), *rels(r))
        if lo is not None and lo <= 1.0:
            out.append((r["steps"], ratio, lo, hi))
    return sorted(out, key=lambda x: x[1])


def _reasoning(fits, basis, phase_basis, pred, best, rates, pooled, kmax, fixed_share, at_tokens,
               extrapolate, last_seen: int = 0, model_ok: bool = True, predict: bool = True,
               ties: list = ()) -> list[str]:
    f = {r["name"]: r for r in fits.iter_rows(named=True)}
    v, d, c = f["verify"], f["draft"], f[basis]
    ms = 1e6
    lines = []
    if contradicts(v):
        pass  # said in words below
    elif v["resolvable"]:
        lines.append(
            f"verify = {v['fixed_ns'] / ms:.3f} ms + {v['per_unit_ns'] / ms:.4f} ms per token ({_interval(v, ms, 4)}; "
            f"{PHASE_BASES[phase_basis]}): at {at_tokens} tokens {fixed_share:.1%} of verify does not depend on the "
            "number of tokens, so " + ("verifying more tokens is nearly free" if fixed_share > 0.9
                                       else f"every verified token costs {v['per_unit_ns'] / ms:.4f} ms"))
    else:
        lines.append(
            f"verify's cost per token is not resolvable from these runs: {v['per_unit_ns'] / ms:+.4f} ms per token, "
            f"{_interval(v, ms, 4)}, which does not lie above zero ({PHASE_BASES[phase_basis]}); verify = "
            f"{v['fixed_ns'] / ms:.3f} ms at these sizes, and more runs, or runs further apart, would tell the "
            "per-token cost")
    lines.append(verify_in_words(v, fixed_share, at_tokens))
    unit = UNIT_WORDS[d["x"]]
    draft = (f"draft = {d['fixed_ns'] / ms:.3f} ms + {d['per_unit_ns'] / ms:.3f} ms per {unit} ({_interval(d, ms, 3)}; "
             f"{PHASE_BASES[phase_basis]})")
    if d["x"] == "forwards":
        draft += (f"; fitted over the draft's forward passes, K - 1 per cycle: the engine (SGLang's EAGLE) takes the "
                  "first draft token from the draft re-extend before it and runs no forward for the last step")
    if contradicts(d) and negative_fixed(d):
        draft += (f": a fixed cost of {d['fixed_ns'] / ms:+.3f} ms ({_fixed_interval(d, ms, 3)}) contradicts the "
                  "model, " + fixed_cause(d))
    elif contradicts(d):
        draft += f": a negative cost per {unit} contradicts the model"
    elif not d["resolvable"]:
        draft += f": the cost per {unit} is not resolvable from these runs (its interval does not lie above zero)"
    lines.append(draft)
    line = (f"cycle = {c['fixed_ns'] / ms:.3f} ms {c['per_unit_ns'] / ms:+.3f} ms per step ("
            + ("period measured without nsys" if basis == "cycle_unprofiled" else
               "attributed GPU time under nsys: inflated where nsys slows a launch-bound phase, see the "
               "cross-check") + ")")
    if c["per_unit_ns"] < 0:
        line += (": a cycle cannot get shorter as draft steps are added; the runs differ by something other "
                 "than K, and nothing is predicted from this line")
    elif negative_fixed(c):
        line += f": a negative fixed cost ({_fixed_interval(c, ms, 3)}), {fixed_cause(c)}; nothing is predicted from it"
    lines.append(line)
    if rates:
        lines.append("acceptance per position: " + ", ".join(
            f"p{i + 1}={p:.3f}" + (" (assumed)" if i + 1 > last_seen else "") for i, p in enumerate(rates[:kmax]))
            + f" (pooled {pooled:.3f})")
    if best is None:
        lines.append("no accept length (no sidecar counts, no --accept, no --server-log): the cost models alone, "
                     "no throughput and no recommended step count")
        return lines
    rows = {r["steps"]: r for r in pred.iter_rows(named=True)}
    k = best["steps"]
    here = rows[k]
    among = "every predicted K (--extrapolate)" if extrapolate else "the measured step counts"
    lines.append(f"tokens/s peaks at K={k} among {among}: accept length {here['accept_len']:.3f} per "
                 f"{here['cycle_ns'] / ms:.3f} ms cycle" + (" (both measured)" if here["measured"] else "")
                 + f" = {here['tokens_per_s_per_request']:.1f}"
                 + _ci_text(here["tokens_per_s_per_request_lo"], here["tokens_per_s_per_request_hi"], 1)
                 + " tokens/s per request" + ("" if model_ok else " (as measured: the model is not used)"))
    for other, ratio, lo, hi in ties:
        o = rows[other]
        lines.append(f"K={k} is not told apart from K={other} within the 95% intervals of their accept lengths and "
                     f"cycles: {here['tokens_per_s_per_request']:.1f} against {o['tokens_per_s_per_request']:.1f}"
                     + _ci_text(o["tokens_per_s_per_request_lo"], o["tokens_per_s_per_request_hi"], 1)
                     + f" tokens/s per request, K={k} over K={other} {ratio:.3f}x ({lo:.3f}-{hi:.3f}): either "
                     "will do; more cycles per run (a wider --capture-cycles window) or repeated runs would tell "
                     "them apart")
    others = pred.filter(pl.col("measured"))
    if not ties and here["measured"] and others.height > 1 \
            and others["tokens_per_s_per_request_lo"].null_count() == 0:
        lines.append(f"K={k} is told apart from every other measured K: its tokens/s lies above theirs beyond the "
                     "95% intervals of their accept lengths and cycles")
    if not model_ok:
        return lines
    if predict and not extrapolate:
        top = pred.sort("tokens_per_s_per_request", descending=True, nulls_last=True).row(0, named=True)
        if top["steps"] != k:
            lines.append(f"the model predicts more at K={top['steps']} ({top['tokens_per_s_per_request']:.1f} tokens/s "
                         f"per request), which no run measured: measure it (or pass --extrapolate to recommend from "
                         "the model)")
    for other in (k - 1, k + 1):
        if other in rows:
            o = rows[other]
            lines.append(
                f"K={other}" + ("" if o["measured"] else " (predicted)")
                + f": {o['accept_len'] - here['accept_len']:+.3f} tokens per cycle "
                f"({(o['accept_len'] / here['accept_len'] - 1) * 100:+.1f}%) for "
                f"{(o['cycle_ns'] - here['cycle_ns']) / ms:+.3f} ms ({(o['cycle_ns'] / here['cycle_ns'] - 1) * 100:+.1f}%)"
                f" -> {(o['tokens_per_s_per_request'] / here['tokens_per_s_per_request'] - 1) * 100:+.1f}% tokens/s")
    if not extrapolate:
        return lines
    # Does the choice survive the per-step cost's uncertainty? (the predicted K: the cycle from the fit)
    pool = pred
    choices = set()
    for slope in (c["per_unit_lo_ns"], c["per_unit_hi_ns"]):
        best_k, best_v = None, -1.0
        for r in pool.iter_rows(named=True):
            cyc = c["fixed_ns"] + (c["per_unit_ns"] if slope is None else slope) * r["steps"]
            val = r["accept_len"] / cyc if cyc > 0 else -1
            if val > best_v:
                best_k, best_v = r["steps"], val
        choices.add(best_k)
    if choices != {k}:
        span = sorted(choices | {k})
        lines.append(f"with the per-step cycle cost anywhere in its 95% interval the best K lies in "
                     f"{span[0]}..{span[-1]}: measure those before settling")
    else:
        lines.append(f"K={k} stays the best with the per-step cycle cost anywhere in its 95% interval")
    return lines
