#!/usr/bin/env bash
# One nsys export of several processes (a tensor-parallel capture: one process per GPU) analysed with --jobs on
# the GPU machine's 16-core host: builds the R-rank input there from a real single-process export (SOURCE:
# fixtures/reference-k4/run.sqlite, carried or copied there: the checkout comes without fixtures/), then runs
# `specprof analyze RANKS.sqlite --no-cache -q --jobs N` for each N of JOBS side by side (benchmarks/ab.py: CPU,
# wall, the largest process's peak RSS), and once more each N > 1 under benchmarks/process_peaks.py (the parent's
# peak and the largest worker's apart).
#
#   OUT=... benchmarks/ranks_device.sh SOURCE.sqlite [COPIES] [RANKS]
#
# COPIES (default 64): time-shifted copies of SOURCE per rank (64: 1.27 M kernels a rank, the input of
# docs/performance.md; 512: 10.2 M a rank, the goal's size, an 11 GB file and several minutes to build); RANKS
# (default 8). Environment: JOBS (default "1 8 16"; "" builds only: an input already in WORK is not built
# again), ROUNDS (default 3), WORK (default /tmp/specprof-ranks: the inputs and the per-process split,
# $SPECPROF_SPLIT_DIR). Needs .whl-analysis/ beside the checkout
# (benchmarks/gpu_site.sh) and, for the page reader, a C compiler (else the results say the reader read through
# SQLite). Results: $OUT/ranks<R>x<COPIES>_build.json, _jobs.json (ab.py), _peaks_jobs<N>.json, _host.txt.
# EXPORTS=E (default 0): also E exports of one process each, copies of the single-process input the build scales
# (E files of COPIES copies of SOURCE: 512 is mix64's size), made in the build and then analysed together,
# `--jobs EXPORTS_JOBS` (default E), under process_peaks.py: _exports<E>_peaks_jobs<N>.json.
set -eu -o pipefail
SOURCE=${1:?give the path of a single-process nsys export, e.g. fixtures/reference-k4/run.sqlite}
COPIES=${2:-64}
RANKS=${3:-8}
JOBS=${JOBS-1 8 16}
ROUNDS=${ROUNDS:-3}
EXPORTS=${EXPORTS:-0}
OUT=${OUT:-$PWD/out}
WORK=${WORK:-/tmp/specprof-ranks}
NAME=ranks${RANKS}x${COPIES}
mkdir -p "$OUT" "$WORK"
. benchmarks/gpu_site.sh
python3 setup.py build_ext --inplace -q >"$OUT/${NAME}_build_ext.log" 2>&1 || echo "no C modules built (see the log)"
PAGES=$(python3 -c "from specprof.analyzer.readers.nsys import page_reader_built; print(page_reader_built())")
{ nproc; free -g; df -h "$WORK"; uptime; echo "page reader: $PAGES"; } >"$OUT/${NAME}_host.txt"

INPUT=$WORK/$NAME.sqlite
t0=$(date +%s.%N)
if [ ! -f "$INPUT" ]; then
  python3 benchmarks/scale_nsys.py "$SOURCE" "$COPIES" "$WORK/source_x$COPIES.sqlite"
  t1=$(date +%s.%N)
  python3 benchmarks/ranks_nsys.py "$WORK/source_x$COPIES.sqlite" "$RANKS" "$INPUT"
else
  t1=$t0
fi
exports=()
for i in $(seq 1 "$EXPORTS"); do
  exports+=("$WORK/export${i}_x$COPIES.sqlite")
  [ -f "$WORK/export${i}_x$COPIES.sqlite" ] || cp "$WORK/source_x$COPIES.sqlite" "$WORK/export${i}_x$COPIES.sqlite"
done
rm -f "$WORK/source_x$COPIES.sqlite"
t2=$(date +%s.%N)
python3 - "$INPUT" "$t0" "$t1" "$t2" "$PAGES" "${exports[@]}" >"$OUT/${NAME}_build.json" <<'PY'
import json, os, sys
path, t0, t1, t2, pages, exports = sys.argv[1], *map(float, sys.argv[2:5]), sys.argv[5], sys.argv[6:]
print(json.dumps({"input": path, "bytes": os.path.getsize(path), "scale_s": round(t1 - t0, 1),
                  "ranks_s": round(t2 - t1, 1), "page_reader": pages == "True",
                  "exports": [{"path": e, "bytes": os.path.getsize(e)} for e in exports]}))
PY
cat "$OUT/${NAME}_build.json"

# JOBS="" (and EXPORTS_JOBS="" where EXPORTS is set): build only; a later call, on the machine still held, measures
if [ -n "${JOBS// /}" ]; then
  export SPECPROF_SPLIT_DIR=$WORK
  args=()
  for n in $JOBS; do
    args+=(--name "jobs$n" --cmd "cd $PWD && python3 -m specprof analyze $INPUT --no-cache -q --jobs $n")
  done
  python3 benchmarks/ab.py --rounds "$ROUNDS" "${args[@]}" --out "$OUT/${NAME}_jobs.json" >/dev/null
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps(d['median'], indent=1))" \
    "$OUT/${NAME}_jobs.json" || true
  for n in $JOBS; do
    if [ "$n" -gt 1 ]; then
      python3 benchmarks/process_peaks.py "$INPUT" --no-cache -q --jobs "$n" >"$OUT/${NAME}_peaks_jobs$n.json"
      cat "$OUT/${NAME}_peaks_jobs$n.json"
    fi
  done
fi
EXPORTS_JOBS=${EXPORTS_JOBS-$EXPORTS}
if [ "$EXPORTS" -gt 0 ] && [ -n "$EXPORTS_JOBS" ]; then
  python3 benchmarks/process_peaks.py "${exports[@]}" --no-cache -q --jobs "$EXPORTS_JOBS" \
    >"$OUT/${NAME}_exports${EXPORTS}_peaks_jobs$EXPORTS_JOBS.json"
  cat "$OUT/${NAME}_exports${EXPORTS}_peaks_jobs$EXPORTS_JOBS.json"
fi
