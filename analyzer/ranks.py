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
    analysis: object  # analyzer.analysis.Analysis


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
        if any(n.endswith(".sqlite") for n in os.listdir(path)):
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


def analyze_all(paths: list[str], grouping: tuple[str, ...], rules, domains: tuple[str, ...]) -> list[RankResult]:
    """Read and analyse each trace; ordered by rank (unknown ranks last), then path."""
    from analyzer import analysis

    results = []
    for path in paths:
        trace = analysis.load(path)
        results.append(RankResult(rank=trace.meta.rank, path=path,
                                  analysis=analysis.analyze(trace, grouping=grouping, rules=rules,
                                                            domains=domains)))
    results.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.path))
    return results


def label(r: RankResult) -> str:
    return f"rank {r.rank}" if r.rank is not None else os.path.basename(r.path)


def summary(results: list[RankResult]) -> pl.DataFrame:
    """One row per trace: GPU ops, wall and busy time summed over its streams, the idle kinds,
    communication time, and the phase with the most attributed time."""
    from analyzer.accounting import IDLE_CATEGORIES
    from analyzer.projection import IN_CYCLE, UNATTRIBUTED

    rows = []
    for r in results:
        a = r.analysis
        s = a.streams
        named = a.phases.filter(~pl.col("phase").is_in([IN_CYCLE, UNATTRIBUTED]))
        comm = a.categories.filter(pl.col("category").cast(pl.Utf8) == "communication")["ns"].sum()
        rows.append({
            "rank": r.rank, "trace": r.path, "ops": a.ops.height,
            "devices": a.devices.height, "streams": s.height,
            "wall": int(s["wall"].sum()), "busy": int(s["busy"].fill_null(0).sum()),
            **{k: int(s[k].fill_null(0).sum()) for k in IDLE_CATEGORIES},
            "communication": int(comm or 0),
            "top_phase": named["phase"][0] if named.height else None,
        })
    return pl.DataFrame(rows, schema={
        "rank": pl.Int64, "trace": pl.Utf8, "ops": pl.Int64, "devices": pl.Int64, "streams": pl.Int64,
        "wall": pl.Int64, "busy": pl.Int64, "cpu_wait": pl.Int64, "launch": pl.Int64, "idle": pl.Int64,
        "communication": pl.Int64, "top_phase": pl.Utf8})


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
    for r in results:
        out += ["", "=" * 100, f"{label(r)}: {terminal.clean(r.path)}", "=" * 100,
                terminal.render(r.analysis, cycle_limit=cycle_limit, phase_limit=phase_limit)]
    return "\n".join(out)


def render_json(results: list[RankResult]) -> str:
    """{"schema": "specprof.ranks/1", "ranks": [{"rank", "path", "analysis": specprof.analysis/1}]}."""
    from analyzer.render import json as json_render

    doc = {"schema": SCHEMA,
           "ranks": [{"rank": r.rank, "path": r.path, "analysis": json.loads(json_render.render(r.analysis))}
                     for r in results]}
    return json.dumps(doc, indent=1)


def run(paths: list[str], as_json: bool, csv_dir: str | None, parquet_dir: str | None,
        html_file: str | None, grouping: tuple[str, ...], rules, domains: tuple[str, ...],
        cycle_limit: int, phase_limit: int) -> str:
    """What `specprof analyze` prints for several traces; tables go into one folder per rank."""
    if html_file:
        raise SpecprofError(f"{html_file}: --html takes one trace; give the traces one at a time", html_file)
    results = analyze_all(paths, grouping, rules, domains)
    from analyzer.render import tables

    for folder, fmt in ((csv_dir, "csv"), (parquet_dir, "parquet")):
        if folder:
            ranks = [r.rank for r in results]
            for i, r in enumerate(results):
                unique = r.rank is not None and ranks.count(r.rank) == 1
                name = f"rank{r.rank}" if unique else f"trace{i}"
                tables.write(r.analysis, os.path.join(folder, name), fmt)
    return render_json(results) if as_json else render_terminal(results, cycle_limit, phase_limit)
