"""Several traces at once (one per rank, or several runs): each read and analysed on its own, in parallel with
`--jobs N` or on Dask (app/parallel.py), into a small `Digest`; then one row per trace and the skew across
them.

A distributed job profiled with torch.profiler writes one Kineto trace per rank (SGLang:
`SGLANG_TORCH_PROFILER_DIR`, one `*-TP-<rank>*.trace.json.gz` per TP rank). Each trace is analysed on its own
(each rank has its own clock and its own launching threads); the results are reported side by side, ordered by
rank (`distributedInfo.rank`), then by file name.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import polars as pl

from analyzer.app import parallel, store
from analyzer.app.analyze import Options, analyze
from analyzer.core.categories import kinds_of
from analyzer.derived.analysis import Analysis
from analyzer.derived.ranks import skew as rank_skew
from analyzer.errors import SpecprofError
from analyzer.model.labels import COMMUNICATION, IDLE_CATEGORIES, IN_CYCLE, UNATTRIBUTED
from analyzer.readers.inputs import locate, resolve
from analyzer.render import json as json_render
from analyzer.render import tables, terminal

SUMMARY_SCHEMA = {
    "rank": pl.Int64, "trace": pl.Utf8, "ops": pl.Int64, "devices": pl.Int64, "streams": pl.Int64,
    "wall": pl.Int64, "busy": pl.Int64, "cpu_wait": pl.Int64, "launch": pl.Int64, "idle": pl.Int64,
    "communication": pl.Int64, "top_phase": pl.Utf8}


@dataclass(frozen=True)
class Outputs:
    """What each trace's analysis gives back (picklable: it travels to the workers)."""

    as_json: bool = False  # the analysis as JSON (a dict)
    text: bool = True  # the terminal text
    store: bool = False  # the results store's rows (app/store.py)
    cycle_limit: int = 10
    phase_limit: int = 20
    csv_dir: str | None = None  # per-trace folders are made under these
    parquet_dir: str | None = None


@dataclass
class Digest:
    """What one trace's analysis gives the command: its JSON document, its terminal text, its store rows, and the
    numbers of the per-trace table. Small: the op tables stay where the analysis ran."""

    path: str
    trace: str
    rank: int | None
    row: dict = field(default_factory=dict)  # summary_row
    phase_ns: dict = field(default_factory=dict)  # phase -> attributed ns
    doc: dict | None = None
    text: str | None = None
    record: store.Record | None = None
    tables: dict = field(default_factory=dict)  # "csv"/"parquet" -> the folder its tables were written to


def summary_row(a: Analysis) -> dict:
    """Per trace: GPU ops, wall and busy time summed over its streams, the idle kinds, communication time, and
    the phase with the most attributed time (ns)."""
    s = a.streams
    named = a.phases.filter(~pl.col("phase").is_in([IN_CYCLE, UNATTRIBUTED]))
    kinds = kinds_of(COMMUNICATION, a.category_parents)
    comm = a.categories.filter(pl.col("category").cast(pl.Utf8).is_in(kinds))["ns"].sum()
    return {"ops": a.ops.height, "devices": a.devices.height, "streams": s.height,
            "wall": int(s["wall"].sum()), "busy": int(s["busy"].fill_null(0).sum()),
            **{k: int(s[k].fill_null(0).sum()) for k in IDLE_CATEGORIES},
            "communication": int(comm or 0), "top_phase": named["phase"][0] if named.height else None}


def digest(path: str, options: Options, outputs: Outputs) -> Digest:
    """Read, analyse and enrich one trace (or run directory); render and record what `outputs` asks for. The
    unit of work of `analyze_all`, run where the trace is."""
    a = analyze(path, options)
    trace = resolve(path)
    d = Digest(path=path, trace=trace, rank=a.trace.meta.rank, row=summary_row(a),
               phase_ns=dict(a.phases.select("phase", "attributed").iter_rows()))
    if outputs.as_json:
        d.doc = json_render.to_dict(a)
    if outputs.text:
        d.text = terminal.render(a, cycle_limit=outputs.cycle_limit, phase_limit=outputs.phase_limit)
    if outputs.store:
        files = locate(path)
        key = store.options_of(options.grouping, options.domains, options.rule_list, files.sidecars, files.baseline)
        d.record = store.record_of(a, path, trace, files, key)
    for folder, fmt in ((outputs.csv_dir, "csv"), (outputs.parquet_dir, "parquet")):
        if folder:  # a folder of its own; `analyze_all` names it once every trace's rank is known
            d.tables[fmt] = os.path.join(folder, ".partial-" + hashlib.sha1(path.encode()).hexdigest()[:16])
            tables.write(a, d.tables[fmt], fmt)
    return d


def analyze_all(paths: list[str], options: Options, outputs: Outputs, jobs: int = 1, dask=None) -> list[Digest]:
    """Every trace's digest (in parallel with `jobs` or on Dask), ordered by rank (unknown ranks last), then path.
    Tables (--csv/--parquet) go into one folder per trace: rank<N> where the rank is known and unique, else
    trace<i>."""
    if dask and (outputs.csv_dir or outputs.parquet_dir):
        raise SpecprofError("--csv and --parquet write files where the analysis runs: not with --dask (the "
                            "workers' file systems); run without --dask, or with --jobs N")
    digests = parallel.map_paths(digest, paths, options, outputs, jobs=jobs, dask=dask)
    digests.sort(key=lambda d: (d.rank is None, d.rank if d.rank is not None else 0, d.path))
    ranks = [d.rank for d in digests]
    for i, d in enumerate(digests):
        unique = d.rank is not None and ranks.count(d.rank) == 1
        for written in d.tables.values():
            _move_tables(written, os.path.join(os.path.dirname(written), f"rank{d.rank}" if unique else f"trace{i}"))
    return digests


def _move_tables(written: str, folder: str) -> None:
    """Move the table files of `written` (a `.partial-*` folder of `digest`) into `folder`."""
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(written):
        os.replace(os.path.join(written, name), os.path.join(folder, name))
    os.rmdir(written)


def summary(digests: list[Digest]) -> pl.DataFrame:
    """One row per trace (SUMMARY_SCHEMA): GPU ops, wall and busy time summed over its streams, the idle kinds,
    communication time, and the phase with the most attributed time."""
    return pl.DataFrame([{"rank": d.rank, "trace": d.path, **d.row} for d in digests], schema=SUMMARY_SCHEMA)


def skew(digests: list[Digest]) -> pl.DataFrame:
    """Per phase, attributed ns across the traces (each on its own clock, so no wait/transfer split here):
    derived/ranks.py's SKEW_SCHEMA, with `rank` the position in `digests`."""
    rows = [{"rank": i, "phase": phase, "attributed": ns}
            for i, d in enumerate(digests) for phase, ns in d.phase_ns.items()]
    phases = pl.DataFrame(rows, schema={"rank": pl.Int64, "phase": pl.Utf8, "attributed": pl.Int64})
    return rank_skew(phases, list(range(len(digests))))
