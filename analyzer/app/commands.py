"""What each command of the `specprof` console script does, one function per command: the CLI (analyzer/cli.py)
parses the options and calls one of these; each returns what to print (`Output`) and writes only the files it
was asked for. The formats are the renderers' (analyzer/render/)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from specprof.analyzer import progress, safe_files
from specprof.analyzer.app import process_tasks, store
from specprof.analyzer.app import traces as many
from specprof.analyzer.app.analyze import Options, RunInputs, baseline_exists
from specprof.analyzer.app.run import Run, baseline_step, open_run
from specprof.analyzer.derived.adaptive_config import adaptive_config
from specprof.analyzer.derived.compare import compare_charges, differences, workload
from specprof.analyzer.derived.drafters import compare_drafters
from specprof.analyzer.derived.drafters import side as drafter_side
from specprof.analyzer.derived.sweep_runs import fit_sweep
from specprof.analyzer.derived.sweep import Sweep
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers import trace_cache
from specprof.analyzer.readers.inputs import expand, manifest
from specprof.analyzer.readers.settings import read_settings
from specprof.analyzer.readers.sglang_log import mean_accept_len, read_server_log
from specprof.analyzer.render import html, perfetto, terminal
from specprof.analyzer.render import json as json_render


@dataclass
class Output:
    """What a command prints: `stdout` (None: nothing), lines for stderr, and its exit status."""

    stdout: str | None = None
    stderr: list[str] = field(default_factory=list)
    exit_code: int = 0


def analyze_traces(paths, options: Options = Options(), inputs: RunInputs = RunInputs(),
                   outputs: many.Outputs = many.Outputs(), html_file: str | None = None, db_path: str | None = None,
                   jobs: int = 1, dask=None, argv: list[str] | None = None, quiet: bool = False) -> Output:
    """`specprof analyze`: one trace (or run directory) with everything the run's files add, or several traces
    side by side (one per rank, or a folder of them: in parallel with `jobs`, or on Dask), each through the one
    pipeline (app/traces.py `produce`); with the tables (--csv/--parquet), the HTML report (--html, one trace)
    and the results store (--db) when asked for."""
    traces = expand(paths)
    progress.enable(progress.wanted(quiet))  # bars on stderr once an analysis has taken seconds
    outputs = replace(outputs, store=db_path is not None)
    if len(traces) > 1 or (not (html_file or db_path or outputs.csv_dir or outputs.parquet_dir) and inputs == RunInputs()
                           and process_tasks.wanted(traces[0], options, jobs, dask)):
        return _several(traces, options, inputs, outputs, html_file, db_path, jobs, dask, argv)
    run = Run.load(traces[0], options, inputs)
    out = many.produce(run, outputs, html_file=html_file)
    said = terminal.stored(db_path, store.save(db_path, [(run.path, out.record)], argv)) if db_path else []
    if html_file:
        said.append(terminal.report_written(html_file))
    return Output(out.text, said)


def _several(traces: list[str], options: Options, inputs: RunInputs, outputs: many.Outputs, html_file: str | None,
             db_path: str | None, jobs: int, dask, argv: list[str] | None) -> Output:
    if html_file:
        raise SpecprofError(f"{html_file}: --html takes one trace; give the traces one at a time", html_file)
    outputs = replace(outputs, text=not outputs.as_json)
    several = process_tasks.analyze_all(traces[0], options, outputs, jobs=jobs, dask=dask) if len(traces) == 1 \
        else many.analyze_all(traces, options, outputs, jobs=jobs, dask=dask, inputs=inputs)
    outs = several.outputs
    said = []
    if db_path:
        said = terminal.stored(db_path, store.save(db_path, [(o.path, o.record) for o in outs], argv))
    skew = many.skew(outs) if several.one_run else None
    text = json_render.traces(outs, skew, several.why) if outputs.as_json else terminal.traces(
        outs, many.summary(outs), skew, outputs.phase_limit, several.why)
    return Output(text, said)


def export_trace(path: str, perfetto_file: str, options: Options = Options(), quiet: bool = False) -> Output:
    """`specprof export`: the attributed timeline of one trace (or run directory) as a Perfetto trace."""
    progress.enable(progress.wanted(quiet))  # bars on stderr once the work has taken seconds, as `analyze`
    counts = perfetto.write(Run.load(path, options).attribution(), perfetto_file)
    return Output(stderr=[terminal.exported(perfetto_file, counts)])


def list_runs(db_path: str, as_json: bool = False) -> Output:
    """`specprof runs`: the runs in a results database."""
    listed = store.list_runs(store.connect(db_path, create=False))
    return Output(json_render.runs(listed) if as_json else terminal.runs(listed, db_path))


def write_report(run: str, output: str, options: Options = Options(), inputs: RunInputs = RunInputs(),
                 quiet: bool = False) -> Output:
    """`specprof report`: the HTML report of a run (a run directory or a trace) in one file."""
    progress.enable(progress.wanted(quiet))
    a = Run.load(run, options, inputs).report_analysis()
    html.write(a, output, manifest=a.data.manifest)
    return Output(stderr=[terminal.report_written(output)])


def compare_runs(a: str, b: str, options: Options = Options(), db_path: str | None = None, as_json: bool = False,
                 fail_pct: float | None = None, allow_mixed: bool = False, baseline: str | None = None) -> Output:
    """`specprof compare`: run B against run A per phase and category (a path, or `@ID` of the results database);
    exit status 1 when B is slower than A by more than `fail_pct` percent. Runs of different engines, target models,
    tensor-parallel sizes or draft shapes are refused unless `allow_mixed`; runs that differ in their draft model
    alone are two drafters, compared as such too (derived/drafters.py), each against the plain run `baseline`."""
    db = store.connect(db_path, create=False) if db_path else None
    runs = [open_run(x, options, RunInputs(baseline_run=baseline), db=db) for x in (a, b)]
    # (from the manifests alone: the check reads no sidecar)
    settings = [(x, read_settings(manifest=manifest(r.files.path))) for x, r in zip((a, b), runs) if isinstance(r, Run)]
    drafts = {s.draft_model for _, s in settings}
    two_drafters = len(settings) == 2 and None not in drafts and len(drafts) == 2
    if not allow_mixed:
        setups = [(x, workload(s.setup)) for x, s in settings if s.setup is not None]
        differ = differences(setups) if len(setups) == 2 else []
        if differ:
            raise SpecprofError("A and B are not one workload: " + "; ".join(differ) + " (their times per cycle "
                                "measure different things; --allow-mixed compares them anyway)")
    alone = [isinstance(r, Run) and r.files.trace is None for r in runs]
    if alone[0] != alone[1]:
        raise SpecprofError(f"{(a, b)[alone.index(True)]}: a run made without nsys (its phases between their CUDA "
                            f"events) against a capture under nsys ({(a, b)[alone.index(False)]}: attributed time): "
                            "they measure different things; compare two runs without nsys (RUN/no-nsys), or two "
                            "captures under nsys")
    result = compare_charges(*(r.side() for r in runs))
    drafters = None
    if two_drafters:  # one target and workload, two draft models: each run's own economics side by side
        drafters = compare_drafters(*(drafter_side(r.analysis(), x, s.draft_model)
                                      for (x, s), r in zip(settings, runs)))
    out = Output(json_render.dumps(json_render.compare(result, drafters)) if as_json
                 else terminal.compare(result) + ("" if drafters is None else "\n" + terminal.drafters(drafters)))
    if fail_pct is not None and result.slower_than(fail_pct):
        out.stderr.append(terminal.slower(result, fail_pct))
        out.exit_code = 1
    return out


def fit_sweep_runs(runs: list[str], steps: list[int] = (), max_steps: int | None = None, db_path: str | None = None,
                   as_json: bool = False, options: Options = Options(), accept: list[float] = (),
                   server_logs: list[str] = (), extrapolate: bool = False, baseline: str | None = None,
                   allow_mixed: bool = False) -> Output:
    """`specprof sweep`: the cost model over runs with different numbers of draft steps (run directories, nsys or
    Kineto traces, or `@ID` of the results database); `baseline`: a plain-decode run to state the best K
    against."""
    db = store.connect(db_path, create=False) if db_path else None
    result = load_sweep(runs, steps, max_steps, db, options, accept, server_logs, extrapolate, baseline, allow_mixed)
    return Output(json_render.dumps(json_render.sweep(result)) if as_json else terminal.sweep(result))


def write_adaptive_config(runs: list[str], baseline: str | None, out: str, db_path: str | None = None,
                          as_json: bool = False, options: Options = Options()) -> Output:
    """`specprof sweep RUN... --baseline PLAIN --adaptive-config OUT`: per batch-size threshold the K that measured
    best against the plain run (derived/adaptive_config.py), written to `out` in SGLang's format (never through a
    link), and its table printed."""
    if not baseline:
        raise SpecprofError("--adaptive-config needs --baseline PLAIN: each K is chosen by its speedup over the "
                            "plain run at the same batch sizes")
    baseline_exists(baseline)
    db = store.connect(db_path, create=False) if db_path else None
    measured = []
    for path in runs:
        run = open_run(path, options, RunInputs(baseline_run=baseline), db=db)
        if not isinstance(run, Run):
            raise SpecprofError(f"{path}: a stored run has no per-batch-size economics: give its run directory")
        economics = run.analysis().economics
        measured.append((path, economics.groups if economics is not None else None))
    result = adaptive_config(measured)
    if result is None:
        raise SpecprofError(f"{', '.join(runs)}: no batch size has both a speculative decode cycle with its K and a "
                            f"plain decode step in --baseline {baseline}: nothing to choose a K from")
    text = json.dumps(result.config, indent=2) + "\n"
    try:
        safe_files.replace(out, text, mode=0o644)
    except OSError as e:
        raise SpecprofError(f"--adaptive-config {out}: cannot write it ({e.strerror or e}); give a writable file "
                            "path that is not a link", out) from None
    return Output(json_render.dumps(json_render.adaptive_config(result, out)) if as_json
                  else terminal.adaptive_config(result, out))


def load_sweep(runs: list[str], steps: list[int] = (), max_steps: int | None = None, db=None,
               options: Options = Options(), accept: list[float] = (), server_logs: list[str] = (),
               extrapolate: bool = False, baseline: str | None = None, allow_mixed: bool = False) -> Sweep:
    """Analyse each run (a run directory or a trace), or read it from the results store `db` (`@ID`), and fit the
    cost model (derived/sweep.py). Accept lengths come from each run's sidecar, else from `accept` or
    `server_logs` (one per run, in order); without any, the cost models alone."""
    if len(runs) < 2:
        raise SpecprofError("specprof sweep needs at least two runs (with different numbers of draft steps)")
    for given, flag in ((steps, "--steps"), (accept, "--accept"), (server_logs, "--server-log")):
        if given and len(given) != len(runs):
            raise SpecprofError(f"{flag} was given {len(given)} times for {len(runs)} runs: give it once per run, "
                                "in the order of the runs")
    if accept and server_logs:
        raise SpecprofError("--accept and --server-log both give each run's accept length: give one of them")
    if server_logs:
        accept = [mean_accept_len(read_server_log(log), log) for log in server_logs]

    def inputs():  # one run at a time: a run's problem is said before the next run is analysed
        for path in runs:
            yield path, open_run(path, options, db=db).sweep_input()

    plain = baseline_step(baseline_exists(baseline), None, options) if baseline else None
    return fit_sweep(inputs(), list(steps), max_steps, list(accept), extrapolate, plain, allow_mixed)


def cache_info() -> Output:
    """`specprof cache info`: where the cache of parsed exports and their analyses is, its entries and size."""
    entries = trace_cache.entries()
    return Output(terminal.cache_info(trace_cache.root(), entries, sum(e.bytes for e in entries),
                                      trace_cache.max_bytes()))


def cache_clear() -> Output:
    """`specprof cache clear`: remove every entry of the cache (of each, the files specprof wrote there)."""
    n, size = trace_cache.clear()
    return Output(terminal.cache_cleared(trace_cache.root(), n, size))
