#!/usr/bin/env bash
# specprof and NVIDIA's `nsys stats -r nvtx_gpu_proj_trace` side by side, in one run, on the same files, on the
# GPU machine's host (where nsys is): builds benchmarks/perf_nsys.py's mixN.sqlite inputs there (each result
# records its tables' row counts) and runs the harness under `taskset` (CORES, default "0,1": two cores, as
# the 2-core target) and, with ALL_CORES=1, once more on every core (specprof only: nsys stats is
# single-threaded).
#
# Needs, beside the checkout (carried, git-ignored): .debs/ (libdw1, libelf1: ../shared/gpu/README.md),
# .bench-traces/nsys_sqlite/nsysai_h100_2gpu_1s.sqlite (from ../shared/traces) and .whl-analysis/ (the wheels
# of polars, polars-runtime-32, adbc-driver-manager and adbc-driver-sqlite for that machine's Python: the
# image has none of them and reaches no registry; `pip download` them here, docs/performance.md), as wheels or,
# to fit the device's 64 MiB carry limit, unzipped into one folder and packed as .whl-analysis/site.tar.xz.
# SIZES (default "64"); results in $OUT/perf_nsys_h200_side_by_side*.json.
set -eu -o pipefail
. benchmarks/gpu_env.sh
. benchmarks/gpu_site.sh
SIZES=$(echo "${SIZES:-64}" | tr ' ' ',')
CORES=${CORES:-0,1}
ls /tmp/specprof-bench/mix*.sqlite 2>/dev/null || true
python3 benchmarks/perf_nsys.py build --dir /tmp/specprof-bench --sizes "$SIZES"
if [ "${ALL_CORES:-0}" = 1 ]; then
  NSYS= python3 benchmarks/perf_nsys.py run --dir /tmp/specprof-bench --sizes "$SIZES" \
    --out "$OUT/perf_nsys_h200_side_by_side_all_cores.json"
else
  taskset -c "$CORES" python3 benchmarks/perf_nsys.py run --dir /tmp/specprof-bench --sizes "$SIZES" \
    --out "$OUT/perf_nsys_h200_side_by_side_${CORES//,/_}.json"
fi
