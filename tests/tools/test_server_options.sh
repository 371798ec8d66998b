#!/bin/sh
# cudadiff-server refuses options out of range and a --source file that is
# not there or not a video (exit 2) before it serves, prints the client counts once more
# when it is stopped, prints each media error once as it comes (exit status
# 1 at the end), and writes an IPv6 address in brackets in its URL.
# cudadiffenc's properties would take an out-of-range threshold with a GLib
# warning only and keep their defaults, so the server checks them itself.
set -eu
server=$1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for bad in "--threshold 300" "--threshold -1" "--keyframe-interval -1" "--port 70000" \
           "--stream-version 3" "--stream-version 0" "--backend gpu" \
           "--source /nonexistent/clip.avi" "--stats-interval -1"; do
  status=0
  # (a server that took the option would serve until the timeout: 124)
  timeout 20 "$server" --port 0 $bad >"$log" 2>&1 || status=$?
  [ "$status" = 2 ] || { cat "$log"; echo "FAIL: $bad: exit status $status, not 2"; exit 1; }
done
# Refused (exit 2) with a message that says `$1`, for the options after it.
expect_refused() {
  message=$1
  shift
  status=0
  timeout 20 "$server" --port 0 "$@" >"$log" 2>&1 || status=$?
  [ "$status" = 2 ] && grep -q -- "$message" "$log" || {
    cat "$log"; echo "FAIL: $*: exit status $status"; exit 1; }
}
# The message names the option and its range; an enum value is one word of
# the element's values, not more of a pipeline description.
expect_refused "--width 40000 is out of range: 1 to 32767" --width 40000
# Without an upper bound of its own: the lower one alone, not the type's
# largest value (2.14748e+09, 1.79769e+308).
expect_refused "--fps 0 is out of range: at least 1\$" --fps 0
expect_refused "--pace-rate -1 is out of range: at least 0\$" --pace-rate -1
expect_refused "--stalled-timeout -5 is out of range: at least 0\$" --stalled-timeout -5
for value in "none ! fakesink" "none threshold=300"; do
  expect_refused "--compression $value: not one of" --compression "$value"
done
# A stray argument (a file meant for --source) is refused, not ignored
# (the test pattern was served instead).
expect_refused 'unexpected argument "clip.avi" (a file to serve is given as --source PATH' clip.avi
# A --source file that is not a video (a text file: this script; a sound)
# is refused before serving, not when the first viewer connects.
wav=$(mktemp --suffix=.wav)
trap 'rm -f "$log" "$wav"' EXIT
gst-launch-1.0 -q audiotestsrc num-buffers=10 ! wavenc ! filesink location="$wav"
expect_refused "not a media file GStreamer can play" --source "$0"
expect_refused "has no video stream" --source "$wav"
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
# Media errors are printed as they come, once each (two viewers of the
# missing camera: two), and make the exit status 1. (The log is emptied
# first: the background server empties it only once it runs, and a loaded
# machine let the loop below read the port of the server before, which had
# ended.)
: >"$log"
"$server" --port 0 --source camera --device /nonexistent/video9 --stats-interval 0 \
  >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; rm -f "$log" "$wav"' EXIT
port=""
for _ in $(seq 150); do
  port=$(sed -n 's|^serving rtsp://HOST:\([0-9]*\)/cam$|\1|p' "$log")
  [ -n "$port" ] && break
  sleep 0.1
done
for _ in 1 2; do
  timeout 10 gst-launch-1.0 -q rtspsrc location="rtsp://127.0.0.1:$port/cam" ! fakesink \
    >/dev/null 2>&1 || true
done
sleep 1.5
kill -INT "$pid"
status=0
wait "$pid" || status=$?
trap 'rm -f "$log" "$wav"' EXIT
# (the error is v4l2src's, or that there is no v4l2src where gst-plugins-good
# lacks it)
[ "$status" = 1 ] && [ "$(grep -c "^media error: " "$log")" = 2 ] &&
  grep -q "^2 media errors in this run, the first: " "$log" || {
  cat "$log"; echo "FAIL: media errors (port ${port:-none}, exit status $status)"; exit 1; }
# Ctrl-C (one SIGINT, as --foreground sends it) within the first stats
# interval: the counts are printed at the end all the same.
status=0
timeout --foreground -s INT 3 "$server" --port 0 >"$log" 2>&1 || status=$?
[ "$status" = 124 ] && [ "$(grep -c "^clients: 0 now, 0 so far" "$log")" = 1 ] || {
  cat "$log"; echo "FAIL: no counts at Ctrl-C (exit status $status)"; exit 1; }
# An IPv6 address: the URL has it in brackets (where the host has IPv6).
ipv6=""
if grep -q '^00000000000000000000000000000001 ' /proc/net/if_inet6 2>/dev/null; then
  status=0
  timeout 3 "$server" --port 0 --address ::1 >"$log" 2>&1 || status=$?
  [ "$status" = 124 ] && grep -q '^serving rtsp://\[::1\]:[0-9]*/cam$' "$log" || {
    cat "$log"; echo "FAIL: IPv6 URL (exit status $status)"; exit 1; }
  ipv6="; an IPv6 URL in brackets"
else
  ipv6="; the IPv6 URL not checked (this host has no IPv6 loopback)"
fi
echo "PASS: options out of range (named with their range), enum values that are more than one, a missing file and files without video refused; --device without a camera" \
  "source and a missing camera reported; media errors printed once each; counts printed" \
  "at Ctrl-C$ipv6"
