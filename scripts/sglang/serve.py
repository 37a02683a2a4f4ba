"""One profiled run of a real SGLang server: start it under `specprof capture`, send a fixed workload, stop it.

    python3 scripts/sglang/serve.py RUN_DIR --model MODEL_DIR [--steps K [--topk N --draft-tokens M]
        [--adaptive CONFIG] | --plain] [--no-nsys] [--capture-cycles W:N] [--gpu-events] [--tp N]
        [--requests 8 | --ramp 1,2,4,8,16 [--rounds 1]] [--new-tokens 320] [--cuda-graph-max-bs 8]
        [--port 30123] [--mem-fraction 0.3] [--server-arg=ARG ...] [--dry-run]

- The server: `python3 -m sglang.launch_server` with MODEL_DIR/target (and MODEL_DIR/draft as the EAGLE-3
  draft head, `--speculative-num-steps K --speculative-eagle-topk N --speculative-num-draft-tokens M`: a chain,
  topk 1 and K+1 draft tokens, unless --topk/--draft-tokens say a tree; `--plain`: no speculation; `--adaptive
  CONFIG`: SGLang's adaptive step count, `--speculative-adaptive --speculative-adaptive-config CONFIG`, starting
  at K, which must be one of the config's candidate steps), token ids in and out (`--skip-tokenizer-init`), the
  Triton attention backend, CUDA graphs for batches up to `--cuda-graph-max-bs` (8), `--tp-size N`, and
  everything else at that version's defaults (the overlap scheduler included; `--server-arg` adds
  more, e.g. `--server-arg=--disable-overlap-schedule`). Weights from MODEL_DIR's safetensors, or random
  (`--load-format dummy`) when it has none.
- Under `specprof capture` (`--nvidia-stats`, or `--no-nsys` for the twin run), with `--capture-cycles` and
  `--gpu-events` passed on. The capture keeps the server's output in RUN_DIR/server.log (where `analyze` reads
  it); everything the capture printed (nsys's lines, and the server's output again) goes to RUN_DIR/capture.log.
- The workload: REQUESTS requests at once (one decode batch), request i the prompt [1, 100+50i, ...,
  139+50i] (41 tokens), NEW_TOKENS new tokens each, greedy, `ignore_eos`: the same tokens every run.
  `--ramp 1,2,4,8,16` instead: levels of concurrent requests one after another in the one server, as a
  server's load rises: at each level ROUNDS rounds (default 1), each round that many requests sent at once and
  all answered before the next round (so each level's decode batches hold that many requests; request i
  counted across the whole ramp). With 1 round and 32 new tokens, each level is 31 decode steps per request:
  31 plain decode cycles, or about 31 / accept length speculative ones. With `--capture-cycles` and a window
  that did not close within the ramp (more cycles asked than it ran), requests of one at a time (8 new tokens)
  follow until the tracer's sidecar says the capture stopped (at most 60 s; client.json's `window_fill`).
  RUN_DIR/client.json holds each response's output length and SGLang's own `meta_info` (spec_* fields), the
  command lines, and the run's wall-clock `start` and `end` (UTC) with the server's start-up and the
  workload's own times (`levels`: each ramp round's concurrency, requests, start and seconds).
- Then SIGINT to `specprof capture`, which passes it on to nsys (or the server), and waits for the export. A
  capture that exits non-zero (nsys left no report) makes this script exit non-zero too, client.json written.
- `--sweep-steps 0,1,2,4 --block N`: `specprof capture --sweep-steps` (the tracer rotates K in blocks of N decode
  cycles inside the one launch; the capture adds the adaptive settings to the server's command).
- `--dry-run`: print the two command lines (the capture's and the server's) as JSON, run nothing.
"""

from __future__ import annotations

import argparse
import datetime
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
    target = os.path.join(model, "target")
    weights = os.path.isdir(target) and any(f.endswith(".safetensors") for f in os.listdir(target))
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", target,
            "--load-format", "auto" if weights else "dummy", "--skip-tokenizer-init",
            "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
            "--mem-fraction-static", str(args.mem_fraction), "--cuda-graph-max-bs", str(args.cuda_graph_max_bs),
            "--port", str(args.port),
            "--decode-log-interval", "10", "--disable-radix-cache"]
    if args.tp > 1:
        argv += ["--tp-size", str(args.tp)]
    if not args.plain:
        argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", os.path.join(model, "draft"),
                 "--speculative-num-steps", str(args.steps), "--speculative-eagle-topk", str(args.topk),
                 "--speculative-num-draft-tokens", str(args.draft_tokens)]
        if args.adaptive:
            argv += ["--speculative-adaptive", "--speculative-adaptive-config", os.path.abspath(args.adaptive)]
    return argv + args.server_arg


def capture_argv(args) -> list[str]:
    argv = [sys.executable, "-m", "specprof", "capture", "-o", args.run_dir]
    argv += ["--no-nsys"] if args.no_nsys else ["--nvidia-stats"]
    if args.capture_cycles:
        argv += ["--capture-cycles", args.capture_cycles]
    if args.gpu_events:
        argv.append("--gpu-events")
    if args.sweep_steps:
        argv += ["--sweep-steps", args.sweep_steps, "--block", str(args.block)]
    return argv + ["--"] + server_argv(args)


def utc(t: float) -> str:
    """Wall-clock seconds as UTC ISO 8601 with milliseconds (as `specprof capture`'s manifest writes them)."""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="milliseconds")


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


def send(port: int, first: int, count: int, new_tokens: int, results: list) -> None:
    """Requests first .. first + count - 1 at once, each on its own thread; returns when all are answered."""
    threads = [threading.Thread(target=generate, args=(port, i, new_tokens, results))
               for i in range(first, first + count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def ramp_levels(text: str) -> list[int]:
    levels = [int(x) for x in text.split(",") if x.strip()]
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: concurrency levels, e.g. 1,2,4,8,16")
    return levels


def window_open(run_dir: str) -> bool:
    """Whether a traced process of this run opened its capture window and has not closed it (its sidecar's
    `capture` records; docs/sidecar.md)."""
    events = []
    for name in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else []:
        if name.startswith("specprof-sidecar.") and name.endswith(".jsonl"):
            with open(os.path.join(run_dir, name)) as fh:
                events += [line for line in fh if '"type":"capture"' in line]
    return bool(events) and '"event":"start"' in events[-1]


def workload(args, record: dict) -> None:
    """Sends the workload (`--requests` at once, or the `--ramp`), fills an open capture window, notes it all."""
    t0 = time.time()
    if args.ramp:
        results: list = [None] * (sum(args.ramp) * args.rounds)
        record["levels"], first = [], 0
        for concurrency in args.ramp:
            for round_ in range(args.rounds):
                start = time.time()
                send(args.port, first, concurrency, args.new_tokens, results)
                record["levels"].append({"concurrency": concurrency, "round": round_,
                                         "requests": [first, first + concurrency], "start": utc(start),
                                         "seconds": time.time() - start})
                print(f"level {concurrency}, round {round_}: {time.time() - start:.2f} s", flush=True)
                first += concurrency
    else:
        results = [None] * args.requests
        send(args.port, 0, args.requests, args.new_tokens, results)
    record["workload_start"], record["workload_s"] = utc(t0), time.time() - t0
    if args.ramp and args.capture_cycles:
        filled, deadline = [], time.time() + 60
        while window_open(args.run_dir) and time.time() < deadline:
            filled.append(None)
            send(args.port, len(filled) - 1, 1, 8, filled)
        record["window_fill"] = len(filled)
        if filled:
            print(f"the capture window was still open after the ramp: {len(filled)} more requests of one", flush=True)
    record["responses"] = results
    done = [r for r in results if r]
    record["output_tokens"] = sum(r["output_tokens"] for r in done)
    print(f"workload: {len(done)} responses, {record['output_tokens']} tokens in {record['workload_s']:.2f} s",
          flush=True)
    for r in done[:2]:
        print(" ", {k: v for k, v in r["meta_info"].items() if k.startswith("spec_")}, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--model", required=True)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--steps", type=int)
    group.add_argument("--plain", action="store_true")
    ap.add_argument("--no-nsys", action="store_true")
    ap.add_argument("--capture-cycles")
    ap.add_argument("--gpu-events", action="store_true")
    ap.add_argument("--requests", type=int, default=8, help="requests sent at once [8]")
    ap.add_argument("--ramp", type=ramp_levels, help="levels of concurrent requests, one after another (1,2,4,8,16)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of requests at each --ramp level [1]")
    ap.add_argument("--adaptive", metavar="CONFIG",
                    help="SGLang's adaptive step count with this --speculative-adaptive-config (needs --steps)")
    ap.add_argument("--cuda-graph-max-bs", type=int, default=8, help="CUDA graphs up to this batch size [8]")
    ap.add_argument("--new-tokens", type=int, default=320)
    ap.add_argument("--port", type=int, default=30123)
    ap.add_argument("--timeout", type=float, default=400)
    ap.add_argument("--topk", type=int, default=1, help="draft branches per step (1: a chain)")
    ap.add_argument("--draft-tokens", type=int, help="tokens the target verifies per cycle [chain: steps + 1]")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (--tp-size)")
    ap.add_argument("--mem-fraction", type=float, default=0.3, help="--mem-fraction-static")
    ap.add_argument("--server-arg", action="append", default=[], help="one more server argument (repeatable)")
    ap.add_argument("--sweep-steps", metavar="K1,K2,...",
                    help="rotate K inside the one launch (specprof capture --sweep-steps; --steps is the start K)")
    ap.add_argument("--block", type=int, default=40, help="decode cycles per K with --sweep-steps [40]")
    ap.add_argument("--dry-run", action="store_true", help="print the command lines as JSON, run nothing")
    args = ap.parse_args(argv)
    if args.sweep_steps and (args.plain or args.adaptive or args.topk != 1):
        ap.error("--sweep-steps rotates the K of a chain: it needs --steps, no --adaptive, --topk 1")
    if args.sweep_steps and str(args.steps) not in args.sweep_steps.split(","):
        ap.error("--steps must be one of --sweep-steps (SGLang starts the adaptive runtime at a candidate K)")
    if args.plain and (args.topk != 1 or args.draft_tokens is not None or args.adaptive):
        ap.error("--topk, --draft-tokens and --adaptive need --steps")
    if args.adaptive and args.topk != 1:
        ap.error("--adaptive runs chains only (SGLang's adaptive step count needs topk 1)")
    if not args.plain:
        if args.steps < 1 or args.topk < 1:
            ap.error("--steps and --topk must be at least 1")
        if args.draft_tokens is None:
            if args.topk != 1:
                ap.error("a tree (--topk > 1) needs --draft-tokens")
            args.draft_tokens = args.steps + 1
        if args.topk == 1 and args.draft_tokens != args.steps + 1:
            ap.error("a chain (--topk 1) verifies --steps + 1 tokens")
        if args.draft_tokens < 2:
            ap.error("--draft-tokens must be at least 2")
    if args.tp < 1 or args.requests < 1 or args.new_tokens < 1 or args.rounds < 1 or args.cuda_graph_max_bs < 1:
        ap.error("--tp, --requests, --rounds, --new-tokens and --cuda-graph-max-bs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.dry_run:
        print(json.dumps({"capture_argv": capture_argv(args), "server_argv": server_argv(args)}, indent=1))
        return
    parent = os.path.dirname(os.path.abspath(args.run_dir))
    os.makedirs(parent, exist_ok=True)
    log_path = os.path.join(parent, f".{os.path.basename(args.run_dir)}.capture.log")
    argv = capture_argv(args)
    print("+", " ".join(argv), flush=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t_start = time.time()
    with open(log_path, "w") as log:
        capture = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        record = {"argv": argv, "server_argv": server_argv(args), "requests": args.requests,
                  "new_tokens": args.new_tokens, "start": utc(t_start)}
        if args.ramp:
            record.update(requests=sum(args.ramp) * args.rounds, ramp=args.ramp, rounds=args.rounds)
        try:
            record["startup_s"] = wait_healthy(args.port, capture, args.timeout)
            print(f"server up after {record['startup_s']:.0f} s", flush=True)
            workload(args, record)
            time.sleep(2)  # the sidecar's flusher writes every 0.1 s; the server logs its last lines
        finally:
            if capture.poll() is None:
                capture.send_signal(signal.SIGINT)
            try:
                record["capture_exit"] = capture.wait(args.timeout)
            except subprocess.TimeoutExpired:
                capture.kill()
                record["capture_exit"] = "killed after timeout"
            t_end = time.time()
            record["end"], record["total_s"] = utc(t_end), t_end - t_start
    os.makedirs(args.run_dir, exist_ok=True)
    shutil.move(log_path, os.path.join(args.run_dir, "capture.log"))
    with open(os.path.join(args.run_dir, "client.json"), "w") as fh:
        json.dump(record, fh, indent=1)
    print(f"capture exited with {record['capture_exit']} after {record['total_s']:.0f} s in all", flush=True)
    if record["capture_exit"] != 0:  # e.g. nsys left no report: the run is not done (runs_lib.sh keeps it apart)
        raise SystemExit(f"specprof capture exited with {record['capture_exit']}: see {args.run_dir}/capture.log")


if __name__ == "__main__":
    main()
