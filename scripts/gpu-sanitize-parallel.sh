#!/usr/bin/env bash
# compute-sanitizer on every CUDA test, several at a time (a many-core GPU
# host finishes in a fraction of the serial time): memcheck on all CUDA tests
# and on element_cudadiff (backend auto, so CUDA on a GPU host), racecheck on
# the core ones. One summary line per run; logs in LOG_DIR (default
# /tmp/gpu-sanitize). GST_RUNTIME as in gpu-check.sh.
#   bash scripts/gpu-sanitize-parallel.sh [BUILD] [JOBS] [TIMEOUT_S]
set -uo pipefail
build=${1:-build-gpu}; jobs=${2:-6}; limit=${3:-500}
runtime=${GST_RUNTIME:-gst-runtime}
[ -f "$runtime/env.sh" ] && source "$runtime/env.sh"
export GST_PLUGIN_PATH_1_0="$PWD/$build/plugins"
out=${LOG_DIR:-/tmp/gpu-sanitize}; mkdir -p "$out"
runs=()
for t in "$build"/tests/core_*_cuda "$build"/tests/core_*_cuda_* "$build"/tests/element_*_cuda "$build"/tests/element_cudadiff; do
  [ -x "$t" ] && runs+=("memcheck $t")
done
for t in "$build"/tests/core_*_cuda "$build"/tests/core_*_cuda_*; do [ -x "$t" ] && runs+=("racecheck $t"); done
printf '%s\n' "${runs[@]}" | xargs -P "$jobs" -L 1 bash -c '
  tool=$0; t=$1; log='"$out"'/$tool-$(basename $t).log
  timeout '"$limit"' compute-sanitizer --tool $tool $( [ $tool = memcheck ] && echo --leak-check full ) "$t" > $log 2>&1
  rc=$?
  line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $log | tail -n 1)
  tests=$(grep -E "^\[  (PASSED|FAILED)  \]" $log | tail -n 1)
  echo "$tool $(basename $t): rc=$rc ${line:-no summary (timeout?)} ${tests}"'
