"""The Parquet cache of an export's parsed tables and of its attribution: same tables back, never a foreign or
stale cache, never a failure because of the cache."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from specprof.analyzer.app import analysis_cache
from specprof.analyzer.app.analyze import Options, attribution
from specprof.analyzer.core.attribution import attribute
from specprof.analyzer.readers import trace_cache as cache
from specprof.analyzer.readers.load import load_trace
from specprof.analyzer.readers.nsys import read_nsys_sqlite
from conftest import FIXTURES


@pytest.fixture
def export(tmp_path):
    """A private copy of a real capture (reference-k4), so that caches land in tmp_path."""
    dst = tmp_path / "data" / "run.sqlite"
    dst.parent.mkdir()
    shutil.copyfile(FIXTURES / "reference-k4" / "run.sqlite", dst)
    return dst


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch):
    """The cache folder of these tests (never the user's own)."""
    folder = tmp_path / "user-cache"
    monkeypatch.setenv("SPECPROF_CACHE_DIR", str(folder))
    monkeypatch.delenv("SPECPROF_CACHE_MAX_GB", raising=False)
    return folder


def _same(a, b):
    for t in cache.TABLES:
        x, y = getattr(a, t), getattr(b, t)
        assert x.schema == y.schema, t
        assert x.equals(y), t
    assert a.meta == b.meta


def test_second_load_reads_the_cache_and_gives_the_same_tables(export):
    fresh = read_nsys_sqlite(str(export))
    first = load_trace(str(export), cache=True)
    assert (Path(cache.location(str(export))) / cache.STAMP).is_file()
    assert os.listdir(export.parent) == [export.name]  # nothing written beside the input
    assert cache.load(str(export)) is not None
    second = load_trace(str(export), cache=True)
    _same(fresh, first)
    _same(fresh, second)
    # And the analysis of the cached tables is the analysis of the export.
    a, b = attribute(fresh), attribute(second)
    for t in ("phases", "categories", "cycle_phases", "launch", "streams", "kernels"):
        assert getattr(a, t).equals(getattr(b, t)), t


def test_changed_file_does_not_use_the_cache(export):
    load_trace(str(export), cache=True)
    # Same size, new content and modification time: the cache must not match.
    with open(export, "r+b") as fh:
        fh.seek(200)
        fh.write(b"\x00")
    os.utime(export, ns=(os.stat(export).st_atime_ns, os.stat(export).st_mtime_ns + 10**9))
    assert cache.load(str(export)) is None


def test_changed_content_with_the_same_size_and_mtime_does_not_use_the_cache(export):
    load_trace(str(export), cache=True)
    st = os.stat(export)
    with open(export, "r+b") as fh:  # the header page: what a different export would differ in
        fh.seek(100)
        fh.write(b"\x01\x02\x03")
    os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(export).st_size == st.st_size and os.stat(export).st_mtime_ns == st.st_mtime_ns
    assert cache.load(str(export)) is None


def _stamp(export) -> dict:
    import json
    return json.loads((Path(cache.location(str(export))) / cache.STAMP).read_text())


def _memo(export) -> tuple[str, int]:
    """This process's hash of the export and when its hashing began (what export_digest keeps)."""
    st = os.stat(export)
    return cache._digests[(os.path.realpath(export), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                           st.st_ctime_ns)]


def test_a_later_run_takes_the_hash_from_the_stamp_of_an_unchanged_export(export, monkeypatch):
    # The copy was written just now: a run would hash it again (RACY_NS, next test); with the margin at 0 this
    # test stands for an export written long before it was cached, as every real one is.
    monkeypatch.setattr(cache, "RACY_NS", 0)
    load_trace(str(export), cache=True)
    hashed = _stamp(export)["hashed"]
    assert hashed["sha256"] == _memo(export)[0] and hashed["size"] == os.path.getsize(export)
    cache._digests.clear()  # what a new process starts with
    assert cache.load(str(export)) is not None
    assert _memo(export) == (hashed["sha256"], hashed["at_ns"])  # taken from the stamp: not hashed again
    assert cache.matching_folder(str(export)) == cache.location(str(export))


def test_an_export_cached_right_after_it_was_written_is_hashed_again_and_the_stamp_keeps_that(export):
    load_trace(str(export), cache=True)
    first = _stamp(export)["hashed"]
    assert first["ctime_ns"] + cache.RACY_NS > first["at_ns"]  # written within 2 s of its hash
    cache._digests.clear()
    assert cache.load(str(export)) is not None
    digest, at = _memo(export)
    assert digest == first["sha256"] and at > first["at_ns"]  # hashed again
    assert _stamp(export)["hashed"]["at_ns"] == at  # the later record is kept, with the stamp still complete
    assert cache.load(str(export)) is not None


def test_a_stamps_hash_is_never_taken_for_an_edited_export(export, monkeypatch):
    monkeypatch.setattr(cache, "RACY_NS", 0)
    load_trace(str(export), cache=True)
    st = os.stat(export)
    with open(export, "r+b") as fh:  # same size, mtime put back: only the ctime tells, and it always does
        fh.seek(100)
        fh.write(b"\x01\x02\x03")
    os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns))
    cache._digests.clear()
    assert cache.load(str(export)) is None
    assert cache.matching_folder(str(export)) is None
    assert _memo(export)[0] != _stamp(export)["hashed"]["sha256"]


def test_cache_of_another_export_is_never_used(export, tmp_path):
    load_trace(str(export), cache=True)
    other = tmp_path / "other" / "run.sqlite"
    other.parent.mkdir()
    shutil.copyfile(FIXTURES / "reference-k2" / "run.sqlite", other)
    # Put reference-k4's cache where reference-k2's export's cache would be.
    shutil.copytree(cache.location(str(export)), cache.location(str(other)))
    assert cache.load(str(other)) is None
    trace = load_trace(str(other), cache=True)
    assert trace.ops.height == read_nsys_sqlite(str(other)).ops.height != read_nsys_sqlite(str(export)).ops.height
    # ... and it was replaced by the right one.
    assert cache.load(str(other)).ops.height == trace.ops.height


def test_cache_of_another_code_version_is_not_used(export, monkeypatch):
    load_trace(str(export), cache=True)
    monkeypatch.setattr(cache, "CACHE_SCHEMA", "specprof.cache/0")
    assert cache.load(str(export)) is None


def test_corrupt_cache_is_ignored(export):
    load_trace(str(export), cache=True)
    folder = Path(cache.location(str(export)))
    (folder / "ops.parquet").write_bytes(b"not parquet")
    assert cache.load(str(export)) is None
    assert load_trace(str(export), cache=True).ops.height == read_nsys_sqlite(str(export)).ops.height


def test_a_moved_export_is_never_served_the_cache_of_what_was_there(export, tmp_path):
    load_trace(str(export), cache=True)
    moved = tmp_path / "elsewhere" / "run.sqlite"
    moved.parent.mkdir()
    os.replace(export, moved)
    assert cache.load(str(moved)) is None  # another path: another entry
    # Another export put where the first one was, with the first one's size and mtime: not served its cache.
    shutil.copyfile(FIXTURES / "reference-k2" / "run.sqlite", export)
    assert cache.load(str(export)) is None


def test_an_unwritable_cache_folder_skips_the_cache_with_a_note(export, monkeypatch, capsys, tmp_path):
    # A folder that cannot be written, even by root: one under a plain file.
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder would be")
    monkeypatch.setenv("SPECPROF_CACHE_DIR", str(blocked / "cache"))
    trace = load_trace(str(export), cache=True)
    assert trace.ops.height == read_nsys_sqlite(str(export)).ops.height
    assert "not cached" in capsys.readouterr().err


def test_the_cache_is_kept_under_its_size_bound_least_recently_used_first(tmp_path, monkeypatch):
    exports = []
    for name in ("reference-k2", "reference-k4", "reference-k6"):
        dst = tmp_path / name / "run.sqlite"
        dst.parent.mkdir()
        shutil.copyfile(FIXTURES / name / "run.sqlite", dst)
        exports.append(str(dst))
    for p in exports[:2]:
        load_trace(p, cache=True)
    one = max(e.bytes for e in cache.entries())
    assert len(cache.entries()) == 2
    load_trace(exports[0], cache=True)  # the first export used again: the second is now the least recent
    monkeypatch.setenv("SPECPROF_CACHE_MAX_GB", str(2.5 * one / 1e9))
    load_trace(exports[2], cache=True)
    kept = {e.export for e in cache.entries()}
    assert kept == {os.path.realpath(exports[0]), os.path.realpath(exports[2])}
    assert sum(e.bytes for e in cache.entries()) <= 2.5 * one


def test_cache_info_and_clear(export, user_cache):
    from click.testing import CliRunner

    from specprof.analyzer.cli import main

    load_trace(str(export), cache=True)
    out = CliRunner().invoke(main, ["cache", "info"])
    assert out.exit_code == 0, out.output
    assert str(user_cache) in out.stdout and os.path.realpath(export) in out.stdout and "1 export(s)" in out.stdout
    out = CliRunner().invoke(main, ["cache", "clear"])
    assert out.exit_code == 0 and "removed 1 export(s)" in out.stdout
    assert cache.entries() == [] and cache.load(str(export)) is None
    assert "0 export(s)" in CliRunner().invoke(main, ["cache", "info"]).stdout


def test_cli_no_cache_writes_none(export):
    from click.testing import CliRunner

    from specprof.analyzer.cli import main

    out = CliRunner().invoke(main, ["analyze", str(export), "--json", "--no-cache"])
    assert out.exit_code == 0, out.output
    assert not os.path.exists(cache.location(str(export)))
    out2 = CliRunner().invoke(main, ["analyze", str(export), "--json"])
    assert out2.exit_code == 0
    assert os.path.exists(cache.location(str(export)))
    assert os.listdir(export.parent) == [export.name]
    out3 = CliRunner().invoke(main, ["analyze", str(export), "--json"])
    assert out3.stdout == out2.stdout == out.stdout


def test_cached_tables_keep_their_types(export):
    load_trace(str(export), cache=True)
    trace = cache.load(str(export))
    assert trace.ops.schema["name"] == pl.Categorical
    assert trace.ops.schema["start"] == pl.Int64


def _same_analysis(a, b):
    for t in ("ops", "ranges", "charges", "waits", "phases", "categories", "cycles", "cycle_phases", "launch",
              "streams", "devices", "kernels", "unattributed"):
        x, y = getattr(a, t), getattr(b, t)
        assert x.schema == y.schema, t
        assert x.equals(y), t
    assert a.notes == b.notes
    assert a.segments.equals(b.segments)
    for t in cache.TABLES:
        assert getattr(a.trace, t).equals(getattr(b.trace, t)), t


def cached(export, rules, domains=()):
    """The attribution of `export` through both caches (app/analyze.py)."""
    return attribution(str(export), Options(rules=tuple(rules), domains=domains))


def test_the_same_analysis_again_comes_from_the_cache(export):
    from specprof.analyzer.core.categories import default_rules

    rules = default_rules()
    first = cached(export, rules)
    opts = analysis_cache.key(("cycle",), rules, ())
    trace = cache.load(str(export))
    again = analysis_cache.load(str(export), opts, trace)
    assert again is not None
    _same_analysis(first, again)
    _same_analysis(first, cached(export, rules))
    # Other options: not that analysis.
    assert analysis_cache.load(str(export), analysis_cache.key(("verify",), rules, ()), trace) is None
    assert analysis_cache.load(str(export), analysis_cache.key(("cycle",), rules[1:], ()), trace) is None
    assert analysis_cache.load(str(export), analysis_cache.key(("cycle",), rules, ("specprof",)), trace) is None
    other = cached(export, rules, ("specprof",))
    _same_analysis(other, attribute(read_nsys_sqlite(str(export)), domains=("specprof",)))


def test_analysis_cache_follows_the_file(export):
    from specprof.analyzer.core.categories import default_rules

    rules = default_rules()
    cached(export, rules)
    st = os.stat(export)
    os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    trace = read_nsys_sqlite(str(export))
    assert analysis_cache.load(str(export), analysis_cache.key(("cycle",), rules, ()), trace) is None


# ---------------------------------------------------------------------- only specprof's entries are touched


def _users_folder(where: Path) -> Path:
    where.mkdir(parents=True)
    (where / "results.csv").write_text("a user's own")
    (where / "ops.parquet").write_text("a user's own, named like a cache file")
    return where


def _intact(where: Path) -> bool:
    return (where / "results.csv").read_text() == "a user's own" and (where / "ops.parquet").exists()


def test_eviction_and_clear_never_touch_a_folder_specprof_did_not_stamp(export, user_cache):
    mine = _users_folder(user_cache / "traces" / "experiment1")
    legacy_looking = _users_folder(user_cache / "traces" / "0123456789abcdef-run.sqlite")  # no key.json
    load_trace(str(export), cache=True)
    assert [e.export for e in cache.entries()] == [os.path.realpath(export)]  # the user's folders are no entries
    assert cache.evict(limit=1) != [] and cache.entries() == []  # a bound of one byte: every entry goes
    assert _intact(mine) and _intact(legacy_looking)
    load_trace(str(export), cache=True)
    assert cache.clear()[0] == 1
    assert _intact(mine) and _intact(legacy_looking)
    assert sorted(os.listdir(user_cache / "traces")) == ["0123456789abcdef-run.sqlite", "experiment1"]


def test_an_entry_gone_between_listing_and_sizing_is_no_error(export, user_cache, monkeypatch):
    # Workers of `--jobs N` share the cache: one lists the entries while another renames its finished write into
    # place (or evicts), so a folder listed a moment ago can be gone when its size is read. Eviction goes on.
    load_trace(str(export), cache=True)
    (entry,) = cache.entries()
    specprofs = cache._specprofs

    def gone_after_listing(base, name):
        doc = specprofs(base, name)
        if doc is not None:
            shutil.rmtree(os.path.join(user_cache, "traces", name))  # what the other worker's rename does
        return doc

    monkeypatch.setattr(cache, "_specprofs", gone_after_listing)
    assert [e.bytes for e in cache.entries()] == [0]
    assert cache.evict(limit=1) == []  # nothing left to remove, and no FileNotFoundError
    assert entry.bytes > 0


def test_a_traces_folder_that_is_a_link_is_never_followed(export, user_cache, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "entry").mkdir()
    (target / "entry" / "results.csv").write_text("a user's own")
    user_cache.mkdir()
    (user_cache / "traces").symlink_to(target)
    trace = load_trace(str(export), cache=True)  # read, not cached through the link
    assert trace.ops.height == read_nsys_sqlite(str(export)).ops.height
    assert os.listdir(target) == ["entry"]
    # A stamped entry reached through the link is not the cache's either.
    shutil.rmtree(target)
    (user_cache / "traces").unlink()
    load_trace(str(export), cache=True)
    shutil.move(user_cache / "traces", target)
    (user_cache / "traces").symlink_to(target)
    assert cache.entries() == [] and cache.clear() == (0, 0) and cache.evict(limit=1) == []
    assert len(os.listdir(target)) == 1 and cache.load(str(export)) is None


def test_an_entry_that_is_a_link_is_not_used_removed_or_written_through(export, user_cache, tmp_path):
    load_trace(str(export), cache=True)
    folder = Path(cache.location(str(export)))
    moved = tmp_path / "moved-entry"
    shutil.move(folder, moved)
    folder.symlink_to(moved)
    assert cache.load(str(export)) is None and cache.entries() == []
    load_trace(str(export), cache=True)  # cannot replace the link: not cached, the link left alone
    assert folder.is_symlink() and cache.clear() == (0, 0) and folder.is_symlink()
    assert (moved / cache.STAMP).is_file()


def test_clear_removes_entries_of_the_schema_before_stamps_and_left_over_writes(export, user_cache):
    old = user_cache / "traces" / "0123456789abcdef-run.sqlite"
    old.mkdir(parents=True)
    (old / "key.json").write_text('{"key": {"schema": "specprof.cache/2", "path": "/x/run.sqlite"}}')
    (old / "ops.parquet").write_bytes(b"old")
    load_trace(str(export), cache=True)
    left = Path(cache.location(str(export)) + ".tmp-abc")  # a write killed after its stamp
    left.mkdir()
    (left / cache.STAMP).write_text(f'{{"schema": "{cache.ENTRY_SCHEMA}", "complete": false}}')
    assert cache.evict(limit=1) and left.exists() and not old.exists()  # a write going on is never evicted
    assert cache.clear()[0] == 1 and os.listdir(user_cache / "traces") == []


# ------------------------------------------------------------------------- cache contents are checked


def test_an_edited_ops_table_in_the_cache_is_not_used(export):
    from click.testing import CliRunner

    from specprof.analyzer.cli import main

    fresh = CliRunner().invoke(main, ["analyze", str(export), "--json", "--no-cache"]).stdout
    assert CliRunner().invoke(main, ["analyze", str(export), "--json"]).stdout == fresh
    folder = Path(cache.location(str(export)))
    ops = pl.read_parquet(folder / "ops.parquet")
    # A valid Parquet file: every op 10 % longer.
    ops.with_columns(end=pl.col("start") + (pl.col("end") - pl.col("start")) * 11 // 10).write_parquet(
        folder / "ops.parquet")
    assert cache.load(str(export)) is None
    for sub in folder.glob("analysis-*"):  # and the analysis's own tables, edited the same way
        charges = pl.read_parquet(sub / "phases.parquet")
        charges.reverse().write_parquet(sub / "phases.parquet")
    assert CliRunner().invoke(main, ["analyze", str(export), "--json"]).stdout == fresh
    assert cache.load(str(export)) is not None  # the edited entry was replaced, whatever its tables' sizes


def test_an_edited_analysis_table_in_the_cache_is_not_used(export):
    from specprof.analyzer.core.categories import default_rules

    rules = default_rules()
    cached(export, rules)
    opts = analysis_cache.key(("cycle",), rules, ())
    trace = cache.load(str(export))
    assert analysis_cache.load(str(export), opts, trace) is not None
    (sub,) = Path(cache.location(str(export))).glob("analysis-*")
    phases = pl.read_parquet(sub / "phases.parquet")
    phases.reverse().write_parquet(sub / "phases.parquet")
    assert analysis_cache.load(str(export), opts, trace) is None


def test_an_export_damaged_in_the_middle_with_its_size_and_mtime_kept_is_not_analysed_from_the_cache(export):
    from click.testing import CliRunner

    from specprof.analyzer.cli import main
    from test_damaged_exports import shifted_record_header

    assert CliRunner().invoke(main, ["analyze", str(export), "--json"]).exit_code == 0  # cached
    st = os.stat(export)
    data = shifted_record_header(str(export), middle=True)
    first_changed = next(i for i, (a, b) in enumerate(zip(data, export.read_bytes())) if a != b)
    assert 64 * 1024 < first_changed < st.st_size - 64 * 1024  # outside the first and last 64 KiB
    with open(export, "r+b") as fh:
        fh.write(data)
    os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(export).st_size == st.st_size and os.stat(export).st_mtime_ns == st.st_mtime_ns
    assert cache.load(str(export)) is None
    for args in (["--no-cache"], []):  # the same refusal with the cache as without
        result = CliRunner().invoke(main, ["analyze", str(export), "--json", *args])
        assert result.exit_code == 2 and "is damaged" in result.output and "Traceback" not in result.output


def test_the_synchronize_timer_estimate_is_kept_with_the_analysis_and_checked(export):
    from specprof.analyzer import progress
    from specprof.analyzer.app.run import Run
    from specprof.analyzer.derived.analysis import estimate_sync_timers

    def estimate():
        steps = []

        def seen(event, name, info):
            if event == "start":
                steps.append(name)
        progress.listen(seen)
        try:
            est = Run.load(str(export), Options()).analysis().sync_timers
        finally:
            progress.unlisten(seen)
        return est, "estimating synchronize timers" in steps

    first, computed = estimate()
    assert computed and first is not None
    second, computed = estimate()
    assert not computed  # read from beside the cached analysis
    a = attribution(str(export), Options())
    fresh = estimate_sync_timers(a)  # with the capture's own synchronize calls' cost, as the analysis makes it
    for est in (first, second):
        assert est.phases.equals(fresh.phases) and est.phases.schema == fresh.phases.schema
        assert (est.cycle_ns, est.synced_cycle_ns, est.cycle_inflation_pct, est.sync_ns, est.syncs_per_cycle,
                est.cycles, est.notes) == (fresh.cycle_ns, fresh.synced_cycle_ns, fresh.cycle_inflation_pct,
                                           fresh.sync_ns, fresh.syncs_per_cycle, fresh.cycles, fresh.notes)
    # an edited estimate (its digest no longer matching) is not used: computed again, the same
    (kept,) = [p for p in Path(cache.root()).rglob("sync_timers.json")]
    kept.write_text(kept.read_text().replace(f'"cycle_ns": {fresh.cycle_ns}', '"cycle_ns": 1'))
    third, computed = estimate()
    assert computed and third.cycle_ns == fresh.cycle_ns


# ------------------------------------------------------------------- the key covers the code that is loaded


def _uncovered() -> list[str]:
    """The loaded modules of specprof.analyzer whose file the code's hash does not cover."""
    from specprof.analyzer import code_identity

    covered = {os.path.realpath(f) for _, f in code_identity.code_files()}
    return sorted(m.__name__ for m in code_identity.loaded_modules()
                  if (f := code_identity.module_file(m)) is not None and os.path.realpath(f) not in covered)


def test_the_cache_keys_cover_every_loaded_module_of_the_analyzer(export, monkeypatch):
    from specprof.analyzer import code_identity
    from specprof.analyzer.core.categories import default_rules

    a = attribution(str(export), Options())  # through both caches: every module an analysis needs is loaded
    assert a.phases.height and cache.matching_folder(str(export)) is not None
    loaded = {m.__name__ for m in code_identity.loaded_modules()}
    named = {"specprof.analyzer.model.columns", "specprof.analyzer.core.window", "specprof.analyzer.model.stats",
             "specprof.analyzer.readers.nsys.read", "specprof.analyzer.readers.trace_cache"}
    compiled = {"specprof.analyzer._scan", "specprof.analyzer.readers.nsys._sqlite_pages"}
    assert named <= loaded
    assert _uncovered() == []
    hashed = dict(code_identity.code_files())
    assert named <= set(hashed)
    for name in compiled & loaded:  # the C modules' own files, as built
        assert os.path.realpath(hashed[name]) == os.path.realpath(code_identity.module_file(__import__(
            name, fromlist=["_"])))
    # The one hash all three keys take: the trace cache's, the analysis cache's, the kept results'.
    monkeypatch.setattr(code_identity, "_hash", None)
    code = code_identity.code_hash()
    assert code == code_identity.digest_of(code_identity.code_files())
    assert cache.key(str(export))["code"] == code
    assert analysis_cache.key(("cycle",), default_rules(), ())["code"] == code
    # The check can fail: a collector that leaves one loaded module out is caught.
    files = code_identity.code_files
    monkeypatch.setattr(code_identity, "code_files",
                        lambda: [(m, f) for m, f in files() if m != "specprof.analyzer.core.window"])
    assert _uncovered() == ["specprof.analyzer.core.window"]


def test_the_code_hash_follows_each_modules_bytes_and_never_hashes_a_missing_file_as_its_name(tmp_path):
    from specprof.analyzer import code_identity

    files = code_identity.code_files()
    base = code_identity.digest_of(files)
    assert code_identity.digest_of(files) == base
    i = next(i for i, (m, _) in enumerate(files) if m == "specprof.analyzer.model.columns")
    copy = tmp_path / "columns.py"
    copy.write_bytes(Path(files[i][1]).read_bytes() + b"\n# one byte more\n")
    assert code_identity.digest_of(files[:i] + [(files[i][0], str(copy))] + files[i + 1:]) != base
    # A module file gone: a value drawn at random, never its name (which a file could hold).
    gone = files[:i] + [(files[i][0], str(tmp_path / "gone.py"))] + files[i + 1:]
    named = tmp_path / "named.py"
    named.write_text(str(tmp_path / "gone.py"))
    one, two = code_identity.digest_of(gone), code_identity.digest_of(gone)
    assert len({one, two, base, code_identity.digest_of(files[:i] + [(files[i][0], str(named))] + files[i + 1:])}) == 4


def test_the_code_hash_takes_a_few_milliseconds():
    import time

    from specprof.analyzer import code_identity

    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        code_identity.digest_of(code_identity.code_files())
        best = min(best, time.perf_counter() - t)
    assert best < 0.05, f"{best * 1e3:.1f} ms"  # about 2 ms here (64 files, 1 MB); once per process


def test_a_cache_written_by_other_code_is_not_used(export, monkeypatch):
    from specprof.analyzer import code_identity
    from specprof.analyzer.core.categories import default_rules

    cached(export, default_rules())
    assert cache.load(str(export)) is not None
    monkeypatch.setattr(code_identity, "_hash", "0" * 16)  # what another version's modules hash to
    assert cache.load(str(export)) is None and cache.matching_folder(str(export)) is None


# ------------------------------------------------------------- broken entries, forged stamps, huge stamps


def _cli(*args):
    from click.testing import CliRunner

    from specprof.analyzer.cli import main

    return CliRunner().invoke(main, list(args))


def test_clear_removes_every_file_specprof_wrote_and_the_folders(export, user_cache):
    fresh = _cli("analyze", str(export), "--json")  # the tables, the analysis, the synchronize-timer estimate
    assert fresh.exit_code == 0, fresh.output
    assert _cli("analyze", str(export), "--json").stdout == fresh.stdout
    folder = Path(cache.location(str(export)))
    assert list(folder.glob("analysis-*/sync_timers.json"))
    out = _cli("cache", "clear")
    assert out.exit_code == 0 and "removed 1 export(s)" in out.stdout, out.output
    assert os.listdir(user_cache / "traces") == []


def test_a_forged_stamp_in_a_users_folder_removes_nothing_of_the_users(export, user_cache):
    # A real stamp (of a copy of reference-k4) put into a user's folder: it lists ops.parquet, which the user's
    # folder also holds, of another size.
    load_trace(str(export), cache=True)
    stamp = (Path(cache.location(str(export))) / cache.STAMP).read_bytes()
    mine = _users_folder(user_cache / "traces" / "experiment1")
    (mine / cache.STAMP).write_bytes(stamp)
    looks_like_one = _users_folder(user_cache / "traces" / "0123456789abcdef-run.sqlite")
    (looks_like_one / cache.STAMP).write_text(f'{{"schema": "{cache.ENTRY_SCHEMA}", "complete": false}}')
    assert cache.evict(limit=1) is not None
    assert _intact(mine) and _intact(looks_like_one)
    out = _cli("cache", "clear")
    assert _intact(mine) and _intact(looks_like_one)
    assert not os.path.exists(cache.location(str(export)))  # the real entry is gone
    # One line naming a folder left and what it holds, and that there is one more.
    assert out.exit_code == 2 and "results.csv" in out.output and "1 more" in out.output, out.output
    assert looks_like_one.name in out.output or mine.name in out.output
    assert len(out.output.strip().splitlines()) == 1 and "Traceback" not in out.output
    info = _cli("cache", "info")  # both are still listed, the one with the unfinished stamp said so
    assert info.exit_code == 0 and mine.name in info.stdout and looks_like_one.name in info.stdout
    assert "cut short" in info.stdout


def test_a_deeply_nested_stamp_is_a_broken_entry_named_and_removed_and_breaks_no_analysis(export, user_cache):
    fresh = _cli("analyze", str(export), "--json", "--no-cache").stdout
    assert _cli("analyze", str(export), "--json").stdout == fresh
    folder = Path(cache.location(str(export)))
    (folder / cache.STAMP).write_text("[" * 50_000)
    assert cache.load(str(export)) is None and cache.matching_folder(str(export)) is None
    info = _cli("cache", "info")
    assert info.exit_code == 0, info.output
    assert folder.name in info.stdout and "broken" in info.stdout
    out = _cli("cache", "clear")
    assert out.exit_code == 0 and "removed 1 export(s)" in out.stdout, out.output
    assert not folder.exists()
    # ... and an analysis over such an entry: the same result, and the entry written anew.
    assert _cli("analyze", str(export), "--json").stdout == fresh
    (folder / cache.STAMP).write_text("[" * 50_000)
    again = _cli("analyze", str(export), "--json")
    assert again.exit_code == 0 and again.stdout == fresh, again.output
    assert cache.matching_folder(str(export)) == str(folder)
    # The analysis's own JSON nested as deep: not used, computed again, the same.
    for sub in folder.glob("analysis-*"):
        (sub / "analysis.json").write_text("[" * 50_000)
        (sub / "sync_timers.json").write_text("[" * 50_000)
    assert _cli("analyze", str(export), "--json").stdout == fresh
    assert _cli("cache", "info").exit_code == 0
    (sub,) = folder.glob("analysis-*")
    (sub / "analysis.json").write_text("[" * 50_000)  # the analysis's stamp broken: its tables go all the same
    out = _cli("cache", "clear")
    assert out.exit_code == 0 and "removed 1 export(s)" in out.stdout, out.output
    assert os.listdir(user_cache / "traces") == []


def test_a_3_gb_sparse_stamp_is_never_read_whole(export, user_cache):
    import subprocess
    import sys

    from conftest import ROOT

    load_trace(str(export), cache=True)
    folder = Path(cache.location(str(export)))
    os.truncate(folder / cache.STAMP, 3 << 30)  # the stamp, then 3 GB of zeros (a sparse file: no disk)
    child = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"  # reading the stamp whole cannot fit
        "from specprof.analyzer.cli import main\n"
        "sys.argv = ['specprof'] + sys.argv[1:]\n"
        "main()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    info = subprocess.run([sys.executable, "-c", child, "cache", "info"], capture_output=True, text=True, env=env)
    assert info.returncode == 0 and "broken" in info.stdout and folder.name in info.stdout, info.stderr
    run = subprocess.run([sys.executable, "-c", child, "analyze", str(export), "--json"], capture_output=True,
                         text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert cache.matching_folder(str(export)) == str(folder)  # written anew
