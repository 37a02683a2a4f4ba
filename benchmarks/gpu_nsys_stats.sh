#!/usr/bin/env bash
# NVIDIA's `nsys stats -r nvtx_gpu_proj_trace` timed on the benchmark inputs, on the GPU machine (where nsys is):
# builds benchmarks/perf_nsys.py's mixN.sqlite inputs there (the same rows as here: each result records its
# tables' row counts) and runs the harness, which measures nsys stats (specprof and nsys-ai need packages that
# machine's image lacks; they are measured on the 2-core machine, docs/performance.md).
#
# Needs, beside the checkout: .debs/ (libdw1, libelf1, as for scripts/gpu_session.sh) and .bench-traces/
# (a copy of shared/traces/nsys_sqlite/nsysai_h100_2gpu_1s.sqlite under .bench-traces/nsys_sqlite/).
# SIZES (default "1 4 16 64"); results in $OUT/perf_nsys_h200.json.
set -eu -o pipefail
. benchmarks/gpu_env.sh
SIZES=$(echo "${SIZES:-1 4 16 64}" | tr ' ' ',')
python3 benchmarks/perf_nsys.py build --dir /tmp/specprof-bench --sizes "$SIZES"
python3 benchmarks/perf_nsys.py run --dir /tmp/specprof-bench --sizes "$SIZES" --out "$OUT/perf_nsys_h200.json"
