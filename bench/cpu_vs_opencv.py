#!/usr/bin/env python3
"""The CPU backend beside OpenCV, on the same machine in the same run.

Runs the CPU rows of this project's benchmarks (bench_gauss, bench_grayscale,
bench_binarize, bench_vis with --no-cuda: one thread and all threads), then
times OpenCV doing the same work on frames of the same size, at one thread and
at the same number of threads, and prints one table: our time, OpenCV's, and
the ratio (ours / OpenCV; <= 2 is the project's goal for every filter).

    python3 bench/cpu_vs_opencv.py --build build [--size 1920x1080] [--runs 15]

Needs OpenCV's Python module (Debian/Ubuntu: python3-opencv) and numpy.
What OpenCV does for each row (the closest standard equivalent):
  gaussian KxK     cv2.GaussianBlur(img, (K, K), 0, borderType=BORDER_REPLICATE)
  box KxK          cv2.blur(img, (K, K), borderType=BORDER_REPLICATE)
  median KxK       cv2.medianBlur(img, K)
  grayscale        cv2.cvtColor(img, COLOR_BGR2GRAY)
  binarize (otsu)  cvtColor to gray + calcHist (256 bins) + threshold(THRESH_BINARY)
  heatmap          absdiff(cur, prev) + cvtColor(diff, BGR2GRAY) (magnitude)
                   + applyColorMap(COLORMAP_JET)
  noisevis mask    absdiff + threshold(20, per channel) + max over the channels
                   + merge into red on black; "+ counts" adds countNonZero
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

try:
    import cv2
    import numpy as np
except ImportError as e:  # pragma: no cover - told to the user
    sys.exit("cpu_vs_opencv: needs OpenCV and numpy for Python 3 (python3-opencv): %s" % e)


def parse_results(text):
    """RESULT|operation|implementation|median ms|... -> {(operation, impl): ms}"""
    rows = {}
    for line in text.splitlines():
        if line.startswith("RESULT|"):
            f = line.split("|")
            rows[(f[1], f[2])] = float(f[3])
    return rows


def run_ours(build, size, runs, cpu_runs):
    env = dict(os.environ)
    env["GST_PLUGIN_PATH_1_0"] = os.path.join(build, "plugins")
    rows = {}
    for name, extra in (("bench_gauss", ["--cpu-runs", str(cpu_runs)]),
                        ("bench_grayscale", []), ("bench_binarize", []), ("bench_vis", [])):
        exe = os.path.join(build, "bench", name)
        if not os.access(exe, os.X_OK):
            print("INFO|%s not built (meson -Dbenchmarks=enabled)" % exe, flush=True)
            continue
        cmd = [exe, "--no-cuda", "--runs", str(runs), "--size", size] + extra
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, check=False)
        if p.returncode not in (0, 77):
            print(p.stdout)
            sys.exit("cpu_vs_opencv: %s exited %d" % (" ".join(cmd), p.returncode))
        rows.update(parse_results(p.stdout))
    return rows


def time_cv(fn, frames, runs, warmup=2):
    for i in range(warmup):
        fn(i)
    ms = []
    for i in range(runs):
        t0 = time.perf_counter()
        fn(i)
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def opencv_ops(w, h, nframes):
    rng = np.random.default_rng(12345)
    frames = [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for _ in range(nframes)]
    # The next frame: the previous one plus small noise, and a changed rectangle.
    nexts = []
    for f in frames:
        n = cv2.add(f, rng.integers(0, 11, size=f.shape, dtype=np.uint8))
        n[h // 4:h // 2, w // 4:w // 2] ^= 0x80
        nexts.append(n)
    k = len(frames)
    black = np.zeros((h, w), np.uint8)

    def noise(i, counts):
        d = cv2.absdiff(nexts[i % k], frames[i % k])
        _, m = cv2.threshold(d, 20, 255, cv2.THRESH_BINARY)
        b, g, r = cv2.split(m)
        mask = cv2.max(cv2.max(b, g), r)
        out = cv2.merge([black, black, mask])
        if counts:
            cv2.countNonZero(mask)
        return out

    def binarize(i):
        g = cv2.cvtColor(frames[i % k], cv2.COLOR_BGR2GRAY)
        cv2.calcHist([g], [0], None, [256], [0, 256])
        return cv2.threshold(g, 127, 255, cv2.THRESH_BINARY)

    def heat(i):
        d = cv2.absdiff(nexts[i % k], frames[i % k])
        return cv2.applyColorMap(cv2.cvtColor(d, cv2.COLOR_BGR2GRAY), cv2.COLORMAP_JET)

    ops = {}
    for kk in (3, 5, 9):
        ops["gaussian %dx%d" % (kk, kk)] = (lambda i, kk=kk: cv2.GaussianBlur(
            frames[i % k], (kk, kk), 0, borderType=cv2.BORDER_REPLICATE))
        ops["box %dx%d" % (kk, kk)] = (lambda i, kk=kk: cv2.blur(
            frames[i % k], (kk, kk), borderType=cv2.BORDER_REPLICATE))
    for kk in (3, 5, 7):
        ops["median %dx%d" % (kk, kk)] = (lambda i, kk=kk: cv2.medianBlur(frames[i % k], kk))
    ops["grayscale"] = lambda i: cv2.cvtColor(frames[i % k], cv2.COLOR_BGR2GRAY)
    ops["binarize"] = binarize
    ops["heatmap"] = heat
    ops["noisevis mask"] = lambda i: noise(i, False)
    ops["noisevis mask + counts"] = lambda i: noise(i, True)
    return ops


def our_name(op, size):
    for prefix in ("gaussian", "box", "median"):
        if op.startswith(prefix + " "):
            k = op.split()[1].split("x")[0]
            return "%s %sx%s BGR %s" % (prefix, k, k, size)
    return {
        "grayscale": "grayscale BGR->GRAY8 %s" % size,
        "binarize": "binarize BGR->GRAY8 %s otsu" % size,
        "heatmap": "heatmap sine %s" % size,
        "noisevis mask": "noisevis mask %s" % size,
        "noisevis mask + counts": "noisevis mask + counts %s" % size,
    }[op]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="meson build directory (default build)")
    ap.add_argument("--size", default="1920x1080", help="frame size WxH (default 1920x1080)")
    ap.add_argument("--runs", type=int, default=15, help="timed runs per row (default 15)")
    ap.add_argument("--cpu-runs", type=int, default=5,
                    help="timed runs of our filters in bench_gauss (default 5)")
    ap.add_argument("--threads", type=int, default=0,
                    help="the 'all threads' count for OpenCV (default: usable CPUs)")
    ap.add_argument("--no-ours", action="store_true", help="OpenCV only")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.lower().split("x"))
    ncpu = args.threads or len(os.sched_getaffinity(0))

    ours = {} if args.no_ours else run_ours(args.build, args.size, args.runs, args.cpu_runs)
    print("INFO|OpenCV %s, %d usable CPUs" % (cv2.__version__, ncpu), flush=True)
    ops = opencv_ops(w, h, 8)
    cv = {}
    for nthr in (1, ncpu):
        cv2.setNumThreads(nthr)
        for op, fn in ops.items():
            ms = time_cv(fn, 8, args.runs)
            cv[(op, nthr)] = ms
            print("RESULT|%s %s|opencv %d thread%s|%.4f" % (op, args.size, nthr,
                                                            "" if nthr == 1 else "s", ms),
                  flush=True)
    cv2.setNumThreads(-1)

    print()
    print("CPU backend vs OpenCV, %s BGR, ms per frame (median); ratio = ours / OpenCV" % args.size)
    print("| operation | ours 1 thr | OpenCV 1 thr | ratio | ours %d thr | OpenCV %d thr | ratio |"
          % (ncpu, ncpu))
    print("|---|---|---|---|---|---|---|")
    for op in ops:
        name = our_name(op, args.size)
        o1 = ours.get((name, "cpu 1 thread"))
        on = next((v for (n, impl), v in ours.items()
                   if n == name and impl.startswith("cpu ") and impl != "cpu 1 thread"), None)
        c1, cn = cv[(op, 1)], cv[(op, ncpu)]

        def cell(v):
            return "%.2f" % v if v is not None else "-"

        def ratio(a, b):
            return "%.2f" % (a / b) if a is not None and b > 0 else "-"

        print("| %s | %s | %s | %s | %s | %s | %s |" % (op, cell(o1), cell(c1), ratio(o1, c1),
                                                       cell(on), cell(cn), ratio(on, cn)))


if __name__ == "__main__":
    main()
