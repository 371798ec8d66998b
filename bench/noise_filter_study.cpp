// The report's Figure 35 on real footage: how many bytes the difference
// encoder sends per frame without a noise filter and with each filter and
// size, and what the filter costs in picture quality.
//
// Input: raw BGR frames (no padding), from a file or stdin, e.g.
//   gst-launch-1.0 -q filesrc location=vtest.avi ! decodebin ! videoconvert
//       ! video/x-raw,format=BGR ! fdsink fd=1
//     | build/bench/noise_filter_study --size 768x576 -
// (one command line).
// Each frame gets Gaussian noise (sigma 4 per byte, fixed seed, rounded and
// clamped: the "camera noise"), then each filter (CPU reference, all threads),
// then the encoder's rule with threshold 20: a byte is sent when it differs
// from the reference by more than the threshold, and only then does the
// reference take its value (so the reference is what the receiver shows).
// Frame 0 is the keyframe and is not counted.
//
// Printed: a markdown table with, per configuration, the bytes sent per frame
// (mean, and % of the frame), the saving against no filter, PSNR of the
// filtered frames against the clean footage and PSNR of what the receiver
// shows against the clean footage.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cudadiff/gauss.h"
#include "cudadiff/runtime.h"

using cudadiff::FrameView;
using cudadiff::NoiseFilterMethod;
using cudadiff::VideoFormat;

namespace {

struct Config {
  std::string name;
  bool filter;
  cudadiff::NoiseFilterSettings settings;
  std::unique_ptr<cudadiff::NoiseFilter> op;
  std::vector<uint8_t> filtered, reference;
  uint64_t sent = 0;
  double filtered_sq_error = 0, shown_sq_error = 0;
};

FrameView bgr_view(std::vector<uint8_t> &data, int w, int h) {
  FrameView v;
  v.format = VideoFormat::BGR;
  v.width = w;
  v.height = h;
  v.data[0] = data.data();
  v.stride[0] = static_cast<size_t>(w) * 3;
  return v;
}

// Normal deviates by Box-Muller from mt19937 (whose sequence the standard
// fixes), so the noise is the same with every standard library.
class Noise {
 public:
  explicit Noise(uint32_t seed) : gen_(seed) {}
  double next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double u1 = (gen_() + 1.0) / 4294967296.0;  // (0, 1]
    const double u2 = gen_() / 4294967296.0;
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2 * M_PI * u2);
    have_spare_ = true;
    return r * std::cos(2 * M_PI * u2);
  }

 private:
  std::mt19937 gen_;
  double spare_ = 0;
  bool have_spare_ = false;
};

double psnr(double sq_error, double samples) {
  const double mse = sq_error / samples;
  return mse > 0 ? 10 * std::log10(255.0 * 255.0 / mse) : INFINITY;
}

}  // namespace

int main(int argc, char **argv) {
  int w = 768, h = 576, threshold = 20, max_frames = 0;
  double noise_sigma = 4.0;
  uint32_t seed = 20250604;
  const char *path = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--size") {
      if (std::sscanf(next(), "%dx%d", &w, &h) != 2 || w <= 0 || h <= 0) return 2;
    } else if (a == "--threshold") {
      threshold = std::atoi(next());
    } else if (a == "--noise") {
      noise_sigma = std::atof(next());
    } else if (a == "--seed") {
      seed = static_cast<uint32_t>(std::strtoul(next(), nullptr, 0));
    } else if (a == "--frames") {
      max_frames = std::atoi(next());
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: %s [--size WxH] [--threshold N] [--noise SIGMA] [--seed N] "
          "[--frames N] FILE|-   (raw BGR frames)\n",
          argv[0]);
      return 0;
    } else {
      path = argv[i];
    }
  }
  if (!path) {
    std::fprintf(stderr, "give a raw BGR file or - for stdin (--help)\n");
    return 2;
  }
  FILE *in = std::strcmp(path, "-") == 0 ? stdin : std::fopen(path, "rb");
  if (!in) {
    std::perror(path);
    return 1;
  }

  const size_t frame_bytes = static_cast<size_t>(w) * h * 3;
  auto cpu = cudadiff::Context::cpu();
  std::vector<Config> configs;
  configs.push_back({"no filter", false, {}, nullptr, {}, {}});
  const NoiseFilterMethod methods[] = {NoiseFilterMethod::Box, NoiseFilterMethod::Gaussian,
                                       NoiseFilterMethod::Median};
  for (NoiseFilterMethod m : methods)
    for (int k : {3, 5, 7, 9}) {
      if (m == NoiseFilterMethod::Median && k > cudadiff::kMaxMedianKernel) continue;
      Config c;
      c.filter = true;
      c.settings.method = m;
      c.settings.kernel_size = k;
      c.name = std::string(cudadiff::noise_filter_method_name(m)) + " " + std::to_string(k) + "x" +
               std::to_string(k);
      if (m == NoiseFilterMethod::Gaussian) {
        char buf[32];
        std::snprintf(buf, sizeof buf, " (sigma %.2g)", cudadiff::gaussian_sigma(k, 0));
        c.name += buf;
      }
      c.op = cudadiff::NoiseFilter::create(*cpu, VideoFormat::BGR, w, h);
      configs.push_back(std::move(c));
    }
  // The clean footage through the encoder, for scale.
  Config clean{"clean footage, no noise, no filter", false, {}, nullptr, {}, {}};

  std::vector<uint8_t> frame(frame_bytes), noisy(frame_bytes);
  for (Config &c : configs) {
    c.filtered.resize(frame_bytes);
    c.reference.resize(frame_bytes);
  }
  clean.reference.resize(frame_bytes);
  Noise noise(seed);
  int frames = 0;
  while ((max_frames == 0 || frames < max_frames) &&
         std::fread(frame.data(), 1, frame_bytes, in) == frame_bytes) {
    for (size_t i = 0; i < frame_bytes; ++i) {
      const long v = std::lround(frame[i] + noise_sigma * noise.next());
      noisy[i] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    for (Config &c : configs) {
      if (c.filter)
        c.op->process(bgr_view(noisy, w, h), bgr_view(c.filtered, w, h), c.settings);
      else
        c.filtered = noisy;
    }
    for (Config *c : [&] {
           std::vector<Config *> all;
           for (Config &x : configs) all.push_back(&x);
           all.push_back(&clean);
           return all;
         }()) {
      const std::vector<uint8_t> &cur = (c == &clean) ? frame : c->filtered;
      uint64_t sent = 0;
      double shown = 0, filtered = 0;
      if (frames == 0) {
        c->reference = cur;  // keyframe
      } else {
        for (size_t i = 0; i < frame_bytes; ++i)
          if (std::abs(int(cur[i]) - int(c->reference[i])) > threshold) {
            c->reference[i] = cur[i];
            ++sent;
          }
      }
      for (size_t i = 0; i < frame_bytes; ++i) {
        const double df = double(cur[i]) - frame[i];
        const double ds = double(c->reference[i]) - frame[i];
        filtered += df * df;
        shown += ds * ds;
      }
      c->sent += sent;
      c->filtered_sq_error += filtered;
      c->shown_sq_error += shown;
    }
    ++frames;
    if (frames % 100 == 0) std::fprintf(stderr, "%d frames\n", frames);
  }
  if (in != stdin) std::fclose(in);
  if (frames < 2) {
    std::fprintf(stderr, "need at least 2 frames of %dx%d BGR\n", w, h);
    return 1;
  }

  const double deltas = frames - 1;
  const double samples = double(frames) * frame_bytes;
  const double base = configs[0].sent / deltas;
  std::printf(
      "%d frames of %dx%d BGR (%zu bytes), noise sigma %.1f per byte (seed %u), "
      "threshold %d; frame 0 is the keyframe\n\n",
      frames, w, h, frame_bytes, noise_sigma, seed, threshold);
  std::printf(
      "| filter | bytes sent per frame | %% of frame | vs no filter | PSNR filtered "
      "vs clean (dB) | PSNR shown vs clean (dB) |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
  auto row = [&](const Config &c) {
    const double per = c.sent / deltas;
    std::printf("| %s | %.0f | %.2f | %+.1f%% | %.2f | %.2f |\n", c.name.c_str(), per,
                100.0 * per / frame_bytes, 100.0 * (per - base) / base,
                psnr(c.filtered_sq_error, samples), psnr(c.shown_sq_error, samples));
  };
  for (const Config &c : configs) row(c);
  row(clean);
  return 0;
}
