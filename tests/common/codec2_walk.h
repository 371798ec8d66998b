// The CUDA decoder's walk through layer 0 of a version 2 tile, counted step
// by step from the schedule's definition (codec2_rules.h, "the encoders'
// lanes"): independent of tile_walk(), which the codec's tests check
// against it, and what bench/codec2_tiles reports for real footage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cudadiff/codec2_rules.h"

namespace testing_util {

struct StepWalk {
  int steps = 0;  // the steps walked
  int jumps = 0;  // the runs of steps at which no lane decodes that the lanes jump over
};

// A tile of w x h samples with `lanes` lanes; `coded` per block of the tile
// (nonzero: coded), row by row, bw blocks a row. The steps at which some
// lane decodes a sample of a coded block, and of each run of steps at which
// none does, its first step and, when the run has at most kDecoderMinJump
// steps and does not end the schedule, the others too (else the lanes jump).
inline StepWalk walk_by_steps(int w, int h, int lanes, int bw, const std::vector<uint8_t> &coded) {
  using namespace cudadiff::codec2;
  const int period = schedule_period(w, lanes), steps = schedule_steps(w, h, lanes);
  std::vector<uint8_t> decodes(size_t(steps), 0);
  for (int j = 0; j < h; ++j)
    for (int i = 0; i < w; ++i)
      if (coded[size_t(j / kBlock) * bw + i / kBlock])
        decodes[size_t((j / lanes) * period + i + kStagger * (j % lanes))] = 1;
  StepWalk walk;
  for (int s = 0; s < steps;) {
    if (decodes[size_t(s)]) {
      ++walk.steps;
      ++s;
      continue;
    }
    int run = 1;
    while (s + run < steps && !decodes[size_t(s + run)]) ++run;
    const bool jump = s + run == steps || run > kDecoderMinJump;
    walk.steps += jump ? 1 : run;
    walk.jumps += jump;
    s += run;
  }
  return walk;
}

}  // namespace testing_util
