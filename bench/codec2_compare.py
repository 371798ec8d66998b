#!/usr/bin/env python3
"""The CUDA codec of stream version 2 before and after a change, in one run.

Runs bench_codec2 (decoder) and bench_codec2_enc (encoder) of two builds on
the same GPU, alternating the builds, --repeat times each, on the synthetic
camera-like frames, on frames of random bytes with --random, and on each
clip given (raw BGR, scaled to 1920x1080 by the benchmarks), and prints one markdown table: per benchmark, source,
threshold and kind of frame, the median ms of every run of each build and
the bodies' bytes of each. Timings vary between machines and runs: compare
only the two columns of one table (both come from the same machine and
call), and read the spread between repeats before a difference.

  bench/codec2_compare.py --before OLD/build --after NEW/build \\
      [--clip vtest.bgr:768x576:12] [--clip tree.bgr:320x240:30] [--random] \\
      [--repeat 2] [--only decoder|encoder]

A build is a meson build directory (its bench/ executables and their
cuda/libcudadiff-core-shared.so). Raw clips come from
`gst-launch-1.0 filesrc location=vtest.avi ! decodebin ! videoconvert !
video/x-raw,format=BGR ! filesink location=vtest.bgr`. The encoder
benchmark also checks that every clip frame's CUDA body equals the CPU's
(a mismatch stops the run). Exits 77 when a benchmark finds no GPU.
"""
import argparse
import re
import subprocess
import sys


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode == 77:
        print("codec2_compare: no usable CUDA device (%s)" % " ".join(cmd))
        sys.exit(77)
    if p.returncode != 0:
        sys.exit("codec2_compare: %s failed (%d):\n%s" % (" ".join(cmd), p.returncode,
                                                          p.stdout[-3000:]))
    return p.stdout


def results(out, decoder):
    """(k, kind) -> (median ms, bytes) from RESULT lines."""
    rows = {}
    for line in out.splitlines():
        if not line.startswith("RESULT|codec2 "):
            continue
        f = line.split("|")
        if decoder:
            m = re.match(r"cuda k=(\d+) (keyframe|delta)$", f[2])
            size = m and re.search(r"%s (\d+) B" % ("deltas" if m.group(2) == "delta"
                                                     else "keyframe"), f[6])
        else:
            m = re.search(r"k=(\d+)$", f[1]) if f[2].startswith("cuda") else None
            size = re.search(r"body (\d+) bytes", f[6])
        if not m:
            continue
        if decoder:
            kind = m.group(2)
        else:  # one at a time, or the rate with N frames in flight (bench_codec2_enc)
            n = re.search(r"(\d+) frames in flight", f[2])
            kind = "delta, %s in flight" % n.group(1) if n else "delta"
        rows[(int(m.group(1)), kind)] = (float(f[3]), int(size.group(1)) if size else 0)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="build directory of the code before")
    ap.add_argument("--after", required=True, help="build directory of the code after")
    ap.add_argument("--clip", action="append", default=[],
                    help="FILE:WxH:FRAMES, raw BGR frames of WxH (repeatable)")
    ap.add_argument("--random", action="store_true",
                    help="also frames of random bytes (8 frames, each independent)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each build (default 2)")
    ap.add_argument("--only", choices=("decoder", "encoder"),
                    help="run only this benchmark (a change to one side)")
    args = ap.parse_args()
    sources = [("synthetic", [], [])]
    if args.random:
        sources.append(("random", ["--random", "--runs", "24"], ["--random"]))
    for c in args.clip:
        m = re.match(r"(.+):(\d+x\d+):(\d+)$", c)
        if not m:
            sys.exit("codec2_compare: --clip wants FILE:WxH:FRAMES, not %r" % c)
        clip = ["--clip", m.group(1), "--clip-size", m.group(2), "--frames", m.group(3)]
        runs = max(48, 4 * int(m.group(3)))
        sources.append((m.group(1).split("/")[-1], clip + ["--runs", str(runs)], clip))
    table = {}  # (bench, source, k, kind) -> {build: [(ms, bytes)]}
    for rep in range(args.repeat):
        for build in ("before", "after"):
            bench = getattr(args, build) + "/bench/"
            for name, dec_args, enc_args in sources:
                outs = []
                if args.only != "encoder":
                    outs.append(("decoder", run([bench + "bench_codec2", "--no-cpu"] +
                                                (dec_args if dec_args else ["--runs", "24"])),
                                 True))
                if args.only != "decoder":
                    outs.append(("encoder", run([bench + "bench_codec2_enc", "--no-cpu"] +
                                                enc_args), False))
                for what, out, decoder in outs:
                    for (k, kind), v in results(out, decoder).items():
                        table.setdefault((what, name, k, kind), {}).setdefault(build, []).append(v)
            print("codec2_compare: %s, run %d of %d done" % (build, rep + 1, args.repeat),
                  file=sys.stderr)
    print("| benchmark | source | threshold | frame | before ms | after ms | before bytes "
          "| after bytes |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for (what, name, k, kind) in sorted(table):
        v = table[(what, name, k, kind)]
        ms = {b: " / ".join("%.2f" % x[0] for x in v.get(b, [])) for b in ("before", "after")}
        size = {b: (v[b][0][1] if v.get(b) else 0) for b in ("before", "after")}
        print("| %s | %s | %d | %s | %s | %s | %d | %d |" % (
            what, name, k, kind, ms["before"], ms["after"], size["before"], size["after"]))


if __name__ == "__main__":
    main()
