"""One profiled run of a real SGLang server: start it under `specprof capture`, send a fixed workload, stop it.

    python3 scripts/sglang/serve.py RUN_DIR --model MODEL_DIR [--steps K | --plain] [--no-nsys]
        [--capture-cycles W:N] [--gpu-events] [--requests 8] [--new-tokens 320] [--port 30123]

- The server: `python3 -m sglang.launch_server` with MODEL_DIR/target (and MODEL_DIR/draft as the EAGLE-3
  draft head, `--speculative-num-steps K --speculative-eagle-topk 1 --speculative-num-draft-tokens K+1`;
  `--plain`: no speculation), token ids in and out (`--skip-tokenizer-init`), the Triton attention backend,
  CUDA graphs for batches up to 8, and everything else at that version's defaults (the overlap scheduler
  included). Weights from MODEL_DIR's model.safetensors, or random (`--load-format dummy`) when it has none.
- Under `specprof capture` (`--nvidia-stats`, or `--no-nsys` for the twin run), with `--capture-cycles` and
  `--gpu-events` passed on. The capture's own output (nsys, the server's log) goes to RUN_DIR/server.log.
- The workload: REQUESTS requests at once (one decode batch), request i the prompt [1, 100+50i, ...,
  139+50i] (41 tokens), NEW_TOKENS new tokens each, greedy, `ignore_eos`: the same tokens every run.
  RUN_DIR/client.json holds each response's output length and SGLang's own `meta_info` (spec_* fields).
- Then SIGINT to `specprof capture`, which passes it on to nsys (or the server), and waits for the export.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def server_argv(args) -> list[str]:
    model = os.path.abspath(args.model)
    weights = os.path.exists(os.path.join(model, "target", "model.safetensors"))
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", f"{model}/target",
            "--load-format", "auto" if weights else "dummy", "--skip-tokenizer-init",
            "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
            "--mem-fraction-static", "0.3", "--cuda-graph-max-bs", "8", "--port", str(args.port),
            "--decode-log-interval", "10", "--disable-radix-cache"]
    if not args.plain:
        argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", f"{model}/draft",
                 "--speculative-num-steps", str(args.steps), "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", str(args.steps + 1)]
    return argv + args.server_arg


def capture_argv(args) -> list[str]:
    argv = [sys.executable, "-m", "analyzer", "capture", "-o", args.run_dir]
    argv += ["--no-nsys"] if args.no_nsys else ["--nvidia-stats"]
    if args.capture_cycles:
        argv += ["--capture-cycles", args.capture_cycles]
    if args.gpu_events:
        argv.append("--gpu-events")
    return argv + ["--"] + server_argv(args)


def wait_healthy(port: int, process: subprocess.Popen, timeout_s: float) -> float:
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with code {process.returncode} before it was up")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
            return time.time() - t0
        except Exception:
            time.sleep(1)
    raise SystemExit(f"the server was not up after {timeout_s:.0f} s")


def generate(port: int, i: int, new_tokens: int, out: list) -> None:
    prompt = [1] + list(range(100 + 50 * i, 140 + 50 * i))
    body = json.dumps({"input_ids": prompt, "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0,
                                                                "ignore_eos": True}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", body,
                                     {"Content-Type": "application/json"})
    t0 = time.time()
    response = json.loads(urllib.request.urlopen(request, timeout=600).read())
    ids = response.get("output_ids") or []
    out[i] = {"request": i, "prompt_tokens": len(prompt), "output_tokens": len(ids), "seconds": time.time() - t0,
              "first_output_ids": ids[:12], "meta_info": response.get("meta_info", {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--model", required=True)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--steps", type=int)
    group.add_argument("--plain", action="store_true")
    ap.add_argument("--no-nsys", action="store_true")
    ap.add_argument("--capture-cycles")
    ap.add_argument("--gpu-events", action="store_true")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=320)
    ap.add_argument("--port", type=int, default=30123)
    ap.add_argument("--timeout", type=float, default=400)
    ap.add_argument("--server-arg", action="append", default=[], help="one more server argument (repeatable)")
    args = ap.parse_args()
    parent = os.path.dirname(os.path.abspath(args.run_dir))
    os.makedirs(parent, exist_ok=True)
    log_path = os.path.join(parent, f".{os.path.basename(args.run_dir)}.server.log")
    argv = capture_argv(args)
    print("+", " ".join(argv), flush=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t_start = time.time()
    with open(log_path, "w") as log:
        capture = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        record = {"argv": argv, "server_argv": server_argv(args), "requests": args.requests,
                  "new_tokens": args.new_tokens}
        try:
            record["startup_s"] = wait_healthy(args.port, capture, args.timeout)
            print(f"server up after {record['startup_s']:.0f} s", flush=True)
            results: list = [None] * args.requests
            threads = [threading.Thread(target=generate, args=(args.port, i, args.new_tokens, results))
                       for i in range(args.requests)]
            t0 = time.time()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            record["workload_s"] = time.time() - t0
            record["responses"] = results
            done = [r for r in results if r]
            record["output_tokens"] = sum(r["output_tokens"] for r in done)
            print(f"workload: {len(done)} responses, {record['output_tokens']} tokens in "
                  f"{record['workload_s']:.2f} s", flush=True)
            for r in done[:2]:
                print(" ", {k: v for k, v in r["meta_info"].items() if k.startswith("spec_")}, flush=True)
            time.sleep(2)  # the sidecar's flusher writes every 0.1 s; the server logs its last lines
        finally:
            if capture.poll() is None:
                capture.send_signal(signal.SIGINT)
            try:
                record["capture_exit"] = capture.wait(args.timeout)
            except subprocess.TimeoutExpired:
                capture.kill()
                record["capture_exit"] = "killed after timeout"
            record["total_s"] = time.time() - t_start
    os.makedirs(args.run_dir, exist_ok=True)
    shutil.move(log_path, os.path.join(args.run_dir, "server.log"))
    with open(os.path.join(args.run_dir, "client.json"), "w") as fh:
        json.dump(record, fh, indent=1)
    print(f"capture exited with {record['capture_exit']} after {record['total_s']:.0f} s in all", flush=True)


if __name__ == "__main__":
    main()
