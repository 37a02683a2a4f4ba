"""Many traces at once: one process per file on this machine (`--jobs N`), or the same function on a Dask
cluster the user points at (`--dask tcp://host:8786`, `dask.distributed.Client.map` over the files). No
scheduler of specprof's own: a process pool or Dask does the scheduling (docs/multirank.md, "Many ranks or
many runs").

The unit of work is `analyse_one(path, options)`: read and analyse one trace (with its run directory's
sidecars), and return a small, picklable `Digest` of what the command prints and stores, never the op tables:
a TP8 job on several nodes gives dozens of exports, and only their summaries travel back. Results do not depend
on where or in which order the work ran: the digests are put back in the order of the files.

With Dask, every worker must see the files under the same paths (a shared file system) and have specprof
installed; --csv/--parquet/--html are refused (they would be written on the workers).
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from analyzer.errors import SpecprofError

CONNECT_TIMEOUT = "30s"  # how long to try reaching a Dask scheduler


@dataclass(frozen=True)
class Options:
    """How each trace is analysed and what comes back (picklable: it travels to the workers)."""

    grouping: tuple[str, ...] = ("cycle",)
    domains: tuple[str, ...] = ()
    rules: tuple = ()  # analyzer.categories.Rule, user's first; empty: the default rules
    cache: bool = False  # analyzer.analysis.load(cache=...)
    as_json: bool = False
    text: bool = True  # the terminal rendering
    store: bool = False  # the results store's rows (analyzer/store.py)
    cycle_limit: int = 10
    phase_limit: int = 20
    csv_dir: str | None = None  # per-trace folders are made under these
    parquet_dir: str | None = None


@dataclass
class Digest:
    """What one trace's analysis gives the command: its JSON object, its terminal text, its store rows, and the
    one-row summary of the per-trace table (analyzer/ranks.py)."""

    path: str
    trace: str
    rank: int | None
    row: dict = field(default_factory=dict)
    phase_ns: dict = field(default_factory=dict)  # phase -> attributed ns
    doc: dict | None = None
    text: str | None = None
    record: object | None = None  # analyzer.store.Record
    tables: dict = field(default_factory=dict)  # "csv"/"parquet" -> the folder its tables were written to


def summary_row(a) -> dict:
    """Per trace: GPU ops, wall and busy time summed over its streams, the idle kinds, communication time, and
    the phase with the most attributed time (ns)."""
    import polars as pl

    from analyzer.accounting import IDLE_CATEGORIES
    from analyzer.categories import COMMUNICATION, kinds_of
    from analyzer.projection import IN_CYCLE, UNATTRIBUTED

    s = a.streams
    named = a.phases.filter(~pl.col("phase").is_in([IN_CYCLE, UNATTRIBUTED]))
    kinds = kinds_of(COMMUNICATION, getattr(a, "category_parents", None))
    comm = a.categories.filter(pl.col("category").cast(pl.Utf8).is_in(kinds))["ns"].sum()
    return {"ops": a.ops.height, "devices": a.devices.height, "streams": s.height,
            "wall": int(s["wall"].sum()), "busy": int(s["busy"].fill_null(0).sum()),
            **{k: int(s[k].fill_null(0).sum()) for k in IDLE_CATEGORIES},
            "communication": int(comm or 0), "top_phase": named["phase"][0] if named.height else None}


def store_record(a, path: str, trace: str, files, options: dict):
    """The results store's rows for an analysed run: its manifest, and the sweep's inputs when it has sidecars."""
    from analyzer import analysis, runs, store
    from analyzer.readers import sidecar as sc

    sweep = None
    if files.sidecars:
        sweep = runs.sweep_run(files, a, sc.read_sidecars(files.sidecars), a.crosscheck)
    return store.record(a, path=path, trace_path=trace, options=options, manifest=analysis.manifest(path),
                        sweep=sweep)


def analyse_one(path: str, opts: Options) -> Digest:
    """Read, analyse and enrich one trace (or run directory); render and record what `opts` asks for."""
    from analyzer import analysis, categories, runs, store
    from analyzer.render import json as json_render
    from analyzer.render import tables, terminal

    rules = list(opts.rules) or categories.default_rules()
    trace = analysis.resolve(path)
    a = analysis.analyze(analysis.load(trace, cache=opts.cache), grouping=opts.grouping, rules=rules,
                         domains=opts.domains)
    files = runs.locate(path)
    a = runs.enrich(a, files)
    d = Digest(path=path, trace=trace, rank=a.trace.meta.rank, row=summary_row(a),
               phase_ns=dict(a.phases.select("phase", "attributed").iter_rows()))
    if opts.as_json:
        import json

        d.doc = json.loads(json_render.render(a))
    if opts.text:
        d.text = terminal.render(a, cycle_limit=opts.cycle_limit, phase_limit=opts.phase_limit)
    if opts.store:
        options = store.options_of(opts.grouping, opts.domains, rules, files.sidecars, files.baseline)
        d.record = store_record(a, path, trace, files, options)
    for folder, fmt in ((opts.csv_dir, "csv"), (opts.parquet_dir, "parquet")):
        if folder:  # a folder of its own; the caller names it once every trace's rank is known
            d.tables[fmt] = os.path.join(folder, ".partial-" + hashlib.sha1(path.encode()).hexdigest()[:16])
            tables.write(a, d.tables[fmt], fmt)
    return d


def move_tables(written: str, folder: str) -> None:
    """Move the table files of `written` (a `.partial-*` folder of analyse_one) into `folder`."""
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(written):
        os.replace(os.path.join(written, name), os.path.join(folder, name))
    os.rmdir(written)


def analyse_many(paths: list[str], opts: Options, jobs: int = 1, dask: str | None = None) -> list[Digest]:
    """`analyse_one` over every path: in this process (jobs=1), one process per file in a pool of `jobs`, or on
    the Dask scheduler at `dask`. The digests come back in the order of `paths`."""
    if dask:
        return _on_dask(paths, opts, dask)
    if jobs <= 1 or len(paths) == 1:
        return [analyse_one(p, opts) for p in paths]
    import multiprocessing

    # spawn: a fresh interpreter per worker (polars' thread pool does not survive fork)
    with ProcessPoolExecutor(max_workers=min(jobs, len(paths)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(analyse_one, paths, [opts] * len(paths)))


def _on_dask(paths: list[str], opts: Options, scheduler) -> list[Digest]:
    """`scheduler`: the scheduler's address, or a dask.distributed.Client already connected (tests)."""
    if opts.csv_dir or opts.parquet_dir:
        raise SpecprofError("--csv and --parquet write files where the analysis runs: not with --dask (the "
                            "workers' file systems); run without --dask, or with --jobs N")
    try:
        from dask.distributed import Client
    except ImportError:
        raise SpecprofError("--dask needs Dask's distributed scheduler: pip install 'specprof[dist]'") from None
    owned = isinstance(scheduler, str)
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT) if owned else scheduler
    except (OSError, TimeoutError) as exc:
        raise SpecprofError(f"--dask {scheduler}: cannot reach the Dask scheduler ({exc})") from None
    try:
        # pure=False: each call analyses (the same file given twice is analysed twice, as without Dask)
        futures = client.map(analyse_one, paths, opts=opts, pure=False)
        return client.gather(futures)
    finally:
        if owned:
            client.close()


def store_one(db_path: str, a, path: str, files, rules, domains=(), argv: list[str] | None = None, server_log=None,
              log_interval=None, baseline_run=None, baseline_ms=None) -> list[tuple[str, int, bool]]:
    """Append one analysed run (the single-trace `specprof analyze --db`); [(path, run id, created)]."""
    from analyzer import analysis, store

    options = store.options_of(a.grouping, domains, rules, files.sidecars, files.baseline,
                               server_log, baseline_run, baseline_ms, log_interval if server_log else None)
    d = Digest(path=path, trace=analysis.resolve(path), rank=a.trace.meta.rank,
               record=store_record(a, path, analysis.resolve(path), files, options))
    return save(db_path, [d], argv)


def save(db_path: str, digests: list[Digest], argv: list[str] | None = None) -> list[tuple[str, int, bool]]:
    """Append the digests' runs to the results store; [(path, run id, created)] in order."""
    from analyzer import store

    db = store.connect(db_path)
    try:
        import_id = store.begin_import(db, argv)
        return [(d.path, *store.add(db, d.record, import_id)) for d in digests if d.record is not None]
    finally:
        db.conn.close()
