#!/usr/bin/env bash
# On the GPU machine, from the repository root, once scripts/sglang/gpu_stage.sh printed `staged: ready`:
# real SGLang 0.5.16 EAGLE-3 servers profiled by specprof, one run set per name given:
#
#   scripts/sglang/gpu_runs.sh k4 plain k2 k4-noevents
#
#   k4, k2        EAGLE-3 with 4 (2) draft steps, topk 1, under nsys (`specprof capture --capture-cycles W:N
#                 --gpu-events --nvidia-stats`), then the same again without nsys into RUN/no-nsys
#   plain         the same server without speculation (the plain-decode baseline), the same two ways
#   k4-noevents   EAGLE-3 K = 4 without nsys and without --gpu-events: with k4/no-nsys, the events' own cost
#   k4-nooverlap  EAGLE-3 K = 4 with --disable-overlap-schedule, under nsys (the scheduler's other path)
#
# The model (scripts/sglang/make_model.py: a Llama target whose greedy choices an EAGLE-3 head gets right on a
# known share of tokens) is made on first use. Runs go to $RUNS_HOME (default $HOME/sglang-runs, outside the
# checkout, so they stay between calls while the machine is held); each run set is packed as
# $OUT/NAME.tar.xz (the nsys report left out: run.sqlite is what specprof reads), with $OUT/gpu_runs.log.
# Needs, carried: .debs/ (libdw1, libelf1 for nsys: ../shared/gpu/README.md); staged: the package folder.
set -u -o pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_runs.log") 2>&1
export PYTHONUNBUFFERED=1
log() { echo "== $(date +%T) $*"; }

mkdir -p /tmp/dw && for f in .debs/*.deb; do dpkg -x "$f" /tmp/dw; done
export LD_LIBRARY_PATH=/tmp/dw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
SITE=${STAGE_HOME:-$HOME/sglang-stage}/site
[ -f "$SITE/.complete" ] || { log "no staged package folder at $SITE: run scripts/sglang/gpu_stage.sh first"; exit 1; }
export PYTHONPATH=$SITE:$PWD/scripts/sglang/stub
RUNS=${RUNS_HOME:-$HOME/sglang-runs}
MODEL=$RUNS/model
WINDOW=${WINDOW:-30:120}
mkdir -p "$RUNS"

if [ ! -f "$MODEL/model.json" ]; then
  log "model: $MODEL"
  python3 scripts/sglang/make_model.py "$MODEL" || exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$NSYS" --version
python3 -c 'import sglang, torch, nvtx; print("sglang", sglang.__version__, "torch", torch.__version__)'

serve() { python3 scripts/sglang/serve.py --model "$MODEL" "$@"; }

pair() {  # NAME, then the server's mode (--steps K or --plain) and any server arguments
  local name=$1; shift
  log "$name: under nsys"
  rm -rf "${RUNS:?}/$name"
  serve "$RUNS/$name" "$@" --capture-cycles "$WINDOW" --gpu-events
  log "$name: without nsys"
  serve "$RUNS/$name/no-nsys" --no-nsys "$@" --capture-cycles "$WINDOW" --gpu-events
}

for name in "$@"; do
  case $name in
    k4) pair sglang-k4 --steps 4 ;;
    k2) pair sglang-k2 --steps 2 ;;
    plain) pair sglang-plain --plain ;;
    k4-noevents)
      log "sglang-k4-noevents: without nsys, without events"
      rm -rf "$RUNS/sglang-k4-noevents"
      serve "$RUNS/sglang-k4-noevents" --no-nsys --steps 4 --capture-cycles "$WINDOW" ;;
    k4-nooverlap)
      log "sglang-k4-nooverlap: under nsys, --disable-overlap-schedule"
      rm -rf "$RUNS/sglang-k4-nooverlap"
      serve "$RUNS/sglang-k4-nooverlap" --steps 4 --capture-cycles "$WINDOW" --gpu-events \
        --server-arg=--disable-overlap-schedule ;;
    *) log "unknown run set: $name"; continue ;;
  esac
  dir=sglang-$name; [ "$name" = plain ] && dir=sglang-plain
  [ -d "$RUNS/$dir" ] || continue
  cp "$MODEL/model.json" "$RUNS/$dir/model.json"
  tar -C "$RUNS" --exclude='*.nsys-rep' --exclude='.bootstrap' -cJf "$OUT/$dir.tar.xz" "$dir"
  log "$dir packed: $(stat -c %s "$OUT/$dir.tar.xz") bytes"
done
