#!/usr/bin/env bash
# Installs what is missing, builds, and runs the demo: the camera (/dev/video0)
# or a test pattern through cudagrayscale, printing the frame rate and saving
# a PNG snapshot of the output (demo-snapshot.png).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ ! -f build/build.ninja ]; then meson setup build; fi
ninja -C build

export GST_PLUGIN_PATH="$PWD/build/plugins${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"
frames=${DEMO_FRAMES:-300}
if [ -e /dev/video0 ] && gst-inspect-1.0 v4l2src >/dev/null 2>&1; then
  source="v4l2src device=/dev/video0 num-buffers=$frames ! videoconvert"
  echo "demo: camera /dev/video0"
else
  source="videotestsrc num-buffers=$frames pattern=ball motion=wavy ! video/x-raw,width=1280,height=720,framerate=30/1"
  echo "demo: test pattern (no camera at /dev/video0)"
fi
out="$PWD/demo-snapshot.png"
set -x
gst-launch-1.0 -e $source ! cudagrayscale method=bt709 ! tee name=t \
  t. ! queue ! fpsdisplaysink video-sink=fakesink text-overlay=false sync=false -v \
  t. ! queue ! videorate drop-only=true ! video/x-raw,framerate=1/1 ! videoconvert ! pngenc \
     ! multifilesink location="$out" \
  | grep -E --line-buffered "average:|ERROR|WARN" | tail -n 3
set +x
echo "demo: snapshot written to $out"
