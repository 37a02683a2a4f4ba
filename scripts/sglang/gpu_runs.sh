#!/usr/bin/env bash
# On the GPU machine (one H200), from the repository root, once scripts/sglang/gpu_stage.sh printed
# `staged: ready`: real SGLang 0.5.16 EAGLE-3 servers profiled by specprof, one plan per name given:
#
#   scripts/sglang/gpu_runs.sh dense          # then the same command again in the next calls until nothing is
#   scripts/sglang/gpu_runs.sh moe tree       # `deferred` (scripts/sglang/runs_lib.sh: the budget, the state)
#
# Plans (each configuration three times, in rounds over all the plan's configurations: the unprofiled twin
# (RUN/no-nsys), the run under nsys (RUN), the twin again (RUN/no-nsys-2), so that a run under nsys sits
# between its twins and the drift between the rounds is measured; launches.jsonl says when each ran):
#   dense   the 8 B Llama-3-shaped target (make_model.py --shape dense): plain decoding, and EAGLE-3 chains
#           (topk 1) with K = 1, 2, 3, 4, 6 draft steps: sglang-dense-{plain,k1,k2,k3,k4,k6}
#   moe     the Qwen3-MoE-shaped target (--shape moe) on SGLang's fused-MoE Triton kernels: plain, K = 2, 4:
#           sglang-moe-{plain,k2,k4}
#   tree    the dense target with tree drafts: --speculative-num-steps 3 --speculative-eagle-topk 4
#           --speculative-num-draft-tokens 8 --disable-overlap-schedule: sglang-dense-tree
#   ramp    a server's load rising in one launch: levels of 1, 2, 4, 8 and 16 concurrent requests one after
#           another (serve.py --ramp 1,2,4,8,16, one round per level, 32 new tokens per request: 31 decode
#           steps per level), CUDA graphs for batches 1, 2, 4, 8 and 16 (no prefill graphs), 45 % of the GPU's
#           memory for weights and KV cache (an H100's 80 GB holds the 8 B targets). The dense target,
#           then the MoE target, each plain, K = 2 and adaptive (--adaptive scripts/sglang/adaptive_ramp.json,
#           starting at K = 3: K = 3 at batches of 1-2, 2 at 3-8, 0 (no draft) at 9-16), each under nsys (RUN)
#           then its twin (RUN/no-nsys): sglang-ramp-{dense,moe}-{plain,k2,adaptive}, in that order. Windows
#           from the first traced call (W = 0) over most of the ramp (N: 150 plain, 88 K = 2, 96 adaptive
#           decode cycles, each into the last level: the ramp ran 161, 92-93 and 101 on the dense and MoE
#           targets, fixtures/README.md); a window the ramp did not close is closed by requests of one
#           (serve.py).
#   rotation  the step sweep inside one launch (specprof capture --sweep-steps 0,1,2,4 --block 10, start K 2),
#           on the dense target, the ramp's load with 256 new tokens per request (each level some 130-250 decode
#           cycles: every K in every level), against the same ramp plain (the real plain step that K = 0 inside
#           the speculative worker is measured against) and at a fixed K = 2 (the rotation's own cost: its K = 2
#           cycles against these, batch size by batch size), each under nsys then its twin:
#           sglang-rotation-dense-{plain,k2,rotation}. Then, in the same or a later call, `rotation-served`: the
#           adaptive config that `specprof sweep RUNS/sglang-rotation-dense-rotation/no-nsys --baseline
#           RUNS/sglang-rotation-dense-plain/no-nsys --adaptive-config` writes (RUNS/rotation-adaptive.json, its
#           table in RUNS/rotation-adaptive.txt), served live with the same ramp: sglang-rotation-dense-served.
# and the first captures' run sets on the 8-layer target (--shape small --runs 1,0: accept length 1.5), each
# under nsys then without: k4, k2, plain, k4-noevents (no nsys, no --gpu-events), k4-nooverlap (nsys only).
#
# Every run: scripts/sglang/serve.py under `specprof capture --capture-cycles W:N --gpu-events` (W:N from
# $SGLANG_WINDOW, default 30:40 for the plans, small windows; 30:120 for the first run sets), 8 requests of 41
# prompt tokens, 320 new tokens each.
# Where this SGLang has them, `--cuda-graph-bs 8` and `--skip-server-warmup` shorten each start (every decode
# batch is padded to 8; MoE: `--moe-runner-backend triton`).
# Needs, carried: .debs/ (libdw1, libelf1 for nsys: ../shared/gpu/README.md; DEBS_DIR names another folder, e.g.
# ../.debs when the scripts run from a copy of the tree inside the checkout); staged: the package folder.
source "$(dirname "$0")/runs_lib.sh"
setup_machine
server_options

for plan in "$@"; do
  PLAN_ARGS=()
  WINDOW=${SGLANG_WINDOW:-30:40}
  case $plan in
    dense)
      m=$(model dense) || continue
      rounds sglang-dense "$m" plain=--plain k1="--steps 1" k2="--steps 2" k3="--steps 3" k4="--steps 4" k6="--steps 6" ;;
    moe)
      m=$(model moe) || continue
      PLAN_ARGS=("${MOE_BACKEND[@]}")
      rounds sglang-moe "$m" plain=--plain k2="--steps 2" k4="--steps 4" ;;
    tree)
      m=$(model dense) || continue
      rounds sglang-dense "$m" "tree=--steps 3 --topk 4 --draft-tokens 8 --server-arg=--disable-overlap-schedule" ;;
    k4|k2|plain|k4-noevents|k4-nooverlap)
      WINDOW=${SGLANG_WINDOW:-30:120}
      m=$RUNS/model
      if [ ! -f "$m/model.json" ]; then
        python3 scripts/sglang/make_model.py "$m" --shape small --runs 1,0 || exit 1
      fi
      case $plan in
        k4) launch 1 sglang-k4 nsys "$m" --steps 4; launch 2 sglang-k4/no-nsys twin "$m" --steps 4 ;;
        k2) launch 1 sglang-k2 nsys "$m" --steps 2; launch 2 sglang-k2/no-nsys twin "$m" --steps 2 ;;
        plain) launch 1 sglang-plain nsys "$m" --plain; launch 2 sglang-plain/no-nsys twin "$m" --plain ;;
        k4-noevents)
          # without --gpu-events: serve.py is called directly (launch always passes it)
          if [ ! -f "$RUNS/sglang-k4-noevents/.done" ]; then
            python3 scripts/sglang/serve.py "$RUNS/sglang-k4-noevents" --model "$m" --no-nsys --steps 4 \
              --capture-cycles "$WINDOW" && cp "$m/model.json" "$RUNS/sglang-k4-noevents/" \
              && touch "$RUNS/sglang-k4-noevents/.done" && FINISHED+=(sglang-k4-noevents)
          fi ;;
        k4-nooverlap) launch 1 sglang-k4-nooverlap nsys "$m" --steps 4 --server-arg=--disable-overlap-schedule ;;
      esac ;;
    ramp)
      RAMP=(--ramp 1,2,4,8,16 --new-tokens 32 --cuda-graph-max-bs 16 --mem-fraction 0.45 "${RAMP_FAST[@]}")
      adaptive="--steps 3 --adaptive scripts/sglang/adaptive_ramp.json"
      for shape in dense moe; do
        m=$(model $shape) || continue
        PLAN_ARGS=("${RAMP[@]}")
        [ $shape = moe ] && PLAN_ARGS+=("${MOE_BACKEND[@]}")
        ramp_runs sglang-ramp-$shape "$m" plain=150=--plain k2=88="--steps 2" adaptive=96="$adaptive"
      done ;;
    rotation|rotation-served)
      m=$(model dense) || continue
      PLAN_ARGS=(--ramp 1,2,4,8,16 --new-tokens 256 --cuda-graph-max-bs 16 --mem-fraction 0.45 "${RAMP_FAST[@]}")
      if [ $plan = rotation ]; then
        ramp_runs sglang-rotation-dense "$m" plain=1200=--plain k2=700="--steps 2" \
          rotation=800="--steps 2 --sweep-steps 0,1,2,4 --block 10"
      else
        config=$RUNS/rotation-adaptive.json
        if [ ! -f "$config" ]; then
          python3 -m specprof sweep "$RUNS/sglang-rotation-dense-rotation/no-nsys" \
            --baseline "$RUNS/sglang-rotation-dense-plain/no-nsys" --adaptive-config "$config" \
            > "$RUNS/rotation-adaptive.txt" || { log "rotation-served: no adaptive config (run the rotation plan first)"; continue; }
          FINISHED+=(rotation-adaptive.json rotation-adaptive.txt)
        fi
        steps=$(python3 -c "import json, sys; c = json.load(open(sys.argv[1])); s = sorted({k for e in c.values() for k in e['candidate_steps']}); print(s[len(s) // 2])" "$config")
        if [ "$steps" = 0 ]; then
          log "rotation-served: the config writes K = 0 at every batch size: plain decoding wins, nothing to serve"
        else
          ramp_runs sglang-rotation-dense "$m" served=800="--steps $steps --adaptive $config"
        fi
      fi ;;
    *) log "unknown plan: $plan" ;;
  esac
done
pack
