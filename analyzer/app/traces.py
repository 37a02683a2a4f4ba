"""What `specprof analyze` makes of each trace, one or several: the one pipeline (`produce`: a Run's analysis made
whole, then its store rows, its tables, its HTML report, its terminal text or JSON document), run in this process for one trace, and for
several traces each on its own, in parallel with `--jobs N` or on Dask (app/parallel.py), into a small
`TraceOutput`; then one row per trace, and the skew across them when they are ranks of one run.

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

from specprof.analyzer import progress, safe_files
from specprof.analyzer.app import parallel, store
from specprof.analyzer.app.analyze import Options, RunInputs
from specprof.analyzer.app.run import Run
from specprof.analyzer.core.categories import kinds_of
from specprof.analyzer.derived.analysis import Analysis
from specprof.analyzer.derived.ranks import skew as rank_skew
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.labels import COMMUNICATION, IDLE_CATEGORIES, IN_CYCLE, UNATTRIBUTED
from specprof.analyzer.render import html
from specprof.analyzer.render import json as json_render
from specprof.analyzer.render import tables, terminal

SUMMARY_SCHEMA = {
    "rank": pl.Int64, "trace": pl.Utf8, "ops": pl.Int64, "devices": pl.Int64, "streams": pl.Int64,
    "wall": pl.Int64, "busy": pl.Int64, "cpu_wait": pl.Int64, "launch": pl.Int64, "idle": pl.Int64,
    "communication": pl.Int64, "top_phase": pl.Utf8}


@dataclass(frozen=True)
class Outputs:
    """What each trace's analysis gives back (picklable: it travels to the workers)."""

    as_json: bool = False  # the analysis as JSON (a trace alone: the document's text; of several: a dict)
    text: bool = True  # the terminal text (unless as_json)
    store: bool = False  # the results store's rows (app/store.py)
    cycle_limit: int = 10
    phase_limit: int = 20
    brief: bool = False  # the terminal text: the summary alone
    csv_dir: str | None = None  # per-trace folders are made under these
    parquet_dir: str | None = None


@dataclass
class TraceOutput:
    """What the pipeline made of one trace, wherever it ran: its text or JSON document, its store rows, the folders
    its tables were written to, and its numbers for the several-traces table. Small: the op tables stay where the
    run was analysed."""

    path: str
    rank: int | None
    row: dict = field(default_factory=dict)  # summary_row
    phase_ns: dict = field(default_factory=dict)  # phase -> attributed ns
    doc: dict | None = None
    text: str | None = None  # the terminal text, or (a trace alone, as_json) the JSON document's text
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


def produce(run: Run, outputs: Outputs, alone: bool = True, html_file: str | None = None) -> TraceOutput:
    """The one pipeline: what `outputs` asks for of `run`, made and written in this order: its store rows, its
    tables (--csv/--parquet), its HTML report (`html_file`), its JSON document or terminal text. `alone`: the
    command's only trace (its tables go into the folders given, its JSON is the document's text); else one of
    several (its tables go into a folder of its own, which `analyze_all` names, its JSON a dict). Every file of the
    run is read and every value made (`Run.analysis`, and its store rows) before the first output is written."""
    a = run.report_analysis() if html_file else run.analysis()
    record = run.record(a) if outputs.store else None
    meta = a.trace.meta if a.traced else None  # None: a run without nsys, its sidecars alone
    out = TraceOutput(path=run.path, rank=meta.rank if meta else None,
                      world_size=meta.extra.get("world_size") if meta else None,
                      absolute=meta is not None and "base_time_ns" in meta.extra, record=record)
    for folder, fmt in ((outputs.csv_dir, "csv"), (outputs.parquet_dir, "parquet")):
        if folder:
            if not alone:  # a folder of its own; `analyze_all` names it once every trace's rank is known
                folder = os.path.join(folder, ".partial-" + hashlib.sha1(run.path.encode()).hexdigest()[:16])
            tables.write(a, folder, fmt, own_folder=not alone)
            out.tables[fmt] = folder
    if html_file:
        html.write(a, html_file, manifest=a.data.manifest)
    with progress.step("rendering"):
        if outputs.as_json:
            if alone:
                out.text = json_render.render(a)
            else:
                out.doc = json_render.to_dict(a)
        elif outputs.text:
            out.text = terminal.render(a, cycle_limit=outputs.cycle_limit, phase_limit=outputs.phase_limit,
                                       brief=outputs.brief)
    if not alone:
        out.row = summary_row(a)
        out.phase_ns = dict(a.phases.select("phase", "attributed").iter_rows())
        out.span = (int(a.ops["start"].min()), int(a.ops["end"].max()))
    return out


def produce_one_of_several(path: str, options: Options, inputs: RunInputs, outputs: Outputs) -> TraceOutput:
    """Load the run at `path` and `produce` it as one of several traces: the unit of work of `analyze_all`, run
    where the trace is."""
    return produce(Run.load(path, options, inputs), outputs, alone=False)


@dataclass
class Several:
    """The outputs of several traces, in the order they are shown, and whether they are ranks of one run (and
    why, or why not)."""

    outputs: list[TraceOutput]
    one_run: bool
    why: str


def one_run(outs: list[TraceOutput]) -> tuple[bool, str]:
    """Whether the traces are ranks of one run, with the reason in the user's words."""
    if any(d.rank is None for d in outs):
        return False, "not every trace says its rank"
    ranks = [d.rank for d in outs]
    twice = sorted({r for r in ranks if ranks.count(r) > 1})
    if twice:
        return False, f"rank {twice[0]} appears {ranks.count(twice[0])} times"
    worlds = {d.world_size for d in outs if d.world_size is not None}
    if len(worlds) > 1:
        return False, f"their world sizes differ ({', '.join(map(str, sorted(worlds)))})"
    if worlds and max(ranks) >= min(worlds):
        return False, f"rank {max(ranks)} is not in a world of {min(worlds)}"
    if all(d.absolute for d in outs):
        if max(d.span[0] for d in outs) >= min(d.span[1] for d in outs):
            return False, "their GPU work does not overlap in time"
        return True, "distinct ranks of one world size, at the same time"
    return True, "distinct ranks of one world size (their clocks cannot be compared)"


def analyze_all(paths: list[str], options: Options, outputs: Outputs, jobs: int = 1, dask=None,
                inputs: RunInputs = RunInputs()) -> Several:
    """Every trace's output (in parallel with `jobs` or on Dask), each with the run options that hold for any
    run (`RunInputs.for_each_trace`): ranks of one run ordered by rank, several runs in the order given. Tables
    (--csv/--parquet) go into one folder per trace: rank<N> for ranks of one run, else <i>-<the input's name> (i
    from 1, in the order given)."""
    if dask and (outputs.csv_dir or outputs.parquet_dir):
        raise SpecprofError("--csv and --parquet write files where the analysis runs: not with --dask (the "
                            "workers' file systems); run without --dask, or with --jobs N")
    inputs = inputs.for_each_trace()
    with progress.step(f"analysing {len(paths)} traces", len(paths), "traces") as step:
        outs = parallel.map_paths(produce_one_of_several, paths, options, inputs, outputs, jobs=jobs, dask=dask,
                                     done=step.advance)
    same, why = one_run(outs)
    if same:
        outs.sort(key=lambda d: d.rank)
    for i, d in enumerate(outs):
        for written in d.tables.values():
            name = f"rank{d.rank}" if same else f"{i + 1}-{input_name(d.path)}"
            _move_tables(written, os.path.join(os.path.dirname(written), name))
    return Several(outs, same, why)


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
    """Move the table files of `written` (a `.partial-*` folder of `produce`) into `folder` (made, or an existing
    folder; never through a link there, nor through one swapped in for `written`)."""
    try:
        source = safe_files.open_folder(written)
        try:
            target = safe_files.own_folder(folder)
            try:
                for name in os.listdir(source):
                    os.replace(name, name, src_dir_fd=source, dst_dir_fd=target)
            finally:
                os.close(target)
        finally:
            os.close(source)
        os.rmdir(written)
    except OSError as exc:
        raise SpecprofError(f"{folder}: cannot move the tables there ({exc.strerror})", folder) from None


def summary(outs: list[TraceOutput]) -> pl.DataFrame:
    """One row per trace (SUMMARY_SCHEMA): GPU ops, wall and busy time summed over its streams, the idle kinds,
    communication time, and the phase with the most attributed time."""
    return pl.DataFrame([{"rank": d.rank, "trace": d.path, **d.row} for d in outs], schema=SUMMARY_SCHEMA)


def skew(outs: list[TraceOutput]) -> pl.DataFrame:
    """Per phase, attributed ns across the traces (each on its own clock, so no wait/transfer split here):
    derived/ranks.py's SKEW_SCHEMA, with `rank` the position in `outs`."""
    rows = [{"rank": i, "phase": phase, "attributed": ns}
            for i, d in enumerate(outs) for phase, ns in d.phase_ns.items()]
    phases = pl.DataFrame(rows, schema={"rank": pl.Int64, "phase": pl.Utf8, "attributed": pl.Int64})
    return rank_skew(phases, list(range(len(outs))))
