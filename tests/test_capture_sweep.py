"""`specprof capture --sweep-steps K1,K2,... --block N`: the server command gets SGLang's adaptive settings (an
adaptive config whose every batch size lists the swept Ks, written before the server starts), the tracer gets
SPECPROF_SWEEP_STEPS, and a server that could not switch K is refused in one line. The server here is a Python
stand-in that prints its arguments and the config it was given (a real SGLang server needs a GPU); the tracer's
side runs on the real SGLang adaptive worker in tests/test_tracer_rotation.py."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.tracer import rotation, step_sweep

SERVER = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--speculative-algorithm", "EAGLE3",
          "--speculative-draft-model-path", "d"]


def invoke(*args: str):
    return CliRunner().invoke(main, ["capture", *map(str, args)])


def test_dry_run_adds_the_adaptive_settings_and_the_rotation(tmp_path):
    run = tmp_path / "run"
    out = invoke("-o", run, "--no-nsys", "--sweep-steps", "0,1,2,4", "--block", "40", "--dry-run", "--", *SERVER)
    assert out.exit_code == 0, out.output
    config = run / ".bootstrap" / step_sweep.CONFIG_NAME
    assert f"--speculative-adaptive --speculative-adaptive-config {config}" in out.output
    assert f"{rotation.ENV}=0,1,2,4:40" in out.output
    assert '{"1": {"candidate_steps": [0, 1, 2, 4]}}' in out.output
    assert not run.exists()  # a dry run writes nothing


def test_the_config_is_written_before_the_server_starts_and_sglang_reads_it(tmp_path):
    params = pytest.importorskip("sglang.srt.speculative.adaptive_spec_params")
    run = tmp_path / "run"
    stand_in = ("import json, os, sys; a = sys.argv; p = a[a.index('--speculative-adaptive-config') + 1]; "
                "print('SEEN', json.dumps({'argv': a[1:], 'config': open(p).read(), "
                "'env': os.environ.get('SPECPROF_SWEEP_STEPS')}))")
    out = invoke("-o", run, "--no-nsys", "--sweep-steps", "2,0", "--block", "3", "--",
                 sys.executable, "-c", stand_in, "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2")
    assert out.exit_code == 0, out.output
    seen = json.loads((run / "server.log").read_text().split("SEEN ", 1)[1].splitlines()[0])
    assert seen["env"] == "2,0:3"
    assert "--speculative-adaptive" in seen["argv"]
    path = run / ".bootstrap" / step_sweep.CONFIG_NAME
    assert json.loads(seen["config"]) == {"1": {"candidate_steps": [0, 2]}}
    assert params.resolve_candidate_steps_from_config(str(path)) == [0, 2]
    manifest = json.loads((run / "manifest.json").read_text())
    assert "--speculative-adaptive-config" in manifest["commands"]["profile"]


@pytest.mark.parametrize("extra, why", [
    (["--speculative-eagle-topk", "4"], "topk = 1 only"),
    (["--enable-dp-attention"], "attention DP"),
    (["--enable-two-batch-overlap"], "two-batch overlap"),
    (["--speculative-adaptive-config", "x.json"], "its own --speculative-adaptive-config"),
    (["--speculative-num-steps", "3"], "not a swept K"),
])
def test_a_server_that_cannot_switch_is_refused_in_one_line(tmp_path, extra, why):
    out = invoke("-o", tmp_path / "run", "--no-nsys", "--sweep-steps", "0,1,2", "--dry-run", "--", *SERVER, *extra)
    assert out.exit_code != 0 and why in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1


def test_refusals_of_the_sweep_itself(tmp_path):
    for args, why in [
        (["--sweep-steps", "0,1", "--preset", "reference"], "sglang preset"),
        (["--sweep-steps", "0,1", "--no-tracer"], "sglang preset"),
        (["--sweep-steps", "2"], "two or more"),
        (["--sweep-steps", "1,1"], "two or more"),
        (["--sweep-steps", "a,b"], "not K1,K2"),
    ]:
        out = invoke("-o", tmp_path / "run", "--no-nsys", *args, "--dry-run", "--", *SERVER)
        assert out.exit_code != 0 and why in out.output, (args, out.output)
    out = invoke("-o", tmp_path / "run", "--no-nsys", "--sweep-steps", "0,1", "--dry-run", "--", "python3", "x.py")
    assert out.exit_code != 0 and "no --speculative-algorithm" in out.output
    out = invoke("-o", tmp_path / "run", "--no-nsys", "--sweep-steps", "0,1", "--dry-run", "--",
                 *SERVER[:-4], "--speculative-algorithm", "NGRAM")
    assert out.exit_code != 0 and "EAGLE and EAGLE3 only" in out.output
