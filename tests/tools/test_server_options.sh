#!/bin/sh
# cudadiff-server refuses options out of range and a --source file that is
# not there (exit 2) before it serves:
# cudadiffenc's properties would take an out-of-range threshold with a GLib
# warning only and keep their defaults, so the server checks them itself.
set -eu
server=$1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for bad in "--threshold 300" "--threshold -2" "--keyframe-interval -3" "--port 70000" \
           "--stream-version 3" "--backend gpu" "--source /nonexistent/clip.avi"; do
  status=0
  # (a server that took the option would serve until the timeout: 124)
  timeout 20 "$server" --port 0 $bad >"$log" 2>&1 || status=$?
  [ "$status" = 2 ] || { cat "$log"; echo "FAIL: $bad: exit status $status, not 2"; exit 1; }
done
# --device without --source camera: said so (the server then serves the
# test pattern until the timeout).
status=0
timeout 5 "$server" --port 0 --device /dev/video9 >"$log" 2>&1 || status=$?
[ "$status" = 124 ] && grep -q -- "--device applies to --source camera only" "$log" || {
  cat "$log"; echo "FAIL: --device without --source camera: exit status $status"; exit 1; }
# A camera that is not there: said so, and served (viewers get the error).
status=0
timeout 5 "$server" --port 0 --source camera --device /nonexistent/video9 >"$log" 2>&1 || status=$?
[ "$status" = 124 ] && grep -q -- "camera /nonexistent/video9 not found" "$log" || {
  cat "$log"; echo "FAIL: a missing camera: exit status $status"; exit 1; }
echo "PASS: options out of range and a missing file refused; --device without a camera" \
  "source and a missing camera reported"
