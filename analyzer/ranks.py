"""Several traces at once (one per rank): expand the CLI's arguments, analyse each, report per rank.

A distributed job profiled with torch.profiler writes one Kineto trace per rank (SGLang:
`SGLANG_TORCH_PROFILER_DIR`, one `*-TP-<rank>*.trace.json.gz` per TP rank). Each trace is read and
analysed on its own (each rank has its own clock and its own launching threads); the results are
reported side by side, ordered by rank (`distributedInfo.rank`), then by file name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import polars as pl

from analyzer.errors import SpecprofError

KINETO_SUFFIXES = (".json", ".json.gz")
SCHEMA = "specprof.ranks/1"


@dataclass
class RankResult:
    rank: int | None
    path: str
    digest: object  # analyzer.parallel.Digest: what this trace's analysis gives the command


def expand(paths) -> list[str]:
    """The traces the arguments name, in order.

    A file stays as given. A directory that holds an nsys export (`*.sqlite`, a run directory made
    by `specprof capture`) stays as given: the existing single-run path resolves it. Any other
    directory stands for every PyTorch-profiler trace in it (`*.json`, `*.json.gz` whose top level
    has `traceEvents`; other JSON files, such as a manifest, are passed over).
    """
    out: list[str] = []
    for path in paths:
        path = str(path)
        if not os.path.isdir(path):
            out.append(path)
            continue
        exports = sorted(n for n in os.listdir(path) if n.endswith(".sqlite"))
        if len(exports) > 1 and not os.path.isfile(os.path.join(path, "manifest.json")):
            out.extend(os.path.join(path, n) for n in exports)  # a folder of exports: each one
            continue
        if exports:
            out.append(path)
            continue
        traces = kineto_traces(path)
        if len(traces) == 1:
            out.append(path)  # a run directory: the single-run path finds its trace and sidecar
            continue
        if not traces:
            raise SpecprofError(
                f"{path}: a directory with no nsys SQLite export (*.sqlite) and no PyTorch-profiler "
                "trace (*.json, *.json.gz with traceEvents) in it; give an export, a trace, or a run "
                "directory made by `specprof capture`", path)
        out.extend(traces)
    if not out:
        raise SpecprofError("no trace given; give an nsys export, a PyTorch-profiler trace or a directory")
    return out


def kineto_traces(folder: str) -> list[str]:
    """The PyTorch-profiler traces in `folder`, sorted by name."""
    from analyzer.readers.kineto import is_kineto

    paths = (os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(KINETO_SUFFIXES))
    return [p for p in paths if os.path.isfile(p) and is_kineto(p)]


def analyze_all(paths: list[str], opts, jobs: int = 1, dask=None) -> list[RankResult]:
    """Read and analyse each trace (in parallel with `jobs` or on Dask: analyzer/parallel.py); ordered by rank
    (unknown ranks last), then path."""
    from analyzer import parallel

    digests = parallel.analyse_many(paths, opts, jobs=jobs, dask=dask)
    results = [RankResult(rank=d.rank, path=d.path, digest=d) for d in digests]
    results.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.path))
    return results


def label(r: RankResult) -> str:
    return f"rank {r.rank}" if r.rank is not None else os.path.basename(r.path)


def summary(results: list[RankResult]) -> pl.DataFrame:
    """One row per trace: GPU ops, wall and busy time summed over its streams, the idle kinds,
    communication time, and the phase with the most attributed time."""
    rows = [{"rank": r.rank, "trace": r.path, **r.digest.row} for r in results]
    return pl.DataFrame(rows, schema={
        "rank": pl.Int64, "trace": pl.Utf8, "ops": pl.Int64, "devices": pl.Int64, "streams": pl.Int64,
        "wall": pl.Int64, "busy": pl.Int64, "cpu_wait": pl.Int64, "launch": pl.Int64, "idle": pl.Int64,
        "communication": pl.Int64, "top_phase": pl.Utf8})


def skew(results: list[RankResult]) -> pl.DataFrame:
    """Per phase, attributed ns across the traces (each on its own clock, so no wait/transfer split here):
    analyzer.multirank.SKEW_SCHEMA, with `rank` the position in `results`."""
    from analyzer import multirank

    rows = [{"rank": i, "phase": phase, "attributed": ns}
            for i, r in enumerate(results) for phase, ns in r.digest.phase_ns.items()]
    phases = pl.DataFrame(rows, schema={"rank": pl.Int64, "phase": pl.Utf8, "attributed": pl.Int64})
    return multirank.skew(phases, list(range(len(results))))


def render_terminal(results: list[RankResult], cycle_limit: int = 10, phase_limit: int = 20) -> str:
    from analyzer.render import terminal

    s = summary(results)
    rows = [[label(r), os.path.basename(r.path), f"{row['ops']:,}", terminal.f_ms(row["wall"]),
             terminal.f_ms(row["busy"]), terminal.pct(row["busy"], row["wall"]), terminal.f_ms(row["cpu_wait"]),
             terminal.f_ms(row["launch"]), terminal.f_ms(row["idle"]), terminal.f_ms(row["communication"]),
             row["top_phase"] or "-"]
            for r, row in zip(results, s.iter_rows(named=True))]
    out = [f"specprof analysis of {len(results)} traces, one per rank (each on its own clock)", "",
           terminal.table(["rank", "trace", "GPU ops", "wall ms", "busy ms", "busy", "cpu_wait ms",
                           "launch ms", "idle ms", "comm ms", "top phase"], rows,
                          "llrrrrrrrrl"),
           "  wall, busy and the idle kinds are summed over each rank's GPU streams (docs/attribution.md)"]
    sk = skew(results).head(phase_limit)
    if sk.height:
        names = [label(r) for r in results]
        rows = [[terminal.clean(r["phase"], 48), str(r["ranks"]), terminal.f_ms(r["min"]), terminal.f_ms(r["max"]),
                 terminal.f_ms(r["skew"]), f"{r['skew_pct']:.1f}%", names[r["min_rank"]], names[r["max_rank"]]]
                for r in sk.iter_rows(named=True)]
        out += ["", "Skew across the traces (attributed ms per phase; a trace without the phase counts 0; "
                "docs/multirank.md)",
                terminal.table(["phase", "traces", "min ms", "max ms", "skew ms", "skew", "min", "max"], rows,
                               "lrrrrrll")]
    for r in results:
        out += ["", "=" * 100, f"{label(r)}: {terminal.clean(r.path)}", "=" * 100, r.digest.text]
    return "\n".join(out)


def render_json(results: list[RankResult]) -> str:
    """{"schema": "specprof.ranks/1", "ranks": [{"rank", "path", "analysis": specprof.analysis/2}]}."""
    from analyzer.render.json import ms

    doc = {"schema": SCHEMA, "ranks": [{"rank": r.rank, "path": r.path, "analysis": r.digest.doc} for r in results],
           # additive: per phase across the traces (`min_trace`/`max_trace`: positions in `ranks`)
           "skew": [{"name": r["phase"], "traces": r["ranks"], "min_ms": ms(r["min"]), "max_ms": ms(r["max"]),
                     "skew_ms": ms(r["skew"]), "skew_pct": round(r["skew_pct"], 3), "min_trace": r["min_rank"],
                     "max_trace": r["max_rank"]} for r in skew(results).iter_rows(named=True)]}
    return json.dumps(doc, indent=1)


def run(paths: list[str], opts, html_file: str | None = None, jobs: int = 1, dask=None,
        db: str | None = None, argv: list[str] | None = None) -> tuple[str, list]:
    """What `specprof analyze` prints for several traces, and [(path, run id, created)] when stored in `db`.
    Tables go into one folder per trace (--csv/--parquet)."""
    if html_file:
        raise SpecprofError(f"{html_file}: --html takes one trace; give the traces one at a time", html_file)
    from dataclasses import replace

    from analyzer import parallel

    opts = replace(opts, text=not opts.as_json, store=db is not None)
    results = analyze_all(paths, opts, jobs=jobs, dask=dask)
    ranks = [r.rank for r in results]
    for i, r in enumerate(results):
        unique = r.rank is not None and ranks.count(r.rank) == 1
        for fmt, written in r.digest.tables.items():
            parallel.move_tables(written, os.path.join(os.path.dirname(written), f"rank{r.rank}" if unique
                                                       else f"trace{i}"))
    stored = parallel.save(db, [r.digest for r in results], argv) if db else []
    text = render_json(results) if opts.as_json else render_terminal(results, opts.cycle_limit, opts.phase_limit)
    return text, stored
