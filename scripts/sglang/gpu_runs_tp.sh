#!/usr/bin/env bash
# On a GPU machine of two or more H200s (nvidia-h200-x2 and larger), from the repository root, once
# scripts/sglang/gpu_stage.sh printed `staged: ready`: the tensor-parallel runs of real SGLang 0.5.16 EAGLE-3
# servers on the dense target (make_model.py --shape dense), `--tp-size $TP` (default 2):
#
#   scripts/sglang/gpu_runs_tp.sh            # and again in the next calls until nothing is `deferred`
#   TP=4 scripts/sglang/gpu_runs_tp.sh       # on nvidia-h200-x4 (TP=8 on -x8)
#
# Configurations (run folders sglang-tpN-NAME), at TP 2:
#   ar-plain, ar-k2, ar-k4        SGLang's custom all-reduce (its default over NVLink): plain decoding, K = 2, 4
#   nccl-plain, nccl-k2, nccl-k4  the same with --disable-custom-all-reduce: NCCL's all-reduce
# at TP 4 or 8: ar-k2 and nccl-k2.
# Each once per round of $ROUNDS (default "twin nsys": the unprofiled twin in RUN/no-nsys, then the run under
# nsys; "twin nsys twin-2" adds a second twin), round by round (scripts/sglang/runs_lib.sh: budget, state,
# launches.jsonl, packing). Under nsys, one report holds every rank (`specprof capture` follows the server's
# processes), and the tracer writes one sidecar per scheduler process, its rank from SGLang's tp_rank.
#
# NVLink multicast stays off (the device machines' rule: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
# NVSHMEM_DISABLE_NVLS=1, set again here for the server's processes); no option that asks SGLang for symmetric
# memory or multimem all-reduce is passed.
# Needs, carried: .debs/ (libdw1, libelf1 for nsys: ../shared/gpu/README.md); staged: the package folder.
source "$(dirname "$0")/runs_lib.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TP=${TP:-2}
setup_machine
server_options
gpus=$(nvidia-smi -L | grep -c '^GPU')
if [ "$gpus" -lt "$TP" ]; then
  log "TP $TP needs $TP GPUs; this machine has $gpus"
  exit 1
fi
WINDOW=${SGLANG_WINDOW:-30:40}
ROUNDS=${ROUNDS:-twin nsys}
m=$(model dense) || exit 1
PLAN_ARGS=(--tp "$TP")
nccl=--server-arg=--disable-custom-all-reduce
if [ "$TP" = 2 ]; then
  rounds "sglang-tp$TP" "$m" ar-plain=--plain ar-k2="--steps 2" ar-k4="--steps 4" \
    nccl-plain="--plain $nccl" nccl-k2="--steps 2 $nccl" nccl-k4="--steps 4 $nccl"
else
  rounds "sglang-tp$TP" "$m" ar-k2="--steps 2" nccl-k2="--steps 2 $nccl"
fi
pack
