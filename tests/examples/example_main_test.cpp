// The examples' shared main helpers (examples/common): the --device values
// they take and what they say when the device cannot run them. (Each program's
// refusal without a usable CUDA device: the example_*_without_cuda ctests.)
#include <gtest/gtest.h>

#include <sstream>

#include "example_main.h"
#include "kiln/cuda.h"

using kiln::Device;
using kiln::examples::parse_device;

TEST(ExampleMain, ParsesDeviceValues) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda());
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  for (const char* bad : {"", "gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:99999", "cpu:0"})
    EXPECT_FALSE(parse_device(bad).has_value()) << bad;
}

// The CPU always runs; a CUDA device past device_count() (every machine has
// fewer than 999) is refused with a reason, and the body never runs.
TEST(ExampleMain, RefusesAnUnusableDeviceClearly) {
  EXPECT_EQ(kiln::examples::device_unusable(Device::cpu()), "");
  const std::string why = kiln::examples::device_unusable(Device::cuda(999));
  if (kiln::cuda::is_available())
    EXPECT_NE(why.find("only"), std::string::npos) << why;
  else
    EXPECT_NE(why.find(kiln::cuda::unavailable_reason()), std::string::npos) << why;
  std::ostringstream err;
  bool ran = false;
  EXPECT_EQ(kiln::examples::run_example(
                Device::cuda(999), [&] { return ran = true, 0; }, err),
            1);
  EXPECT_FALSE(ran);
  EXPECT_EQ(err.str(), "error: " + why + "\n");
}

// The body's status comes back; an exception is one "error:" line and status 1.
TEST(ExampleMain, RunsTheBodyAndReportsItsErrors) {
  std::ostringstream err;
  EXPECT_EQ(kiln::examples::run_example(
                Device::cpu(), [] { return 3; }, err),
            3);
  EXPECT_EQ(err.str(), "");
  EXPECT_EQ(kiln::examples::run_example(
                Device::cpu(), []() -> int { throw kiln::Error("[op] bad input"); }, err),
            1);
  EXPECT_EQ(err.str(), "error: [op] bad input\n");
}
