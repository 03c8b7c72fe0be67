// The backward timeline's text form (bench/ddp_timeline.h): what
// ddp_bench --device cuda --ranks 1 prints as "model input: ..." is what
// ddp_overlap_model parses back, and malformed input is an error naming it.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "../../bench/ddp_timeline.h"

namespace kiln::bench {
namespace {

TEST(DdpTimeline, ModelInputRoundTrips) {
  const std::vector<ReadyBucket> in = {{0.01234, 4239400}, {0.25, 3215360}};
  const std::string line = format_model_input(in, 0.25);
  EXPECT_EQ(line, "--ready 0.0123:4239400,0.2500:3215360 --end 0.2500");
  // Split as the shell does for ddp_overlap_model's argv.
  std::istringstream words(line);
  std::string ready_flag, ready, end_flag, end;
  words >> ready_flag >> ready >> end_flag >> end;
  EXPECT_EQ(ready_flag, "--ready");
  EXPECT_EQ(end_flag, "--end");
  const std::vector<ReadyBucket> out = parse_ready(ready);
  ASSERT_EQ(out.size(), in.size());
  for (size_t b = 0; b < in.size(); ++b) {
    EXPECT_NEAR(out[b].ready_ms, in[b].ready_ms, 1e-4);
    EXPECT_EQ(out[b].bytes, in[b].bytes);
  }
  EXPECT_DOUBLE_EQ(parse_timeline_number(end, "--end"), 0.25);
}

TEST(DdpTimeline, MalformedReadyIsAnError) {
  for (const char* bad : {"", "0.5", "0.5:", "x:100", "0.5:100,", "0.5:100;1:2", "-1:100"}) {
    try {
      parse_ready(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[ddp timeline]"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln::bench
