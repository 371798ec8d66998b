// main() of element and pipeline tests. With REQUIRE_CUDA: exit 77 (skip)
// when no CUDA device is usable; with REQUIRE_ELEMENTS ("factory:package,..."):
// exit 77 when one of the elements is missing.
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
#ifdef REQUIRE_ELEMENTS
  // "element:package,...": a test of a pipeline that needs elements from
  // other plugins skips when one is missing, saying which.
  for (const std::string &item : gst_test::split(REQUIRE_ELEMENTS, ',')) {
    const size_t colon = item.find(':');
    const std::string name = item.substr(0, colon);
    GstElementFactory *factory = gst_element_factory_find(name.c_str());
    if (!factory) {
      std::printf("SKIP: element %s not found (%s)\n", name.c_str(),
                  colon == std::string::npos ? "?" : item.substr(colon + 1).c_str());
      gst_deinit();
      return 77;
    }
    gst_object_unref(factory);
  }
#endif
  testing_util::test_seed();
  const int rc = RUN_ALL_TESTS();
  gst_deinit();
  return rc;
}
