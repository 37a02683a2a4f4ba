"""`specprof export --perfetto`: the file read back by an independent reader, Perfetto's own protobuf schema
(perfetto/protos/perfetto/trace/perfetto_trace.proto, as the `perfetto` package ships it, parsed by the `protobuf`
package), and its slices, flows and names checked against the analysis. Perfetto's trace processor itself needs
a binary it downloads at run time, which this machine cannot reach; docs/perfetto.md says so."""

from __future__ import annotations

from collections import defaultdict

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.app.analyze import Options
from specprof.analyzer.app.run import Run
from specprof.analyzer.cli import main
from specprof.analyzer.core.attribution import attribute
from specprof.analyzer.derived.analysis import analyse
from specprof.analyzer.model.trace import Trace, TraceMeta
from specprof.analyzer.render import perfetto
from conftest import FIXTURES

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def read(path):
    """The file as a reader sees it: tracks (uuid -> descriptor) and slices (begin/end paired per track, the
    interned names resolved), with their flows."""
    trace = pb.Trace()
    trace.ParseFromString(open(path, "rb").read())
    tracks, slices, open_ = {}, [], defaultdict(list)
    names, arg_names, arg_values = {}, {}, {}
    for packet in trace.packet:
        assert packet.trusted_packet_sequence_id == perfetto.SEQUENCE
        if packet.HasField("track_descriptor"):
            d = packet.track_descriptor
            tracks[d.uuid] = d
            continue
        if packet.sequence_flags & 1:  # incremental state cleared: the interning tables start anew
            names, arg_names, arg_values = {}, {}, {}
        for e in packet.interned_data.event_names:
            names[e.iid] = e.name
        for e in packet.interned_data.debug_annotation_names:
            arg_names[e.iid] = e.name
        for e in packet.interned_data.debug_annotation_string_values:
            arg_values[e.iid] = e.str.decode()
        ev = packet.track_event
        assert ev.track_uuid in tracks, "an event on a track declared before it"
        if ev.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            args = {arg_names[a.name_iid]: arg_values[a.string_value_iid] for a in ev.debug_annotations}
            open_[ev.track_uuid].append({"track": ev.track_uuid, "start": packet.timestamp, "name": names[ev.name_iid],
                                         "cats": list(ev.categories), "args": args, "flows": list(ev.flow_ids),
                                         "ends_flow": list(ev.terminating_flow_ids)})
        else:
            assert ev.type == pb.TrackEvent.TYPE_SLICE_END
            s = open_[ev.track_uuid].pop()  # ends must close the innermost open slice of their track
            s["end"] = packet.timestamp
            assert s["end"] >= s["start"]
            slices.append(s)
    assert not any(open_.values()), "every slice begun is ended"
    return tracks, slices


@pytest.mark.parametrize("run", ["reference-k4", "reference-k4-tp2", "sglang-k4", "torch-k4"])
def test_the_file_holds_every_op_segment_range_and_flow_of_the_analysis(run, tmp_path):
    a = Run.load(str(FIXTURES / run), Options(cache=False)).analysis()
    out = tmp_path / "t.pftrace"
    counts = perfetto.write(a, str(out))
    tracks, slices = read(out)
    kind = {u: "kernels" if "kernels" in d.name else "tiles" if "phase · category" in d.name else "cpu"
            for u, d in tracks.items()}
    kernels = [s for s in slices if kind[s["track"]] == "kernels"]
    tiles = [s for s in slices if kind[s["track"]] == "tiles"]
    cpu = [s for s in slices if kind[s["track"]] == "cpu"]
    # Every op once, with its duration; per stream the same count and total.
    assert len(kernels) == a.ops.height == counts["ops"]
    assert sum(s["end"] - s["start"] for s in kernels) == int((a.ops["end"] - a.ops["start"]).sum())
    # The tiling: per phase and category, the attributed ns of the analysis, to the ns.
    got = defaultdict(int)
    for s in tiles:
        got[tuple(s["cats"])] += s["end"] - s["start"]
    want = a.charges.group_by(pl.col("phase").cast(pl.Utf8), pl.col("category").cast(pl.Utf8)).agg(
        pl.col("ns").sum())
    assert dict(got) == {(p, c): ns for p, c, ns in want.iter_rows() if ns}
    # Each range once, by name; on its thread's track (or one beside it).
    ranges = [s for s in cpu if s["cats"] == ["range"]]
    assert sorted(s["name"] for s in ranges) == sorted(a.ranges["name"].to_list())
    # Flows: each op with a launch call ends one flow that its launch call starts.
    starts = {f for s in cpu for f in s["flows"]}
    ends = [f for s in kernels for f in s["ends_flow"]]
    with_launch = a.ops.filter(pl.col("launch_start").is_not_null() & pl.col("launch_tid").is_not_null()).height
    assert len(ends) == len(set(ends)) == with_launch and set(ends) == starts
    # The kernel slices carry their phase and category.
    phases = defaultdict(int)
    for s in kernels:
        phases[s["args"]["phase"]] += 1
    assert dict(phases) == dict(a.ops.group_by(pl.col("phase").cast(pl.Utf8)).len().iter_rows())


def test_names_from_the_trace_stay_inside_their_field(tmp_path):
    # Synthetic: a three-op trace whose kernel and range names are hostile (quotes, newlines, markup, U+FFFD, a
    # NUL, protobuf-looking bytes); the file must still parse and give each name back.
    names = ['k"\n</script><b>', "\ufffdbad\x00\x08\x12\xff", "ok"]
    ops = pl.DataFrame({"op_id": [0, 1, 2], "kind": ["kernel"] * 3, "start": [100, 300, 500], "end": [200, 400, 600],
                        "device": [0] * 3, "stream": [7] * 3, "pid": [1] * 3, "correlation": [1, 2, 3],
                        "name": names, "short_name": names, "graph_node": [None] * 3})
    api = pl.DataFrame({"pid": [1] * 3, "tid": [1] * 3, "start": [10, 250, 450], "end": [20, 260, 460],
                        "name": ["cudaLaunchKernel"] * 3, "correlation": [1, 2, 3]})
    ranges = pl.DataFrame({"range_id": [0], "pid": [1], "tid": [1], "start": [0], "end": [470],
                           "name": ['draft"\n{}'], "domain": [None]})
    trace = Trace(ops=ops, api=api, ranges=ranges, marks=pl.DataFrame(), meta=TraceMeta(path="synthetic",
                                                                                        format="nsys-sqlite"))
    a = analyse(attribute(trace))
    out = tmp_path / "t.pftrace"
    perfetto.write(a, str(out))
    _, slices = read(out)
    got = {s["name"] for s in slices}
    assert set(names) | {'draft"\n{}'} <= got


def test_export_command_with_a_window(tmp_path):
    out = tmp_path / "k4.pftrace"
    result = CliRunner().invoke(main, ["export", str(FIXTURES / "reference-k4"), "--perfetto", str(out), "--no-cache",
                                       "--cycle-window", "10:20"])
    assert result.exit_code == 0, result.output
    assert str(out) in result.stderr and "ui.perfetto.dev" in result.stderr
    tracks, slices = read(out)
    cycles = {s["args"].get("cycle") for s in slices if "kernels" in tracks[s["track"]].name}
    a = Run.load(str(FIXTURES / "reference-k4"), Options(cache=False)).analysis()
    window_cycles = a.cycles.filter(pl.col("index").is_between(10, 19))["cycle"].cast(pl.Utf8).to_list()
    assert cycles - {None} == set(window_cycles)


def test_an_unwritable_file_is_one_clear_error(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("x")
    result = CliRunner().invoke(main, ["export", str(FIXTURES / "reference-k2"), "--perfetto",
                                       str(blocked / "t.pftrace"), "--no-cache"])
    assert result.exit_code == 2 and "cannot write the Perfetto trace" in result.output


def test_export_shows_progress_as_analyze_does(tmp_path, monkeypatch):
    # Building the tracks and writing the file are steps of their own (after the trace's reading and attribution):
    # on a terminal, each draws a bar once it has taken DELAY_S (0 here); --quiet draws none.
    import io

    from specprof.analyzer import progress
    from specprof.analyzer.app import commands

    steps = []

    def record(event, name, info):
        steps.append((event, name, info.get("total")))

    out = io.StringIO()
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "wanted", lambda quiet, stream=None: not quiet)  # stderr as a terminal
    progress.enable(False, out)
    progress.listen(record)
    try:
        commands.export_trace(str(FIXTURES / "reference-k2"), str(tmp_path / "t.pftrace"), Options(cache=False))
        drawn = out.getvalue()
        out.seek(0)
        out.truncate()
        commands.export_trace(str(FIXTURES / "reference-k2"), str(tmp_path / "q.pftrace"), Options(cache=False),
                              quiet=True)
    finally:
        progress.unlisten(record)
        progress.enable(False, progress.sys.stderr)
    _, slices = read(tmp_path / "t.pftrace")
    starts = [(name, total) for event, name, total in steps if event == "start"]
    assert ("building the Perfetto tracks", None) in starts and ("writing the Perfetto trace", 2 * len(slices)) in starts
    assert "specprof: writing the Perfetto trace [" in drawn and drawn.endswith("\n")
    assert out.getvalue() == ""
