#!/usr/bin/env python3
"""Where a step of the CUDA decoder of stream version 2 spends its time.

Builds timing-only variants of the decoder kernel (cuda/kernels/codec2_dec.cu)
that leave out or simplify one part of a decoding step each, and times them
with bench_codec2 beside the unchanged kernel. The variants decode wrong
pictures on purpose: they never refuse a body (a damaged or mis-decoded one
runs on to its end), so only their times mean anything. What each changes:

  nofail     no early exit: a lane's checks and its final state are ignored
             (what every variant below does too);
  perlane    each lane reads its renormalisation bytes from its own part of
             the payload, without the warp's votes that hand out the shared
             stream (what a format with a byte stream per lane would do);
  norecon    no reconstruction: the decoded values are the working values
             and the picture's bytes (no inverse colour transform, no
             dequantisation, no T-domain update);
  flatctx    every context is the first of its class and component: the
             table no longer depends on the neighbours' activity (the left
             neighbour among them), so the chain of symbols waits only on
             the rANS state;
  noraw      tokens of 16 or more read no raw bits.

Usage (a checkout with meson, ninja and nvcc; a GPU to run):

  bench/decoder_ablation.py --dir /tmp/ablation [--cuda-arch 90] [--build-only]

builds each variant from the checkout's HEAD in DIR/<variant> and, unless
--build-only, runs DIR/<variant>/build/bench/bench_codec2 --no-cpu --runs 24
for the unchanged kernel and each variant, printing the median ms per frame.
With --build-only the executables can be copied to a GPU host and run there
(each needs its build's cuda/libcudadiff-core-shared.so beside it, as in the
build tree).
"""
import argparse
import os
import re
import subprocess
import sys

KERNEL = "cuda/kernels/codec2_dec.cu"


def replace(s, old, new, count=1):
    if s.count(old) != count:
        sys.exit("decoder_ablation: the kernel changed (%d matches of %r); update this script"
                 % (s.count(old), old[:60]))
    return s.replace(old, new)


def nofail(s):
    s = replace(s, "    if (__any_sync(kFullWarp, bad)) return false;\n", "    (void)bad;\n")
    s = replace(s, "  if (!ok && lane == 0) atomicAdd(P.failed, 1u);", "  (void)ok;")
    s = replace(s, "    if (__any_sync(kFullWarp, wrong) || pos != t.size) ok = false;",
                "    (void)wrong;")
    return s


def nofail_shared_stream(s):
    # out of bytes: start again at the tile's first byte instead of failing
    s = nofail(s)
    # in renorm() and in the token's renormalisation
    return replace(s, "if (end - pos < total) return false;\n", "if (end - pos < total) pos = 0;\n", 2)


def perlane(s):
    start = s.index("__device__ __forceinline__ bool renorm(")
    end = s.index("// The token of a table symbol")
    s = s[:start] + """__device__ __forceinline__ bool renorm(uint32_t &x, bool active, const uint8_t *__restrict__ p,
                                       uint32_t &pos, uint32_t end, unsigned lane_mask_lt) {
  (void)lane_mask_lt;
  const uint32_t n = !active ? 0u : x < (1u << 15) ? 2u : x < kRansLow ? 1u : 0u;
  if (n) {
    const uint32_t at = pos + 2u <= end ? pos : 0u;
    x = n == 1 ? (x << 8) | __ldg(p + at)
               : (x << 16) | uint32_t(__ldg(p + at)) << 8 | __ldg(p + at + 1);
    pos = at + n;
  }
  return true;
}

""" + s[end:]
    i = s.index("      bool any_extra;\n      {")
    j = s.index("      uint32_t v = uint32_t(token);")
    s = s[:i] + """      const bool any_extra = extra;
      renorm(x, active, p, pos, end, lt);
""" + s[j:]
    s = nofail(s)
    s = replace(s, "  uint32_t pos = 4u * lanes;\n",
                "  uint32_t pos = 4u * lanes + uint32_t(lane) * ((t.size - 4u * lanes) / "
                "(lanes > 0 ? lanes : 1));\n")
    s = replace(s, "    if (lane == 0 && pos + 256u < end)", "    if (pos + 256u < end)")
    return s


def norecon(s):
    i = s.index("    // Reconstruction and the sample's working values")
    j = s.index("    (void)bad;\n    __syncwarp();")
    return s[:i] + """    if (active) {
      for (int c = 0; c < NC; ++c) {
        rec_at.at[c][i * step_of[c]] = uint8_t(value[c]);
        wp[c] = int16_t(value[c]);
        if (!KEY) wp[NC + c] = int16_t(value[c]);
      }
    }
""" + s[j:]


def flatctx(s):
    s = replace(s, "ctx = bucket_of(lu, temporal_activity(av, b, cc, d));", "ctx = 0;")
    return replace(s, "ctx = bucket_of(lu, spatial_activity(av, b, cc, d));", "ctx = 0;")


def noraw(s):
    return replace(s, "const bool extra = active && token >= kDirectTokens;", "const bool extra = false;")


VARIANTS = {
    "unchanged": [],
    "nofail": [nofail_shared_stream],
    "perlane": [perlane],
    "nofail+norecon": [nofail_shared_stream, norecon],
    "nofail+flatctx": [nofail_shared_stream, flatctx],
    "nofail+noraw": [nofail_shared_stream, noraw],
    "perlane+flatctx": [perlane, flatctx],
    "perlane+norecon+flatctx+noraw": [perlane, norecon, flatctx, noraw],
}


def sh(cmd, **kw):
    subprocess.run(cmd, check=True, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="where the variants' trees and builds go")
    ap.add_argument("--cuda-arch", default="90")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--runs", default="24")
    args = ap.parse_args()
    repo = subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True,
                          capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    os.makedirs(args.dir, exist_ok=True)
    for name, edits in VARIANTS.items():
        tree = os.path.join(args.dir, name.replace("+", "-"))
        if not os.path.isdir(tree):
            os.makedirs(tree)
            archive = subprocess.run(["git", "-C", repo, "archive", "HEAD"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "x", "-C", tree], input=archive, check=True)
            path = os.path.join(tree, KERNEL)
            src = open(path).read()
            for edit in edits:
                src = edit(src)
            open(path, "w").write(src)
            sh(["meson", "setup", "build", "-Dbuildtype=release", "-Dcuda=enabled",
                "-Dcuda-arch=" + args.cuda_arch, "-Dtests=disabled"], cwd=tree,
               stdout=subprocess.DEVNULL)
        sh(["ninja", "-C", "build", "bench/bench_codec2"], cwd=tree, stdout=subprocess.DEVNULL)
    if args.build_only:
        return
    cols = ["k=%d %s" % (k, w) for k in (0, 5, 10, 20) for w in ("key", "delta")]
    print("| variant | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for name in VARIANTS:
        exe = os.path.join(args.dir, name.replace("+", "-"), "build", "bench", "bench_codec2")
        out = subprocess.run([exe, "--no-cpu", "--runs", args.runs], check=True,
                             capture_output=True, text=True).stdout
        ms = [float(line.split("|")[3]) for line in out.splitlines()
              if line.startswith("RESULT|") and re.search(r"\|cuda k=\d+ ", line)]
        print("| %s | %s |" % (name, " | ".join("%.3f" % v for v in ms)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
