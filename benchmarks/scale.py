"""Large captures made from a real one: time-shifted copies of a capture's tables, for scale tests.

`scaled_trace(trace, copies)` lays `copies` copies of a real Trace end to end on its clock (each copy shifted
by the capture's span plus a 1 ms gap; op, range and correlation ids offset so that they stay unique), so the
result has the real capture's kernels, ranges, launches and gaps, `copies` times over. `scaled_analysis(path,
ops)` analyses enough copies of the capture at `path` to hold at least `ops` GPU ops.

    python3 benchmarks/scale.py --ops 1000000 --html /tmp/report-1m.html   # build, analyse, render, time

Used by benchmarks/html_report.py and the HTML report's scale numbers (docs/report.md).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import polars as pl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from specprof.analyzer.core.attribution import attribute  # noqa: E402
from specprof.analyzer.derived.analysis import Analysis, analyse  # noqa: E402
from specprof.analyzer.model.trace import Trace  # noqa: E402
from specprof.analyzer.readers.inputs import manifest  # noqa: E402
from specprof.analyzer.readers.load import load_trace  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "reference-k4")
GAP_NS = 1_000_000


def _span(trace: Trace) -> tuple[int, int]:
    lows = [df[c].min() for df, c in ((trace.ops, "start"), (trace.api, "start"), (trace.ranges, "start"),
                                      (trace.marks, "ts")) if df.height]
    highs = [df[c].max() for df, c in ((trace.ops, "end"), (trace.api, "end"), (trace.ranges, "end"),
                                       (trace.marks, "ts")) if df.height]
    return int(min(lows)), int(max(highs))


def scaled_trace(trace: Trace, copies: int) -> Trace:
    """`copies` time-shifted copies of `trace`, end to end, as one Trace (same processes, threads, streams)."""
    if copies < 1:
        raise ValueError("copies must be at least 1")
    lo, hi = _span(trace)
    shift = hi - lo + GAP_NS
    corr_step = int(max(trace.ops["correlation"].max() or 0, trace.api["correlation"].max() or 0)) + 1
    op_step = int(trace.ops["op_id"].max() or 0) + 1
    range_step = int(trace.ranges["range_id"].max() or 0) + 1 if trace.ranges.height else 1

    def stack(df: pl.DataFrame, times: tuple[str, ...], ids: dict[str, int]) -> pl.DataFrame:
        k = pl.DataFrame({"_k": pl.int_range(copies, eager=True).cast(pl.Int64)})
        out = df.join(k, how="cross").with_columns(
            *[(pl.col(c) + pl.col("_k") * shift).alias(c) for c in times],
            *[(pl.col(c) + pl.col("_k") * step).alias(c) for c, step in ids.items()],
        )
        return out.sort("_k", maintain_order=True).drop("_k")

    return Trace(
        ops=stack(trace.ops, ("start", "end"), {"op_id": op_step, "correlation": corr_step}),
        api=stack(trace.api, ("start", "end"), {"correlation": corr_step}),
        ranges=stack(trace.ranges, ("start", "end"), {"range_id": range_step}),
        marks=stack(trace.marks, ("ts",), {}),
        meta=trace.meta,
    )


def scaled_analysis(path: str = FIXTURE, ops: int = 1_000_000) -> Analysis:
    """The analysis of enough time-shifted copies of the capture at `path` to hold at least `ops` GPU ops."""
    trace = load_trace(path)
    copies = max(1, math.ceil(ops / trace.ops.height))
    return analyse(attribute(scaled_trace(trace, copies)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixture", default=FIXTURE)
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--html", help="also render the HTML report to this file")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    a = scaled_analysis(args.fixture, args.ops)
    t1 = time.perf_counter()
    print(f"{a.ops.height:,} ops, {a.ranges.height:,} ranges, {a.cycles.height:,} cycles, "
          f"{a.segments.height:,} segments: load + analyse {t1 - t0:.1f} s")
    if args.html:
        from specprof.analyzer.render import html

        html.write(a, args.html, manifest=manifest(args.fixture))
        t2 = time.perf_counter()
        print(f"{args.html}: {os.path.getsize(args.html) / 1e6:.1f} MB, rendered in {t2 - t1:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
