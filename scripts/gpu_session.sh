#!/usr/bin/env bash
# Every GPU step of a session, in one command on the GPU machine (the device tool's `run`),
# from the repository root. PARTS picks the steps (default: captures torch overhead):
#   captures   the reference engine under nsys and without it, for each K in KS (default 4 2 6):
#              run.sqlite, NVIDIA's nvtx_gpu_proj_trace CSV, sidecars, ground_truth.json, manifest.json
#   torch      a torch.profiler trace of the engine with the tracer on (K=4)
#   tp         the reference engine tensor-parallel on 2 GPUs (NCCL all-reduce), K=4, with and without nsys
#   graphtrace the reference engine captured with --cuda-graph-trace=graph (graph-level rows), K=4
#   overhead   the tracer's cost on decode throughput (interleaved on/off pairs, no nsys)
#   nsysstats  NVIDIA's `nsys stats -r nvtx_gpu_proj_trace` timed on scaled copies of reference-k4
#              (benchmarks/scale_nsys.py; the same files are analysed by specprof elsewhere)
# What it makes lands under $OUT (default ./out): runs.tar.gz, overhead.json, nsys_stats.json, session.log.
# Needs, carried into the checkout: .debs/ (libdw1, libelf1: see ../shared/gpu/README.md) and
# .whl/ (the `nvtx` wheel for the machine's Python 3.12).
set -u -o pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1
ROOT=$PWD
PARTS=${PARTS:-captures torch overhead}
log() { echo "== $(date +%T) $*"; }
want() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

mkdir -p /tmp/dw && for f in .debs/*.deb; do dpkg -x "$f" /tmp/dw; done
export LD_LIBRARY_PATH=/tmp/dw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$ROOT
export NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
"$NSYS" --version
python3 -c 'import torch, nvtx; print("torch", torch.__version__, "cuda", torch.version.cuda)'

R=/tmp/runs
rm -rf "$R" && mkdir -p "$R"
CYCLES=${CYCLES:-100}
specprof() { python3 -m specprof "$@"; }

if want captures; then
  for K in ${KS:-4 2 6}; do
    log "capture: reference engine K=$K under nsys"
    specprof capture --preset reference --nvidia-stats --capture-range cudaProfilerApi -o "$R/reference-k$K" -- \
      python3 -m specprof reference --steps "$K" --cycles "$CYCLES" --profile-range
    if [ ! -s "$R/reference-k$K/run.sqlite" ]; then
      log "no export for K=$K: stopping here"; ls -la "$R/reference-k$K"; tar -C /tmp -czf "$OUT/runs.tar.gz" runs; exit 1
    fi
    log "no nsys, tracer on: K=$K"
    specprof reference --trace --steps "$K" --cycles "$CYCLES" --out "$R/reference-k$K/no-nsys"
  done
fi

if want torch; then
  log "torch.profiler trace, tracer on: K=4"
  specprof reference --trace --steps 4 --cycles 30 --out "$R/torch-k4" --torch-trace "$R/torch-k4/trace.json" \
    && gzip -9 "$R/torch-k4/trace.json"
fi

if want tp; then
  # Needs 2 GPUs (nvidia-h200-x2). NVLink multicast stays off, as those machines require.
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  log "capture: reference engine TP=2, K=4, under nsys"
  specprof capture --preset reference --nvidia-stats --capture-range cudaProfilerApi -o "$R/reference-k4-tp2" -- \
    python3 -m specprof reference --tp 2 --steps 4 --cycles "$CYCLES" --profile-range
  log "no nsys, tracer on: TP=2, K=4"
  specprof reference --trace --tp 2 --steps 4 --cycles "$CYCLES" --out "$R/reference-k4-tp2/no-nsys"
fi

if want graphtrace; then
  log "capture with --cuda-graph-trace=graph (one row per graph launch): K=4"
  G="$R/reference-k4-graph"; mkdir -p "$G"
  SPECPROF_TRACE=1 SPECPROF_PRESET=reference SPECPROF_OUT_DIR="$G" "$NSYS" profile -t cuda,nvtx,osrt \
    --cuda-graph-trace=graph -s none --cpuctxsw=none --capture-range=cudaProfilerApi --capture-range-end=stop \
    -o "$G/run" -f true python3 -m specprof reference --steps 4 --cycles 30 --profile-range --out "$G"
  "$NSYS" export --type sqlite -o "$G/run.sqlite" "$G/run.nsys-rep"
  "$NSYS" stats -q -r nvtx_gpu_proj_trace -f csv -o "$G/nvidia" "$G/run.sqlite"
fi

if want overhead; then
  log "tracer overhead on the reference engine"
  python3 benchmarks/tracer_overhead_gpu.py --pairs "${PAIRS:-15}" --cycles "${BLOCK:-200}" --attribute --json "$OUT/overhead.json"
fi

if want nsysstats; then
  log "nsys stats -r nvtx_gpu_proj_trace on scaled copies of reference-k4"
  python3 - "$NSYS" "$OUT/nsys_stats.json" ${SCALES:-1 4 16 64} <<'PY'
import hashlib, json, os, resource, subprocess, sys, time
nsys, out, sizes = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]]
rows = []
for n in sizes:
    db = f"/tmp/k4x{n}.sqlite"
    subprocess.run([sys.executable, "benchmarks/scale_nsys.py", "fixtures/reference-k4/run.sqlite", str(n), db], check=True)
    digest = hashlib.sha256(open(db, "rb").read()).hexdigest()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([nsys, "stats", "-q", "-r", "nvtx_gpu_proj_trace", "-f", "csv", "-o", f"/tmp/nv{n}", db],
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rows.append({"factor": n, "bytes": os.path.getsize(db), "sha256": digest, "rc": p.returncode,
                 "wall_s": round(wall, 3), "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 3),
                 "max_rss_mb_children": round(after.ru_maxrss / 1024, 1), "stderr_tail": p.stderr[-400:]})
    print(rows[-1], flush=True)
    os.remove(db)
json.dump({"tool": "nsys stats -r nvtx_gpu_proj_trace", "nsys": nsys, "cpus": os.cpu_count(), "runs": rows}, open(out, "w"), indent=1)
PY
fi

log "pack"
find "$R" -name '*.nsys-rep' -delete
find "$R" -name '.bootstrap' -prune -exec rm -rf {} +
du -ah "$R" | sort -h | tail -30
tar -C /tmp -czf "$OUT/runs.tar.gz" runs
ls -la "$OUT"
