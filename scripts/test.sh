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

# A short account of what failed, printed last, where the end of a long log
# shows it: each failed test and its failed checks (see testlog.txt for all).
summarize() {  # dir
  python3 - "$1" <<'PY'
import json, sys
build = sys.argv[1]
for line in open(build + "/meson-logs/testlog.json"):
    t = json.loads(line)
    if t["result"] in ("OK", "SKIP", "EXPECTEDFAIL"):
        continue
    print(f"{build}: {t['name']}: {t['result']}")
    out = ((t.get("stdout") or "") + (t.get("stderr") or "")).splitlines()
    shown = []
    for i, l in enumerate(out):
        if "Failure" in l:
            shown += out[i:i + 5]
        elif "FAILED  ]" in l or "CRITICAL" in l or "ERROR" in l:
            shown.append(l)
    for l in (shown or out[-10:])[:40]:
        print("    " + l[:300])
PY
}

if [ $status -ne 0 ]; then
  for dir in build build-cpu; do
    if [ -f "$dir/meson-logs/testlog.json" ]; then summarize "$dir" || true; fi
  done
fi

if [ $status -eq 0 ]; then
  echo "test.sh: all tests passed (CUDA tests skip without a GPU)"
else
  echo "test.sh: FAILURES (see above and build*/meson-logs/testlog.txt)" >&2
fi
exit $status
