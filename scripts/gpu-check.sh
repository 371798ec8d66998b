#!/usr/bin/env bash
# One call on the GPU machine (see docs/development.md): the whole test suite,
# compute-sanitizer (memcheck on every CUDA test, racecheck on the core CUDA
# tests), every benchmark, and the peers' benchmark. Logs go to /tmp/gpu-check
# and, packed as one file (the device tool returns few files), to $OUT/logs.tgz.
#   bash scripts/gpu-check.sh [BUILD_DIR] [tests|sanitize|bench|peers ...]
set -uo pipefail
build=${1:-build-gpu}
shift || true
steps=${*:-tests sanitize bench peers}
out=/tmp/gpu-check
rm -rf "$out" && mkdir -p "$out"
source .device/env.sh
# Pango needs fonts: point fontconfig at the staged ones.
if [ -d .device/root/usr/share/fonts ]; then
  cat > /tmp/gpu-check-fonts.conf <<CONF
<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig><dir>$PWD/.device/root/usr/share/fonts</dir><cachedir>/tmp/fontconfig-cache</cachedir></fontconfig>
CONF
  export FONTCONFIG_FILE=/tmp/gpu-check-fonts.conf
fi
summary=()

for step in $steps; do
  case $step in
    tests)
      python3 .device/devtest.py "$build" 2>&1 | tee "$out/devtest.log"
      summary+=("tests: $(tail -n 1 "$out/devtest.log")")
      ;;
    sanitize)
      : > "$out/sanitizer.log"
      for t in "$build"/tests/core_*_cuda "$build"/tests/element_*_cuda \
               "$build"/tests/pipeline_cuda_memory; do
        [ -x "$t" ] || continue
        name=$(basename "$t")
        line=$(GST_PLUGIN_PATH_1_0="$PWD/$build/plugins" timeout ${SANITIZE_TIMEOUT:-400} \
               compute-sanitizer --tool memcheck --leak-check full "$t" 2>&1 | tee -a "$out/sanitizer.log" |
               grep "ERROR SUMMARY" | tail -n 1)
        summary+=("memcheck $name: ${line:-no summary (timeout or crash)}")
      done
      for t in "$build"/tests/core_*_cuda "$build"/tests/pipeline_cuda_memory; do
        name=$(basename "$t")
        line=$(GST_PLUGIN_PATH_1_0="$PWD/$build/plugins" timeout ${SANITIZE_TIMEOUT:-400} \
               compute-sanitizer --tool racecheck "$t" 2>&1 | tee -a "$out/sanitizer.log" |
               grep "RACECHECK SUMMARY" | tail -n 1)
        summary+=("racecheck $name: ${line:-no summary (timeout or crash)}")
      done
      ;;
    bench)
      export GST_PLUGIN_PATH_1_0="$PWD/$build/plugins"
      for b in "$build"/bench/bench_*; do
        [ -x "$b" ] || continue
        name=$(basename "$b")
        timeout 300 "$b" > "$out/$name.log" 2>&1
        summary+=("$name: exit $?")
      done
      ;;
    peers)
      bash .device/peers/peer_bench.sh > "$out/peers.log" 2>&1
      summary+=("peers: exit $?")
      ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
if [ -n "${OUT:-}" ]; then tar czf "$OUT/logs.tgz" -C "$out" .; fi
