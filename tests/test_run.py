"""One run, loaded once (analyzer/app/run.py `Run`): its files found once and read once, whatever a command makes
of it; a command makes only what it shows, and makes all of it (every file read, every error raised) before it
writes anything; the renderers receive values and compute none of them. On the real captures of fixtures/."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
from click.testing import CliRunner

from specprof.analyzer import progress
from specprof.analyzer.app import run as run_module
from specprof.analyzer.app.analyze import Options, RunInputs
from specprof.analyzer.app.run import Run, StoredRun, open_run
from specprof.analyzer.cli import main
from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.derived import analysis
from specprof.analyzer.derived.analysis import Analysis, PER_RANK_TABLES
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers import settings
from specprof.analyzer.render import html, tables, terminal
from specprof.analyzer.render import json as json_render
from conftest import FIXTURES

K4 = FIXTURES / "reference-k4"
SGLANG = FIXTURES / "sglang-k4"


@pytest.fixture
def counted(monkeypatch):
    """How often each file-reading function of the run loader is called, by name, while the test runs."""
    calls: dict[str, list] = {}
    readers = ((run_module, "locate"), (run_module.sc, "read_sidecars"), (run_module.gt, "read_ground_truth"),
               (run_module, "read_server_log"), (run_module, "manifest"), (settings, "server_args"))
    for module, name in readers:
        real = getattr(module, name)

        def counting(*args, _real=real, _name=name, **kw):
            calls.setdefault(_name, []).append(args[0] if args else None)
            return _real(*args, **kw)

        monkeypatch.setattr(module, name, counting)
    return calls


def test_analyze_with_every_output_finds_and_reads_each_file_once(counted, tmp_path):
    out = CliRunner().invoke(main, ["analyze", str(SGLANG), "--json", "--db", str(tmp_path / "s.db"), "--csv",
                                    str(tmp_path / "csv"), "--html", str(tmp_path / "r.html"), "-q"])
    assert out.exit_code == 0, out.output
    assert counted["locate"] == [str(SGLANG)]
    # the run's sidecars and those of its run without nsys: each set read once, for every result and output
    read = counted["read_sidecars"]
    assert len(read) == 2 and len({tuple(r) for r in read}) == 2
    assert counted["read_server_log"] == [str(SGLANG / "server.log")]
    assert counted["server_args"] == [str(SGLANG / "server.log")]  # the run's settings: resolved once
    assert len(counted["manifest"]) == 1
    doc = json.loads(out.stdout)
    assert doc["crosscheck"]["accept"] is not None and doc["economics"] is not None


def test_compare_reads_no_sidecar_and_sweep_makes_no_economics(counted, monkeypatch):
    out = CliRunner().invoke(main, ["compare", str(FIXTURES / "reference-k2"), str(K4)])
    assert out.exit_code == 0, out.output
    assert "read_sidecars" not in counted  # a comparison needs the charges alone
    made = []
    monkeypatch.setattr(analysis, "economics_of", lambda *a: made.append(a))
    out = CliRunner().invoke(main, ["sweep", *(str(FIXTURES / f"reference-k{k}") for k in (2, 4, 6))])
    assert out.exit_code == 0, out.output
    assert made == []


def test_an_analysis_is_made_whole_and_rendering_reads_and_makes_nothing(counted):
    run = Run.load(str(K4))
    assert set(counted) == {"locate"}  # nothing read yet
    a = run.analysis()
    assert a is run.analysis() and counted["read_sidecars"] and counted["read_ground_truth"]
    reads = {name: len(calls) for name, calls in counted.items()}
    # every value is made: a field of the analysis is a value, none a computation left for later
    assert isinstance(a, Analysis)
    assert a.crosscheck is not None and a.economics is not None and a.cycle_breakdown is not None
    assert a.phase_rows.height and a.totals and a.breakdown_summary and a.draft_shape.steps == 4
    # the attribution's tables read as the analysis' own attributes: what every renderer takes
    for f in fields(Attribution):
        if not f.name.startswith("_") and f.name not in PER_RANK_TABLES + ("notes",):
            assert getattr(a, f.name) is getattr(a.attribution, f.name), f.name
    steps = []

    def seen(event, name, info):
        if event == "start":
            steps.append(name)

    progress.listen(seen)
    try:
        terminal.render(a)
        json_render.to_dict(a)
        html.render(a)
        tables.frames(a)
    finally:
        progress.unlisten(seen)
    assert steps == [] and {name: len(calls) for name, calls in counted.items()} == reads


def test_a_problem_with_a_runs_files_is_said_before_any_output_is_written(tmp_path):
    # a server log given that has no `accept len` line: the one clear error comes before the tables' folder is made
    log = tmp_path / "server.log"
    log.write_text("nothing to read here\n")
    out = tmp_path / "tables"
    result = CliRunner().invoke(main, ["analyze", str(SGLANG), "--server-log", str(log), "--csv", str(out),
                                       "--html", str(tmp_path / "r.html"), "-q"])
    assert result.exit_code != 0 and "no `accept len:` line" in result.output
    assert not out.exists() and not (tmp_path / "r.html").exists()


def test_wrong_inputs_are_said_before_anything_is_read(tmp_path):
    with pytest.raises(SpecprofError, match="no such file or directory"):
        Run.load(str(tmp_path / "nothing"))
    with pytest.raises(SpecprofError, match="--baseline-ms must be a positive number"):
        Run.load(str(K4), inputs=RunInputs(baseline_ms=0.0))
    alone = tmp_path / "run.sqlite"
    alone.write_bytes((K4 / "run.sqlite").read_bytes())
    with pytest.raises(SpecprofError, match="give the sidecar too"):
        Run.load(str(alone), inputs=RunInputs(server_log=str(SGLANG / "server.log")))


def test_a_stored_run_is_opened_by_its_id(tmp_path):
    db_path = str(tmp_path / "s.db")
    assert CliRunner().invoke(main, ["analyze", str(K4), "--db", db_path, "-q"]).exit_code == 0
    from specprof.analyzer.app import store

    db = store.connect(db_path, create=False)
    stored = open_run("@1", db=db)
    assert isinstance(stored, StoredRun)
    loaded = Run.load(str(K4))
    assert stored.side().cycles == loaded.side().cycles and stored.side().instances == loaded.side().instances
    assert stored.sweep_input().steps == loaded.sweep_input().steps == 4
    with pytest.raises(SpecprofError, match="give the results database with --db FILE"):
        open_run("@1")
    assert isinstance(open_run(str(K4), Options()), Run)


def test_a_baseline_trace_is_read_through_the_one_cached_loader(monkeypatch):
    from specprof.analyzer.app import analyze

    seen = []
    real = analyze.load_trace
    monkeypatch.setattr(analyze, "load_trace", lambda path, cache=False: seen.append(cache) or real(path, cache))
    k0 = str(FIXTURES / "reference-k0" / "run.sqlite")
    with_cache = run_module.baseline_step(k0, options=Options())
    without = run_module.baseline_step(k0, options=Options(cache=False))
    assert seen == [True, False] and with_cache == without
    assert "trace `cycle` ranges under nsys" in with_cache.source
