#!/usr/bin/env bash
# Every GPU step of a session, in one command on the GPU machine (the device tool's `run`),
# from the repository root. What it makes lands under $OUT (default ./out):
#   runs.tar.gz  the reference-engine captures (run.sqlite, NVIDIA's nvtx_gpu_proj_trace CSV,
#                sidecars, ground_truth.json, manifest.json) with and without nsys, K = 2, 4, 6
#   overhead.json  the tracer's cost (interleaved on/off pairs, no nsys)
#   session.log
# Needs, carried into the checkout: .debs/ (libdw1, libelf1: see ../shared/gpu/README.md) and
# .whl/ (the `nvtx` wheel for the machine's Python 3.12).
set -u -o pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1
ROOT=$PWD
log() { echo "== $(date +%T) $*"; }

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
specprof() { python3 -m analyzer "$@"; }

for K in ${KS:-4 2 6}; do
  log "capture: reference engine K=$K under nsys"
  specprof capture --preset reference --nvidia-stats --capture-range cudaProfilerApi -o "$R/reference-k$K" -- \
    python3 -m analyzer reference --steps "$K" --cycles "$CYCLES" --profile-range
  if [ ! -s "$R/reference-k$K/run.sqlite" ]; then
    log "no export for K=$K: stopping here"; ls -la "$R/reference-k$K"; tar -C /tmp -czf "$OUT/runs.tar.gz" runs; exit 1
  fi
  log "no nsys, tracer on: K=$K"
  specprof reference --trace --steps "$K" --cycles "$CYCLES" --out "$R/reference-k$K/no-nsys"
done

if [ -n "${TORCH_TRACE:-1}" ]; then
  log "torch.profiler trace, tracer on: K=4"
  specprof reference --trace --steps 4 --cycles 30 --out "$R/torch-k4" --torch-trace "$R/torch-k4/trace.json" \
    && gzip -9 "$R/torch-k4/trace.json"
fi

if [ -n "${OVERHEAD:-1}" ] && [ -f benchmarks/tracer_overhead_gpu.py ]; then
  log "tracer overhead on the reference engine"
  python3 benchmarks/tracer_overhead_gpu.py --pairs 7 --cycles 300 --json "$OUT/overhead.json"
fi

log "pack"
find "$R" -name '*.nsys-rep' -delete
du -ah "$R" | sort -h | tail -30
tar -C /tmp -czf "$OUT/runs.tar.gz" runs
ls -la "$OUT"
