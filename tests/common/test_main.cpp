// main() of the core tests. Built twice: plain, and with REQUIRE_CUDA for the
// CUDA tests, which exit 77 (meson's "skipped") when no device is usable.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cudadiff/runtime.h"
#include "frames.h"

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
#ifdef REQUIRE_CUDA
  std::string why;
  if (cudadiff::device_count(&why) == 0) {
    std::printf("SKIP: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
  const cudadiff::DeviceInfo dev = cudadiff::device_info(0);
  std::printf("CUDA device 0: %s, compute %d.%d\n", dev.name.c_str(), dev.cc_major, dev.cc_minor);
#endif
  testing_util::test_seed();  // print the seed up front
  return RUN_ALL_TESTS();
}
