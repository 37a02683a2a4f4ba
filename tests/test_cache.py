"""The Parquet cache of an export's parsed tables and of its attribution: same tables back, never a foreign or
stale cache, never a failure because of the cache."""

from __future__ import annotations

import os
import shutil

import polars as pl
import pytest

from analyzer.app import analysis_cache
from analyzer.app.analyze import Options, attribution
from analyzer.core.attribution import attribute
from analyzer.readers import trace_cache as cache
from analyzer.readers.load import load_trace
from analyzer.readers.nsys_sqlite import read_nsys_sqlite
from conftest import FIXTURES


@pytest.fixture
def export(tmp_path):
    """A private copy of a real capture (reference-k4), so that caches land in tmp_path."""
    dst = tmp_path / "run.sqlite"
    shutil.copyfile(FIXTURES / "reference-k4" / "run.sqlite", dst)
    return dst


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch):
    """The user cache folder of these tests (never the real ~/.cache)."""
    folder = tmp_path / "user-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
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
    beside = export.parent / f".{export.name}{cache.SUFFIX}"
    assert (beside / "key.json").is_file()
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


def test_cache_of_another_export_is_never_used(export, tmp_path):
    load_trace(str(export), cache=True)
    other = tmp_path / "other" / "run.sqlite"
    other.parent.mkdir()
    shutil.copyfile(FIXTURES / "reference-k2" / "run.sqlite", other)
    # Put reference-k4's cache beside reference-k2's export, under the name its cache would have.
    shutil.copytree(export.parent / f".{export.name}{cache.SUFFIX}", other.parent / f".{other.name}{cache.SUFFIX}")
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
    folder = export.parent / f".{export.name}{cache.SUFFIX}"
    (folder / "ops.parquet").write_bytes(b"not parquet")
    assert cache.load(str(export)) is None
    assert load_trace(str(export), cache=True).ops.height == read_nsys_sqlite(str(export)).ops.height


def test_unwritable_folder_beside_the_export_falls_back_to_the_user_cache(export, user_cache, monkeypatch, tmp_path):
    # A folder that cannot be written, even by root: one under a plain file.
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder would be")
    beside, user = cache.locations(str(export))
    monkeypatch.setattr(cache, "locations", lambda path: [str(blocked / os.path.basename(beside)), user])
    load_trace(str(export), cache=True)
    assert any(user_cache.rglob("key.json"))
    assert cache.load(str(export)) is not None


def test_unwritable_locations_skip_the_cache_with_a_note(export, monkeypatch, capsys, tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder would be")
    monkeypatch.setattr(cache, "locations", lambda path: [str(blocked / "a"), str(blocked / "b")])
    trace = load_trace(str(export), cache=True)
    assert trace.ops.height == read_nsys_sqlite(str(export)).ops.height
    assert "not cached" in capsys.readouterr().err


def test_cli_no_cache_writes_none(export):
    from click.testing import CliRunner

    from analyzer.cli import main

    out = CliRunner().invoke(main, ["analyze", str(export), "--json", "--no-cache"])
    assert out.exit_code == 0, out.output
    assert not (export.parent / f".{export.name}{cache.SUFFIX}").exists()
    out2 = CliRunner().invoke(main, ["analyze", str(export), "--json"])
    assert out2.exit_code == 0
    assert (export.parent / f".{export.name}{cache.SUFFIX}").exists()
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
    from analyzer.core.categories import default_rules

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
    from analyzer.core.categories import default_rules

    rules = default_rules()
    cached(export, rules)
    st = os.stat(export)
    os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    trace = read_nsys_sqlite(str(export))
    assert analysis_cache.load(str(export), analysis_cache.key(("cycle",), rules, ()), trace) is None
