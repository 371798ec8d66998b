#!/usr/bin/env bash
# compute-sanitizer on every CUDA test, several at a time (a many-core GPU
# host finishes in a fraction of the serial time): memcheck on all CUDA tests
# and on element_cudadiff (backend auto, so CUDA on a GPU host), racecheck on
# the core ones. One summary line per run; logs in LOG_DIR (default
# /tmp/gpu-sanitize). GST_RUNTIME as in gpu-check.sh.
#   bash scripts/gpu-sanitize-parallel.sh [BUILD] [JOBS] [TIMEOUT_S]
# SHARDS=N (default 1) runs each core test's racecheck as N googletest shards
# (GTEST_TOTAL_SHARDS, GTEST_SHARD_INDEX), each its own run: racecheck is
# slow, and the version 2 decoder's damaged-body tests, run whole, take
# longer than the time limit. RUN=echo prints the runs instead.
set -uo pipefail
build=${1:-build-gpu}; jobs=${2:-6}; limit=${3:-500}
shards=${SHARDS:-1}
case $shards in '' | *[!0-9]* | 0) echo "SHARDS must be a positive integer" >&2; exit 2 ;; esac
runtime=${GST_RUNTIME:-gst-runtime}
[ -f "$runtime/env.sh" ] && source "$runtime/env.sh"
export GST_PLUGIN_PATH_1_0="$PWD/$build/plugins"
out=${LOG_DIR:-/tmp/gpu-sanitize}; mkdir -p "$out"
runs=()
for t in "$build"/tests/core_*_cuda "$build"/tests/core_*_cuda_* "$build"/tests/element_*_cuda "$build"/tests/element_cudadiff; do
  [ -f "$t" ] && [ -x "$t" ] && runs+=("memcheck $t 0 1")
done
for t in "$build"/tests/core_*_cuda "$build"/tests/core_*_cuda_*; do
  [ -f "$t" ] && [ -x "$t" ] || continue
  for ((s = 0; s < shards; s++)); do runs+=("racecheck $t $s $shards"); done
done
if [ "${RUN:-}" = echo ]; then printf '%s\n' "${runs[@]}"; exit 0; fi
printf '%s\n' "${runs[@]}" | xargs -P "$jobs" -L 1 bash -c '
  tool=$0; t=$1; shard=$2; n=$3
  name=$(basename $t); [ "$n" -gt 1 ] && name="$name-shard$shard-of-$n"
  log='"$out"'/$tool-$name.log
  GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$shard \
    timeout '"$limit"' compute-sanitizer --tool $tool $( [ $tool = memcheck ] && echo --leak-check full ) "$t" > $log 2>&1
  rc=$?
  line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $log | tail -n 1)
  tests=$(grep -E "^\[  (PASSED|FAILED)  \]" $log | tail -n 1)
  echo "$tool $name: rc=$rc ${line:-no summary (timeout?)} ${tests}"'
