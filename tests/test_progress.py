"""Progress on stderr: an analysis of several traces, each in seconds, shows one line that counts the traces and
names the step running now, drawn over in place and ended once."""

from __future__ import annotations

import io
import time

import pytest

from specprof.analyzer import progress
from specprof.analyzer.app import traces
from specprof.analyzer.app.analyze import Options
from conftest import FIXTURES


@pytest.fixture
def stream(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    progress.enable(True, out)
    yield out
    progress.enable(False, progress.sys.stderr)


def test_several_traces_show_their_count_and_the_step_running_now(stream, monkeypatch):
    real = traces.produce_one_of_several

    def produce(path, *args):  # each trace's analysis with a step that outlasts a redraw (0.2 s)
        with progress.step("waiting"):
            time.sleep(3 * progress.REDRAW_S)
        return real(path, *args)

    monkeypatch.setattr(traces, "produce_one_of_several", produce)
    paths = [str(FIXTURES / f"reference-k{k}") for k in (2, 4, 6)]
    several = traces.analyze_all(paths, Options(cache=False), traces.Outputs(text=False))
    assert len(several.outputs) == 3
    text = stream.getvalue()
    assert "specprof: analysing 3 traces" in text  # the outer step's own line, ended at the end
    assert all(f"specprof: [{i}/3] waiting" in text for i in range(3))  # the step now, after the traces done
    assert text.count("\n") == 1 and text.endswith("\n")  # one line, drawn over in place (\r), ended once
    assert "3/3 traces" in text.splitlines()[-1]


def test_a_short_analysis_draws_nothing(monkeypatch):
    out = io.StringIO()
    progress.enable(True, out)
    try:
        with progress.step("outer", 2, "traces") as s:
            with progress.step("inner"):
                pass
            s.advance()
    finally:
        progress.enable(False, progress.sys.stderr)
    assert out.getvalue() == ""
