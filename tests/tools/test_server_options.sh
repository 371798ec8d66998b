#!/bin/sh
# cudadiff-server refuses options out of range (exit 2) before it serves:
# cudadiffenc's properties would take an out-of-range threshold with a GLib
# warning only and keep their defaults, so the server checks them itself.
set -eu
server=$1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for bad in "--threshold 300" "--threshold -2" "--keyframe-interval -3" "--port 70000" \
           "--stream-version 3" "--backend gpu"; do
  status=0
  # (a server that took the option would serve until the timeout: 124)
  timeout 20 "$server" --port 0 $bad >"$log" 2>&1 || status=$?
  [ "$status" = 2 ] || { cat "$log"; echo "FAIL: $bad: exit status $status, not 2"; exit 1; }
done
echo "PASS: options out of range refused"
