#!/usr/bin/env bash
# compute-sanitizer on every CUDA test, several at a time (the GPU machine has
# 16 cores; device time is scarce): memcheck on all CUDA tests, racecheck on
# the core ones. Prints one summary line per run. Usage: BUILD [JOBS] [TIMEOUT]
set -uo pipefail
build=${1:-build-gpu-slim}; jobs=${2:-6}; limit=${3:-500}
source .device/env.sh
# Pango needs fonts: point fontconfig at the staged ones (as gpu-check.sh does).
if [ -d .device/root/usr/share/fonts ]; then
  printf '<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig><dir>%s</dir><cachedir>/tmp/fontconfig-cache</cachedir></fontconfig>\n' \
    "$PWD/.device/root/usr/share/fonts" > /tmp/gpu-sanitize-fonts.conf
  export FONTCONFIG_FILE=/tmp/gpu-sanitize-fonts.conf
fi
export GST_PLUGIN_PATH_1_0="$PWD/$build/plugins"
out=/tmp/gpu-sanitize; rm -rf "$out"; mkdir -p "$out"
runs=()
# element_cudadiff runs with backend auto, so on the GPU its frames-in-flight
# tests drive the CUDA encoder through GStreamer.
for t in "$build"/tests/core_*_cuda "$build"/tests/element_*_cuda "$build"/tests/element_cudadiff; do
  runs+=("memcheck $t")
done
for t in "$build"/tests/core_*_cuda; do runs+=("racecheck $t"); done
printf '%s\n' "${runs[@]}" | xargs -P "$jobs" -L 1 bash -c '
  tool=$0; t=$1; log='"$out"'/$tool-$(basename $t).log
  timeout '"$limit"' compute-sanitizer --tool $tool $( [ $tool = memcheck ] && echo --leak-check full ) "$t" > $log 2>&1
  rc=$?
  line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $log | tail -n 1)
  tests=$(grep -E "^\[  (PASSED|FAILED)  \]" $log | tail -n 1)
  echo "$tool $(basename $t): rc=$rc ${line:-no summary (timeout?)} ${tests}"'
