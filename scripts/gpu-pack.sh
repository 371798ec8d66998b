#!/usr/bin/env bash
# Packs a build directory for a GPU host without GStreamer or meson (see
# scripts/stage-runtime.sh): only the plugin, test, bench and tool executables
# (stripped of debug info) and meson's introspection files, with their paths
# rewritten, in BUILD-slim/; then that and the staged runtime in one
# compressed bundle, gpu-bundle.tgz, to unpack in the checkout on the host.
# Usage: scripts/gpu-pack.sh [BUILD] [RUNTIME_DIR]   (defaults build-gpu, gst-runtime)
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build-gpu}
runtime=${2:-gst-runtime}
dst=$src-slim
rm -rf "$dst"
mkdir -p "$dst/meson-info" "$dst/tests" "$dst/bench" "$dst/plugins" "$dst/cuda" "$dst/tools"
cp "$src"/meson-info/*.json "$dst/meson-info/"
sed -i "s|$PWD/$src/|$PWD/$dst/|g; s|$PWD/$src\"|$PWD/$dst\"|g" "$dst"/meson-info/*.json
for f in "$src"/tests/* "$src"/bench/* "$src"/plugins/*.so "$src"/cuda/*.so "$src"/tools/*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  rel=${f#"$src"/}
  strip --strip-debug -o "$dst/$rel" "$f"
done
# data files the tests read (fuzz corpora and the like) stay in the source tree
du -sh "$dst" | sed 's/^/packed: /'
if [ -d "$runtime" ]; then
  tar czf gpu-bundle.tgz "$dst" "$runtime"
else
  echo "gpu-pack: no runtime in $runtime (scripts/stage-runtime.sh makes one); bundling the build alone"
  tar czf gpu-bundle.tgz "$dst"
fi
du -sh gpu-bundle.tgz | sed 's/^/bundle: /'
