// main() of element and pipeline tests. With REQUIRE_CUDA: exit 77 (skip)
// when no CUDA device is usable.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cudadiff/runtime.h"
#include "frames.h"
#include "gst_test.h"

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
#ifdef REQUIRE_CUDA
  std::string why;
  if (cudadiff::device_count(&why) == 0) {
    std::printf("SKIP: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
#endif
  gst_test::init(&argc, &argv);
  testing_util::test_seed();
  const int rc = RUN_ALL_TESTS();
  gst_deinit();
  return rc;
}
