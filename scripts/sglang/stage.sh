#!/usr/bin/env bash
# Here (any x86-64 or Arm machine with pip and PyPI): build the SGLang 0.5.16 package folder the H200 image
# lacks, from the pinned wheels.txt beside this script, as parts small enough for the device tool to carry.
#
#   scripts/sglang/stage.sh [STAGE_DIR]     (default .sglang-stage, git-ignored)
#
# 1. `pip download --no-deps` every pinned wheel for CPython 3.12 manylinux x86-64 (STAGE_DIR/wheels);
# 2. `pip install --no-deps --target STAGE_DIR/site` (no .pyc: Python writes them there on first import);
# 3. strip what an EAGLE-3 run with `--attention-backend triton` never loads from sglang-kernel: FlashAttention 3
#    (sgl_kernel/flash_ops.abi3.so, 1.1 GB) and the Blackwell (sm100) build;
# 4. tar | xz, split into PARTS parts (default 2, 61 MB each: one device call carries at most 64 MiB, checkout
#    included), SHA256SUMS of the whole archive and of every part.
# The device side is scripts/sglang/gpu_stage.sh; docs/sglang.md says how the parts are carried.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
stage=${1:-.sglang-stage}
parts=${PARTS:-2}
mkdir -p "$stage/wheels"
stage=$(cd "$stage" && pwd)
platforms=()
for p in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 \
         manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 any; do
    platforms+=(--platform "$p")
done
target=(--only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}")
python3 -m pip download -q --no-deps "${target[@]}" -d "$stage/wheels" -r "$here/wheels.txt"
rm -rf "$stage/site"
python3 -m pip install -q --no-deps --no-compile --ignore-requires-python "${target[@]}" --target "$stage/site" \
    "$stage"/wheels/*.whl
rm -f "$stage/site/sgl_kernel/flash_ops.abi3.so"
rm -rf "$stage/site/sgl_kernel/sm100"
echo "site: $(du -sh "$stage/site" | cut -f1) unpacked"
rm -f "$stage"/site.tar.xz "$stage"/site.tar.xz.part-*
tar -C "$stage" -cf - site | xz -T0 -6 > "$stage/site.tar.xz"
size=$(stat -c %s "$stage/site.tar.xz")
split -d -a 1 -b $(( (size + parts - 1) / parts )) "$stage/site.tar.xz" "$stage/site.tar.xz.part-"
(cd "$stage" && sha256sum site.tar.xz site.tar.xz.part-* > SHA256SUMS)
ls -la "$stage"/site.tar.xz*
