#!/usr/bin/env bash
# The checks a CUDA change needs, in one go on a GPU host (for a host without
# GStreamer: scripts/stage-runtime.sh and scripts/gpu-pack.sh): the whole test
# suite, compute-sanitizer (memcheck on every CUDA test, racecheck on the core
# CUDA tests) and every benchmark. Logs in LOG_DIR (default /tmp/gpu-check),
# also packed as LOG_DIR/logs.tgz; a summary is printed last.
#   bash scripts/gpu-check.sh [BUILD_DIR] [tests|sanitize|bench|peers ...]
# GST_RUNTIME: a staged runtime to source first (default gst-runtime, when it
# exists). The optional step `peers` runs the command in PEER_BENCH (for
# example a benchmark of NPP and OpenCV on the same frames), so that the peers
# are measured on the same machine in the same state as this project.
set -uo pipefail
build=${1:-build-gpu}
shift || true
steps=${*:-tests sanitize bench}
out=${LOG_DIR:-/tmp/gpu-check}
runtime=${GST_RUNTIME:-gst-runtime}
mkdir -p "$out" && rm -f "$out"/*.log "$out"/summary.txt
[ -f "$runtime/env.sh" ] && source "$runtime/env.sh"
summary=()

for step in $steps; do
  case $step in
    tests)
      python3 scripts/run-tests.py "$build" 2>&1 | tee "$out/tests.log"
      summary+=("tests: $(tail -n 1 "$out/tests.log")")
      ;;
    sanitize)
      # (tests named *DeliberateApiError* make a CUDA call fail on purpose,
      # which memcheck reports as an error: left out of its runs)
      : > "$out/sanitizer.log"
      for t in "$build"/tests/core_*_cuda "$build"/tests/core_*_cuda_* "$build"/tests/element_*_cuda \
               "$build"/tests/pipeline_cuda_memory; do
        [ -f "$t" ] && [ -x "$t" ] || continue
        name=$(basename "$t")
        line=$(GST_PLUGIN_PATH_1_0="$PWD/$build/plugins" timeout ${SANITIZE_TIMEOUT:-400} \
               compute-sanitizer --tool memcheck --leak-check full "$t" \
                 --gtest_filter='-*DeliberateApiError*' 2>&1 | tee -a "$out/sanitizer.log" |
               grep "ERROR SUMMARY" | tail -n 1)
        summary+=("memcheck $name: ${line:-no summary (timeout or crash)}")
      done
      for t in "$build"/tests/core_*_cuda "$build"/tests/core_*_cuda_* "$build"/tests/pipeline_cuda_memory; do
        [ -f "$t" ] && [ -x "$t" ] || continue
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
      if [ -n "${PEER_BENCH:-}" ]; then
        bash -c "$PEER_BENCH" > "$out/peers.log" 2>&1
        summary+=("peers: exit $?")
      else
        summary+=("peers: skipped (PEER_BENCH not set)")
      fi
      ;;
    *) summary+=("unknown step $step (tests, sanitize, bench, peers)") ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
tar czf "$out/logs.tgz" -C "$out" --exclude logs.tgz .
