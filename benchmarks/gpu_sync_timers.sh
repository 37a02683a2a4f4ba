#!/usr/bin/env bash
# On the GPU machine, from the repository root: synchronize timers against specprof's tracer
# (benchmarks/sync_timers_gpu.py, K = 4 and K = 2) and the tracer's cost with and without CUDA events
# (benchmarks/tracer_overhead_gpu.py --events), on the reference engine, no nsys. Results under $OUT.
# Needs, carried: .whl/ with the `nvtx` wheel for the machine's Python 3.12 (../.library/device/README.md).
set -u -o pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_sync_timers.log") 2>&1
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for K in 4 2; do
  python3 benchmarks/sync_timers_gpu.py --steps "$K" --rounds 5 --cycles 200 --json "$OUT/sync_timers_k$K.json"
done
python3 benchmarks/tracer_overhead_gpu.py --pairs 9 --cycles 300 --events --json "$OUT/tracer_overhead_events.json"
