"""Do the cycles outside nsys's capture window run as fast as the unprofiled twin?

    python3 scripts/sglang/outside_window.py RUN [RUN ...]      (each RUN with its twin in RUN/no-nsys)

A server under `specprof capture --capture-cycles W:N` runs all its cycles under nsys, but nsys records only
the N of the window; the tracer's sidecar has every cycle (phase host times, CUDA-event GPU times). This
compares, per phase, three parts of the profiled run with the twin's cycles of the same index (the twin counts
its decode cycles the same way): before the window, inside it, after it. Only decode cycles at the full batch
in both runs count (the warm-up's smaller batches and the last, emptying ones are left out), and so does the
cycle at each edge of the window (the one whose end starts the capture, and the one that waits for the stop's
flush). A stall is left out too: a cycle whose GPU time (its CUDA events) or period in either run is more than
STALL_FACTOR times that run's median over the compared cycles (one-off work such as the 100-130 ms first cycle at
the full batch in the first launch of each configuration on the dense target; each part says how many). Printed
per part and phase: mean ms per cycle under nsys and in the twin, their ratio and its 95 % interval (delta
method), as a Markdown table.
"""

from __future__ import annotations

import glob
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from specprof.analyzer.readers.sidecar import read_sidecars  # noqa: E402

STALL_FACTOR = 3.0  # (as economics.IDLE_GAP_FACTOR: a period that long is no steady-state cycle)


def per_cycle(sc) -> pl.DataFrame:
    """Per decode cycle: index, batch_size, and ns per measure: gpu_<phase> (CUDA events, `gpu_cycle` the
    cycle's own pair), cpu_<phase> (host time of the phase's ranges), cpu_period (start to next start)."""
    starts = sc.cycles.sort("file", "index").select(
        "index", cpu_period=pl.col("start").shift(-1).over("file") - pl.col("start"))
    out = sc.cycles.filter(pl.col("decode")).select("index", "batch_size").join(starts, on="index")
    gpu = sc.gpu_time.rename({"cycle": "index"}).group_by("index", "phase").agg(pl.col("ns").sum())
    cpu = sc.phases.filter(pl.col("in_cycle")).group_by(index="cycle", phase="name").agg(
        ns=(pl.col("end") - pl.col("start")).sum())
    for prefix, table in (("gpu_", gpu), ("cpu_", cpu)):
        if table.height:
            wide = table.pivot(on="phase", index="index", values="ns")
            out = out.join(wide.rename({c: prefix + c for c in wide.columns if c != "index"}), on="index",
                           how="left")
    return out


def ratio(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float, float]:
    ma, mb = a.mean(), b.mean()
    r = ma / mb
    rel = math.sqrt(a.var(ddof=1) / len(a) / ma ** 2 + b.var(ddof=1) / len(b) / mb ** 2)
    return ma, mb, r, r * (1 - 1.96 * rel), r * (1 + 1.96 * rel)


def compare(run: str) -> list[dict]:
    files = [sorted(glob.glob(os.path.join(run, *sub, "specprof-sidecar.*.jsonl"))) for sub in ((), ("no-nsys",))]
    if [len(f) for f in files] != [1, 1]:
        raise SystemExit(f"{run}: one sidecar under nsys and one in no-nsys/ expected (one process per run)")
    profiled, twin = (read_sidecars(f) for f in files)
    edges = {r["event"]: r["after_cycle"] for r in profiled.capture.iter_rows(named=True)}
    if "start" not in edges or "stop" not in edges:
        raise SystemExit(f"{run}: the sidecar has no complete capture window (run with --capture-cycles)")
    first, last = edges["start"] + 1, edges["stop"]
    a, b = per_cycle(profiled), per_cycle(twin)
    full = max(a["batch_size"].max(), b["batch_size"].max())
    both = a.join(b, on="index", suffix="_twin").filter(
        (pl.col("batch_size") == full) & (pl.col("batch_size_twin") == full))
    stall = pl.lit(False)
    for c in ("gpu_cycle", "gpu_cycle_twin", "cpu_period", "cpu_period_twin"):
        if c in both.columns:
            stall = stall | (pl.col(c) > STALL_FACTOR * pl.col(c).median()).fill_null(False)
    both = both.with_columns(stall=stall)
    parts = {"before": both.filter(pl.col("index") < first - 1),
             "inside": both.filter(pl.col("index").is_between(first + 1, last - 1)),
             "after": both.filter(pl.col("index") > last + 1)}
    measures = sorted(c for c in a.columns if c.startswith(("gpu_", "cpu_")) and c + "_twin" in both.columns)
    rows = []
    for part, cycles in parts.items():
        stalls = int(cycles["stall"].sum())
        cycles = cycles.filter(~pl.col("stall"))
        for m in measures:
            x = cycles.select(m, m + "_twin").drop_nulls()
            if x.height < 3:
                continue
            ma, mb, r, lo, hi = ratio(x[m].to_numpy().astype(float), x[m + "_twin"].to_numpy().astype(float))
            rows.append({"run": os.path.basename(os.path.normpath(run)), "part": part, "cycles": x.height,
                         "first": int(cycles["index"].min()), "last": int(cycles["index"].max()), "stalls": stalls,
                         "measure": m, "nsys_ms": ma / 1e6, "twin_ms": mb / 1e6, "ratio": r, "lo": lo, "hi": hi})
    return rows


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    results = [compare(run) for run in argv]
    print("| run | part (cycles, stalls left out) | measure | under nsys ms | twin ms | ratio | 95 % interval |")
    print("|---|---|---|---|---|---|---|")
    for rows in results:
        for r in rows:
            print(f"| {r['run']} | {r['part']} ({r['first']}..{r['last']}, {r['cycles']}, {r['stalls']}) | "
                  f"{r['measure']} | {r['nsys_ms']:.3f} | {r['twin_ms']:.3f} | {r['ratio']:.3f} | "
                  f"{r['lo']:.3f}..{r['hi']:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
