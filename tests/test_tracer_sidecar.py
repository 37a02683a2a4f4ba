"""The sidecar (tracer/sidecar.py, tracer/cycles.py): records and their order, FIFO accept matching with
delayed counts, the bounded queue, flushing at exit and on SIGTERM/SIGINT (in subprocesses), clock readings and
their NVTX marks, and never raising when the output folder cannot be written."""

from __future__ import annotations

import json
import os
import signal
import socket
import textwrap
import threading

import pytest

import fake_engine
from specprof.tracer import clock
from specprof.tracer.cycles import AcceptMatcher, Cycle
from specprof.tracer.sidecar import SCHEMA, file_name
from specprof.tracer.targets import CountsHook, Target
from tracer_helpers import (  # noqa: F401 (traced: fixture)
    FakeClock,
    RecordingNvtx,
    of_type,
    read_sidecar,
    run_python,
    sidecar_files,
    traced,
)

Batch = fake_engine.Batch


def _cycles(records):
    return {c["index"]: c for c in of_type(records, "cycle")}


# -- records -------------------------------------------------------------------------------------------------
def test_header_clock_cycles_ranges_footer(traced, tmp_path):
    session, nvtx = traced(sync_every_ns=10**15)
    worker = fake_engine.ReferenceWorker([[1, 2, 0], [3, 3, 3]])
    worker.forward_prefill(Batch(3))
    fake_engine.ReferenceScheduler(worker).run(Batch(3), cycles=2)
    session.close()
    [path] = sidecar_files(tmp_path)
    assert os.path.basename(path) == f"specprof-sidecar.{socket.gethostname()}.{os.getpid()}.jsonl"
    records = read_sidecar(tmp_path)
    header = records[0]
    assert header["type"] == "header" and header["schema"] == SCHEMA == "specprof.sidecar/1"
    assert header["pid"] == os.getpid() and header["rank"] == 0 and header["preset"] == "reference"
    assert header["host"] == socket.gethostname() and isinstance(header["argv"], list)
    assert set(header["versions"]) == {"specprof", "sglang", "torch"}
    assert header["clock"]["unit"] == "ns"
    assert {t["target"] for t in header["targets"]} >= {"fake_engine.ReferenceWorker.verify"}
    assert records[1]["type"] == "clock" and records[-2]["type"] == "clock"
    assert records[-1] == {"type": "footer", "dropped": 0, "cycles": 2, "unmatched_accepts": 0,
                           "reason": "exit", "tracer_faults": 0}
    cycles = _cycles(records)
    assert [c["accept"]["correct_drafts"] for c in cycles.values()] == [[1, 2, 0], [3, 3, 3]]
    assert cycles[0]["accept"]["accept_len_mean"] == pytest.approx(2.0)
    assert cycles[1]["accept"]["accept_len_mean"] == pytest.approx(4.0)
    assert all(c["pid"] == os.getpid() and c["rank"] == 0 and c["batch_size"] == 3 for c in cycles.values())
    ranges = of_type(records, "range")
    assert [(r["name"], r["cycle"]) for r in ranges] == [("prefill", None), ("accept", 0), ("accept", 1)]


def test_every_clock_reading_is_an_nvtx_mark_with_the_same_value(traced, tmp_path):
    fake = FakeClock(step=400)
    session, nvtx = traced(perf_counter_ns=fake, sync_every_ns=1_000)
    worker = fake_engine.ReferenceWorker()
    for _ in range(4):
        worker.forward_batch_generation(Batch(1))
    session.close()
    readings = of_type(read_sidecar(tmp_path), "clock")
    marks = [message for kind, message in nvtx.events if kind == "mark"]
    assert len(readings) == 6  # at open, after each of the 4 cycles (1000 ns of the fake clock), at close
    assert marks == [f"specprof.clock_sync perf_counter_ns={r['perf_counter_ns']}" for r in readings]
    assert marks[0] == clock.mark_message(readings[0]["perf_counter_ns"])
    assert all(type(r["time_ns"]) is int and type(r["monotonic_raw_ns"]) is int for r in readings)
    assert all(r["perf_counter_ns"] < r["mark_done_ns"] for r in readings)


def test_clock_readings_after_cycles_0_1_3_7_and_every_interval(traced, tmp_path):
    session, _ = traced(perf_counter_ns=FakeClock(step=10), sync_every_ns=10**15)
    worker = fake_engine.ReferenceWorker()
    for _ in range(10):
        worker.forward_batch_generation(Batch(1))
    session.close()
    records = read_sidecar(tmp_path)
    # Which cycle each clock reading follows in time (None: the one at open).
    ends = sorted((c["end_ns"], c["index"]) for c in of_type(records, "cycle"))
    after = [max((i for end, i in ends if end < clock["perf_counter_ns"]), default=None)
             for clock in of_type(records, "clock")]
    assert after == [None, 0, 1, 3, 7, 9]  # the last one: at close


def test_a_second_session_in_the_same_process_gets_its_own_file(traced, tmp_path):
    for _ in range(2):
        session, _ = traced()
        fake_engine.ReferenceWorker().forward_batch_generation(Batch(1))
        session.deactivate()
    host, pid = socket.gethostname(), os.getpid()
    assert [os.path.basename(p) for p in sidecar_files(tmp_path)] == sorted(
        [file_name(host, pid), file_name(host, pid, 2)]
    )


def test_a_link_planted_under_the_sidecars_name_is_never_written_through(traced, tmp_path):
    target = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    target.write_text("a user's own")
    host, pid = socket.gethostname(), os.getpid()
    os.symlink(target, tmp_path / file_name(host, pid))
    os.symlink(tmp_path / "nowhere", tmp_path / file_name(host, pid, 2))  # one that leads nowhere: not created
    session, _ = traced()
    fake_engine.ReferenceWorker().forward_batch_generation(Batch(1))
    session.deactivate()
    assert target.read_text() == "a user's own" and not (tmp_path / "nowhere").exists()
    written = tmp_path / file_name(host, pid, 3)
    assert not written.is_symlink() and json.loads(written.read_text().splitlines()[0])["type"] == "header"


# -- accept counts -------------------------------------------------------------------------------------------
def test_counts_one_iteration_late_are_matched_in_order(traced, tmp_path):
    counts = [[i % 4, (i * 7) % 5] for i in range(6)]
    session, _ = traced()
    worker = fake_engine.ReferenceWorker([list(c) for c in counts])
    fake_engine.ReferenceScheduler(worker).run(Batch(2), cycles=6, overlap=True)
    session.close()
    records = read_sidecar(tmp_path)
    cycles = _cycles(records)
    assert [cycles[i]["accept"]["correct_drafts"] for i in range(6)] == counts
    # The accept range of cycle i's counts runs after cycle i+1 started, so it names cycle i+1.
    assert [r["cycle"] for r in of_type(records, "range")] == [1, 2, 3, 4, 5, 5]
    assert records[-1]["unmatched_accepts"] == 0


def _closed(index: int, size: int | None, verified: bool = True) -> Cycle:
    cycle = Cycle(index, index * 100, size)
    cycle.end_ns = index * 100 + 50
    cycle.verified = verified
    return cycle


def test_a_cycle_that_never_gets_counts_is_written_without_them():
    written = []
    matcher = AcceptMatcher(written.append)
    matcher.cycle_closed(_closed(0, 4))  # say, counts lost because verify raised
    matcher.cycle_closed(_closed(1, 2))
    matcher.counts_arrived([1, 1], open_cycle=None)  # two requests: cycle 1's, not cycle 0's
    assert [(c.index, c.counts) for c in written] == [(0, None), (1, [1, 1])]


def test_without_a_size_match_counts_go_to_the_oldest():
    written = []
    matcher = AcceptMatcher(written.append)
    matcher.cycle_closed(_closed(0, 4))
    matcher.cycle_closed(_closed(1, 4))
    matcher.counts_arrived([2, 2, 2], open_cycle=None)  # padded or filtered: no size matches, FIFO
    assert [(c.index, c.counts) for c in written] == [(0, [2, 2, 2])]
    assert len(matcher) == 1


def test_prefill_and_idle_cycles_do_not_wait():
    written = []
    matcher = AcceptMatcher(written.append)
    matcher.cycle_closed(_closed(0, 3, verified=False))  # prefill: no verify
    matcher.cycle_closed(_closed(1, 0))  # idle batch
    assert [c.index for c in written] == [0, 1] and len(matcher) == 0


def test_counts_inside_the_cycle_after_verify_belong_to_it():
    written = []
    matcher = AcceptMatcher(written.append)
    matcher.cycle_closed(_closed(0, 1))  # waiting, never to get counts
    open_cycle = Cycle(1, 500, 1)
    matcher.counts_arrived([9], open_cycle=open_cycle)  # before verify: not this cycle's
    assert open_cycle.counts is None and [c.counts for c in written] == [[9]]
    open_cycle.verified = True
    matcher.counts_arrived([4], open_cycle=open_cycle)
    assert open_cycle.counts == [4]


def test_too_many_waiting_cycles_and_close_write_them_without_counts():
    written = []
    matcher = AcceptMatcher(written.append, max_pending=2)
    for i in range(4):
        matcher.cycle_closed(_closed(i, 1))
    assert [c.index for c in written] == [0, 1] and len(matcher) == 2
    matcher.drain()
    assert [(c.index, c.counts) for c in written] == [(0, None), (1, None), (2, None), (3, None)]
    matcher.counts_arrived([1], open_cycle=None)
    assert matcher.unmatched == 1


def test_v1_counts_read_from_verify_reach_their_own_cycle(traced, tmp_path, monkeypatch):
    """SGLang v1 reads the counts inside the cycle, from verify's return value."""
    from specprof.tracer.presets import sglang

    class VerifyOutput:
        def __init__(self, counts):
            self.num_correct_drafts_per_req_cpu = counts

    class V1Worker(fake_engine.ReferenceWorker):
        def verify(self, batch, drafts):
            result = super().verify(batch, drafts)
            return ("logits", VerifyOutput(result.correct_drafts), True)

        def forward_batch_generation(self, batch):
            drafts = self.draft_worker.draft(batch)
            self.verify(batch, drafts)
            self.draft_worker.draft_extend(batch, None)

    monkeypatch.setattr(fake_engine, "V1Worker", V1Worker, raising=False)
    import dataclasses

    base = fake_engine.preset_for("fake_engine")
    preset = dataclasses.replace(
        base,
        targets=base.targets
        + (
            Target("cycle", (("fake_engine", "V1Worker", "forward_batch_generation"),)),
            Target("verify", (("fake_engine", "V1Worker", "verify"),)),
        ),
        counts=(CountsHook((("fake_engine", "V1Worker", "verify"),), sglang.counts_from_verify_output),),
    )
    session, _ = traced(preset=preset)
    worker = V1Worker([[2], [0], [1]])
    for _ in range(3):
        worker.forward_batch_generation(Batch(1))
    session.close()
    assert [c["accept"]["correct_drafts"] for c in _cycles(read_sidecar(tmp_path)).values()] == [[2], [0], [1]]


# -- bounded memory ------------------------------------------------------------------------------------------
def test_a_full_queue_drops_records_and_counts_them(traced, tmp_path):
    # The flusher never runs before close; the fake clock never reaches a periodic clock reading.
    session, _ = traced(max_queue=5, flush_interval_s=3600, perf_counter_ns=FakeClock(), sync_every_ns=10**15)
    fake_engine.ReferenceScheduler(fake_engine.ReferenceWorker()).run(Batch(1), cycles=10)
    session.close()
    records = read_sidecar(tmp_path)
    kept = [(r["type"], r.get("index", r.get("cycle"))) for r in records[1:-1]]
    # Written at open: the first clock reading. Queued, up to 5 records: the clock reading after cycle 0,
    # cycle 0 (when its counts arrive), its accept range, the clock reading after cycle 1, cycle 1.
    assert kept == [("clock", None), ("clock", None), ("cycle", 0), ("range", 0), ("clock", None), ("cycle", 1)]
    # Dropped: accept range 1, cycles 2-9 and their accept ranges, the clock readings after cycles 3 and 7,
    # and the closing one.
    assert records[-1] == {"type": "footer", "dropped": 1 + 16 + 2 + 1, "cycles": 2, "unmatched_accepts": 0,
                           "reason": "exit", "tracer_faults": 0}


# -- exit, signals ---------------------------------------------------------------------------------------------
_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    import fake_engine
    from specprof.tracer.session import TracingSession
    {before}
    # The flusher never runs on its own here: whatever reaches the file was flushed by exit or signal handling.
    session = TracingSession(fake_engine.preset_for("fake_engine"), {out!r}, flush_interval_s=3600)
    session.activate()
    worker = fake_engine.ReferenceWorker()
    fake_engine.ReferenceScheduler(worker).run(fake_engine.Batch(2), cycles=3)
    {after}
    """
)


def _child(tmp_path, before: str = "", after: str = "") -> str:
    return _CHILD.format(out=str(tmp_path), before=before, after=after)


def test_flushed_at_normal_exit(tmp_path):
    done = run_python(_child(tmp_path, after="print('ran')"))
    assert done.returncode == 0, done.stderr
    records = read_sidecar(tmp_path)
    assert len(of_type(records, "cycle")) == 3
    assert records[-1]["type"] == "footer" and records[-1]["reason"] == "exit"


def test_flushed_on_sigterm_which_still_terminates(tmp_path):
    done = run_python(_child(tmp_path, after="os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)"))
    assert done.returncode == -signal.SIGTERM, done.stderr
    records = read_sidecar(tmp_path)
    assert len(of_type(records, "cycle")) == 3
    assert records[-1]["type"] == "footer" and records[-1]["reason"] == "SIGTERM"


def test_sigterm_chains_to_the_handler_it_replaced(tmp_path):
    before = textwrap.dedent(
        """
        def theirs(signum, frame):
            print("their handler ran", flush=True)
            sys.exit(7)
        signal.signal(signal.SIGTERM, theirs)
        """
    )
    done = run_python(_child(tmp_path, before=before, after="os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)"))
    assert done.returncode == 7, done.stderr
    assert "their handler ran" in done.stdout
    records = read_sidecar(tmp_path)
    assert len(of_type(records, "cycle")) == 3
    assert records[-1]["reason"] == "exit"  # their handler exited normally: atexit wrote the footer


def test_flushed_on_sigint_which_still_interrupts(tmp_path):
    after = textwrap.dedent(
        """
        try:
            os.kill(os.getpid(), signal.SIGINT); time.sleep(30)
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
            lines = open(session.sidecar.path).read().splitlines()
            print("cycles on disk before exit:", sum('"type":"cycle"' in line for line in lines), flush=True)
        """
    )
    done = run_python(_child(tmp_path, after=after))
    assert done.returncode == 0, done.stderr
    assert "KeyboardInterrupt" in done.stdout and "cycles on disk before exit: 3" in done.stdout
    assert read_sidecar(tmp_path)[-1]["reason"] == "exit"


def test_an_ignored_signal_stays_ignored(tmp_path):
    before = "signal.signal(signal.SIGTERM, signal.SIG_IGN)"
    after = "os.kill(os.getpid(), signal.SIGTERM); print('still here', flush=True)"
    done = run_python(_child(tmp_path, before=before, after=after))
    assert done.returncode == 0 and "still here" in done.stdout, done.stderr


# -- never raises ----------------------------------------------------------------------------------------------
def test_an_unwritable_output_folder_turns_the_sidecar_off_not_the_engine(tmp_path, caplog):
    from specprof.tracer.session import TracingSession

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    session = TracingSession(fake_engine.preset_for("fake_engine"), str(blocker / "out"), handle_signals=False,
                             nvtx_factory=RecordingNvtx)
    session.activate()
    try:
        worker = fake_engine.ReferenceWorker([[1]])
        with caplog.at_level("WARNING", logger="specprof.tracer"):
            fake_engine.ReferenceScheduler(worker).run(Batch(1), cycles=3)
            session.close()
        assert worker.accepted == [[1], [0], [0]]
        warnings = [r.getMessage() for r in caplog.records if r.name == "specprof.tracer"]
        assert len(warnings) == 1 and "cannot write the sidecar" in warnings[0]
        assert session.recorder.nvtx.pushed().count("cycle") == 3  # the NVTX ranges go on
    finally:
        session.deactivate()


def test_a_forked_child_writes_its_own_file(traced, tmp_path):
    session, _ = traced()
    fake_engine.ReferenceWorker().forward_batch_generation(Batch(1))
    from specprof.tracer import plugin

    plugin._register_fork_hook()
    previous, plugin._session = plugin._session, session
    try:
        pid = os.fork()
        if pid == 0:  # the child: trace one cycle, close, leave without running the parent's atexit
            try:
                fake_engine.ReferenceWorker().forward_batch_generation(Batch(5))
                session.close()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    finally:
        plugin._session = previous
    session.close()
    files = sidecar_files(tmp_path)
    assert len(files) == 2
    by_pid = {}
    for path in files:
        with open(path) as handle:
            records = [json.loads(line) for line in handle]
        by_pid[records[0]["pid"]] = records
    child = by_pid[pid]
    assert [c["batch_size"] for c in of_type(child, "cycle")] == [5]
    assert [c["batch_size"] for c in of_type(by_pid[os.getpid()], "cycle")] == [1]


@pytest.mark.parametrize(
    "rank, batch_size, counts, end_ns, phases",
    [
        (0, 3, [1, 2, 0], 900, [["draft", 1, 2], ["verify", 3, 4]]),
        (None, None, None, None, []),
        (7, 0, [], 5, [["draft_extend", 6, None]]),
        (1, 2, [4, 3], 10**15, [["prefill", 10**14, 10**15]]),
    ],
)
def test_the_fast_cycle_line_is_the_records_json(rank, batch_size, counts, end_ns, phases):
    cycle = Cycle(3, 100, batch_size)
    cycle.end_ns = end_ns
    cycle.counts = counts
    cycle.phases = [list(p) + [None, cycle] for p in phases]
    line = cycle.json_line(pid=42, rank=rank)
    assert json.loads(line) == cycle.record(pid=42, rank=rank)
    assert " " not in line


def test_the_fast_range_line_is_the_records_json():
    from specprof.tracer.sidecar import _dumps

    for cycle in (None, 0, 12):
        record = {"type": "range", "name": "accept", "start_ns": 10, "end_ns": 20, "cycle": cycle}
        assert json.loads(_dumps(record)) == record


# -- faults and threads ---------------------------------------------------------------------------------------


class PopFailsOnce(RecordingNvtx):
    """An NVTX backend whose second pop raises (the first cycle's draft pops first, then ... ): one fault."""

    def __init__(self, fail_at: int):
        super().__init__()
        self.pops = 0
        self.fail_at = fail_at

    def pop(self):
        self.pops += 1
        if self.pops == self.fail_at:
            raise RuntimeError("nvtx pop failed")
        super().pop()


def test_one_failing_pop_at_a_cycle_end_stops_no_later_cycle(traced, tmp_path):  # noqa: F811
    # The fourth pop of the first cycle is the cycle's own (draft, verify, draft_extend, cycle).
    nvtx = PopFailsOnce(fail_at=4)
    session, _ = traced(nvtx_factory=lambda: nvtx)
    worker = fake_engine.ReferenceWorker()
    fake_engine.ReferenceScheduler(worker).run(fake_engine.Batch(2), cycles=50)
    assert session.recorder._local.cycle is None
    session.close()
    records = read_sidecar(tmp_path)
    cycles = of_type(records, "cycle")
    assert [c["index"] for c in cycles] == list(range(50))
    assert all(len(c["phases"]) == 3 for c in cycles)  # no cycle kept open, no phase list growing
    assert records[-1]["tracer_faults"] == 1 and records[-1]["dropped"] == 0


def test_records_of_every_thread_are_written_or_counted_while_the_file_opens(traced, tmp_path):  # noqa: F811
    session, _ = traced()
    threads, per_thread = 8, 200
    barrier = threading.Barrier(threads)

    def work():
        worker = fake_engine.ReferenceWorker()
        scheduler = fake_engine.ReferenceScheduler(worker)
        barrier.wait()
        scheduler.run(fake_engine.Batch(1), cycles=per_thread)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    session.close()
    records = read_sidecar(tmp_path)
    footer = records[-1]
    written = len(of_type(records, "cycle"))
    assert written + footer["dropped"] == threads * per_thread
    assert written == threads * per_thread  # the queue holds 10 000: nothing had to be dropped
