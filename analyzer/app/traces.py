"""Several traces at once (ranks of one run, or several runs): each read and analysed on its own, in parallel
with `--jobs N` or on Dask (app/parallel.py), into a small `Digest`; then one row per trace, and the skew across
them when they are ranks of one run.

A distributed job profiled with torch.profiler writes one Kineto trace per rank (SGLang:
`SGLANG_TORCH_PROFILER_DIR`, one `*-TP-<rank>*.trace.json.gz` per TP rank). Traces are called ranks of one run
only when they are (`one_run`): each says its rank (`distributedInfo.rank`), no rank twice, the same world size
(each rank below it), and, where their clocks are absolute (Kineto's `baseTimeNanoseconds`), their GPU work
overlaps in time. They are then ordered by rank, with the skew across them. Anything else (several nsys
exports, unrelated Kineto traces) is several runs: each analysed as its own run, side by side in the order
given, with no skew.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field

import polars as pl

from analyzer import progress
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
    world_size: int | None = None  # Kineto distributedInfo.world_size
    span: tuple[int, int] | None = None  # its first GPU op's start and last op's end, on its clock
    absolute: bool = False  # its clock is absolute (ns since the epoch), so spans of several traces compare


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
    return digest_of(analyze(path, options), path, options, outputs)


def digest_of(a: Analysis, path: str, options: Options, outputs: Outputs) -> Digest:
    """The digest of the analysis `a` of the trace at `path` (what `digest` returns)."""
    trace = resolve(path)
    meta = a.trace.meta
    d = Digest(path=path, trace=trace, rank=meta.rank, row=summary_row(a),
               phase_ns=dict(a.phases.select("phase", "attributed").iter_rows()),
               world_size=meta.extra.get("world_size"), span=(int(a.ops["start"].min()), int(a.ops["end"].max())),
               absolute="base_time_ns" in meta.extra)
    if outputs.as_json:
        d.doc = json_render.to_dict(a)
    if outputs.text:
        d.text = terminal.render(a, cycle_limit=outputs.cycle_limit, phase_limit=outputs.phase_limit)
    if outputs.store:
        files = locate(path)
        key = store.options_of(options.grouping, options.domains, options.rule_list, files.sidecars, files.baseline,
                               window=options.window.describe() if options.window else None)
        d.record = store.record_of(a, path, trace, files, key)
    for folder, fmt in ((outputs.csv_dir, "csv"), (outputs.parquet_dir, "parquet")):
        if folder:  # a folder of its own; `analyze_all` names it once every trace's rank is known
            d.tables[fmt] = os.path.join(folder, ".partial-" + hashlib.sha1(path.encode()).hexdigest()[:16])
            tables.write(a, d.tables[fmt], fmt)
    return d


@dataclass
class Several:
    """The digests of several traces, in the order they are shown, and whether they are ranks of one run (and
    why, or why not)."""

    digests: list[Digest]
    one_run: bool
    why: str


def one_run(digests: list[Digest]) -> tuple[bool, str]:
    """Whether the traces are ranks of one run, with the reason in the user's words."""
    if any(d.rank is None for d in digests):
        return False, "not every trace says its rank"
    ranks = [d.rank for d in digests]
    twice = sorted({r for r in ranks if ranks.count(r) > 1})
    if twice:
        return False, f"rank {twice[0]} appears {ranks.count(twice[0])} times"
    worlds = {d.world_size for d in digests if d.world_size is not None}
    if len(worlds) > 1:
        return False, f"their world sizes differ ({', '.join(map(str, sorted(worlds)))})"
    if worlds and max(ranks) >= min(worlds):
        return False, f"rank {max(ranks)} is not in a world of {min(worlds)}"
    if all(d.absolute for d in digests):
        if max(d.span[0] for d in digests) >= min(d.span[1] for d in digests):
            return False, "their GPU work does not overlap in time"
        return True, "distinct ranks of one world size, at the same time"
    return True, "distinct ranks of one world size (their clocks cannot be compared)"


def analyze_all(paths: list[str], options: Options, outputs: Outputs, jobs: int = 1, dask=None) -> Several:
    """Every trace's digest (in parallel with `jobs` or on Dask): ranks of one run ordered by rank, several runs in
    the order given. Tables (--csv/--parquet) go into one folder per trace: rank<N> for ranks of one run, else
    <i>-<the input's name> (i from 1, in the order given)."""
    if dask and (outputs.csv_dir or outputs.parquet_dir):
        raise SpecprofError("--csv and --parquet write files where the analysis runs: not with --dask (the "
                            "workers' file systems); run without --dask, or with --jobs N")
    with progress.step(f"analysing {len(paths)} traces", len(paths), "traces") as step:
        digests = parallel.map_paths(digest, paths, options, outputs, jobs=jobs, dask=dask, done=step.advance)
    same, why = one_run(digests)
    if same:
        digests.sort(key=lambda d: d.rank)
    for i, d in enumerate(digests):
        for written in d.tables.values():
            name = f"rank{d.rank}" if same else f"{i + 1}-{input_name(d.path)}"
            _move_tables(written, os.path.join(os.path.dirname(written), name))
    return Several(digests, same, why)


def input_name(path: str) -> str:
    """A folder name after the input: its base name without the trace suffixes, in safe characters."""
    name = os.path.basename(os.path.normpath(path))
    for suffix in (".sqlite", ".json.gz", ".json", ".gz"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "trace"
    return name[:80]


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
