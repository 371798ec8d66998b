// The fuzz target of the stream reader (plugins/diff/cudadiffstream) and the
// CPU decoders of both versions, and the helpers its two drivers share:
// libFuzzer (fuzz_stream, clang builds) and the plain meson test
// (fuzz_stream_replay: a corpus plus random mutations for a bounded time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace fuzz {

// Recomputes the header and payload checksums of every packet found in
// `data`, so that mutated fields get past the checksums to the deeper checks.
void fix_checksums(uint8_t *data, size_t size);

// One random structure-aware mutation of `data` (bit flips, byte edits,
// inserted or removed runs, header fields set to edge values, truncation,
// splices with `other`), then checksums fixed with probability 1/2.
void mutate(std::vector<uint8_t> &data, const std::vector<uint8_t> &other, std::mt19937 &gen);

// Largest frame the target decodes (a zstd keyframe of up to 1 GiB is a
// valid stream but would make fuzzing slow); version 2, whose decoder keeps
// about 7 bytes of state per frame byte, a smaller one.
constexpr size_t kMaxFuzzFrameBytes = size_t(1) << 22;
constexpr size_t kMaxFuzzV2FrameBytes = size_t(1) << 20;

}  // namespace fuzz
