"""What a run's files give its economics (derived/economics.py): the cycles it is measured over and their period and
accept length (`window_measured`, which the sweep takes too), its draft's shape from its settings
(`draft_shape_of`), and the economics against its baseline step (`economics_of`). Pure functions of tables: the
files are read by app/run.py into a `RunData`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import polars as pl

from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.derived import crosscheck as cc
from specprof.analyzer.derived import draft_shape as ds
from specprof.analyzer.derived import economics as econ
from specprof.analyzer.derived import groups as gr
from specprof.analyzer.derived.breakdown import CycleBreakdown
from specprof.analyzer.derived.draft_shape import shape_notes
from specprof.analyzer.model.run_data import BASELINE_DIR, RunData
from specprof.analyzer.model.settings import RunSettings
from specprof.analyzer.model.sidecars import Sidecars


def aligned_cycles(check: cc.CrossCheck | None) -> tuple[int | None, int | None]:
    """The sidecar indices of the first and last cycle the capture holds (None, None when not aligned)."""
    if check is not None:
        m = check.alignment.filter(pl.col("matched_cycles") > 0)
        if m.height:
            return int(m["first_index"].min()), int(m["last_index"].max())
    return None, None


@dataclass
class Measured:
    """One measurement of a run over the sidecar cycles it is compared on (`window_measured`): the run under the
    profiler (its capture's cycles) or its twin without it (the same window; its repeated twins pooled). The
    economics' estimate of that source, and the sweep's accept length and cycle for the run, are these."""

    cycles: pl.DataFrame  # the sidecar cycles kept (`crosscheck.window_cycles`)
    runs: pl.DataFrame | None  # file, run: the repeated twin of each sidecar file (None under the profiler)
    period: econ.Measure | None  # the busy cycle period, start to start
    accept_len: float | None  # per request-round, the bonus token included (None without accept counts)
    accept: econ.Measure | None  # the same with its 95 % interval
    batch: float | None  # mean requests per cycle
    accepts: pl.DataFrame  # the sidecars' accept counts (file, cycle, request, correct), every cycle's

    @property
    def file_rounds(self) -> pl.DataFrame:
        """`rounds` with the sidecar file of each (file first)."""
        every = self.every_round
        if not every.height:
            return every
        return every.join(self.cycles.select("file", cycle="index"), on=["file", "cycle"], how="semi")

    @property
    def every_round(self) -> pl.DataFrame:
        """The request-rounds of every cycle of the sidecars (file, cycle, request, correct, twin): what a batch-size
        group's cycles (file, index; derived/groups.py, over every cycle of a twin) select from."""
        schema = {"file": self.accepts.schema.get("file", pl.Int64), "cycle": pl.Int64, "request": pl.Int64,
                  "correct": pl.Int64, "twin": pl.Utf8}
        if not self.accepts.height:
            return pl.DataFrame(schema=schema)
        seen = self.accepts
        seen = seen.join(self.runs, on="file", how="left").rename({"run": "twin"}) if self.runs is not None \
            else seen.with_columns(twin=pl.lit(None, dtype=pl.Utf8))
        return seen.select("file", "cycle", "request", "correct", "twin")

    @property
    def rounds(self) -> pl.DataFrame:
        """The request-rounds of the cycles kept: cycle, request, correct, twin (the repeated twin's folder;
        null under the profiler)."""
        return self.file_rounds.drop("file")


def window_measured(sides: Sidecars, first: int | None, last: int | None, twin: bool) -> Measured:
    """The period and accept length of `sides` over the cycles compared: a sidecar's own capture window, else
    the sidecar indices [first, last] the trace holds (`aligned_cycles`); `twin`: the sidecars are the run's twins
    without the profiler (their repeats each a run of the intervals). The one place both `analyze`'s economics
    and `sweep` take a run's accept length and cycle from."""
    window = cc.window_cycles(sides, first, last)
    runs = econ.run_of(sides.files) if twin else None
    m = econ.period_measure(sides.cycles, "file", keep=window, runs=runs)
    _, batch, _ = econ.accept_stats(window)
    accept = econ.accept_measure(window, runs)
    return Measured(window, runs, m, accept.value if accept else None, accept, batch, sides.accepts)


def _estimate(source: str, profiled: bool, x: Measured, baseline_ns: int | None, steps: int | None,
              base_m: econ.Measure | None) -> dict:
    m = x.period
    return econ.estimate(source, profiled, m.n if m else 0, int(round(m.value)) if m else None, x.accept_len,
                         x.batch, baseline_ns, steps, m, x.accept, base_m)


def economics_for(a: Attribution, sidecars: Sidecars | None, baseline: Sidecars | None,
                  check: cc.CrossCheck | None, baseline_ns: int | None, baseline_source: str | None,
                  notes: list[str], steps: int | None = None, breakdown: CycleBreakdown | None = None,
                  run: str | None = None, baseline_measure: econ.Measure | None = None) -> econ.Economics | None:
    """Estimates from the unprofiled sidecar (headline), the profiled sidecar, or (no sidecar, a baseline given)
    the trace's cycles with the accept length unknown. None when there is nothing to estimate. `steps`: the
    draft steps K (the most a cycle can accept is K + 1); `breakdown`: the decode cycle's, for how much of it the
    GPU waited on the host; `run`: the run's directory (None: a trace file alone), for the hint of how to measure
    it without the profiler."""
    rows = []
    under = cc.profiler_name(a.trace) if a is not None else "nsys"  # None: a run without nsys, `baseline` its own
    base_m = baseline_measure if baseline_measure is not None else (
        econ.Measure(baseline_ns, None, 0, basis="given") if baseline_ns else None)
    measured = []  # the sidecar measurements, headline first
    if sidecars is not None or a is None:
        first, last = aligned_cycles(check)
        if baseline is not None:
            measured.append(window_measured(baseline, first, last, True))
            rows.append(_estimate(f"sidecar without {under}", False, measured[-1], baseline_ns, steps, base_m))
        if sidecars is not None:
            measured.append(window_measured(sidecars, first, last, False))
            rows.append(_estimate(f"sidecar under {under}", True, measured[-1], baseline_ns, steps, base_m))
    elif a.cycles.height and baseline_ns is not None:  # no sidecar: only with a baseline is there anything to say
        m = econ.period_measure(a.cycles)
        rows.append(econ.estimate(f"trace cycle ranges under {under}", True, m.n if m else 0,
                                  int(round(m.value)) if m else None, None, None, baseline_ns, steps, m, None, base_m))
        notes.append("no sidecar of this run: the accept length is unknown (the sidecar carries the accept "
                     "counts)")
    if not rows:
        return None
    if steps is None:
        notes.append("the number of draft steps is unknown (not on the traced command line; give --steps K): "
                     "whether the break-even is within reach (at most K + 1 tokens per cycle) is not checked")
    waits = None
    if breakdown is not None:
        waits = breakdown.phases.filter(pl.col("busy_share").is_not_null()).select(
            "phase", share_of_cycle="share", wait_share=1 - pl.col("busy_share"))
    twin = (f"`specprof capture --no-nsys ... -o {os.path.join(run, BASELINE_DIR)} -- <the same command>`, then "
            f"analyze {run} again" if run else
            "`specprof capture --no-nsys -o RUN/no-nsys -- <the same command>` (docs/capture.md)")
    out = econ.economics(rows, baseline_ns, baseline_source, notes, waits, under, twin, base_m)
    if measured and measured[0].accept is not None:
        out.rounds, out.every_round = measured[0].file_rounds, measured[0].every_round
    return out


def economics_of(a: Attribution | None, data: RunData, check: cc.CrossCheck | None, breakdown: CycleBreakdown | None
                 ) -> econ.Economics | None:
    """Does speculation pay, for the attribution `a` of the run whose files `data` holds (`check`: its
    cross-check; `breakdown`: its decode cycle's breakdown): `economics_for` with the baseline step and the
    draft steps (given, else from the traced command line). `a` None: a run without nsys, its sidecars measured as
    a run under nsys measures its twin without nsys (the same rows, the same numbers)."""
    step = data.baseline_step
    notes = list(step.notes) if step else []
    feeding = data.sidecars
    if foreign_sidecar(a, data, check):
        feeding = None  # a sidecar of another run: its accept counts and cycles are not this trace's
        notes.append("the sidecar does not line up with the trace (see the cross-check): it feeds nothing here, "
                     "neither the accept length nor the cycle time")
    shape = draft_shape_of(a, data, check)
    if a is None:  # a run without nsys: its own sidecars are the run without the profiler
        feeding, baseline = None, data.sidecars
    else:
        baseline = data.baseline if feeding is not None else None
    economics = economics_for(a, feeding, baseline, check,
                              step.ns if step else None, step.source if step else None, notes, shape.steps, breakdown,
                              data.folder, step.measure if step else None)
    if economics is not None:
        economics.draft_tree = shape.as_tree()
        economics.notes.extend(shape_notes(shape))
    thresholds = gr.adaptive_edges(data.adaptive_thresholds)
    pooling = None
    if data.adaptive_note is not None:  # an adaptive run that names its config: say what it gave
        pooling = data.adaptive_note if thresholds else "powers of two; " + data.adaptive_note
    if economics is not None and a is None and baseline is not None:
        # a run without nsys alone: its own sidecars are the run without the profiler
        economics.groups = gr.economics_groups(economics, None, baseline, None, None, step, shape.steps,
                                               thresholds=thresholds, pooling=pooling)
    elif economics is not None and feeding is not None:
        economics.groups = gr.economics_groups(economics, feeding, data.baseline, *aligned_cycles(check), step,
                                               shape.steps, cc.profiler_name(a.trace), thresholds, pooling)
    head = economics.headline if economics is not None else None
    batch = step.batch if step else None
    if economics is not None and economics.groups is not None and economics.groups.several:
        batch = None  # the per-batch-size table compares like with like
    if head is not None and head["batch"] is not None and batch is not None \
            and abs(batch - head["batch"]) > 0.01 * head["batch"]:
        economics.notes.append(f"the baseline ran {batch:g} requests per step, this run {head['batch']:g} "
                               "per cycle: a step time depends on the batch, so the speedup compares unlike runs")
    return economics


def draft_shape_of(a: Attribution, data: RunData, check: cc.CrossCheck | None) -> ds.DraftShape:
    """The draft's shape of the run whose trace `a` is, from its settings (`data.settings`); from its manifest's alone
    when its sidecar is of another run (the cross-check `check` does not line it up with the trace). K given with
    --steps (`data.steps`) wins."""
    return ds.draft_shape(settings_of(a, data, check), data.steps)


def settings_of(a: Attribution, data: RunData, check: cc.CrossCheck | None) -> RunSettings:
    """The settings of the run whose trace `a` is: its files' (`data.settings`), or its manifest's alone where its
    sidecar is of another run (the cross-check `check` does not line it up with the trace)."""
    return data.manifest_settings if foreign_sidecar(a, data, check) else data.settings


def foreign_sidecar(a: Attribution | None, data: RunData, check: cc.CrossCheck | None) -> bool:
    """The run's sidecar is of another run: the cross-check `check` does not line up with the trace's cycles."""
    return a is not None and data.sidecars is not None and check is not None and bool(a.cycles.height) and not cc.aligned(check)
