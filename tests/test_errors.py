"""Errors a user can meet: one clear line naming the file, exit code 2, never a traceback."""

from __future__ import annotations

import shutil
import sqlite3

import pytest
from click.testing import CliRunner

from analyzer.cli import main


def run(*args):
    result = CliRunner().invoke(main, ["analyze", *map(str, args)])
    return result


def assert_clean_error(result, path, words):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert str(path) in lines[0] and lines[0].startswith("specprof: error:")
    assert any(w in lines[0] for w in words), lines[0]


def test_missing_path(tmp_path):
    p = tmp_path / "nope.sqlite"
    assert_clean_error(run(p), p, ["no such file"])


def test_directory_without_an_export(tmp_path):
    assert_clean_error(run(tmp_path), tmp_path, ["no nsys SQLite export"])


def test_not_sqlite(tmp_path):
    p = tmp_path / "report.nsys-rep"
    p.write_bytes(b"\x00\x01binary nsys report, not an export" * 10)
    assert_clean_error(run(p), p, ["not a SQLite file"])


def test_sqlite_but_not_nsys(tmp_path):
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.commit()
    con.close()
    assert_clean_error(run(p), p, ["not an Nsight Systems export"])


def test_truncated(tmp_path, shared_dir):
    src = shared_dir / "nsys_sqlite" / "nsysai_mfu_2gpu_before.sqlite"
    p = tmp_path / "cut.sqlite"
    p.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    assert_clean_error(run(p), p, ["truncated"])


def test_truncated_tail_pages_with_a_lying_header(tmp_path, shared_dir):
    # A file cut short whose header was rewritten to match: SQLite itself must then report it.
    src = shared_dir / "nsys_sqlite" / "nsysai_mfu_2gpu_before.sqlite"
    data = bytearray(src.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    keep = (len(data) // page // 3) * page
    data = data[:keep]
    data[28:32] = (keep // page).to_bytes(4, "big")
    p = tmp_path / "cut2.sqlite"
    p.write_bytes(bytes(data))
    assert_clean_error(run(p), p, ["truncated or corrupt", "is damaged", "no GPU operations"])


def test_no_gpu_ops(tmp_path, shared_dir):
    p = tmp_path / "nogpu.sqlite"
    shutil.copy(shared_dir / "nsys_sqlite" / "nsysai_mock.sqlite", p)
    con = sqlite3.connect(p)
    for t in ("KERNEL", "MEMCPY", "MEMSET"):
        try:
            con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_{t}")
        except sqlite3.OperationalError:
            pass
    con.commit()
    con.close()
    assert_clean_error(run(p), p, ["no GPU operations"])


def test_no_nvtx_ranges_still_reports_kernels(shared_dir):
    # mock.sqlite is a real export with no NVTX at all.
    p = shared_dir / "nsys_sqlite" / "nsysai_mock.sqlite"
    result = run(p)
    assert result.exit_code == 0, result.output
    assert "no phases found" in result.output
    assert "Top kernels per phase" in result.output and "reduce_kernel" in result.output


def test_bad_categories_file(tmp_path, shared_dir):
    cats = tmp_path / "cats.toml"
    cats.write_text('[[rule]]\ncategory = "x"\npattern = "(unclosed"\n')
    result = CliRunner().invoke(main, ["analyze", str(shared_dir / "nsys_sqlite" / "nsysai_mock.sqlite"),
                                       "--categories", str(cats)])
    assert_clean_error(result, cats, ["bad pattern"])


@pytest.mark.parametrize("name", ["we?ird#name%20.sqlite", "spa ce.sqlite"])
def test_paths_with_uri_characters(tmp_path, shared_dir, name):
    p = tmp_path / name
    shutil.copy(shared_dir / "nsys_sqlite" / "nsysai_mock.sqlite", p)
    result = run(p)
    assert result.exit_code == 0, result.output
