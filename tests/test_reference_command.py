"""`specprof reference` on the CPU (the tiny engine): plain decoding and speculative cycles."""

from __future__ import annotations

import json

from click.testing import CliRunner

from specprof.analyzer.cli import main


def run(tmp_path, *args):
    result = CliRunner().invoke(main, ["reference", "--tiny", "--cycles", "6", "--warmup", "1",
                                       "--no-trace", "--out", str(tmp_path), *args])
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / "ground_truth.json").read_text())


def test_plain_decoding_accepts_exactly_one_token_per_step(tmp_path):
    out = run(tmp_path, "--steps", "0")
    assert out["config"]["steps"] == 0
    assert out["run"]["mean_accept_len"] == 1.0
    assert out["run"]["tokens"] == 6 * out["config"]["batch"]


def test_speculative_cycles_accept_between_one_and_k_plus_one(tmp_path):
    out = run(tmp_path, "--steps", "3", "--draft-error", "0.0")
    # With no injected errors nearly every draft token matches the target's greedy choice (the
    # draft differs from the target only by a small residual, which flips a few argmaxes).
    assert 3.5 < out["run"]["mean_accept_len"] <= 4.0
    out = run(tmp_path, "--steps", "3", "--draft-error", "1.0")
    assert out["run"]["mean_accept_len"] < 1.2


def test_sync_timers_time_every_phase_of_every_measured_cycle(tmp_path, monkeypatch):
    # On the CPU there is nothing to synchronise: what is checked is that the timers run where a hand patch
    # puts them (around each phase of each measured cycle, none in the warm-up) and land in the output; the
    # H200 measurement of what they cost is benchmarks/sync_timers_gpu.py (docs/economics.md).
    out = run(tmp_path, "--steps", "2", "--sync-timers")
    timers = out["sync_timers"]
    assert "synchronize()" in timers["method"]
    assert [c["index"] for c in timers["cycles"]] == list(range(6))
    for cycle in timers["cycles"]:
        assert set(cycle) == {"index", "draft_ms", "verify_ms", "draft_extend_ms", "accept_ms"}
        assert all(value >= 0 for key, value in cycle.items() if key != "index")
    assert set(timers["mean_ms"]) == {"draft", "verify", "draft_extend", "accept"}
    assert "sync_timers" not in run(tmp_path, "--steps", "2")  # off unless asked for


def test_without_a_gpu_the_engine_says_so_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():  # only a machine without a usable GPU can show it (CI has none)
        import pytest

        pytest.skip("a GPU is usable here")
    result = CliRunner().invoke(main, ["reference", "--cycles", "2", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr == ("specprof: error: the reference engine needs a GPU: no CUDA GPU is usable here; to try "
                             "it on the CPU, run `specprof reference --tiny --device cpu`\n")


def test_without_torch_the_engine_names_the_extra_in_one_line(tmp_path):
    # A plain `pip install .` has no torch: hide it from this process's imports (sys.modules[...] = None makes
    # `import torch` raise ImportError, as on a machine without it) and run the real console entry point.
    import subprocess
    import sys

    code = "import sys; sys.modules['torch'] = None; from specprof.analyzer.cli import main; sys.argv[0] = 'specprof'; main()"
    proc = subprocess.run([sys.executable, "-c", code, "reference", "--tiny", "--device", "cpu", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("specprof: error: the reference engine needs PyTorch")
    # the command that installs it, to run as written: this Python, from this checkout (as the README installs)
    from conftest import ROOT

    assert proc.stderr.rstrip().endswith(f"from this checkout: {sys.executable} -m pip install -e '{ROOT}[gpu]'")
    assert not (tmp_path / "ground_truth.json").exists()
