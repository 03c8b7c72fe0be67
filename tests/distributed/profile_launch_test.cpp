// kilnrun --profile: a 2-rank DDP job (the DDP example) writes one trace per
// rank, labelled with its rank, and kilnrun merges them into one timeline on
// rank 0's clock. Checked by parsing the files: spans nested per thread, both
// ranks' collectives present, and each all-reduce overlapping in time with its
// peer's (a collective cannot end on one rank before the other started it).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "kiln/data/fashion_mnist.h"
#include "runtime/trace_check.h"

#if defined(KILNRUN_PATH) && defined(KILN_DDP_EXAMPLE_PATH)
#include "distributed/kilnrun_test_util.h"

namespace {

using namespace kiln::testing::kilnrun;

bool have_data() {
  return fs::exists(kiln::data::FashionMNIST::kDefaultRoot);
}

// Microseconds of an event's start and end.
std::pair<double, double> span_of(const nlohmann::json& e) {
  const double ts = e["ts"].get<double>();
  return {ts, ts + e["dur"].get<double>()};
}

TEST(ProfileLaunch, MergesTwoRanksOfADdpStep) {
  if (!have_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const std::string dir = make_temp_dir();
  const std::string prof = dir + "/prof";
  Result r = run_kilnrun(
      {"--nproc-per-node", "2", "--master-port", "0", "--profile", prof, KILN_DDP_EXAMPLE_PATH,
       "--model", "cnn", "--limit", "256", "--steps", "2", "--epochs", "1", "--test-limit", "64"},
      dir, 120);
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("profile of every rank: "), std::string::npos) << r.err;
  for (int rank : {0, 1}) {
    nlohmann::json t = kiln::testing::read_trace(kiln::str(prof, "/rank", rank, ".json"));
    ASSERT_FALSE(t.is_null());
    EXPECT_EQ(t["otherData"]["rank"], rank);
    // Ranks on one host share the monotonic clock: the measured offset is the
    // method's error, well under a millisecond (10 ms bound: loaded hosts).
    EXPECT_LT(std::abs(t["otherData"]["clock_offset_ns"].get<double>()), 1e7);
    kiln::testing::expect_spans_nested(t);
  }
  nlohmann::json m = kiln::testing::read_trace(prof + "/trace.json");
  ASSERT_FALSE(m.is_null());
  kiln::testing::expect_spans_nested(m);
  // The all-reduces of each rank by sequence number.
  std::map<int64_t, std::pair<double, double>> by_rank[2];
  bool named[2] = {false, false};
  for (const auto& e : m["traceEvents"]) {
    const int64_t pid = e["pid"].get<int64_t>();
    ASSERT_TRUE(pid == 0 || pid == 1) << e.dump();
    if (e["ph"] == "M" && e["name"] == "process_name")
      named[pid] = e["args"]["name"] == kiln::str("rank ", pid);
    if (e["ph"] == "X" && e["cat"] == "collective" &&
        e["name"].get<std::string>().starts_with("all_reduce"))
      by_rank[pid][e["args"]["seq"].get<int64_t>()] = span_of(e);
  }
  EXPECT_TRUE(named[0] && named[1]);
  ASSERT_FALSE(by_rank[0].empty());
  int matched = 0;
  for (const auto& [seq, a] : by_rank[0]) {
    auto it = by_rank[1].find(seq);
    if (it == by_rank[1].end()) continue;
    const auto& b = it->second;
    ++matched;
    // Overlap, up to the clock alignment's error (1 ms allowed).
    EXPECT_LE(a.first, b.second + 1000) << "all_reduce #" << seq;
    EXPECT_LE(b.first, a.second + 1000) << "all_reduce #" << seq;
  }
  EXPECT_GT(matched, 0);
  fs::remove_all(dir);
}

// Without a rank file there is nothing to merge.
TEST(ProfileLaunch, MergeOfAnEmptyDirectoryIsEmpty) {
  const std::string dir = make_temp_dir();
  EXPECT_EQ(kiln::launcher::merge_profile_dir(dir), "");
  fs::remove_all(dir);
}

}  // namespace

#endif
