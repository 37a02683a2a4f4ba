#!/usr/bin/env bash
# On the GPU machine, from the repository root: receive the parts of the SGLang package folder made by
# scripts/sglang/stage.sh that one call carried in CARRY_DIR (default .sglang-carry; git-ignored folders
# .sglang-carry*, named in the device tool's `carry`, one folder per call), into
# $STAGE_HOME (default $HOME/sglang-stage, outside the checkout, so it stays between consecutive calls while
# the machine is held). When every part listed in SHA256SUMS is there, join them, check the sums and unpack
# the folder to $STAGE_HOME/site. Prints `staged: ready` once the folder is ready.
set -euo pipefail
carry=${1:-.sglang-carry}
home=${STAGE_HOME:-$HOME/sglang-stage}
mkdir -p "$home"
cp "$carry/SHA256SUMS" "$home/"
for part in "$carry"/site.tar.xz.part-*; do
    [ -e "$part" ] || continue
    cp "$part" "$home/"
    echo "staged: $(basename "$part") ($(stat -c %s "$part") bytes)"
done
cd "$home"
if [ -f site/.complete ]; then
    echo "staged: ready (already unpacked)"
    exit 0
fi
wanted=$(awk '$2 ~ /part-/ {print $2}' SHA256SUMS)
for part in $wanted; do
    if [ ! -f "$part" ]; then
        echo "staged: waiting for $part"
        exit 0
    fi
done
grep 'part-' SHA256SUMS | sha256sum -c --quiet
cat $wanted > site.tar.xz
grep ' site.tar.xz$' SHA256SUMS | sha256sum -c --quiet
rm -rf site && xz -dc site.tar.xz | tar -xf -
rm -f site.tar.xz $wanted
touch site/.complete
echo "staged: ready ($(du -sh site | cut -f1))"
