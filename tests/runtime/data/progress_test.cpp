// Verifies ProgressBar rendering (forced on for a string stream) and its tty default.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <sstream>
#include <string>

#include "kiln/data/data.h"

using namespace kiln;
using namespace kiln::data;

// Not a terminal: a bar on a string stream is off by default and prints nothing.
TEST(ProgressBar, DisabledForNonTerminal) {
  std::ostringstream os;
  ProgressBar bar(10, os);
  EXPECT_FALSE(bar.enabled());
  bar.update(1.0, 8);
  bar.close();
  EXPECT_EQ(os.str(), "");
  EXPECT_EQ(bar.steps(), 1);
}

// Forced on: each update redraws one '\r' line with steps, mean loss, samples/s and ETA.
TEST(ProgressBar, RendersStepsLossRateEta) {
  std::ostringstream os;
  ProgressBar bar(4, os, "epoch 1");
  bar.set_enabled(true);
  bar.update(2.0, 32);
  bar.update(1.0, 32);
  EXPECT_EQ(bar.samples(), 64);
  EXPECT_DOUBLE_EQ(bar.mean_loss(), 1.5);
  std::string out = os.str();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 2);
  EXPECT_EQ(out.find('\n'), std::string::npos);
  std::string last = out.substr(out.rfind('\r') + 1);
  last.erase(last.find_last_not_of(' ') + 1);  // padding over the longer first line
  const std::string prefix = "epoch 1 ##########.......... 2/4 | loss 1.5000 | ";
  EXPECT_EQ(last.rfind(prefix, 0), 0u) << last;
  size_t rate = last.find(" samples/s | ETA ");
  ASSERT_NE(rate, std::string::npos) << last;
  EXPECT_GT(std::stod(last.substr(prefix.size(), rate - prefix.size())), 0.0) << last;
  std::string eta = last.substr(rate + 17);
  EXPECT_TRUE(eta.size() == 5 && eta[2] == ':' && std::isdigit(eta[0]) && std::isdigit(eta[4]))
      << last;
  bar.close();
  bar.close();  // idempotent
  out = os.str();
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);
}

// A shorter line is padded with spaces so no stale characters remain on screen.
TEST(ProgressBar, PadsShorterLines) {
  std::ostringstream os;
  ProgressBar bar(0, os);  // unknown total: no bar, no ETA
  bar.set_enabled(true);
  bar.update(1e12, 1);
  size_t first = os.str().size();
  bar.update(-1e12, 1);  // mean 0: a much shorter line
  std::string second = os.str().substr(first);
  EXPECT_EQ(second.size(), first);
  EXPECT_EQ(bar.line().find("ETA"), std::string::npos);
  EXPECT_THROW(ProgressBar(-1, os), kiln::Error);
}
