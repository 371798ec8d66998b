#!/bin/sh
# The streaming demo end to end: 30 frames of the test pattern through
# cudadiffenc (stream version 2, named), TCP and cudadiffdec; every
# frame shown, the version 2 statistics printed, and both pictures written:
# the client's frame (W x H) and the mosaic of one moment (2W x 2H).
set -eu
demo=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$demo" --source test --frames 30 --width 320 --height 240 --stream-version 2 \
  --png "$dir/snapshot.png" --mosaic "$dir/mosaic.png" >"$dir/log" 2>&1 || {
  cat "$dir/log"; echo "FAIL: the demo exited with an error"; exit 1; }
cat "$dir/log"
grep -q "^frames:  30 sent, 30 shown by the client" "$dir/log" || { echo "FAIL: not every frame shown"; exit 1; }
grep -q "^mosaic: " "$dir/log" || { echo "FAIL: no mosaic reported"; exit 1; }
grep -q "stream version 2; blocks " "$dir/log" || { echo "FAIL: no version 2 statistics"; exit 1; }
# PNG: the signature, then IHDR with width and height (big-endian u32) at byte 16.
png_size() {
  sig=$(od -An -tx1 -N8 "$1" | tr -d ' \n')
  [ "$sig" = 89504e470d0a1a0a ] || { echo "FAIL: $1 is not a PNG"; exit 1; }
  set -- $(od -An -tu1 -j16 -N8 "$1")
  echo "$(( ($1 << 24) | ($2 << 16) | ($3 << 8) | $4 ))x$(( ($5 << 24) | ($6 << 16) | ($7 << 8) | $8 ))"
}
[ "$(png_size "$dir/snapshot.png")" = 320x240 ] || { echo "FAIL: snapshot is $(png_size "$dir/snapshot.png")"; exit 1; }
[ "$(png_size "$dir/mosaic.png")" = 640x480 ] || { echo "FAIL: mosaic is $(png_size "$dir/mosaic.png")"; exit 1; }
# An odd width: the mosaic's rows of 6W bytes are padded to 4 (the mosaic
# failed to be written, exit status 1, and an empty file was left).
"$demo" --source test --frames 5 --width 33 --height 17 --png "$dir/odd.png" \
  --mosaic "$dir/odd-mosaic.png" >"$dir/odd.log" 2>&1 || {
  cat "$dir/odd.log"; echo "FAIL: the demo at 33x17 exited with an error"; exit 1; }
[ "$(png_size "$dir/odd-mosaic.png")" = 66x34 ] || { echo "FAIL: mosaic at 33x17 is $(png_size "$dir/odd-mosaic.png")"; exit 1; }
# Live sources (compositor then makes one frame more than its inputs): the
# demo still streams the frames asked for, no more.
"$demo" --source test --live --frames 20 --width 160 --height 120 --mosaic "" \
  --png "$dir/live.png" >"$dir/live.log" 2>&1 || {
  cat "$dir/live.log"; echo "FAIL: the live demo exited with an error"; exit 1; }
grep -q "^frames:  20 sent, 20 shown by the client" "$dir/live.log" || {
  cat "$dir/live.log"; echo "FAIL: live: not 20 frames sent and shown"; exit 1; }
# Ctrl-C (SIGINT) during a live run ends the stream: the frames sent are
# all shown and the report is printed, exit status 0 (a demo that ignored
# it would be killed 30 s later: 137).
status=0
# (--foreground: one SIGINT, to the demo alone, as one Ctrl-C in a terminal
# sends; otherwise timeout also signals its process group, a second Ctrl-C)
timeout --foreground -k 30 -s INT --preserve-status 4 "$demo" --source test --live --frames 100000 \
  --width 160 --height 120 --mosaic "" >"$dir/int.log" 2>&1 || status=$?
[ "$status" = 0 ] && grep -q "interrupted: ending the stream" "$dir/int.log" &&
  grep -Eq "^frames:  ([1-9][0-9]*) sent, \1 shown by the client" "$dir/int.log" || {
  cat "$dir/int.log"; echo "FAIL: Ctrl-C on a live run: exit status $status"; exit 1; }
# Options out of range, and a stray argument, are refused (exit 2) before
# anything runs (the elements would keep their defaults with a GLib warning
# only).
for bad in "--threshold 300" "--threshold -1" "--keyframe-interval -5" "--width 0" "--fps 0" \
           "--source camra" "--stream-version 3" "--backend gpu" "--compression zz" "extra"; do
  status=0
  "$demo" $bad --frames 5 >"$dir/bad.log" 2>&1 || status=$?
  [ "$status" = 2 ] || { cat "$dir/bad.log"; echo "FAIL: $bad: exit status $status, not 2"; exit 1; }
done
# --source auto with a device that is there but gives no frame (not a
# camera): the test pattern instead, said so, every frame shown.
"$demo" --device /dev/null --frames 5 --width 160 --height 120 --mosaic "" \
  --png "$dir/auto.png" >"$dir/auto.log" 2>&1 || {
  cat "$dir/auto.log"; echo "FAIL: --source auto with a device that is no camera"; exit 1; }
grep -q "^camera /dev/null gives no frame (.*): streaming the test pattern instead" "$dir/auto.log" &&
  grep -q "^frames:  5 sent, 5 shown by the client" "$dir/auto.log" || {
  cat "$dir/auto.log"; echo "FAIL: --source auto did not fall back to the test pattern"; exit 1; }
# An element that cannot start (backend=cuda without a usable GPU) ends the
# demo at once with its error, not after waiting 5 s for the client to
# connect; with a GPU the demo runs.
status=0
"$demo" --source test --frames 5 --width 160 --height 120 --mosaic "" --backend cuda \
  --png "$dir/cuda.png" >"$dir/cuda.log" 2>&1 || status=$?
if [ "$status" != 0 ]; then
  [ "$status" = 1 ] && grep -q "^error: .*no CUDA device is usable" "$dir/cuda.log" &&
    ! grep -q "has not connected" "$dir/cuda.log" || {
    cat "$dir/cuda.log"; echo "FAIL: --backend cuda without a GPU: exit status $status"; exit 1; }
fi
# A picture that cannot be written: said so, and the exit status is 1.
status=0
"$demo" --source test --frames 5 --width 160 --height 120 --mosaic "" \
  --png "$dir/no/such/dir/x.png" >"$dir/nopng.log" 2>&1 || status=$?
[ "$status" = 1 ] && grep -q "could not write the PNG" "$dir/nopng.log" || {
  cat "$dir/nopng.log"; echo "FAIL: an unwritable --png: exit status $status"; exit 1; }
echo "PASS: snapshot 320x240, mosaic 640x480 (66x34 at 33x17); live: 20 frames; Ctrl-C ends a live run;" \
  "bad options refused; a device that is no camera falls back to the test pattern"
