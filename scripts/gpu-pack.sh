#!/usr/bin/env bash
# Packs a build directory for the GPU machine (docs/development.md): only the
# plugin, test and bench executables (stripped of debug info) and meson's
# introspection files, with paths rewritten, in BUILD-slim/, then that and
# .device/ in one compressed bundle, .gpu/bundle.tgz (the device tool carries
# at most 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build-gpu}
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
# data files tests read (fuzz corpora and the like) stay where the source tree has them
du -sh "$dst" | sed 's/^/packed: /'
# One compressed bundle with the staged GStreamer runtime (.device, from
# ../shared/gpu/prepare.sh): carry `.gpu` and start the command with
#   tar xzf .gpu/bundle.tgz &&
mkdir -p .gpu
tar czf .gpu/bundle.tgz "$dst" .device
du -sh .gpu/bundle.tgz | sed 's/^/bundle: /'
