#!/usr/bin/env bash
# Installs what gst-cudadiff needs on Debian 12 / Ubuntu 22.04+ (apt), only the
# packages that are missing, so running it again does nothing. CUDA is not an
# apt package here: nvcc is looked for in PATH and /usr/local/cuda; without it
# the build is CPU-only (every element still works, backend cpu).
set -euo pipefail

packages=(
  g++ meson ninja-build pkg-config python3
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  libgtest-dev libzstd-dev zlib1g-dev
  libpango1.0-dev libcairo2-dev
  libgstreamer-plugins-bad1.0-dev
  # device-resident tests: nvcodec's cudaupload/cudadownload/nvh264dec and
  # h264parse (plugins-bad), x264enc (plugins-ugly); they skip without them
  gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly
  # cudadiff-server (RTSP), its tests and the latency benchmark: gst-rtsp-server,
  # rtspsrc/rtpbin/udp (good), SRT and netsim (bad)
  libgstrtspserver-1.0-dev
)
# Extra packages a caller asks for (the demo wants none beyond these).
packages+=(${EXTRA_PACKAGES:-})

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# Optional: the build uses them where present and works without them.
#   libisal-dev: ISA-L's crc32 for the difference stream's checksums (zlib's
#   otherwise, about 13 times slower on x86-64)
optional=(libisal-dev)
opt_missing=()
for p in "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || opt_missing+=("$p")
done
if [ ${#opt_missing[@]} -gt 0 ]; then
  sudo=""
  # (sudo -n: never wait for a password for an optional package)
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo -n"
  if [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; then
    echo "setup: installing optional ${opt_missing[*]}"
    opt_install() {
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${opt_missing[@]}"
    }
    # (the package lists may be empty where nothing else was installed)
    opt_install || { $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && opt_install; } ||
      echo "setup: optional ${opt_missing[*]} not installed; building without"
  else
    echo "setup: optional ${opt_missing[*]} not installed (no root or sudo); building without"
  fi
fi

if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit: $( (command -v nvcc || echo /usr/local/cuda/bin/nvcc) | head -1)"
else
  echo "setup: no CUDA toolkit (nvcc) found: building CPU-only. Install CUDA >= 11.8 for the GPU backend."
fi
