"""No write goes through a link (analyzer/safe_files.py, docs/robustness.md "Writes"): for every name specprof
writes (the report, the HTML of `analyze`, each CSV and Parquet table, the Perfetto trace, the results store, the
tables of several traces, the caches' files), a symbolic link planted under that name before the command runs is
replaced by the new file or refused, and the file it points at, outside, is never touched. The analyses are of
real captures (fixtures/reference-k2, reference-k4); the capture's own names are in tests/test_capture.py, the
tracer's sidecar in tests/test_tracer_sidecar.py."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from specprof.analyzer import safe_files
from specprof.analyzer.cli import main
from test_nsys_report import fake  # noqa: F401 (the fake nsys fixture)

RUN = FIXTURES / "reference-k2"
OTHER = FIXTURES / "reference-k4"
OWN = "a user's own file, outside"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


class Outside:
    """Files outside the folders specprof writes into, one per planted link, each holding OWN."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir()
        self.n = 0

    def plant(self, link: Path) -> None:
        self.n += 1
        target = self.root / f"target-{self.n}"
        target.write_text(OWN)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)

    def untouched(self) -> bool:
        files = sorted(self.root.iterdir())
        return len(files) == self.n and all(f.read_text() == OWN for f in files)


@pytest.fixture
def outside(tmp_path) -> Outside:
    return Outside(tmp_path / "outside")


# -- the helper (synthetic: no capture involved) ------------------------------------------------------------------

def test_the_helper_replaces_a_link_and_never_follows_one(tmp_path, outside):
    outside.plant(tmp_path / "a")
    safe_files.replace(tmp_path / "a", "new")
    assert not (tmp_path / "a").is_symlink() and (tmp_path / "a").read_text() == "new"
    outside.plant(tmp_path / "b")
    with safe_files.created(tmp_path / "b") as fh:
        fh.write(b"grows")
    assert (tmp_path / "b").read_bytes() == b"grows"
    outside.plant(tmp_path / "c")
    with pytest.raises(FileExistsError):
        safe_files.create(tmp_path / "c")
    with pytest.raises(RuntimeError), safe_files.replacing(tmp_path / "d") as fh:  # an error leaves nothing
        fh.write(b"half")
        raise RuntimeError
    assert not (tmp_path / "d").exists()
    (tmp_path / "folder").symlink_to(outside.root)
    with pytest.raises(safe_files.LinkRefused) as refused:
        safe_files.own_folder(tmp_path / "folder")
    assert refused.value.errno == errno.ELOOP and "never writes through" in refused.value.strerror
    assert outside.untouched()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c", "folder", "outside"]  # no temporary left


# -- the analyzer's outputs ---------------------------------------------------------------------------------------

def test_the_report_the_html_and_every_table_replace_a_planted_link(tmp_path, outside):
    first = invoke("analyze", RUN, "-q", "--csv", tmp_path / "learn")
    assert first.exit_code == 0, first.output
    tables = sorted(p.stem for p in (tmp_path / "learn").iterdir())
    assert len(tables) > 20
    names = [tmp_path / "report.html", tmp_path / "analyze.html"]
    names += [tmp_path / "csv" / f"{t}.csv" for t in tables] + [tmp_path / "parquet" / f"{t}.parquet" for t in tables]
    for name in names:
        outside.plant(name)
    report = invoke("report", RUN, "-o", tmp_path / "report.html")
    assert report.exit_code == 0, report.output
    analyzed = invoke("analyze", RUN, "-q", "--html", tmp_path / "analyze.html", "--csv", tmp_path / "csv",
                      "--parquet", tmp_path / "parquet")
    assert analyzed.exit_code == 0, analyzed.output
    assert outside.untouched()
    assert all(n.is_file() and not n.is_symlink() for n in names)
    assert (tmp_path / "csv" / "phases.csv").read_bytes() == (tmp_path / "learn" / "phases.csv").read_bytes()
    assert "<html" in (tmp_path / "report.html").read_text()


def test_the_perfetto_trace_replaces_a_planted_link(tmp_path, outside):
    outside.plant(tmp_path / "run.pftrace")
    done = invoke("export", RUN, "--perfetto", tmp_path / "run.pftrace")
    assert done.exit_code == 0, done.output
    assert outside.untouched() and not (tmp_path / "run.pftrace").is_symlink()
    assert (tmp_path / "run.pftrace").stat().st_size > 1000


@pytest.mark.parametrize("dangling", [False, True])
def test_a_results_store_that_is_a_link_is_refused(tmp_path, outside, dangling):
    db = tmp_path / "runs.db"
    outside.plant(db)
    if dangling:  # SQLite would have created the store at the link's target
        Path(os.readlink(db)).unlink()
        outside.n -= 1
    done = invoke("analyze", RUN, "-q", "--db", db)
    assert done.exit_code == 2 and "Traceback" not in done.output
    (line,) = done.stderr.splitlines()
    assert line == (f"specprof: error: {db}: the results database is a symbolic link, which specprof never writes "
                    "through; give the file itself")
    assert outside.untouched() and db.is_symlink()


@pytest.mark.parametrize("planted", ["1-reference-k2", ".partial-"])
def test_the_folders_of_several_traces_are_never_reached_through_a_link(tmp_path, outside, planted):
    import hashlib

    out = tmp_path / "tables"
    if planted == ".partial-":  # the folder each trace's tables are first written into
        planted += hashlib.sha1(str(RUN).encode()).hexdigest()[:16]
    (out / planted).parent.mkdir()
    (out / planted).symlink_to(outside.root)
    done = invoke("analyze", RUN, OTHER, "-q", "--csv", out, "--jobs", "1")
    assert done.exit_code == 2 and "Traceback" not in done.output
    (line,) = done.stderr.splitlines()
    assert line.startswith("specprof: error: ") and "a symbolic link, which specprof never writes through" in line
    assert list(outside.root.iterdir()) == []


def test_the_caches_files_replace_a_planted_link(tmp_path, outside, monkeypatch):
    monkeypatch.setenv("SPECPROF_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.sqlite").symlink_to(RUN / "run.sqlite")
    assert invoke("analyze", run, "-q").exit_code == 0
    (entry,) = (tmp_path / "cache" / "traces").iterdir()
    (analysis,) = entry.glob("analysis-*")
    written = [entry / "used", *analysis.glob("*.json")]
    assert len(written) >= 3
    for name in written:
        name.unlink()
        outside.plant(name)
    again = invoke("analyze", run, "-q")
    assert again.exit_code == 0, again.output
    assert outside.untouched()
    assert not (entry / "used").is_symlink() and (entry / "used").read_text().isdigit()


def test_the_export_of_a_report_in_the_cache_replaces_planted_links(fake, tmp_path, outside, monkeypatch):  # noqa: F811
    nsys, report, calls = fake
    monkeypatch.setenv("PATH", f"{nsys.parent}:/usr/bin:/bin")
    from specprof.analyzer.readers import trace_cache

    folder = Path(trace_cache.location(str(report)))
    for name in ("key.json", "used", "export.sqlite"):
        outside.plant(folder / name)
    done = invoke("analyze", report, "-q")
    assert done.exit_code == 0, done.output
    assert len(calls()) == 1 and outside.untouched()
    assert json.loads((folder / "key.json").read_text())["key"]["schema"]
    assert not any((folder / name).is_symlink() for name in ("key.json", "used", "export.sqlite"))
