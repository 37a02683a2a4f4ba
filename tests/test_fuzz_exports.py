"""The differential fuzz of the nsys reader (tests/fuzz_exports.py) in the suite: a fast run on every capture
(indexed copies of two fixtures included), the cache's mutants, and the same run with both C modules built with AddressSanitizer and UndefinedBehaviorSanitizer (plus an export
with an emptied table, and a whole analysis of the two-rank capture, which runs the ops scan of
analyzer/_scan.c). The long run is by hand:
`python3 tests/fuzz_exports.py --mutants 3000`."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import textwrap

import pytest

import fuzz_exports
from conftest import FIXTURES
from test_reader_pages import needs_pages

MUTANTS = 300
CACHE_MUTANTS = 24


# A new seed every run (not the same 300 files each time), said in any failure: `python3 tests/fuzz_exports.py
# --seed N` replays it, and $SPECPROF_FUZZ_SEED makes the suite use N.
SEED = int(os.environ.get("SPECPROF_FUZZ_SEED") or random.randrange(1 << 32))


@needs_pages
def test_every_mutant_is_read_alike_or_refused():
    counts = fuzz_exports.run(MUTANTS, seed=SEED)
    assert counts["mutants"] == MUTANTS
    assert not counts["failures"], f"seed {SEED}:\n" + "\n".join(counts["failures"])


def test_the_cache_gives_nothing_or_the_undamaged_tables():
    counts = fuzz_exports.run_cache(CACHE_MUTANTS, seed=SEED)
    assert counts["mutants"] == CACHE_MUTANTS
    assert not counts["failures"], f"seed {SEED}:\n" + "\n".join(counts["failures"])


FLIPS = 24  # (by hand: `python3 tests/fuzz_exports.py --flips 1000`, a few minutes)


@needs_pages
def test_random_bytes_anywhere_in_an_export_are_analysed_or_refused():
    # Bytes changed anywhere in reference-k4's export (the schema, the small tables, free pages included), the
    # whole analysis run both ways: before, a damaged schema's text raised UnicodeDecodeError (2 of 25 copies with
    # 200 bytes changed), and rootpage edits changed numbers with exit 0.
    counts = fuzz_exports.run_flips(FLIPS, seed=SEED)
    assert counts["mutants"] == FLIPS
    assert not counts["failures"], f"seed {SEED}:\n" + "\n".join(counts["failures"])


def _compiler() -> str | None:
    return shutil.which("gcc")


SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-g",
            "-O1"]


def _sanitizer_env(tmp_path) -> dict:
    asan = subprocess.run([_compiler(), "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(asan):
        pytest.skip("gcc has no AddressSanitizer runtime here")
    return {**os.environ, "LD_PRELOAD": asan, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1", "PYTHONPATH": str(tmp_path / "pkg")}


def _sanitized(tmp_path) -> dict:
    """A copy of the package whose two C modules are built with the sanitizers; the environment that runs it."""
    fuzz_exports.build(tmp_path, SANITIZE)
    return _sanitizer_env(tmp_path)


def _clean(done: subprocess.CompletedProcess) -> None:
    report = done.stderr[-6000:]
    assert "AddressSanitizer" not in done.stderr and "runtime error:" not in done.stderr, report
    assert done.returncode == 0, report


@pytest.mark.skipif(_compiler() is None, reason="no gcc: the sanitizer build needs it")
def test_the_c_modules_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    env = _sanitized(tmp_path)
    pkg = tmp_path / "pkg"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(pkg / "tests")!r})
        from specprof.analyzer import _scan
        from specprof.analyzer.readers.nsys.pages import reader
        assert reader.__file__.startswith({str(pkg)!r}) and _scan.__file__.startswith({str(pkg)!r})
        import shutil, sqlite3
        from specprof.analyzer.readers.nsys import read_nsys_sqlite
        shutil.copy({str(FIXTURES / "reference-k4" / "run.sqlite")!r}, "emptied.sqlite")
        con = sqlite3.connect("emptied.sqlite")  # a table with no rows: its root, a leaf with no cells
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_MEMSET")
        con.commit()
        con.close()
        assert read_nsys_sqlite("emptied.sqlite").ops.height > 0
        import fuzz_exports
        counts = fuzz_exports.run({MUTANTS // 2}, seed={SEED + 1}, indexed=False)  # indexes: SQLite's, not the C code's
        print(counts["mutants"], "mutants", len(counts["failures"]), "failures")
        print(*counts["failures"], sep=chr(10))
        sys.exit(1 if counts["failures"] else 0)
    """)
    fuzz = subprocess.run([sys.executable, "-c", script], cwd=pkg, env=env, capture_output=True, text=True,
                          timeout=600)
    _clean(fuzz)
    assert f"{MUTANTS // 2} mutants 0 failures" in fuzz.stdout, f"seed {SEED + 1}: {fuzz.stdout[-3000:]}"
    analysis = subprocess.run([sys.executable, "-m", "specprof", "analyze", str(FIXTURES / "reference-k4-tp2"),
                               "--no-cache", "--json", "-q"], cwd=pkg, env=env, capture_output=True, text=True,
                              timeout=600)
    _clean(analysis)
    assert '"ranks"' in analysis.stdout


@pytest.mark.skipif(_compiler() is None, reason="no gcc: the sanitizer build needs it")
def test_the_sanitizer_setup_reports_an_overflow(tmp_path):
    # The same flags and environment catch a real out-of-bounds read: the test above can fail.
    (tmp_path / "pkg").mkdir()
    src = tmp_path / "bad.c"
    src.write_text("#include <stdlib.h>\nint peek(int i) { int *a = malloc(4 * sizeof(int)); int v = a[i]; "
                   "free(a); return v; }\n")
    lib = tmp_path / "bad.so"
    subprocess.run([_compiler(), "-shared", "-fPIC", *SANITIZE, str(src), "-o", str(lib)], check=True)
    done = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(lib)!r}).peek(9)"],
                          env=_sanitizer_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stderr[-2000:]
    assert "heap-buffer-overflow" in done.stderr or "runtime error:" in done.stderr, done.stderr[-2000:]
