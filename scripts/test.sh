#!/usr/bin/env bash
# Installs what is missing, builds gst-cudadiff twice (with CUDA when nvcc
# exists, and CPU-only) and runs the whole test suite of both. CUDA tests skip
# (exit 77) on a machine without a GPU. Build directories: build/, build-cpu/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

configure() {  # dir, options...
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@"
  fi
}

jobs=$(nproc)
status=0
configure build -Dtests=enabled
ninja -C build -j "$jobs"
meson test -C build --print-errorlogs --num-processes "$jobs" || status=1

configure build-cpu -Dcuda=disabled -Dtests=enabled
ninja -C build-cpu -j "$jobs"
meson test -C build-cpu --print-errorlogs --num-processes "$jobs" || status=1

if [ $status -eq 0 ]; then
  echo "test.sh: all tests passed (CUDA tests skip without a GPU)"
else
  echo "test.sh: FAILURES (see above and build*/meson-logs/testlog.txt)" >&2
fi
exit $status
