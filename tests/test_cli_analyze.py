"""`specprof analyze` on a real capture: the terminal tables, the JSON contract, CSV and Parquet."""

from __future__ import annotations

import json
import os

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.render.tables import TABLES
from specprof.analyzer.readers.load import load_trace
from conftest import FIXTURES

K4 = FIXTURES / "reference-k4"


def invoke(*args):
    result = CliRunner().invoke(main, ["analyze", str(K4), "--no-cache", "-q", *args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def doc():
    return json.loads(invoke("--json"))


def test_json_contract(doc):
    assert doc["schema"] == "specprof.analysis/3"
    assert {"path", "format", "nsys_version", "gpus"} <= set(doc["source"])
    assert doc["source"]["gpus"] == [{"device": 0, "name": "NVIDIA H200"}]
    names = [p["name"] for p in doc["phases"]]
    assert set(names) == {"draft", "verify", "draft_extend", "prefill", "accept", "(cycle)", "(unattributed)"}
    for p in doc["phases"]:
        assert {"name", "instances", "cpu_ms", "gpu_span_ms", "gpu_busy_ms", "attributed_ms", "categories"} <= set(p)
        # the categories split the attributed time exactly (to the rounding of each value)
        assert sum(p["categories"].values()) == pytest.approx(p["attributed_ms"], abs=1e-5 * (1 + len(p["categories"])))
    wall = sum(s["wall_ms"] for s in doc["streams"])
    assert sum(p["attributed_ms"] for p in doc["phases"]) == pytest.approx(wall, abs=1e-4)
    assert len(doc["cycles"]) == 100 and [c["index"] for c in doc["cycles"]] == list(range(100))
    first = doc["cycles"][0]
    assert {"index", "start_ns", "phases"} <= set(first)
    assert set(first["phases"]["verify"]) == {"attributed_ms", "gpu_busy_ms", "cpu_ms"}
    assert doc["unattributed"]["ops"] == 0 and doc["unattributed"]["ms"] == 0.0


def test_per_cycle_sums_equal_the_phase_totals_inside_cycles(doc):
    verify = next(p for p in doc["phases"] if p["name"] == "verify")
    in_cycles = sum(c["phases"]["verify"]["attributed_ms"] for c in doc["cycles"])
    assert in_cycles == pytest.approx(verify["attributed_ms"], rel=1e-6)


def test_terminal_sections():
    out = invoke("--show-cycles", "3")
    for heading in ("Phases (totals over instances", "Attributed ms by category", "Per cycle: attributed ms",
                    "Launch overhead", "GPU streams", "Top kernels per phase"):
        assert heading in out
    assert "first 3 of 100 cycles" in out


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_tables_written(tmp_path, doc, fmt):
    invoke(f"--{fmt}", str(tmp_path))
    read = pl.read_csv if fmt == "csv" else pl.read_parquet
    for name in TABLES:
        assert (tmp_path / f"{name}.{fmt}").is_file(), name
    phases = read(tmp_path / f"phases.{fmt}")
    assert sorted(phases["phase"].to_list()) == sorted(p["name"] for p in doc["phases"])
    # The same numbers as the JSON, in ns under names that say so.
    ms = {p["name"]: p["attributed_ms"] for p in doc["phases"]}
    for phase, ns in phases.select("phase", "attributed_ns").iter_rows():
        assert ns / 1e6 == pytest.approx(ms[phase], abs=1e-6)
    assert read(tmp_path / f"cycles.{fmt}").height == 100
    assert read(tmp_path / f"ops.{fmt}").height == 21126
    # The run directory has a sidecar and a run without nsys: the cross-check's tables are there too.
    for name in ("crosscheck_alignment", "crosscheck_consistency", "crosscheck_inflation"):
        assert (tmp_path / f"{name}.{fmt}").is_file(), name


# Column names that are times without a unit: none may be written.
BARE_TIMES = {"start", "end", "first", "attributed", "busy", "gpu_busy", "gpu_span", "cpu", "wall", "idle",
              "cpu_wait", "wait", "transfer", "comm", "min", "max", "mean", "skew"}


@pytest.mark.parametrize("run, extra", [("reference-k4-tp2", ["--baseline-ms", "2"]),
                                        ("sglang-k4", ["--baseline-ms", "20"])])
def test_every_table_is_written_with_its_units_and_documented(tmp_path, run, extra):
    import re

    from conftest import ROOT

    out = CliRunner().invoke(main, ["analyze", str(FIXTURES / run), "--no-cache", "-q", "--csv", str(tmp_path),
                                    *extra])
    assert out.exit_code == 0, out.output
    doc = (ROOT / "docs" / "tables.md").read_text(encoding="utf-8")
    documented = {}
    for line in doc.splitlines():
        m = re.match(r"\| `(\w+)` \| (.*) \|$", line)
        if m:
            documented[m.group(1)] = set(re.findall(r"`(\w+)`", m.group(2)))
    written = {f[:-4]: pl.read_csv(tmp_path / f, infer_schema_length=0).columns for f in os.listdir(tmp_path)}
    assert {"economics_estimates", "ranks_ranks" if run.endswith("tp2") else "crosscheck_accept"} <= set(written)
    for name, columns in written.items():
        assert name in documented, f"{name}.csv is not in docs/tables.md"
        assert set(columns) <= documented[name], (name, set(columns) - documented[name])
        assert not set(columns) & BARE_TIMES, (name, set(columns) & BARE_TIMES)


def test_json_text_survives_hostile_phase_names():
    # Range names come from other programs: one that imitates the renderer's own layout (a cycle
    # boundary, a placeholder-like token) must come back as the same string, the document intact.
    from dataclasses import replace

    from specprof.analyzer.core.attribution import attribute
    from specprof.analyzer.derived.analysis import analyse
    from specprof.analyzer.render import json as json_render

    t = attribute(load_trace(str(K4)))
    hostile = '}, {"index": 7, "x": "specprof-cycles-0"}\n]"cycles": ['
    a = analyse(replace(t, cycle_phases=t.cycle_phases.with_columns(
        phase=pl.when(pl.col("phase") == "verify").then(pl.lit(hostile)).otherwise(pl.col("phase")))))
    text = json_render.render(a)
    doc = json.loads(text)
    assert doc == json.loads(json.dumps(json_render.to_dict(a)))
    assert len(doc["cycles"]) == a.cycles.height
    assert all(hostile in c["phases"] for c in doc["cycles"])
    assert text.count('\n  {"index": ') == a.cycles.height


# -- several traces: the run options ------------------------------------------------------------------------------

K2 = FIXTURES / "reference-k2"


@pytest.mark.parametrize("option", [["--server-log", "/nonexistent"],
                                    ["--sidecar", str(next(K4.glob("specprof-sidecar.*.jsonl")))],
                                    ["--baseline-sidecar", str(next((K4 / "no-nsys").glob("specprof-sidecar.*")))]])
def test_several_traces_refuse_the_files_of_one_run_in_one_line(option):
    out = CliRunner().invoke(main, ["analyze", str(K4), str(K2), *option])
    assert out.exit_code == 2 and out.stdout == "", out.output
    assert out.stderr.count("\n") == 1 and "belongs to one run, and several traces were given" in out.stderr
    assert option[0] in out.stderr and "give it with one trace, or give run directories" in out.stderr
    # one trace with the same option is not refused for being one run's (it is read, or said missing)
    one = CliRunner().invoke(main, ["analyze", str(K4), *option, "-q"])
    assert "belongs to one run" not in one.output
    if option[0] == "--server-log":
        assert one.exit_code == 2 and "/nonexistent: no such file" in one.stderr


def test_several_traces_refuse_a_wrong_baseline_step_before_any_analysis():
    out = CliRunner().invoke(main, ["analyze", str(K4), str(K2), "--baseline-ms", "-1"])
    assert out.exit_code == 2 and "--baseline-ms must be a positive number" in out.stderr


@pytest.mark.parametrize("option", [["--baseline-ms", "5"], ["--baseline", str(FIXTURES / "reference-k0")],
                                    ["--baseline", str(FIXTURES / "reference-k0" / "run.sqlite"),
                                     "--baseline-range", "verify"]])
def test_several_traces_keep_the_options_that_hold_for_any_run(option):
    # each trace gets the baseline: its economics is the one it has when analysed alone with it
    out = CliRunner().invoke(main, ["analyze", str(K4), str(K2), *option, "--json", "-q"])
    assert out.exit_code == 0, out.output
    runs = json.loads(out.stdout)["runs"]
    for run, path in zip(runs, (K4, K2)):
        alone = json.loads(CliRunner().invoke(main, ["analyze", str(path), *option, "--json", "-q"]).stdout)
        assert run["analysis"]["economics"] == alone["economics"]
        assert run["analysis"]["economics"]["baseline_ms"] is not None


def test_a_server_log_without_accept_lines_in_a_run_folder_is_a_note_not_an_error(tmp_path):
    # `specprof capture` keeps every run's output as RUN/server.log, also a run whose server prints no `accept len`
    # line (the reference engine, a short run); given with --server-log, the same log is still an error.
    import shutil

    run = tmp_path / "run"
    shutil.copytree(K4, run)
    (run / "server.log").write_text("reference: K=4 cycles=100 tokens/s=3263.7\n")
    result = CliRunner().invoke(main, ["analyze", str(run), "--no-cache", "-q", "--json"])
    assert result.exit_code == 0, result.output
    notes = json.loads(result.stdout)["crosscheck"]["notes"]
    assert f"server log found ({run / 'server.log'}) but it has no `accept len:` line: accept length not checked" \
        in notes
    given = CliRunner().invoke(main, ["analyze", str(run), "--no-cache", "-q", "--server-log", str(run / "server.log")])
    assert given.exit_code == 2 and "no `accept len:` line" in given.output
