"""scripts/sglang/: the parts that run without a GPU (argument handling, dry runs, the measurement of the
cycles outside the capture window on the committed captures)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

SCRIPTS = ROOT / "scripts" / "sglang"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


outside = load("outside_window")


def test_cycles_outside_the_capture_window_are_not_the_unprofiled_speed():
    # docs/sglang.md, "Cycles outside the capture window": measured on the committed K = 4 capture
    rows = {(r["part"], r["measure"]): r for r in outside.compare(str(FIXTURES / "sglang-k4"))}
    before, after = rows[("before", "gpu_cycle")], rows[("after", "gpu_cycle")]
    assert (before["cycles"], after["cycles"]) == (17, 69)
    assert before["lo"] > 1.15 and after["lo"] > 1.5  # slower than the twin, beyond the launch-to-launch noise
    assert round(before["ratio"], 3) == 1.209 and round(rows[("before", "cpu_period")]["ratio"], 3) == 1.197
    inside = rows[("inside", "gpu_cycle")]
    assert before["nsys_ms"] < inside["nsys_ms"] < after["nsys_ms"]


def test_cycles_outside_the_window_on_the_moe_and_tree_runs():
    # docs/sglang.md, "Cycles outside the capture window": before the window plain MoE and the tree run at their
    # twins' speed, MoE K = 2 30 % slower and MoE K = 4 12 %; inside it nsys stretches MoE K = 2's cycle 1.61x
    ratio = {}
    for name in ("sglang-moe-plain", "sglang-moe-k2", "sglang-moe-k4", "sglang-dense-tree"):
        rows = {(r["part"], r["measure"]): r for r in outside.compare(str(FIXTURES / name))}
        ratio[name] = {part: rows[(part, "gpu_cycle")] for part in ("before", "inside", "after")}
    for name in ("sglang-moe-plain", "sglang-dense-tree"):
        before = ratio[name]["before"]
        assert abs(before["ratio"] - 1) < 0.011 and before["hi"] > 0.998, (name, before)
    k2, k4 = ratio["sglang-moe-k2"]["before"], ratio["sglang-moe-k4"]["before"]
    assert round(k2["ratio"], 3) == 1.300 and k2["lo"] > 1.25 and (k2["cycles"], k2["stalls"]) == (23, 1)
    assert round(k4["ratio"], 3) == 1.123 and k4["lo"] > 1.05 and (k4["cycles"], k4["stalls"]) == (25, 2)
    assert round(ratio["sglang-moe-k2"]["inside"]["ratio"], 3) == 1.610
    assert ratio["sglang-moe-k2"]["after"]["lo"] > 1.1 and ratio["sglang-moe-k4"]["after"]["lo"] > 1.2


def test_outside_window_needs_a_window(tmp_path):
    run = tmp_path / "run"
    (run / "no-nsys").mkdir(parents=True)
    out = subprocess.run([sys.executable, str(SCRIPTS / "outside_window.py"), str(run)], capture_output=True,
                         text=True)
    assert out.returncode != 0 and "one sidecar" in out.stderr


FAKE_SERVE = r'''#!/usr/bin/env python3
# stands in for scripts/sglang/serve.py: checks its arguments with serve.py's own parser, writes what a run
# writes that the plan logic looks at, takes a moment
import json, os, sys, time
sys.path.insert(0, os.path.join(os.environ["REPO"], "scripts", "sglang"))
import serve
args = serve.parse_args(sys.argv[1:])
os.makedirs(args.run_dir)
for name in ("manifest.json", "server.log", "specprof-sidecar.vm.1.jsonl"):
    open(os.path.join(args.run_dir, name), "w").write("{}")
json.dump({"server_argv": serve.server_argv(args), "capture_argv": serve.capture_argv(args), "no_nsys": args.no_nsys, "capture_cycles": args.capture_cycles,
           "ramp": args.ramp, "new_tokens": args.new_tokens}, open(os.path.join(args.run_dir, "client.json"), "w"))
first = os.path.join(os.environ["RUNS_HOME"], ".fake-first-done")  # FAKE_FIRST_SECONDS: the hold's first launch
if os.environ.get("FAKE_FIRST_SECONDS") and not os.path.exists(first):
    open(first, "w").close()
    time.sleep(float(os.environ["FAKE_FIRST_SECONDS"]))
time.sleep(float(os.environ.get("FAKE_SECONDS", "0")))
'''


def fake_machine(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("nvidia-smi", "nsys"):
        (bin_dir / tool).write_text("#!/bin/sh\necho fake-" + tool + "\n")
        (bin_dir / tool).chmod(0o755)
    serve = tmp_path / "fake_serve.py"
    serve.write_text(FAKE_SERVE)
    serve.chmod(0o755)
    (tmp_path / "stage" / "site").mkdir(parents=True)
    (tmp_path / "stage" / "site" / ".complete").touch()
    runs = tmp_path / "runs"
    (runs / "model-dense").mkdir(parents=True)
    (runs / "model-dense" / "model.json").write_text('{"shape": "dense"}')
    (runs / ".server_help").write_text("--cuda-graph-bs CUDA_GRAPH_BS\n--skip-server-warmup\n")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", NSYS=str(bin_dir / "nsys"), REPO=str(ROOT),
               STAGE_HOME=str(tmp_path / "stage"), RUNS_HOME=str(runs), SERVE=f"{sys.executable} {serve}")
    return runs, env


def call(env, out, *plans, **extra):
    return subprocess.run(["bash", str(SCRIPTS / "gpu_runs.sh"), *plans], cwd=ROOT, capture_output=True, text=True,
                          env=dict(env, OUT=str(out), **extra), timeout=300)


def test_the_dense_plan_interleaves_its_rounds_and_resumes_where_the_budget_stopped(tmp_path):
    runs, env = fake_machine(tmp_path)
    calls = []
    for n in range(20):
        out = tmp_path / f"out{n}"
        # each launch takes its second whatever the start-up of `python3 -m analyzer capture` costs, so that 18
        # launches never fit in two 6 s budgets
        done = call(env, out, "dense", BUDGET_S="6", LAUNCH_GUESS_S="1", FAKE_SECONDS="1")
        assert done.returncode == 0, done.stdout + done.stderr
        calls.append(out)
        if "deferred" not in (out / "gpu_runs.log").read_text():
            break
    assert len(calls) >= 2  # the budget split the plan over calls (18 launches of >= 0.5 s exceed one 6 s budget)
    launches = [json.loads(line) for line in (runs / "launches.jsonl").read_text().splitlines()]
    assert [x["position"] for x in launches] == list(range(1, 19)) and all(x["exit"] == 0 for x in launches)
    configs = ["plain", "k1", "k2", "k3", "k4", "k6"]
    assert [x["run"] for x in launches] == ([f"sglang-dense-{c}/no-nsys" for c in configs]
                                            + [f"sglang-dense-{c}" for c in configs]
                                            + [f"sglang-dense-{c}/no-nsys-2" for c in configs])
    assert all(x["start"] <= x["end"] for x in launches) and launches[0]["end"] <= launches[6]["start"]
    k4 = runs / "sglang-dense-k4"
    for sub, nsys in ((k4, False), (k4 / "no-nsys", True), (k4 / "no-nsys-2", True)):
        client = json.loads((sub / "client.json").read_text())
        argv = client["server_argv"]
        assert client["no_nsys"] == nsys and (sub / "model.json").exists()
        assert argv[argv.index("--speculative-num-steps") + 1] == "4"
        assert argv[argv.index("--speculative-eagle-topk") + 1] == "1"
        assert "--skip-server-warmup" in argv and argv[argv.index("--cuda-graph-bs") + 1] == "8"
    plain = json.loads((runs / "sglang-dense-plain" / "client.json").read_text())["server_argv"]
    assert "--speculative-algorithm" not in plain
    # every call brought back what it finished: each run folder's own files, once
    packed = []
    for out in calls:
        for archive in out.glob("runs-*.tar.xz"):
            listing = subprocess.run(["tar", "-tJf", str(archive)], capture_output=True, text=True, check=True)
            packed += listing.stdout.split()
        assert len(list(out.iterdir())) <= 8
    assert sorted(packed) == sorted(set(packed))
    assert {p.rsplit("/", 1)[0] for p in packed} == {x["run"] for x in launches}
    assert "sglang-dense-k4/client.json" in packed and "sglang-dense-k4/no-nsys-2/client.json" in packed


def launches_of(runs) -> list[dict]:
    path = runs / "launches.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_budget_guesses_a_launch_from_this_holds_warm_launches(tmp_path):
    # The hold's first launch is cold (the dense target's: 167 s, the warm ones 86-109 s): the budget must not
    # take it for what a launch costs, or it defers launches that fit. Here the first takes 10 s, the others
    # 1.5 s, and a call of 17 s must start a second launch (about 7 s left: taking 10 s for a launch would
    # defer it; the margin holds a loaded machine's slower stand-in launches).
    runs, env = fake_machine(tmp_path)
    done = call(env, tmp_path / "out1", "dense", BUDGET_S="17", LAUNCH_GUESS_S="1", FAKE_FIRST_SECONDS="10",
                FAKE_SECONDS="1.5")
    assert done.returncode == 0, done.stdout + done.stderr
    first = launches_of(runs)
    assert first[0]["seconds"] >= 10 and len(first) >= 2, first
    # The next call starts from the longest launch recorded, less the first: the warm ones' (not 10 s, and not
    # LAUNCH_GUESS_S, which would defer everything in a budget of 12 s)
    done = call(env, tmp_path / "out2", "dense", BUDGET_S="12", LAUNCH_GUESS_S="100", FAKE_SECONDS="1.5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(launches_of(runs)) > len(first)
    log = (tmp_path / "out2" / "gpu_runs.log").read_text()
    guesses = [int(part.split()[0]) for part in log.split("a launch took up to ")[1:]]
    assert all(g < 10 for g in guesses), guesses


def test_the_budget_falls_back_on_the_guess_without_a_warm_launch(tmp_path):
    runs, env = fake_machine(tmp_path)
    # only the hold's first launch recorded (cold, long): the guess decides, here more than the budget
    (runs / "launches.jsonl").write_text(json.dumps({"run": "sglang-other/no-nsys", "kind": "twin", "position": 1,
                                                     "start": "", "end": "", "seconds": 2, "exit": 0}) + "\n")
    done = call(env, tmp_path / "out", "dense", BUDGET_S="20", LAUNCH_GUESS_S="50")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(launches_of(runs)) == 1
    assert "a launch took up to 50 s): call again" in (tmp_path / "out" / "gpu_runs.log").read_text()


def test_the_tree_and_moe_plans(tmp_path):
    runs, env = fake_machine(tmp_path)
    (runs / "model-moe").mkdir()
    (runs / "model-moe" / "model.json").write_text('{"shape": "moe"}')
    (runs / ".server_help").write_text("--moe-runner-backend\n")
    done = call(env, tmp_path / "out", "tree", "moe")
    assert done.returncode == 0, done.stdout + done.stderr
    tree = json.loads((runs / "sglang-dense-tree" / "client.json").read_text())["server_argv"]
    assert tree[tree.index("--speculative-eagle-topk") + 1] == "4"
    assert tree[tree.index("--speculative-num-draft-tokens") + 1] == "8" and "--disable-overlap-schedule" in tree
    assert "--cuda-graph-bs" not in tree and "--moe-runner-backend" not in tree  # not in this SGLang's help
    for k in ("plain", "k2", "k4"):
        argv = json.loads((runs / f"sglang-moe-{k}" / "no-nsys-2" / "client.json").read_text())["server_argv"]
        assert argv[argv.index("--moe-runner-backend") + 1] == "triton"


def test_the_tensor_parallel_plan(tmp_path):
    runs, env = fake_machine(tmp_path)
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200'\necho 'GPU 1: NVIDIA H200'\n")
    done = subprocess.run(["bash", str(SCRIPTS / "gpu_runs_tp.sh")], cwd=ROOT, capture_output=True, text=True,
                          env=dict(env, OUT=str(tmp_path / "out")), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    launches = [json.loads(line)["run"] for line in (runs / "launches.jsonl").read_text().splitlines()]
    names = ["ar-plain", "ar-k2", "ar-k4", "nccl-plain", "nccl-k2", "nccl-k4"]
    assert launches == [f"sglang-tp2-{n}/no-nsys" for n in names] + [f"sglang-tp2-{n}" for n in names]
    for name in names:
        client = json.loads((runs / f"sglang-tp2-{name}" / "client.json").read_text())
        argv = client["server_argv"]
        assert argv[argv.index("--tp-size") + 1] == "2" and not client["no_nsys"]
        assert ("--disable-custom-all-reduce" in argv) == name.startswith("nccl")
        assert ("--speculative-algorithm" in argv) == (not name.endswith("plain"))
    # four GPUs asked of a machine of two: refused before any server starts
    refused = subprocess.run(["bash", str(SCRIPTS / "gpu_runs_tp.sh")], cwd=ROOT, capture_output=True, text=True,
                             env=dict(env, OUT=str(tmp_path / "out4"), TP="4"), timeout=300)
    assert refused.returncode == 1 and "TP 4 needs 4 GPUs" in refused.stdout


def test_the_server_keeps_nvlink_multicast_off(tmp_path):
    runs, env = fake_machine(tmp_path)
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: x'\necho 'GPU 1: x'\n")
    serve = tmp_path / "env_serve.sh"
    serve.write_text('#!/bin/sh\nmkdir -p "$1" && env | grep -E "NVLS|MULTICAST" > "$1/env.txt" && echo {} > "$1/client.json"\n')
    serve.chmod(0o755)
    done = subprocess.run(["bash", str(SCRIPTS / "gpu_runs_tp.sh")], cwd=ROOT, capture_output=True, text=True,
                          env=dict(env, OUT=str(tmp_path / "out"), SERVE=str(serve), NCCL_NVLS_ENABLE="1"),
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = set((runs / "sglang-tp2-ar-k2" / "env.txt").read_text().split())
    assert {"NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1"} <= seen


@pytest.mark.parametrize("argv,message", [
    (["--plain", "--topk", "4"], "need --steps"),
    (["--steps", "3", "--topk", "4"], "needs --draft-tokens"),
    (["--steps", "3", "--draft-tokens", "8"], "a chain"),
    (["--steps", "0"], "at least 1"),
    (["--plain", "--tp", "0"], "at least 1"),
])
def test_serve_refuses_what_sglang_would_not_run(argv, message, capsys):
    serve = load("serve")
    with pytest.raises(SystemExit):
        serve.parse_args(["run", "--model", "m", *argv])
    assert message in capsys.readouterr().err


def test_serve_dry_run_prints_both_command_lines(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPTS / "serve.py"), str(tmp_path / "run"), "--model", str(tmp_path),
                          "--steps", "3", "--topk", "4", "--draft-tokens", "8", "--tp", "2", "--no-nsys",
                          "--capture-cycles", "30:40", "--gpu-events", "--server-arg=--disable-overlap-schedule",
                          "--dry-run"], capture_output=True, text=True, check=True)
    lines = json.loads(out.stdout)
    capture, server = lines["capture_argv"], lines["server_argv"]
    assert capture[capture.index("--") + 1:] == server and "--no-nsys" in capture and "--gpu-events" in capture
    assert server[server.index("--load-format") + 1] == "dummy"  # no weights in that folder
    assert server[server.index("--tp-size") + 1] == "2" and server[-1] == "--disable-overlap-schedule"
    assert not (tmp_path / "run").exists()


def test_only_some_configurations_of_a_plan(tmp_path):
    runs, env = fake_machine(tmp_path)
    done = call(env, tmp_path / "out", "dense", ONLY="k3 k6", ROUNDS="nsys twin")
    assert done.returncode == 0, done.stdout + done.stderr
    launches = [json.loads(line) for line in (runs / "launches.jsonl").read_text().splitlines()]
    assert [(x["run"], x["position"]) for x in launches] == [
        ("sglang-dense-k3", 4), ("sglang-dense-k6", 6), ("sglang-dense-k3/no-nsys", 10),
        ("sglang-dense-k6/no-nsys", 12)]


def test_the_ramp_plan(tmp_path):
    runs, env = fake_machine(tmp_path)
    (runs / "model-moe").mkdir()
    (runs / "model-moe" / "model.json").write_text('{"shape": "moe"}')
    (runs / ".server_help").write_text("--cuda-graph-bs\n--skip-server-warmup\n--disable-prefill-cuda-graph\n"
                                       "--moe-runner-backend\n")
    done = call(env, tmp_path / "out", "ramp")
    assert done.returncode == 0, done.stdout + done.stderr
    names = [f"sglang-ramp-{shape}-{config}" for shape in ("dense", "moe") for config in ("plain", "k2", "adaptive")]
    assert [x["run"] for x in launches_of(runs)] == [run for name in names for run in (name, f"{name}/no-nsys")]
    windows = {"plain": "0:150", "k2": "0:88", "adaptive": "0:96"}
    for name in names:
        for sub, nsys in ((runs / name, True), (runs / name / "no-nsys", False)):
            client = json.loads((sub / "client.json").read_text())
            argv = client["server_argv"]
            assert client["no_nsys"] != nsys and client["ramp"] == [1, 2, 4, 8, 16] and client["new_tokens"] == 32
            assert client["capture_cycles"] == windows[name.rsplit("-", 1)[1]]
            graphs = argv.index("--cuda-graph-bs")
            assert argv[graphs + 1:graphs + 6] == ["1", "2", "4", "8", "16"]
            assert argv[argv.index("--cuda-graph-max-bs") + 1] == "16"
            assert "--disable-prefill-cuda-graph" in argv and "--skip-server-warmup" in argv
            assert ("--moe-runner-backend" in argv) == ("-moe-" in name)
            assert ("--speculative-adaptive" in argv) == name.endswith("adaptive")
            if name.endswith("adaptive"):
                config = argv[argv.index("--speculative-adaptive-config") + 1]
                assert config == str(SCRIPTS / "adaptive_ramp.json")
                assert argv[argv.index("--speculative-num-steps") + 1] == "3"


def test_the_rotation_plan(tmp_path):
    runs, env = fake_machine(tmp_path)
    (runs / ".server_help").write_text("--cuda-graph-bs\n--skip-server-warmup\n--disable-prefill-cuda-graph\n")
    done = call(env, tmp_path / "out", "rotation")
    assert done.returncode == 0, done.stdout + done.stderr
    names = [f"sglang-rotation-dense-{config}" for config in ("plain", "k2", "rotation")]
    assert [x["run"] for x in launches_of(runs)] == [run for name in names for run in (name, f"{name}/no-nsys")]
    for name in names:
        for sub in (runs / name, runs / name / "no-nsys"):
            client = json.loads((sub / "client.json").read_text())
            capture, argv = client["capture_argv"], client["server_argv"]
            assert client["ramp"] == [1, 2, 4, 8, 16] and client["new_tokens"] == 256
            if name.endswith("rotation"):
                at = capture.index("--sweep-steps")
                assert capture[at + 1:at + 4] == ["0,1,2,4", "--block", "10"]
                assert argv[argv.index("--speculative-num-steps") + 1] == "2"
                assert "--speculative-adaptive" not in argv  # the capture adds it, with its own config
            else:
                assert "--sweep-steps" not in capture
    # the served config comes from the rotation run's analysis: without a real one, it says so and launches nothing
    done = call(env, tmp_path / "out2", "rotation-served")
    assert done.returncode == 0 and "rotation-served: no adaptive config" in done.stdout
    assert len(launches_of(runs)) == 6


def test_serve_passes_the_rotation_to_the_capture(capsys):
    serve = load("serve")
    args = serve.parse_args(["r", "--model", "m", "--steps", "2", "--sweep-steps", "0,1,2,4", "--block", "10"])
    capture = serve.capture_argv(args)
    assert capture[capture.index("--sweep-steps"):capture.index("--")] == ["--sweep-steps", "0,1,2,4", "--block", "10"]
    for argv, message in [(["r", "--model", "m", "--plain", "--sweep-steps", "0,1"], "needs --steps"),
                          (["r", "--model", "m", "--steps", "3", "--sweep-steps", "0,1,2"], "one of --sweep-steps")]:
        with pytest.raises(SystemExit):
            serve.parse_args(argv)
        assert message in capsys.readouterr().err


def test_the_ramp_adaptive_config_is_sglangs_format_with_steps_by_batch_size():
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    params = AdaptiveSpeculativeParams(initial_steps=3, cfg_path=str(SCRIPTS / "adaptive_ramp.json"))
    params.set_cuda_graph_bs([1, 2, 4, 8, 16])  # the ramp's CUDA graphs: a batch is padded to the next one
    assert [params.get_steps_for_batch(bs) for bs in range(1, 17)] == [3] * 2 + [2] * 6 + [0] * 8
    assert params.candidate_steps == [0, 2, 3]


class FakeServer:
    """Answers /generate with `new_tokens` ids, counting requests and the most answered at once; after `stop_after`
    requests it writes a capture stop record into the run folder's sidecar (as the tracer does when the window
    closes)."""

    def __init__(self, sidecar, stop_after: int):
        import http.server
        import threading

        self.seen, self.busy, self.most = [], 0, 0
        lock, server = threading.Lock(), self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                import time

                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    server.seen.append(body)
                    server.busy += 1
                    server.most = max(server.most, server.busy)
                    if len(server.seen) == stop_after:
                        with open(sidecar, "a") as fh:
                            fh.write('{"type":"capture","event":"stop","after_cycle":9,"decode_cycles":9,"ns":1}\n')
                time.sleep(1.0)  # long enough for every request of a level to be in flight, on a loaded machine
                with lock:
                    server.busy -= 1
                n = body["sampling_params"]["max_new_tokens"]
                data = json.dumps({"output_ids": list(range(n)), "meta_info": {"spec_verify_ct": 1}}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 64  # a level's 16 requests connect at once (the default backlog is 5)

        self.http = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.port = self.http.server_address[1]


def test_the_ramp_workload_sends_each_level_at_once_then_closes_an_open_window(tmp_path):
    serve = load("serve")
    run = tmp_path / "run"
    run.mkdir()
    sidecar = run / "specprof-sidecar.vm.1.jsonl"
    sidecar.write_text('{"type":"header"}\n{"type":"capture","event":"start","after_cycle":null,"decode_cycles":0,'
                       '"ns":1}\n')
    server = FakeServer(sidecar, stop_after=31 + 3)  # the window closes on the third request after the ramp
    args = serve.parse_args([str(run), "--model", "m", "--steps", "3", "--adaptive", "c.json", "--ramp", "1,2,4,8,16",
                             "--new-tokens", "32", "--capture-cycles", "0:80", "--port", str(server.port)])
    record: dict = {}
    serve.workload(args, record)
    server.http.shutdown()
    assert [(x["concurrency"], x["requests"]) for x in record["levels"]] == [
        (1, [0, 1]), (2, [1, 3]), (4, [3, 7]), (8, [7, 15]), (16, [15, 31])]
    assert server.most == 16 and record["window_fill"] == 3
    assert [len(b["input_ids"]) for b in server.seen] == [41] * 34
    assert [b["sampling_params"]["max_new_tokens"] for b in server.seen] == [32] * 31 + [8] * 3
    assert len(record["responses"]) == 31 and record["output_tokens"] == 31 * 32
    assert not serve.window_open(str(run))
    # without a window left open, nothing more is sent
    server = FakeServer(sidecar, stop_after=0)
    args.port = server.port
    serve.workload(args, record)
    server.http.shutdown()
    assert record["window_fill"] == 0 and len(server.seen) == 31
