"""No write goes through a link (analyzer/safe_files.py, docs/robustness.md "Writes"): for every name specprof
writes (the report, the HTML of `analyze`, each CSV and Parquet table, the Perfetto trace, the results store, the
tables of several traces, the caches' files), a symbolic link planted under that name before the command runs is
refused (one line; a cache's file is not written, silently, as any cache write that fails), and the file it
points at, outside, is never touched. The analyses are of real captures (fixtures/reference-k2, reference-k4);
the capture's own names are in tests/test_capture.py, the tracer's sidecar in tests/test_tracer_sidecar.py."""

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

def test_the_helper_never_writes_through_a_link_nor_replaces_one(tmp_path, outside):
    outside.plant(tmp_path / "a")
    for write in (lambda p: safe_files.replace(p, "new"), safe_files.created, lambda p: safe_files.put(tmp_path / "x", p)):
        (tmp_path / "x").write_text("moved")
        with pytest.raises(safe_files.LinkRefused) as refused:
            write(tmp_path / "a")
        assert refused.value.errno == errno.ELOOP and "never writes through" in refused.value.strerror
        assert (tmp_path / "a").is_symlink()
    os.mkfifo(tmp_path / "fifo")  # nor anything but a regular file: a device at `-o /dev/null`, run as root
    with pytest.raises(safe_files.NotAFile):
        safe_files.replace(tmp_path / "fifo", b"new")
    (tmp_path / "file").write_text("old")
    os.link(tmp_path / "file", tmp_path / "hard")
    safe_files.replace(tmp_path / "hard", "new")  # a regular file (a hard link here) is replaced, not written into
    assert (tmp_path / "file").read_text() == "old" and (tmp_path / "hard").read_text() == "new"
    outside.plant(tmp_path / "c")
    with pytest.raises(FileExistsError):
        safe_files.create(tmp_path / "c")
    with pytest.raises(RuntimeError), safe_files.replacing(tmp_path / "d") as fh:  # an error leaves nothing
        fh.write(b"half")
        raise RuntimeError
    assert not (tmp_path / "d").exists()
    (tmp_path / "folder").symlink_to(outside.root)
    with pytest.raises(safe_files.LinkRefused):
        safe_files.own_folder(tmp_path / "folder")
    assert outside.untouched()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "c", "fifo", "file", "folder", "hard", "outside", "x"]


# -- the analyzer's outputs ---------------------------------------------------------------------------------------

def _refused(result, path):
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"specprof: error: {path}: ") and \
        "a symbolic link, which specprof never writes through" in line, line
    return line


@pytest.mark.parametrize("command", [["report", RUN, "-o", "{out}"], ["analyze", RUN, "-q", "--html", "{out}"],
                                     ["export", RUN, "--perfetto", "{out}"]], ids=["report", "html", "perfetto"])
def test_a_link_at_a_report_or_trace_file_is_refused(tmp_path, outside, command):
    out = tmp_path / "out"
    outside.plant(out)
    _refused(invoke(*[str(a).format(out=out) for a in command]), out)
    assert outside.untouched() and out.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "outside"]  # no temporary file left


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_link_at_any_table_is_refused(tmp_path, outside, fmt):
    # Every table name, one after the other: a link under each, the tables before it written, then refused there.
    from specprof.analyzer.app.run import Run
    from specprof.analyzer.errors import SpecprofError
    from specprof.analyzer.render import tables

    run = Run.load(str(RUN)).analysis()
    names = [f"{name}.{fmt}" for name in tables.frames(run)]
    assert len(names) > 20
    folder = tmp_path / "tables"
    for name in names:
        outside.plant(folder / name)
    for name in names:
        with pytest.raises(SpecprofError) as refused:
            tables.write(run, str(folder), fmt)
        assert str(refused.value) == f"{folder / name}: cannot write (a symbolic link, which specprof never " \
                                     "writes through)"
        (folder / name).unlink()
    assert len(tables.write(run, str(folder), fmt)) == len(names)
    assert outside.untouched() and sorted(p.name for p in folder.iterdir()) == sorted(names)


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


def test_the_caches_files_are_never_written_through_a_link(tmp_path, outside, monkeypatch):
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
    # `used` is not rewritten; the analysis, no longer whole, is made again in a new folder that replaces its own
    assert outside.untouched() and (entry / "used").is_symlink()


def test_the_export_of_a_report_in_the_cache_is_never_written_through_a_link(fake, tmp_path, outside,  # noqa: F811
                                                                              monkeypatch):
    nsys, report, calls = fake
    monkeypatch.setenv("PATH", f"{nsys.parent}:/usr/bin:/bin")
    from specprof.analyzer.readers import trace_cache

    folder = Path(trace_cache.location(str(report)))
    outside.plant(folder / "export.sqlite")
    _refused(invoke("analyze", report, "-q"), folder / "export.sqlite")
    (folder / "export.sqlite").unlink()
    outside.n -= 1
    for name in ("key.json", "used"):  # the export's stamps: not written, as any cache write that fails
        outside.plant(folder / name)
    done = invoke("analyze", report, "-q")
    assert done.exit_code == 0, done.output
    assert len(calls()) == 2 and outside.untouched()
    assert (folder / "export.sqlite").is_file() and not (folder / "export.sqlite").is_symlink()


def test_the_cache_removes_the_new_files_of_its_writes_cut_short(tmp_path, monkeypatch):
    # A process killed between writing a new file and renaming it leaves `.NAME.<12 hex>.tmp` in an entry:
    # specprof's own, removed with the entry (the cache removes only the files it writes).
    monkeypatch.setenv("SPECPROF_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.sqlite").symlink_to(RUN / "run.sqlite")
    assert invoke("analyze", run, "-q").exit_code == 0
    (entry,) = (tmp_path / "cache" / "traces").iterdir()
    (analysis,) = entry.glob("analysis-*")
    for folder, name in ((entry, "used"), (entry, "ops.parquet"), (entry, "specprof-cache.json"),
                         (analysis, "analysis.json"), (analysis, "sync_timers.json")):
        (folder / f".{name}.0123456789ab.tmp").write_bytes(b"cut short")
    (entry / "notes.txt").write_text("a user's own")
    cleared = invoke("cache", "clear")
    assert "it holds files that are not the cache's (notes.txt), left as they were" in cleared.stderr
    assert sorted(p.name for p in entry.iterdir()) == ["notes.txt", "specprof-cache.json"]  # the user's file kept
    (entry / "notes.txt").unlink()
    assert invoke("cache", "clear").exit_code == 0 and not entry.exists()
