# Sourced by scripts/sglang/gpu_runs.sh and gpu_runs_tp.sh (bash): the GPU machine's setup, and `launch`, which
# runs one server (scripts/sglang/serve.py) into one run folder, at most once across calls, within the call's
# time budget, and records when it ran.
#
# State lives outside the checkout, so it stays between the calls of one hold: $RUNS_HOME (default
# $HOME/sglang-runs) holds the models (model-SHAPE), the run folders, `launches.jsonl` (one line per launch:
# run, kind, plan position, UTC start and end, seconds, exit) and a `.done` marker in each finished run folder.
# Each call packs the run folders it finished into $OUT/runs-CALL.tar.xz (parts of at most 15 MiB: the device
# tool brings back 8 files of 16 MiB), with $OUT/gpu_runs.log and $OUT/launches.jsonl.
#
# Budget: BUDGET_S (default 540: a call may run 600 s) counts from the script's start; a launch starts only if
# the time left holds the longest launch of this hold so far (`longest_launch`: launches.jsonl, every call's
# launches, less the hold's first, a cold start that warm launches do not repeat; LAUNCH_GUESS_S, default
# 150, before there is one), else it and the ones after it are left for the next call (`deferred` in the log),
# which resumes where this one stopped.

set -u -o pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_runs.log") 2>&1
export PYTHONUNBUFFERED=1
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
LAUNCH_GUESS_S=${LAUNCH_GUESS_S:-150}
DEFERRED=0
FINISHED=()
SERVE=${SERVE:-python3 scripts/sglang/serve.py}  # one server run (a test puts a stand-in here)
log() { echo "== $(date -u +%T) $*"; }

setup_machine() {  # DEBS_DIR: the carried libdw1/libelf1 packages (default .debs; nsys's importer needs them)
  mkdir -p /tmp/dw && for f in "${DEBS_DIR:-.debs}"/*.deb; do [ -e "$f" ] && dpkg -x "$f" /tmp/dw; done
  export LD_LIBRARY_PATH=/tmp/dw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  export NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
  SITE=${STAGE_HOME:-$HOME/sglang-stage}/site
  [ -f "$SITE/.complete" ] || { log "no staged package folder at $SITE: run scripts/sglang/gpu_stage.sh first"; exit 1; }
  export PYTHONPATH=$SITE:$PWD/scripts/sglang/stub
  RUNS=${RUNS_HOME:-$HOME/sglang-runs}
  mkdir -p "$RUNS"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$NSYS" --version
  python3 -c 'import importlib.metadata as m, importlib.util as u; print("sglang", m.version("sglang"), "torch",
    m.version("torch"), "nvtx", "found" if u.find_spec("nvtx") else "MISSING")'
  # the server options this SGLang has (read once per hold): optional ones are passed only where they exist
  [ -s "$RUNS/.server_help" ] || python3 -m sglang.launch_server --help > "$RUNS/.server_help" 2>&1
}

has_option() { grep -q -- "$1" "$RUNS/.server_help"; }

model() {  # SHAPE: make $RUNS/model-SHAPE once (scripts/sglang/make_model.py), print its folder
  local dir=$RUNS/model-$1
  if [ ! -f "$dir/model.json" ]; then
    log "model $1: $dir" >&2
    rm -rf "$dir"
    python3 scripts/sglang/make_model.py "$dir" --shape "$1" >&2 || { log "model $1 failed" >&2; return 1; }
  fi
  echo "$dir"
}

longest_launch() {  # seconds: the longest launch in $RUNS/launches.jsonl but its first line, else LAUNCH_GUESS_S
  # (the hold's first launch is cold: 167 s for the dense target where the warm ones took 86-109 s)
  local s
  s=$(tail -n +2 "$RUNS/launches.jsonl" 2>/dev/null | sed -n 's/.*"seconds": \([0-9][0-9]*\).*/\1/p' | sort -n | tail -n 1)
  echo "${s:-$LAUNCH_GUESS_S}"
}

launch() {  # POSITION RUN KIND MODEL_DIR serve.py-arguments...; KIND: nsys | twin (RUN is then .../no-nsys*)
  local pos=$1 run=$2 kind=$3 model_dir=$4; shift 4
  local dir=$RUNS/$run
  [ -f "$dir/.done" ] && return 0
  if [ "$DEFERRED" = 1 ]; then log "deferred: $run"; return 0; fi
  local now left longest
  now=$(date +%s); left=$(( BUDGET_S - (now - T0) )); longest=$(longest_launch)
  if [ "$left" -lt "$longest" ]; then
    DEFERRED=1
    log "deferred: $run ($left s left of the call's budget, a launch took up to $longest s): call again"
    return 0
  fi
  local extra=()
  [ "$kind" = twin ] && extra+=(--no-nsys)
  log "$run: $kind"
  # made in a working folder, then moved in: a run folder may already hold its twin's folder, and
  # `specprof capture` writes only into an empty one (the manifest's run_dir names the working folder)
  local work=$RUNS/.work/${run//\//+}
  rm -rf "$work"
  local start end rc
  start=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ); now=$(date +%s)
  $SERVE "$work" --model "$model_dir" "${extra[@]}" "$@" --capture-cycles "$WINDOW" \
    --gpu-events --port "${PORT:-30123}"
  rc=$?
  if [ "$rc" = 0 ] && [ -f "$work/client.json" ]; then
    mkdir -p "$dir"
    (shopt -s dotglob; mv "$work"/* "$dir"/) && rm -rf "$work"
  else
    rm -rf "$dir.failed" && mv "$work" "$dir.failed" 2>/dev/null
  fi
  end=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
  local took=$(( $(date +%s) - now ))
  printf '{"run": "%s", "kind": "%s", "position": %s, "start": "%s", "end": "%s", "seconds": %s, "exit": %s}\n' \
    "$run" "$kind" "$pos" "$start" "$end" "$took" "$rc" >> "$RUNS/launches.jsonl"
  if [ "$rc" = 0 ] && [ -f "$dir/client.json" ]; then
    cp "$model_dir/model.json" "$dir/model.json"
    touch "$dir/.done"
    FINISHED+=("$run")
  else
    log "$run: failed (exit $rc), kept in $dir.failed; capture.log's end:"
    tail -n 30 "$dir.failed/capture.log" 2>/dev/null
  fi
}

pack() {  # the run folders finished in this call (their own files: not the folders of other launches inside)
  cp "$RUNS/launches.jsonl" "$OUT/launches.jsonl" 2>/dev/null
  [ "${#FINISHED[@]}" -gt 0 ] || { log "nothing finished in this call"; return 0; }
  local list=$RUNS/.pack-list call
  call=$(date -u +%H%M%S)
  : > "$list"
  for run in "${FINISHED[@]}"; do
    (cd "$RUNS" && find "$run" -maxdepth 1 -type f ! -name '*.nsys-rep' ! -name '*.qdstrm' ! -name '.*') >> "$list"
  done
  tar -C "$RUNS" --no-recursion -cf - -T "$list" | xz -T0 -6 > "$OUT/runs-$call.tar.xz"
  local size
  size=$(stat -c %s "$OUT/runs-$call.tar.xz")
  if [ "$size" -gt $(( 15 << 20 )) ]; then
    split -d -a 1 -b 15M "$OUT/runs-$call.tar.xz" "$OUT/runs-$call.tar.xz.part-" && rm "$OUT/runs-$call.tar.xz"
  fi
  log "packed ${#FINISHED[@]} run folder(s): $size bytes; left for the next call: $DEFERRED"
}

server_options() {  # after setup_machine: FAST (shorter starts), RAMP_FAST (the ramp's: CUDA graphs for batches
  # 1-16, none for prefill) and MOE_BACKEND, where this SGLang has them
  FAST=()
  has_option --cuda-graph-bs && FAST+=(--server-arg=--cuda-graph-bs --server-arg=8)
  has_option --skip-server-warmup && FAST+=(--server-arg=--skip-server-warmup)
  RAMP_FAST=()
  if has_option --cuda-graph-bs; then
    RAMP_FAST+=(--server-arg=--cuda-graph-bs)
    for bs in 1 2 4 8 16; do RAMP_FAST+=(--server-arg=$bs); done
  fi
  has_option --disable-prefill-cuda-graph && RAMP_FAST+=(--server-arg=--disable-prefill-cuda-graph)
  has_option --skip-server-warmup && RAMP_FAST+=(--server-arg=--skip-server-warmup)
  MOE_BACKEND=()
  has_option --moe-runner-backend && MOE_BACKEND+=(--server-arg=--moe-runner-backend --server-arg=triton)
  PLAN_ARGS=()
}

ramp_runs() {  # PREFIX MODEL_DIR NAME=N=ARGS...: each configuration under nsys (PREFIX-NAME), then its twin
  # (PREFIX-NAME/no-nsys), with the window 0:N and PLAN_ARGS (the ramp's, and FAST's part that it keeps)
  local prefix=$1 model_dir=$2; shift 2
  local pos=0 config name rest args
  for config in "$@"; do
    name=${config%%=*}; rest=${config#*=}; args=${rest#*=}
    WINDOW=${SGLANG_WINDOW:-0:${rest%%=*}}
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then pos=$((pos + 2)); continue; fi
    pos=$((pos + 1)); launch "$pos" "$prefix-$name" nsys "$model_dir" $args "${PLAN_ARGS[@]}"
    pos=$((pos + 1)); launch "$pos" "$prefix-$name/no-nsys" twin "$model_dir" $args "${PLAN_ARGS[@]}"
  done
}

rounds() {  # PREFIX MODEL_DIR NAME=ARGS...: each configuration once per round of $ROUNDS (default: twin nsys
  # twin-2), round by round over all the configurations: RUN/no-nsys, then RUN, then RUN/no-nsys-2, RUN being
  # PREFIX-NAME; the arguments go to serve.py with FAST and PLAN_ARGS. ONLY="k3 k6" keeps those configurations
  # (a new hold that redoes what the last one left unfinished: a configuration's launches stay on one machine)
  local prefix=$1 model_dir=$2; shift 2
  local pos=0 round config name args
  for round in ${ROUNDS:-twin nsys twin-2}; do
    for config in "$@"; do
      name=${config%%=*}; args=${config#*=}
      pos=$((pos + 1))
      if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
      case $round in
        twin) launch "$pos" "$prefix-$name/no-nsys" twin "$model_dir" $args "${FAST[@]}" "${PLAN_ARGS[@]}" ;;
        nsys) launch "$pos" "$prefix-$name" nsys "$model_dir" $args "${FAST[@]}" "${PLAN_ARGS[@]}" ;;
        twin-2) launch "$pos" "$prefix-$name/no-nsys-2" twin "$model_dir" $args "${FAST[@]}" "${PLAN_ARGS[@]}" ;;
        *) log "unknown round: $round" ;;
      esac
    done
  done
}
