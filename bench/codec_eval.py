#!/usr/bin/env python3
"""Size, error and speed of the version 2 difference codec against its peers.

Decodes each clip with gst-launch-1.0 to raw BGR and I420 frames, then in the
same run codes them with
  - this codec (build/bench/codec_eval, CPU reference), k in --k;
  - JPEG-LS NEAR=k (build/bench/jpegls_peer, CharLS; I420 plane by plane);
  - FFV1 (ffmpeg -c:v ffv1 -level 3; bgr0 / yuv420p) and x264 qp 0 (libx264rgb
    for BGR, libx264 for I420; -preset ultrafast -tune zerolatency), lossless,
    when ffmpeg is installed;
and prints one markdown table: bytes per frame, maximum error per byte and
PSNR of every codec, and ours against the best peer at the same bound.
With --speed it also times the CPU encoder and decoder on 1920x1080 BGR
frames (the clips scaled up, and random frames) with 1 and 2 threads.

  bench/codec_eval.py --build build vtest.avi tree.avi
  bench/codec_eval.py --build build --formats BGR --k 0,20 --frames 50 --speed vtest.avi

Timings depend on the machine and on what else runs on it.
"""
import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw).stdout


def frame_bytes(fmt, w, h):
    if fmt == "BGR":
        return 3 * w * h
    if fmt == "I420":
        return w * h + 2 * ((w + 1) // 2) * ((h + 1) // 2)
    raise ValueError(fmt)


def decode_clip(path, fmt, out, frames, scale=None):
    """Raw frames of `path` in `fmt` (optionally scaled) -> file `out`; returns (w, h, fps, n)."""
    caps = "video/x-raw,format=%s" % fmt
    scaler = ""
    if scale:
        scaler = "videoscale method=nearest-neighbour ! "
        caps += ",width=%d,height=%d" % scale
    pipeline = ("filesrc location=%s ! decodebin ! videoconvert ! %s%s ! filesink location=%s"
                % (shlex_quote(path), scaler, caps, shlex_quote(out)))
    log = run(["gst-launch-1.0", "-v"] + split_pipeline(pipeline))
    lines = [l for l in log.splitlines() if "GstFileSink" in l and "caps = video/x-raw" in l]
    if not lines:
        raise RuntimeError("could not read the decoded size of %s" % path)
    field = lambda name: re.search(name + r"=\((?:int|fraction)\)(\d+)(?:/(\d+))?", lines[-1])
    w, h = int(field("width").group(1)), int(field("height").group(1))
    rate = field("framerate")
    fn, fd = (int(rate.group(1)), int(rate.group(2) or 1)) if rate else (25, 1)
    size = frame_bytes(fmt, w, h)
    n = os.path.getsize(out) // size
    if frames and n > frames:
        n = frames
    with open(out, "r+b") as f:
        f.truncate(n * size)
    return w, h, (fn / fd if fd else 25.0), n


def shlex_quote(s):
    import shlex
    return shlex.quote(s)


def split_pipeline(p):
    import shlex
    return shlex.split(p)


def ours(build, fmt, w, h, raw, ks, keyint, threads=None, frames=None, repeat=0, extra=()):
    cmd = [os.path.join(build, "bench", "codec_eval"), "--format", fmt, "--size", "%dx%d" % (w, h),
           "--k", ",".join(str(k) for k in ks), "--keyframe-interval", str(keyint), "--markdown",
           "--repeat", str(repeat)]
    if threads:
        cmd += ["--threads", str(threads)]
    if frames:
        cmd += ["--frames", str(frames)]
    cmd += list(extra)
    rows = {}
    for line in run(cmd + [raw]).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8:
            k = int(cells[2])
            rows[k] = dict(bytes=float(cells[3]), maxerr=int(cells[4]), psnr=float(cells[5]),
                           enc_ms=float(cells[6]), dec_ms=float(cells[7]))
    return rows


def jpegls(build, fmt, w, h, raw, k):
    exe = os.path.join(build, "bench", "jpegls_peer")
    if not os.path.exists(exe):
        return None
    out = run([exe, fmt, str(w), str(h), str(k), raw])
    m = re.search(r"bytes/frame=(\d+) maxerr=(\d+) psnr=([\d.]+)", out)
    return dict(bytes=float(m.group(1)), maxerr=int(m.group(2)), psnr=float(m.group(3)))


def ffmpeg_peer(fmt, w, h, fps, raw, codec, tmp):
    """Lossless ffmpeg peer: bytes/frame from the packet sizes, error by decoding back."""
    if not shutil.which("ffmpeg") or not shutil.which("ffprobe"):
        return None
    in_fmt = "bgr24" if fmt == "BGR" else "yuv420p"
    if codec == "ffv1":
        args = ["-c:v", "ffv1", "-level", "3", "-pix_fmt", "bgr0" if fmt == "BGR" else "yuv420p"]
    else:
        args = ["-c:v", "libx264rgb" if fmt == "BGR" else "libx264", "-preset", "ultrafast",
                "-tune", "zerolatency", "-qp", "0"]
        if fmt == "BGR":
            args += ["-pix_fmt", "bgr24"]
    mkv = os.path.join(tmp, "peer.mkv")
    back = os.path.join(tmp, "peer.raw")
    try:
        run(["ffmpeg", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", in_fmt, "-s",
             "%dx%d" % (w, h), "-r", "%g" % fps, "-i", raw] + args + [mkv])
        sizes = [int(x) for x in run(["ffprobe", "-v", "error", "-select_streams", "v",
                                      "-show_entries", "packet=size", "-of", "csv=p=0",
                                      mkv]).split()]
        run(["ffmpeg", "-loglevel", "error", "-y", "-i", mkv, "-f", "rawvideo", "-pix_fmt", in_fmt,
             back])
    except subprocess.CalledProcessError as e:
        sys.stderr.write("ffmpeg %s failed: %s\n" % (codec, e.stderr.strip()))
        return None
    maxerr, se, n = compare(raw, back)
    return dict(bytes=sum(sizes) / len(sizes), maxerr=maxerr,
                psnr=99.0 if se == 0 else 10 * math.log10(255.0 ** 2 * n / se))


def compare(a, b):
    maxerr, se, n = 0, 0, 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if not x:
                break
            if len(x) != len(y):
                return 255, float("inf"), 1
            diff = [abs(p - q) for p, q in zip(x, y) if p != q]
            if diff:
                maxerr = max(maxerr, max(diff))
                se += sum(d * d for d in diff)
            n += len(x)
    return maxerr, se, n


def fmt_cell(r):
    if not r:
        return "", "", ""
    psnr = "inf" if r["psnr"] >= 99 else "%.2f" % r["psnr"]
    return "{:,.0f}".format(r["bytes"]), str(r["maxerr"]), psnr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("clips", nargs="+", help="video files GStreamer can decode")
    ap.add_argument("--build", default="build", help="meson build directory (default: build)")
    ap.add_argument("--formats", default="BGR,I420")
    ap.add_argument("--k", default="0,5,10,20")
    ap.add_argument("--frames", type=int, default=200, help="frames per clip (default 200)")
    ap.add_argument("--keyframe-interval", type=int, default=60)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--tiles", metavar="BXxBY",
                    help="our encoder with tiles of BX x BY blocks instead of 10x8")
    ap.add_argument("--lane-samples", metavar="N",
                    help="our encoder with a rANS lane per N coded sample components instead of "
                         "its default (2048 for BGR, 1024 for I420)")
    ap.add_argument("--walk-bound", metavar="P",
                    help="our encoder with lanes that bound a tile's walk to P percent of a full "
                         "tile's instead of 100 (0: no bound)")
    ap.add_argument("--lane-coding", choices=["rans", "tans"],
                    help="our encoder with tANS lanes (body flag 0x04) instead of rANS lanes")
    ap.add_argument("--speed", action="store_true",
                    help="also time encoder and decoder at 1920x1080 BGR, 1 and 2 threads")
    ap.add_argument("--speed-frames", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3,
                    help="timed passes for --speed; the fastest counts (default 3)")
    args = ap.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    fmts = args.formats.split(",")
    layout = []
    if args.tiles:
        layout += ["--tiles", args.tiles]
    if args.lane_samples:
        layout += ["--lane-samples", args.lane_samples]
    if args.walk_bound:
        layout += ["--walk-bound", args.walk_bound]
    if args.lane_coding:
        layout += ["--lane-coding", args.lane_coding]

    tmp = tempfile.mkdtemp(prefix="codec_eval")
    try:
        print("| clip | format | k | ours B/frame | max err | PSNR | JPEG-LS B/frame | max err | "
              "PSNR | FFV1 B/frame | x264 qp0 B/frame | ours / best peer |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for clip in args.clips:
            name = os.path.splitext(os.path.basename(clip))[0]
            for fmt in fmts:
                raw = os.path.join(tmp, "%s.%s.raw" % (name, fmt))
                w, h, fps, n = decode_clip(clip, fmt, raw, args.frames)
                mine = ours(args.build, fmt, w, h, raw, ks, args.keyframe_interval, extra=layout)
                ffv1 = x264 = None
                if not args.no_peers and 0 in ks:
                    ffv1 = ffmpeg_peer(fmt, w, h, fps, raw, "ffv1", tmp)
                    x264 = ffmpeg_peer(fmt, w, h, fps, raw, "x264", tmp)
                for k in ks:
                    jl = None if args.no_peers else jpegls(args.build, fmt, w, h, raw, k)
                    peers = [p["bytes"] for p in (jl,) if p]
                    if k == 0:
                        peers += [p["bytes"] for p in (ffv1, x264) if p]
                    m = mine[k]
                    ratio = "%.2f" % (m["bytes"] / min(peers)) if peers else ""
                    print("| %s %dx%d (%d frames) | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                          % ((name, w, h, n, fmt, k) + fmt_cell(m) + fmt_cell(jl)
                             + (fmt_cell(ffv1)[0] if k == 0 else "",
                                fmt_cell(x264)[0] if k == 0 else "", ratio)))
                    sys.stdout.flush()
                os.remove(raw)
        if args.speed:
            print()
            print("CPU encoder and decoder, ms per 1920x1080 BGR frame (this machine):")
            print()
            print("| source | k | enc 1 thread | dec 1 thread | enc 2 threads | dec 2 threads |")
            print("|---|---:|---:|---:|---:|---:|")
            sources = []
            for clip in args.clips:
                raw = os.path.join(tmp, "%s.1080p.raw" % os.path.basename(clip))
                decode_clip(clip, "BGR", raw, args.speed_frames, scale=(1920, 1080))
                sources.append((os.path.splitext(os.path.basename(clip))[0] + " scaled", raw))
            raw = os.path.join(tmp, "random.1080p.raw")
            with open(raw, "wb") as f:
                f.write(os.urandom(frame_bytes("BGR", 1920, 1080) * min(args.speed_frames, 5)))
            sources.append(("random", raw))
            for name, raw in sources:
                one = ours(args.build, "BGR", 1920, 1080, raw, ks, args.keyframe_interval, threads=1,
                           repeat=args.repeat, extra=layout)
                two = ours(args.build, "BGR", 1920, 1080, raw, ks, args.keyframe_interval, threads=2,
                           repeat=args.repeat, extra=layout)
                for k in ks:
                    print("| %s | %d | %.1f | %.1f | %.1f | %.1f |" % (
                        name, k, one[k]["enc_ms"], one[k]["dec_ms"], two[k]["enc_ms"],
                        two[k]["dec_ms"]))
                    sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
