#!/usr/bin/env bash
# compute-sanitizer on every CUDA test, several at a time (a many-core GPU
# host finishes in a fraction of the serial time): memcheck on all CUDA tests
# and on element_cudadiff (backend auto, so CUDA on a GPU host), racecheck on
# the core ones. One summary line per run; logs in LOG_DIR (default
# /tmp/gpu-sanitize). GST_RUNTIME as in gpu-check.sh.
#   bash scripts/gpu-sanitize-parallel.sh [BUILD] [JOBS] [TIMEOUT_S]
# SHARDS=N (default 1) runs each core test's racecheck as N googletest shards
# (GTEST_TOTAL_SHARDS, GTEST_SHARD_INDEX), each its own run: racecheck is
# slow, and the version 2 decoder's damaged-body tests, run whole, take longer
# than the time limit. PER_TEST=1 instead runs each test of the core programs
# as its own run, for racecheck and memcheck alike (--gtest_filter, from
# --gtest_list_tests): many short runs share the jobs better than shards whose
# slowest test sets their time, and the version 2 decoder's program, whole,
# outlasts the time limit under memcheck too when other runs share the GPU.
# DEADLINE_S=N (default: none) starts no run after N seconds and gives each
# run at most the time left before them (runs not started are listed as such).
# ONLY=REGEX keeps the runs whose line ("TOOL PROGRAM SHARD SHARDS [TEST]", as
# RUN=echo prints them) matches the extended regular expression, e.g.
# ONLY='^racecheck .*DamagedBodies' or ONLY='^memcheck .*/core_codec2_cuda '.
# RUN=echo prints the runs instead.
# Tests named *DeliberateApiError* (a CUDA call made to fail on purpose,
# which memcheck reports as an error) are left out of every run.
set -uo pipefail
build=${1:-build-gpu}; jobs=${2:-6}; limit=${3:-500}
shards=${SHARDS:-1}
case $shards in '' | *[!0-9]* | 0) echo "SHARDS must be a positive integer" >&2; exit 2 ;; esac
runtime=${GST_RUNTIME:-gst-runtime}
[ -f "$runtime/env.sh" ] && source "$runtime/env.sh"
export GST_PLUGIN_PATH_1_0="$PWD/$build/plugins"
out=${LOG_DIR:-/tmp/gpu-sanitize}; mkdir -p "$out"
runs=()
# A run: TOOL PROGRAM SHARD SHARDS [TEST] (TEST: a googletest filter).
# per_test TOOL PROGRAM: a run for each of the program's tests.
per_test() {
  local suite="" line name before=${#runs[@]}
  # "Suite." lines, then "  Test  # GetParam() = ..." lines
  while IFS= read -r line; do
    case "$line" in
      "  "*) name=${line#  }; runs+=("$1 $2 0 1 $suite${name%% *}") ;;
      [A-Za-z]*) suite=${line%% *} ;;
    esac
  done < <("$2" --gtest_list_tests)
  # (none listed, e.g. without a device: the whole program, which says why)
  [ ${#runs[@]} -eq "$before" ] && runs+=("$1 $2 0 1")
}
for t in "$build"/tests/core_*_cuda "$build"/tests/core_*_cuda_*; do
  [ -f "$t" ] && [ -x "$t" ] || continue
  if [ "${PER_TEST:-0}" = 1 ]; then
    per_test memcheck "$t"
    per_test racecheck "$t"
  else
    runs+=("memcheck $t 0 1")
    for ((s = 0; s < shards; s++)); do runs+=("racecheck $t $s $shards"); done
  fi
done
# (GStreamer check programs, not googletest: always whole, memcheck only)
for t in "$build"/tests/element_*_cuda "$build"/tests/element_cudadiff \
  "$build"/tests/pipeline_cuda_memory; do
  [ -f "$t" ] && [ -x "$t" ] && runs+=("memcheck $t 0 1")
done
if [ -n "${ONLY:-}" ]; then
  kept=()
  for r in "${runs[@]}"; do
    if printf '%s \n' "$r" | grep -Eq -- "$ONLY"; then kept+=("$r"); fi
  done
  runs=("${kept[@]}")
  if [ ${#runs[@]} -eq 0 ]; then echo "ONLY=$ONLY matches no run" >&2; exit 2; fi
fi
if [ "${RUN:-}" = echo ]; then printf '%s\n' "${runs[@]}"; exit 0; fi
deadline=0
[ -n "${DEADLINE_S:-}" ] && deadline=$(($(date +%s) + DEADLINE_S))
printf '%s\n' "${runs[@]}" | xargs -P "$jobs" -L 1 bash -c '
  tool=$0; t=$1; shard=$2; n=$3; filter=${4:-*}
  name=$(basename $t); [ "$n" -gt 1 ] && name="$name-shard$shard-of-$n"
  [ "$filter" != "*" ] && name="$name-$(printf %s "$filter" | tr "/" "_")"
  limit='"$limit"'
  if [ '"$deadline"' -gt 0 ]; then
    left=$(('"$deadline"' - $(date +%s)))
    if [ $left -lt 10 ]; then echo "$tool $name: not started (deadline)"; exit 0; fi
    [ $left -lt $limit ] && limit=$left
  fi
  log='"$out"'/$tool-$name.log
  GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$shard \
    timeout $limit compute-sanitizer --tool $tool $( [ $tool = memcheck ] && echo --leak-check full ) \
    "$t" --gtest_filter="$filter-*DeliberateApiError*" > $log 2>&1
  rc=$?
  line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $log | tail -n 1)
  tests=$(grep -E "^\[  (PASSED|FAILED)  \]" $log | tail -n 1)
  echo "$tool $name: rc=$rc ${line:-no summary (timeout?)} ${tests}"'
