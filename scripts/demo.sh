#!/usr/bin/env bash
# Installs what is missing, builds, and runs the streaming demo on 127.0.0.1:
# a server pipeline (the camera /dev/video0, or without one a moving test
# pattern with noise) -> cudadiffenc -> tcpserversink, and a client pipeline
# tcpclientsrc -> cudadiffdec. It prints the client's frame rate, the bytes
# per second sent against raw video, the PSNR of the client's picture, and
# saves that picture as demo-snapshot.png, and demo-mosaic.png: the server's
# input, the client's picture, cudaheatmap and cudanoisevis of the same moment,
# labelled by cudatextoverlay. Extra arguments go to the demo
# program (./build/tools/cudadiff-demo --help), e.g. --threshold 0 --source test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ ! -f build/build.ninja ]; then meson setup build; fi
ninja -C build

export GST_PLUGIN_PATH="$PWD/build/plugins${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"
exec ./build/tools/cudadiff-demo --frames "${DEMO_FRAMES:-300}" --png "$PWD/demo-snapshot.png" \
  --mosaic "$PWD/demo-mosaic.png" "$@"
