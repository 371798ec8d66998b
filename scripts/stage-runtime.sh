#!/usr/bin/env bash
# Stages a GStreamer runtime for a GPU host that has CUDA and a driver but no
# GStreamer (a CUDA container image, a rented GPU machine without root): the
# Debian/Ubuntu packages below are downloaded with apt-get and unpacked into a
# folder, not installed, and DIR/env.sh points GStreamer, the dynamic linker
# and fontconfig at them. Run it on a Debian/Ubuntu machine of the release the
# build was made on; copy the checkout with its build and DIR to the host, at
# the same path, and there:
#
#     source gst-runtime/env.sh
#     python3 scripts/run-tests.py build-gpu          # the test suite, no meson needed
#     bash scripts/gpu-check.sh build-gpu             # tests, compute-sanitizer, benchmarks
#
# Usage: scripts/stage-runtime.sh [DIR] (default gst-runtime). Groups of extra
# packages: WITH="nvcodec rtsp" (GStreamer's NVIDIA elements cudaupload,
# cudadownload, nvh264dec...; gst-rtsp-server, SRT, netsim); EXTRA_PKGS="..."
# adds any other packages. A plugin built with gstreamer-cuda-1.0 (CUDA memory
# caps) links libgstcuda-1.0 and needs the nvcodec group: without it the
# plugin does not load there. Running it again restages from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$(realpath -m "${1:-gst-runtime}")

pkgs=(libgstreamer1.0-0 libgstreamer-plugins-base1.0-0 gstreamer1.0-plugins-base
      gstreamer1.0-plugins-good gstreamer1.0-tools liborc-0.4-0 libglib2.0-0 libunwind8
      libdw1 libelf1
      # what the plugin links: OpenMP, zstd, zlib, ISA-L (where the build found it),
      # Pango/Cairo (cudatextoverlay) and a font
      libgomp1 libzstd1 zlib1g libisal2 libpango-1.0-0 libpangocairo-1.0-0 libpangoft2-1.0-0 libcairo2
      libdatrie1 libfontconfig1 libfreetype6 libfribidi0 libgraphite2-3 libharfbuzz0b
      libpixman-1-0 libpng16-16 libthai0 libx11-6 libxau6 libxcb-render0 libxcb-shm0 libxcb1
      libxdmcp6 libxext6 libxrender1 libbrotli1 libbsd0 libmd0 libexpat1 fontconfig-config
      fonts-dejavu-core)
for group in ${WITH:-}; do
  case $group in
    nvcodec) pkgs+=(gstreamer1.0-plugins-bad libgstreamer-plugins-bad1.0-0 libgstreamer-gl1.0-0
                    libgudev-1.0-0 libegl1 libgl1 libglvnd0 libglx0 libgbm1 libdrm2
                    libwayland-client0 libwayland-cursor0 libwayland-egl1 libwayland-server0
                    libx11-xcb1 libffi8 libudev1 libpcre2-8-0) ;;
    rtsp) pkgs+=(libgstrtspserver-1.0-0 gstreamer1.0-rtsp gstreamer1.0-plugins-bad
                 libgstreamer-plugins-bad1.0-0 libsrt1.5-gnutls libgnutls30 libnettle8
                 libhogweed6 libp11-kit0 libtasn1-6 libidn2-0 libunistring2 libgmp10) ;;
    *) echo "stage-runtime: unknown group '$group' (nvcodec, rtsp)" >&2; exit 2 ;;
  esac
done
pkgs+=(${EXTRA_PKGS:-})

rm -rf "$dest" && mkdir -p "$dest/debs" "$dest/root"
[ -n "$(ls /var/lib/apt/lists 2>/dev/null | grep -v lock)" ] || apt-get update -qq
# apt-get download needs unique names; it prints a line per package.
(cd "$dest/debs" && apt-get download -q $(printf '%s\n' "${pkgs[@]}" | sort -u) >/dev/null)
for f in "$dest"/debs/*.deb; do dpkg -x "$f" "$dest/root"; done
rm -rf "$dest/debs"

cat > "$dest/env.sh" <<'ENV'
# Source on the GPU host: GStreamer, the linker and fontconfig use the
# packages unpacked next to this file; the registry is private to the shell.
_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_lib="$_here/root/usr/lib/x86_64-linux-gnu"
export PATH="$_here/root/usr/bin:$PATH"
export LD_LIBRARY_PATH="$_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GST_PLUGIN_SYSTEM_PATH_1_0="$_lib/gstreamer-1.0"
export GST_PLUGIN_SCANNER_1_0="$_lib/gstreamer1.0/gstreamer-1.0/gst-plugin-scanner"
export GST_REGISTRY_1_0="/tmp/gst-registry-$$.bin"
if [ -d "$_here/root/usr/share/fonts" ]; then
  printf '<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig><dir>%s</dir><cachedir>/tmp/fontconfig-cache</cachedir></fontconfig>\n' \
    "$_here/root/usr/share/fonts" > /tmp/gst-runtime-fonts.conf
  export FONTCONFIG_FILE=/tmp/gst-runtime-fonts.conf
fi
unset _here _lib
ENV
echo "staged $(du -sh "$dest" | cut -f1) in $dest; on the host: source $(basename "$dest")/env.sh"
