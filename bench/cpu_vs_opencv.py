#!/usr/bin/env python3
"""The CPU backend beside OpenCV, on the same machine in the same run.

Runs the CPU rows of this project's benchmarks (bench_gauss, bench_grayscale,
bench_binarize, bench_vis with --no-cuda: one thread and N threads), then
times OpenCV doing the same work on frames of the same size at one thread and
at N threads, and prints one table: our time, OpenCV's, and the ratio (ours /
OpenCV; the project's goal is at most 2 for every filter). N is every CPU this
process may use (affinity mask and cgroup quota) unless --threads says
otherwise; our benchmarks get it through OMP_NUM_THREADS.

    python3 bench/cpu_vs_opencv.py --build build [--size 1920x1080] [--runs 15] [--repeat 3]

With --repeat R both sides are measured R times, alternating, and each row
keeps its best median: on a busy machine a row's worst runs say more about
the neighbours than about the code.

Needs OpenCV's Python module (Debian/Ubuntu: python3-opencv; pip:
opencv-python-headless) and numpy, and a build with benchmarks (meson's
default). What OpenCV does for each row (the closest standard equivalent):
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
import platform
import re
import statistics
import subprocess
import sys
import time

try:
    import cv2
    import numpy as np
except ImportError as e:  # pragma: no cover - told to the user
    sys.exit("cpu_vs_opencv: needs OpenCV and numpy for Python 3 "
             "(python3-opencv, or pip's opencv-python-headless): %s" % e)


def usable_cpus():
    """CPUs this process may use: the affinity mask, capped by a cgroup CPU quota."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = None
    try:  # cgroup v2
        with open("/sys/fs/cgroup/cpu.max") as fh:
            q, p = fh.read().split()[:2]
        if q != "max":
            quota = int(q) / int(p)
    except (OSError, ValueError):
        try:  # cgroup v1
            with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as fq, \
                    open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as fp:
                q, p = int(fq.read()), int(fp.read())
            if q > 0:
                quota = q / p
        except (OSError, ValueError):
            pass
    if quota is not None:
        n = min(n, int(quota))
    return max(1, n or 1)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            text = fh.read()
    except OSError:
        return platform.processor() or platform.machine()
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    flags = re.search(r"^(flags|Features)\s*:\s*(.*)$", text, re.M)
    isa = []
    if flags:
        have = set(flags.group(2).split())
        isa = [f for f in ("avx2", "avx512bw", "asimd", "sve") if f in have]
    return "%s (%s)" % (model.group(1).strip() if model else platform.machine(),
                        ", ".join(isa) or "no AVX2/NEON flags")


def parse_results(text):
    """RESULT|operation|implementation|median ms|... -> {(operation, impl): ms}"""
    rows = {}
    for line in text.splitlines():
        if line.startswith("RESULT|"):
            f = line.split("|")
            rows[(f[1], f[2])] = float(f[3])
    return rows


def run_ours(build, size, runs, cpu_runs, threads):
    env = dict(os.environ)
    env["GST_PLUGIN_PATH_1_0"] = os.path.join(build, "plugins")
    env["OMP_NUM_THREADS"] = str(threads)
    rows = {}
    for name, extra in (("bench_gauss", ["--cpu-runs", str(cpu_runs)]),
                        ("bench_grayscale", []), ("bench_binarize", []), ("bench_vis", [])):
        exe = os.path.join(build, "bench", name)
        if not os.access(exe, os.X_OK):
            print("INFO|%s not built (meson -Dbenchmarks=enabled)" % exe, flush=True)
            continue
        cmd = [exe, "--no-cuda", "--runs", str(runs), "--size", size] + extra
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, check=False)
        if p.returncode not in (0, 77):
            print(p.stdout)
            sys.exit("cpu_vs_opencv: %s exited %d" % (" ".join(cmd), p.returncode))
        rows.update(parse_results(p.stdout))
    return rows


def time_cv(fn, runs, warmup=2):
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


def best(into, rows):
    for key, ms in rows.items():
        into[key] = min(ms, into.get(key, ms))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="meson build directory (default build)")
    ap.add_argument("--size", default="1920x1080", help="frame size WxH (default 1920x1080)")
    ap.add_argument("--runs", type=int, default=15, help="timed runs per row (default 15)")
    ap.add_argument("--cpu-runs", type=int, default=15,
                    help="timed runs of our filters in bench_gauss (default 15)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="measure both sides this many times, alternating, and keep each "
                         "row's best median (default 3)")
    ap.add_argument("--threads", type=int, default=0,
                    help="the 'N threads' count for both (default: usable CPUs)")
    ap.add_argument("--only", default="",
                    help="regular expression: only the OpenCV rows whose name matches")
    ap.add_argument("--no-ours", action="store_true", help="OpenCV only")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.lower().split("x"))
    ncpu = args.threads or usable_cpus()
    build_info = cv2.getBuildInformation()
    framework = re.search(r"Parallel framework:\s*(.*)", build_info)
    print("INFO|CPU %s; %d usable CPUs, N = %d" % (cpu_model(), usable_cpus(), ncpu), flush=True)
    print("INFO|OpenCV %s, parallel framework %s" %
          (cv2.__version__, framework.group(1).strip() if framework else "unknown"), flush=True)

    ops = opencv_ops(w, h, 8)
    if args.only:
        ops = {k: v for k, v in ops.items() if re.search(args.only, k)}
    ours, cv = {}, {}
    for rep in range(max(1, args.repeat)):
        if not args.no_ours:
            best(ours, run_ours(args.build, args.size, args.runs, args.cpu_runs, ncpu))
        for nthr in (1, ncpu):
            cv2.setNumThreads(nthr)
            for op, fn in ops.items():
                ms = time_cv(fn, args.runs)
                print("RESULT|%s %s|opencv %d thread%s|%.4f|repeat %d" %
                      (op, args.size, nthr, "" if nthr == 1 else "s", ms, rep + 1), flush=True)
                best(cv, {(op, nthr): ms})
        cv2.setNumThreads(-1)

    print()
    print("CPU backend vs OpenCV, %s BGR, ms per frame (best of %d medians); "
          "ratio = ours / OpenCV" % (args.size, max(1, args.repeat)))
    print("| operation | ours 1 thr | OpenCV 1 thr | ratio | ours %d thr | OpenCV %d thr | ratio |"
          % (ncpu, ncpu))
    print("|---|---:|---:|---:|---:|---:|---:|")
    over = []
    for op in ops:
        name = our_name(op, args.size)
        o1 = ours.get((name, "cpu 1 thread"))
        on = next((v for (n, impl), v in ours.items()
                   if n == name and impl.startswith("cpu ") and impl != "cpu 1 thread"), None)
        if ncpu == 1:
            on = o1
        c1, cn = cv[(op, 1)], cv[(op, ncpu)]

        def cell(v):
            return "%.2f" % v if v is not None else "-"

        def ratio(a, b, threads):
            if a is None or b <= 0:
                return "-"
            if a / b > 2:
                over.append("%s at %d thread%s (%.2fx)" %
                            (op, threads, "" if threads == 1 else "s", a / b))
            return "%.2f" % (a / b)

        print("| %s | %s | %s | %s | %s | %s | %s |" %
              (op, cell(o1), cell(c1), ratio(o1, c1, 1), cell(on), cell(cn),
               ratio(on, cn, ncpu) if ncpu > 1 else "-"))
    threads_seen = {impl for (_, impl) in ours if impl != "cpu 1 thread"}
    if threads_seen and threads_seen != {"cpu %d threads" % ncpu}:
        print("NOTE: our benchmarks ran with %s (OpenMP missing from the build?)" %
              ", ".join(sorted(threads_seen)))
    print("over 2x: %s" % ("; ".join(over) if over else "none"))


if __name__ == "__main__":
    main()
