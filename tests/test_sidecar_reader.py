"""The sidecar reader on the project's real sidecars (fixtures/, with and without nsys), checked against a
plain json.loads of the same files; then garbage, each giving one clear error naming the file and line
(synthetic files: no capture is damaged in these ways)."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers.sidecar import find, read_sidecars
from conftest import FIXTURES

# The reference engine's (and its torch.profiler run's): every cycle a full batch of 8 with counts.
SIDECARS = [p for p in sorted(FIXTURES.glob("*/specprof-sidecar.*.jsonl"))
            + sorted(FIXTURES.glob("*/no-nsys/specprof-sidecar.*.jsonl"))
            if not p.relative_to(FIXTURES).parts[0].startswith("sglang-")]
# Real SGLang servers: prefill cycles, batches that grow, CUDA-event and capture-window records.
SGLANG_SIDECARS = sorted(FIXTURES.glob("sglang-*/specprof-sidecar.*.jsonl")) + sorted(
    FIXTURES.glob("sglang-*/no-nsys*/specprof-sidecar.*.jsonl"))


def raw(path):
    return [json.loads(line) for line in open(path)]


@pytest.mark.parametrize("path", SIDECARS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_real_sidecar_tables_match_the_records(path):
    records = raw(path)
    s = read_sidecars([str(path)])
    cycles = [r for r in records if r["type"] == "cycle"]
    ranges = [r for r in records if r["type"] == "range"]
    header, footer = records[0], records[-1]
    assert s.files.row(0, named=True)["pid"] == header["pid"]
    assert s.files["complete"].to_list() == [True] and footer["cycles"] == len(cycles) == s.cycles.height
    assert s.cycles.sort("index")["start"].to_list() == [c["start_ns"] for c in sorted(cycles, key=lambda c: c["index"])]
    # accept length: recomputed from the counts, equal to what the tracer wrote
    by_index = {c["index"]: c for c in cycles}
    for row in s.cycles.iter_rows(named=True):
        rec = by_index[row["index"]]
        assert row["requests"] == len(rec["accept"]["correct_drafts"]) == rec["batch_size"] == 8
        assert row["accept_len"] == pytest.approx(rec["accept"]["accept_len_mean"], abs=1e-12)
        assert row["verify"] is True
    assert s.accepts.height == sum(len(c["accept"]["correct_drafts"]) for c in cycles)
    assert s.accepts["correct"].sum() == sum(sum(c["accept"]["correct_drafts"]) for c in cycles)
    inside = s.phases.filter(pl.col("in_cycle"))
    assert inside.height == sum(len(c["phases"]) for c in cycles)
    # Plain decoding (K = 0, reference-k0) has no draft: only verify inside its cycles.
    expected = ["verify"] if "reference-k0" in str(path) else ["draft", "draft_extend", "verify"]
    assert sorted(inside["name"].unique().to_list()) == expected
    outside = s.phases.filter(~pl.col("in_cycle")).sort("start")
    assert outside["name"].to_list() == [r["name"] for r in sorted(ranges, key=lambda r: r["start_ns"])]
    assert (s.phases["end"] >= s.phases["start"]).all()
    assert s.clocks["perf_counter_ns"].to_list() == [r["perf_counter_ns"] for r in records if r["type"] == "clock"]
    assert s.notes == []


@pytest.mark.parametrize("path", SGLANG_SIDECARS, ids=lambda p: "/".join(p.relative_to(FIXTURES).parts[:-1]))
def test_real_sglang_sidecar_tables_match_the_records(path):
    records = raw(path)
    s = read_sidecars([str(path)])
    cycles = {r["index"]: r for r in records if r["type"] == "cycle"}
    # the window `specprof capture --capture-cycles W:N` asked for (the run's manifest): 30:120 on the 8-layer
    # captures, 30:40 on the dense ones
    skip, count = (int(x) for x in json.loads((path.parent / "manifest.json").read_text())["env"]
                   ["SPECPROF_CAPTURE_CYCLES"].split(":"))
    assert s.cycles.height == len(cycles) > skip + count
    for row in s.cycles.iter_rows(named=True):
        names = [p[0] for p in cycles[row["index"]]["phases"]]
        assert row["verify"] == ("verify" in names)
        assert row["decode"] == ("verify" in names or "decode" in names)
        assert row["decode"] != (names == ["prefill"])  # a prefill batch is its own cycle, not a decode one
    events = [(r["cycle"], name, ns) for r in records if r["type"] == "gpu_time" for name, ns in r["phases"]]
    assert s.gpu_time.select("cycle", "phase", "ns").rows() == events
    if records[0]["gpu_time"]:
        assert len({c for c, _, _ in events}) >= len(cycles) - 8  # all but the last few, read at the end
    else:
        assert events == []
    capture = [(r["event"], r["after_cycle"], r["decode_cycles"]) for r in records if r["type"] == "capture"]
    assert s.capture.select("event", "after_cycle", "decode_cycles").rows() == capture
    assert [(e, n) for e, _, n in capture] == [("start", skip), ("stop", skip + count)]
    footer = records[-1] if records[-1]["type"] == "footer" else None
    assert s.files["complete"].to_list() == [footer is not None]
    if footer is not None:
        assert footer["cycles"] == len(cycles) and footer["dropped"] == 0
        if records[0]["gpu_time"]:
            assert footer["gpu_time_cycles"] == len({c for c, _, _ in events}) and footer["gpu_time_dropped"] == 0


def test_the_reference_runs_hold_five_warmup_cycles_then_prefill_then_the_measured_ones():
    s = read_sidecars(find(str(FIXTURES / "reference-k4")))
    prefill = s.phases.filter(pl.col("name") == "prefill").row(0, named=True)
    before = s.cycles.filter(pl.col("end") <= prefill["start"])
    assert before["index"].to_list() == [0, 1, 2, 3, 4] and prefill["cycle"] == 4
    assert s.cycles.filter(pl.col("start") >= prefill["end"]).height == 100


def test_several_files_are_numbered_in_order():
    paths = [str(p) for p in SIDECARS[:3]]
    s = read_sidecars(paths)
    assert s.files["path"].to_list() == paths and s.files["file"].to_list() == [0, 1, 2]
    assert s.cycles.group_by("file").len().sort("file")["len"].to_list() == [
        sum(1 for r in raw(p) if r["type"] == "cycle") for p in paths]


# -- damaged and foreign files (synthetic) --------------------------------------------------------------------

HEADER = {"type": "header", "schema": "specprof.sidecar/1", "pid": 7, "rank": None, "host": "h", "argv": []}
CYCLE = {"type": "cycle", "index": 0, "pid": 7, "rank": None, "start_ns": 100, "end_ns": 900,
         "phases": [["draft", 110, 400], ["verify", 410, 800]], "batch_size": 2,
         "accept": {"correct_drafts": [1, 3], "accept_len_mean": 3.0}}
FOOTER = {"type": "footer", "dropped": 0, "cycles": 1, "unmatched_accepts": 0, "reason": "exit"}


def write(tmp_path, records, tail: str = "\n", name="specprof-sidecar.h.7.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + tail)
    return str(p)


def error(paths):
    with pytest.raises(SpecprofError) as info:
        read_sidecars(paths)
    return str(info.value)


def test_a_minimal_file_reads(tmp_path):
    s = read_sidecars([write(tmp_path, [HEADER, CYCLE, FOOTER])])
    assert s.cycles.row(0, named=True)["accept_len"] == 3.0 and s.accepts["correct"].to_list() == [1, 3]


@pytest.mark.parametrize("records, words", [
    (["not json at all"], "the first line is not JSON"),
    ([{"type": "cycle"}], "the first record is not a header"),
    ([{**HEADER, "schema": "specprof.sidecar/9"}], "specprof.sidecar/9"),
    ([HEADER, "{broken", FOOTER], ":2: not valid JSON"),
    ([HEADER, [1, 2]], ":2: not a specprof sidecar record"),
    ([HEADER, {**CYCLE, "start_ns": "100"}], ":2:"),
    ([HEADER, {**CYCLE, "start_ns": 1.5}], "must be an integer"),
    ([HEADER, {**CYCLE, "end_ns": True}], "must be an integer"),
    ([HEADER, {**CYCLE, "end_ns": 50}], "ends before it starts"),
    ([HEADER, {**CYCLE, "phases": [["draft", 5]]}], "[name, start_ns, end_ns]"),
    ([HEADER, {**CYCLE, "accept": {"correct_drafts": [1, -2]}}], "at least 0"),
    ([HEADER, {**CYCLE, "accept": {"correct_drafts": "12"}}], "must be a list"),
    ([HEADER, CYCLE, CYCLE], "cycle 0 appears twice"),
    ([HEADER, FOOTER, CYCLE], "after the footer"),
    ([HEADER, HEADER], "a second header"),
    ([HEADER, {**CYCLE, "start_ns": 2**70, "end_ns": 2**71}], "64 bits"),
    ([HEADER, {"type": "range", "name": 3, "start_ns": 1, "end_ns": 2, "cycle": None}], "must be a string"),
])
def test_garbage_is_one_clear_error_naming_the_file(tmp_path, records, words):
    path = write(tmp_path, records)
    message = error([path])
    assert path in message and words in message and "\n" not in message


def test_empty_missing_and_directory(tmp_path):
    empty = write(tmp_path, [], tail="")
    assert "empty" in error([empty])
    assert "no such file" in error([str(tmp_path / "nope.jsonl")])
    assert "a directory" in error([str(tmp_path)])
    assert "no sidecar files" in error([])


def test_a_cut_last_line_and_a_missing_footer_are_tolerated_with_notes(tmp_path):
    path = write(tmp_path, [HEADER, CYCLE, json.dumps(CYCLE)[:30]], tail="")
    s = read_sidecars([path])
    assert s.cycles.height == 1
    assert any("cut off" in n for n in s.notes) and any("no footer" in n for n in s.notes)
    assert s.files["complete"].to_list() == [False]


def test_unknown_record_types_and_fields_are_skipped_and_counted(tmp_path):
    path = write(tmp_path, [HEADER, {"type": "future", "x": 1}, {**CYCLE, "new_field": [1]}, FOOTER])
    s = read_sidecars([path])
    assert s.cycles.height == 1 and any("1 'future'" in n for n in s.notes)


def test_dropped_records_are_said(tmp_path):
    s = read_sidecars([write(tmp_path, [HEADER, CYCLE, {**FOOTER, "dropped": 12}])])
    assert any("dropped 12" in n for n in s.notes)


def test_without_a_footer_the_headers_count_of_dropped_records_is_said(tmp_path):
    # A copy of a real capture's sidecar as a tracer leaves it when its process is killed while its writes fail:
    # no footer, and the header's running count (rewritten in place at each flush, tracer/sidecar.py).
    lines = (FIXTURES / "reference-k4" / "specprof-sidecar.vm.494.jsonl").read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n")
    assert json.loads(lines[-1])["type"] == "footer" and '"dropped"' not in header
    path = tmp_path / "specprof-sidecar.vm.494.jsonl"
    path.write_text(header[:-1] + ',"dropped":37                  }\n' + "".join(lines[1:-1]))
    s = read_sidecars([str(path)])
    assert s.files["dropped"].to_list() == [37] and s.files["complete"].to_list() == [False]
    assert f"{path}: the tracer had dropped 37 records by its last flush (its queue was full or a write of the " \
           "sidecar failed; the count in its header)" in s.notes
    result = CliRunner().invoke(main, ["analyze", str(FIXTURES / "reference-k4" / "run.sqlite"), "--sidecar",
                                       str(path), "--json", "-q", "--no-cache"])
    assert result.exit_code == 0, result.output
    assert any("had dropped 37 records" in n for n in json.loads(result.stdout)["crosscheck"]["notes"])


def test_cli_bad_sidecar_exits_2_with_one_line(tmp_path):
    bad = write(tmp_path, ["garbage"])
    result = CliRunner().invoke(main, ["analyze", str(FIXTURES / "reference-k4" / "run.sqlite"), "--sidecar", bad])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("specprof: error:") and bad in lines[0]
