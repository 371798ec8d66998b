// Would motion vectors help the version 2 codec at threshold 0? A study,
// not the codec: each 16x16 block of each delta takes the cheapest of the
// codec's predictions at k = 0 (spatial: the median predictor on the
// frame; temporal: the difference to the previous frame; temporal+spatial:
// the median predictor on that difference), by a cost of sum(log2(1 + |r|))
// over its residuals; then once more with the temporal two also from the
// previous frame shifted by any integer vector up to +-R (each vector
// charged 10 bits). The bytes of either are the zeroth-order entropy of the
// residuals per mode and channel (plus, with vectors, 10 bits per vector and
// 1 bit per block); their ratio is what vectors could save, not the codec's
// bytes (its context modelling codes the same residuals in about half).
//
//   motion_study FRAMES.bgr WIDTH HEIGHT [RANGE]    (raw BGR frames, e.g.
//   gst-launch-1.0 filesrc location=clip.avi ! decodebin ! videoconvert !
//   video/x-raw,format=BGR ! filesink location=FRAMES.bgr)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

namespace {

int W, H;
std::vector<unsigned char> frames;

int sample(int f, int x, int y, int c) {
  x = x < 0 ? 0 : x >= W ? W - 1 : x;
  y = y < 0 ? 0 : y >= H ? H - 1 : y;
  return frames[((size_t(f) * H + y) * W + x) * 3 + c];
}

int median_prediction(int a, int b, int c) {
  const int mx = a > b ? a : b, mn = a < b ? a : b;
  return c >= mx ? mn : c <= mn ? mx : a + b - c;
}

enum Mode { Spatial = 0, Temporal = 1, TemporalSpatial = 2 };

// The value the mode predicts from: the sample, or its difference to the
// previous frame shifted by (dx, dy).
int value(int t, int x, int y, int c, Mode m, int dx, int dy) {
  const int v = sample(t, x, y, c);
  return m == Spatial ? v : v - sample(t - 1, x + dx, y + dy, c);
}

int residual(int t, int x, int y, int c, Mode m, int dx, int dy) {
  const int v = value(t, x, y, c, m, dx, dy);
  if (m == Temporal || (x == 0 && y == 0)) return v;
  if (y == 0) return v - value(t, x - 1, y, c, m, dx, dy);
  const int b = value(t, x, y - 1, c, m, dx, dy);
  if (x == 0) return v - b;
  return v - median_prediction(value(t, x - 1, y, c, m, dx, dy), b,
                               value(t, x - 1, y - 1, c, m, dx, dy));
}

constexpr int B = 16;

double block_cost(int t, int bx, int by, Mode m, int dx, int dy) {
  double s = 0;
  for (int y = by * B; y < by * B + B; ++y)
    for (int x = bx * B; x < bx * B + B; ++x)
      for (int c = 0; c < 3; ++c) s += std::log2(1.0 + std::abs(residual(t, x, y, c, m, dx, dy)));
  return s;
}

struct Histogram {
  std::map<int, long> counts;
  long n = 0;
  void add(int v) {
    counts[v]++;
    n++;
  }
  double bits() const {
    double s = 0;
    for (const auto &kv : counts) s -= double(kv.second) * std::log2(double(kv.second) / double(n));
    return s;
  }
};

}  // namespace

int main(int argc, char **argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: motion_study FRAMES.bgr WIDTH HEIGHT [RANGE, default 8]\n");
    return 2;
  }
  W = std::atoi(argv[2]);
  H = std::atoi(argv[3]);
  const int R = argc > 4 ? std::atoi(argv[4]) : 8;
  FILE *f = std::fopen(argv[1], "rb");
  if (!f || W < B || H < B || R < 1) {
    std::fprintf(stderr, "cannot read %s, or a size below 16x16, or a range below 1\n", argv[1]);
    return 2;
  }
  const size_t frame_bytes = size_t(W) * H * 3;
  std::vector<unsigned char> buf(frame_bytes);
  while (std::fread(buf.data(), 1, frame_bytes, f) == frame_bytes)
    frames.insert(frames.end(), buf.begin(), buf.end());
  std::fclose(f);
  const int nf = int(frames.size() / frame_bytes);
  if (nf < 2) {
    std::fprintf(stderr, "%s: fewer than two frames of %dx%d\n", argv[1], W, H);
    return 2;
  }
  Histogram without[3][3], with[3][3];
  long blocks = 0, vectors = 0;
  for (int t = 1; t < nf; ++t)
    for (int by = 0; by < H / B; ++by)
      for (int bx = 0; bx < W / B; ++bx) {
        ++blocks;
        Mode m0 = Spatial;
        double c0 = block_cost(t, bx, by, Spatial, 0, 0);
        for (Mode m : {Temporal, TemporalSpatial}) {
          const double c = block_cost(t, bx, by, m, 0, 0);
          if (c < c0) c0 = c, m0 = m;
        }
        Mode m1 = m0;
        double c1 = c0;
        int vx = 0, vy = 0;
        for (int dy = -R; dy <= R; ++dy)
          for (int dx = -R; dx <= R; ++dx) {
            if (dx == 0 && dy == 0) continue;
            for (Mode m : {Temporal, TemporalSpatial}) {
              const double c = block_cost(t, bx, by, m, dx, dy) + 10;
              if (c < c1) c1 = c, m1 = m, vx = dx, vy = dy;
            }
          }
        if (vx || vy) ++vectors;
        for (int y = by * B; y < by * B + B; ++y)
          for (int x = bx * B; x < bx * B + B; ++x)
            for (int c = 0; c < 3; ++c) {
              without[m0][c].add(residual(t, x, y, c, m0, 0, 0));
              with[m1][c].add(residual(t, x, y, c, m1, vx, vy));
            }
      }
  double b0 = 0, b1 = double(vectors) * 10 + double(blocks);
  for (int m = 0; m < 3; ++m)
    for (int c = 0; c < 3; ++c) b0 += without[m][c].bits(), b1 += with[m][c].bits();
  const int n = nf - 1;
  std::printf(
      "%s: %d deltas of %dx%d, blocks spatial / temporal / temporal+spatial %.1f / %.1f / %.1f "
      "%%\n",
      argv[1], n, W, H, 100.0 * without[0][0].n / (blocks * B * B),
      100.0 * without[1][0].n / (blocks * B * B), 100.0 * without[2][0].n / (blocks * B * B));
  std::printf(
      "  without vectors %.0f B/frame, with vectors up to +-%d %.0f B/frame (ratio %.3f); "
      "blocks with a vector %.1f %%\n",
      b0 / 8 / n, R, b1 / 8 / n, b1 / b0, 100.0 * double(vectors) / double(blocks));
  return 0;
}
