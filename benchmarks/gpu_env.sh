# Sourced by the benchmarks' GPU-machine scripts: $OUT, nsys's libdw from the carried .debs/
# (../shared/gpu/README.md), $NSYS, and the shared captures carried in .bench-traces/.
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
if ls .debs/*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/dw && for f in .debs/*.deb; do dpkg -x "$f" /tmp/dw; done
  export LD_LIBRARY_PATH=/tmp/dw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
export NSYS=${NSYS:-$(command -v nsys || echo /opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys)}
export SPECPROF_SHARED_TRACES=${SPECPROF_SHARED_TRACES:-$PWD/.bench-traces}
"$NSYS" --version
