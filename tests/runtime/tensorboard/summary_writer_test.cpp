// SummaryWriter: the events it writes, read back with record.h and kiln's
// generated messages (field numbers as TensorBoard's); buffering, threads,
// and each bad input refused with a kiln::Error that names it.
#include "kiln/tensorboard/summary_writer.h"
#include "common/error_of.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cfloat>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <regex>
#include <thread>

#include "kiln/functional.h"
#include "kiln/tensorboard/record.h"
#include "runtime/serialize/safetensors_test_util.h"
#include "tensorboard.pb.h"

namespace kiln::tensorboard {
namespace {

namespace fs = std::filesystem;

std::vector<proto::Event> events_in(const std::string& path) {
  std::vector<proto::Event> out;
  for (const std::string& r : read_records(path)) {
    proto::Event e;
    EXPECT_TRUE(e.ParseFromString(r));
    out.push_back(std::move(e));
  }
  return out;
}

using kiln::testing::error_of;

#define EXPECT_ERROR_HAS(stmt, text)                       \
  do {                                                     \
    const std::string msg_ = error_of([&] { stmt; });      \
    EXPECT_NE(msg_.find(text), std::string::npos) << msg_; \
  } while (0)

TEST(SummaryWriter, FileNameAndVersionRecord) {
  test::ScratchDir dir;
  const std::string logdir = dir.file("runs/a");  // parents are created
  SummaryWriter w(logdir, {.filename_suffix = ".v1"});
  const fs::path p = w.file_path();
  EXPECT_EQ(p.parent_path(), fs::path(logdir));
  EXPECT_TRUE(std::regex_match(p.filename().string(),
                               std::regex(R"(events\.out\.tfevents\.\d+\.[^/]+\.\d+\.\d+\.v1)")))
      << p;
  // The version record is on disk before any flush.
  std::vector<proto::Event> ev = events_in(p);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].file_version(), "brain.Event:2");
  EXPECT_GT(ev[0].wall_time(), 1.6e9);
  // A second writer on the same directory gets its own file.
  SummaryWriter w2(logdir);
  EXPECT_NE(w2.file_path(), w.file_path());
}

TEST(SummaryWriter, ScalarEvents) {
  test::ScratchDir dir;
  SummaryWriter w(dir.file("run"));
  w.add_scalar("loss", 0.25, 3, 1000.5);
  w.add_scalar("loss", NAN, -1);
  w.flush();
  std::vector<proto::Event> ev = events_in(w.file_path());
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[1].step(), 3);
  EXPECT_EQ(ev[1].wall_time(), 1000.5);
  ASSERT_EQ(ev[1].summary().value_size(), 1);
  EXPECT_EQ(ev[1].summary().value(0).tag(), "loss");
  EXPECT_EQ(ev[1].summary().value(0).simple_value(), 0.25f);
  EXPECT_EQ(ev[2].step(), -1);
  EXPECT_TRUE(std::isnan(ev[2].summary().value(0).simple_value()));
}

// PyTorch's layout: one sub-run per tag, named <main_tag with '/' as '_'>_<tag>.
TEST(SummaryWriter, AddScalarsWritesSubRuns) {
  test::ScratchDir dir;
  const std::string logdir = dir.file("run");
  {
    SummaryWriter w(logdir);
    w.add_scalars("loss/all", {{"train", 1.0}, {"val", 2.0}}, 5);
    w.add_scalars("loss/all", {{"train", 0.5}}, 6);
  }
  for (auto [sub, values] : {std::pair{"loss_all_train", std::vector<float>{1.0f, 0.5f}},
                             std::pair{"loss_all_val", std::vector<float>{2.0f}}}) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(fs::path(logdir) / sub)) files.push_back(e.path());
    ASSERT_EQ(files.size(), 1u) << sub;
    std::vector<proto::Event> ev = events_in(files[0]);
    ASSERT_EQ(ev.size(), 1 + values.size()) << sub;
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(ev[i + 1].step(), 5 + int64_t(i));
      EXPECT_EQ(ev[i + 1].summary().value(0).tag(), "loss/all");
      EXPECT_EQ(ev[i + 1].summary().value(0).simple_value(), values[i]);
    }
  }
}

TEST(SummaryWriter, HistogramBucketLimitsAreTensorflows) {
  std::span<const double> lim = histogram_bucket_limits();
  ASSERT_EQ(lim.size() % 2, 1u);
  EXPECT_EQ(lim.front(), -DBL_MAX);
  EXPECT_EQ(lim.back(), DBL_MAX);
  EXPECT_EQ(lim[lim.size() / 2], 0.0);
  EXPECT_EQ(lim[lim.size() / 2 + 1], 1e-12);
  EXPECT_NEAR(lim[lim.size() / 2 + 2], 1.1e-12, 1e-24);
  EXPECT_TRUE(std::is_sorted(lim.begin(), lim.end()));
  for (size_t i = 0; i < lim.size(); ++i) EXPECT_EQ(lim[i], -lim[lim.size() - 1 - i]);
  EXPECT_LT(lim[lim.size() - 2], 1.1e20);
}

TEST(SummaryWriter, HistogramStatisticsAndBuckets) {
  test::ScratchDir dir;
  SummaryWriter w(dir.file("run"));
  w.add_histogram("h", std::vector<double>{-1.0, 0.0, 0.0, 2.5, DBL_MAX}, 4);
  w.add_histogram("t", from_vector<int32_t>({3, 3, 3}), 5);
  w.flush();
  std::vector<proto::Event> ev = events_in(w.file_path());
  ASSERT_EQ(ev.size(), 3u);
  const proto::HistogramProto& h = ev[1].summary().value(0).histo();
  EXPECT_EQ(h.min(), -1.0);
  EXPECT_EQ(h.max(), DBL_MAX);
  EXPECT_EQ(h.num(), 5.0);
  EXPECT_EQ(h.sum(), -1.0 + 2.5 + DBL_MAX);
  EXPECT_TRUE(std::isinf(h.sum_squares()));  // DBL_MAX squared overflows, as in TensorFlow
  // Bucket i holds limit[i-1] <= v < limit[i]; DBL_MAX falls in the last bucket.
  double total = 0;
  std::span<const double> all = histogram_bucket_limits();
  for (int i = 0; i < h.bucket_size(); ++i) {
    total += h.bucket(i);
    ASSERT_NE(std::find(all.begin(), all.end(), h.bucket_limit(i)), all.end());
    if (i > 0) {
      EXPECT_LT(h.bucket_limit(i - 1), h.bucket_limit(i));
      // No two empty buckets in a row: runs are merged.
      EXPECT_FALSE(h.bucket(i) == 0 && h.bucket(i - 1) == 0) << i;
    }
  }
  EXPECT_EQ(total, 5.0);
  auto count_below = [&](double limit) {
    for (int i = 0; i < h.bucket_size(); ++i)
      if (h.bucket_limit(i) == limit) return h.bucket(i);
    return -1.0;
  };
  EXPECT_EQ(count_below(1e-12), 2.0);  // the two zeros: [0, 1e-12)
  EXPECT_EQ(count_below(DBL_MAX), 1.0);
  EXPECT_EQ(h.bucket_limit(h.bucket_size() - 1), DBL_MAX);
  const proto::HistogramProto& t = ev[2].summary().value(0).histo();
  EXPECT_EQ(t.num(), 3.0);
  EXPECT_EQ(t.sum(), 9.0);
  EXPECT_EQ(t.sum_squares(), 27.0);
}

// The text plugin's format: a DT_STRING tensor of shape [1] owned by "text".
TEST(SummaryWriter, TextEvent) {
  test::ScratchDir dir;
  SummaryWriter w(dir.file("run"));
  w.add_text("notes", "caf\xc3\xa9 **bold**", 9);
  w.close();
  std::vector<proto::Event> ev = events_in(w.file_path());
  ASSERT_EQ(ev.size(), 2u);
  const proto::Summary::Value& v = ev[1].summary().value(0);
  EXPECT_EQ(v.tag(), "notes");
  EXPECT_EQ(v.metadata().plugin_data().plugin_name(), "text");
  EXPECT_EQ(v.tensor().dtype(), proto::DT_STRING);
  ASSERT_EQ(v.tensor().tensor_shape().dim_size(), 1);
  EXPECT_EQ(v.tensor().tensor_shape().dim(0).size(), 1);
  ASSERT_EQ(v.tensor().string_val_size(), 1);
  EXPECT_EQ(v.tensor().string_val(0), "caf\xc3\xa9 **bold**");
}

// Events wait in the buffer until max_queue are pending, a flush, or close.
TEST(SummaryWriter, BuffersUntilMaxQueue) {
  test::ScratchDir dir;
  const std::string logdir = dir.file("run");
  std::string path;
  {
    SummaryWriter w(logdir, {.max_queue = 3});
    path = w.file_path();
    w.add_scalar("a", 1, 0);
    w.add_scalar("a", 2, 1);
    EXPECT_EQ(read_records(path).size(), 1u);
    w.add_scalar("a", 3, 2);
    EXPECT_EQ(read_records(path).size(), 4u);
    w.add_scalar("a", 4, 3);
    EXPECT_EQ(read_records(path).size(), 4u);
  }  // the destructor closes, which writes the rest
  EXPECT_EQ(read_records(path).size(), 5u);
}

// The background thread writes pending events without any call (a bounded wait).
TEST(SummaryWriter, FlushesPeriodically) {
  test::ScratchDir dir;
  SummaryWriter w(dir.file("run"), {.max_queue = 1000, .flush_secs = 0.01});
  w.add_scalar("a", 1, 0);
  size_t n = 0;
  for (int i = 0; i < 1000 && n < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = read_records(w.file_path()).size();
  }
  EXPECT_EQ(n, 2u);
}

TEST(SummaryWriter, ConcurrentWritersLoseNothing) {
  test::ScratchDir dir;
  SummaryWriter w(dir.file("run"), {.max_queue = 7, .flush_secs = 0.001});
  constexpr int kThreads = 4, kSteps = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int s = 0; s < kSteps; ++s) {
        w.add_scalar("t" + std::to_string(t), s, s);
        if (s % 50 == 0) w.add_histogram("h" + std::to_string(t), std::vector<double>{1.0 * s}, s);
      }
    });
  for (auto& th : threads) th.join();
  w.close();
  std::vector<proto::Event> ev = events_in(w.file_path());
  ASSERT_EQ(ev.size(), 1u + kThreads * (kSteps + kSteps / 50));
  std::map<std::string, std::vector<int64_t>> steps;
  for (size_t i = 1; i < ev.size(); ++i) {
    const auto& v = ev[i].summary().value(0);
    if (v.has_histo()) continue;
    EXPECT_EQ(v.simple_value(), float(ev[i].step()));
    steps[v.tag()].push_back(ev[i].step());
  }
  ASSERT_EQ(steps.size(), size_t(kThreads));
  for (const auto& [tag, s] : steps) {
    ASSERT_EQ(s.size(), size_t(kSteps)) << tag;
    for (int k = 0; k < kSteps; ++k) EXPECT_EQ(s[k], k) << tag;  // each thread's order kept
  }
}

TEST(SummaryWriter, UnwritableLogdirNamesThePath) {
  test::ScratchDir dir;
  const std::string file = dir.file("plain_file");
  test::write_file(file, "x");
  EXPECT_ERROR_HAS(SummaryWriter(file + "/sub"),
                   "cannot create the log directory '" + file + "/sub'");
  EXPECT_ERROR_HAS(SummaryWriter{file}, "cannot create the log directory '" + file + "'");
  EXPECT_ERROR_HAS(SummaryWriter{""}, "log directory is empty");
  // A NUL would cut the path short: the files would land elsewhere.
  EXPECT_ERROR_HAS(
      SummaryWriter(dir.file("a") + std::string("\0b", 2)),
      "the log directory contains a NUL byte at offset " + std::to_string(dir.file("a").size()));
  EXPECT_FALSE(fs::exists(dir.file("a")));
  // A sub-run that cannot be created is an error too, and the writer goes on.
  SummaryWriter w(dir.path().string());
  test::write_file(dir.file("m_x"), "x");
  EXPECT_ERROR_HAS(w.add_scalars("m", {{"x", 1.0}}, 0), dir.file("m_x"));
  w.add_scalar("still", 1.0, 0);
}

// Runs `body` in a child process whose files may not grow past `max_bytes`
// (writes past it fail with EFBIG); returns the child's exit status.
template <typename F>
int in_child_with_file_limit(rlim_t max_bytes, F&& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{max_bytes, max_bytes};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int rc = 3;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: unexpected exception: %s\n", e.what());
    }
    ::_exit(rc);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

// Whether `e` is a write failure that names `w`'s event file.
bool names_file(const Error& e, const SummaryWriter& w) {
  const std::string m = e.what();
  return m.find(w.file_path()) != std::string::npos && m.find("failed") != std::string::npos;
}

// Child bodies for WriteFailuresNameTheFile: 0 when the error named the file.
int fails_in_flush(const std::string& logdir) {
  SummaryWriter w(logdir, {.max_queue = 100000});
  for (int i = 0; i < 100; ++i) w.add_scalar("tag", i, i);
  try {
    w.flush();
  } catch (const Error& e) {
    return names_file(e, w) ? 0 : 2;
  }
  return 1;
}

int fails_in_background(const std::string& logdir) {
  SummaryWriter w(logdir, {.max_queue = 100000, .flush_secs = 0.001});
  try {
    for (int i = 0; i < 100; ++i) w.add_scalar("tag", i, i);
    for (int i = 0; i < 5000; ++i) {  // a bounded wait for the background flush to fail
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      w.add_scalar("more", 0, 0);
    }
  } catch (const Error& e) {
    return names_file(e, w) ? 0 : 2;
  }
  return 1;
}

// A failed write (here: past the file-size limit) is a kiln::Error naming the
// file, from flush(), or from the next call after a failed background flush.
TEST(SummaryWriter, WriteFailuresNameTheFile) {
  test::ScratchDir dir;
  EXPECT_EQ(in_child_with_file_limit(200, [&] { return fails_in_flush(dir.file("a")); }), 0);
  EXPECT_EQ(in_child_with_file_limit(200, [&] { return fails_in_background(dir.file("b")); }), 0);
}

TEST(SummaryWriter, BadOptionsAreRefused) {
  test::ScratchDir dir;
  EXPECT_ERROR_HAS(SummaryWriter(dir.file("r"), {.max_queue = 0}), "max_queue 0");
  EXPECT_ERROR_HAS(SummaryWriter(dir.file("r"), {.flush_secs = 0}), "flush_secs 0");
  EXPECT_ERROR_HAS(SummaryWriter(dir.file("r"), {.flush_secs = NAN}), "flush_secs nan");
  EXPECT_ERROR_HAS(SummaryWriter(dir.file("r"), {.filename_suffix = "a/b"}), "'a/b'");
}

TEST(SummaryWriter, BadTagsAndValuesAreRefused) {
  test::ScratchDir dir;
  SummaryWriter w(dir.file("run"));
  EXPECT_ERROR_HAS(w.add_scalar("", 1, 0), "[add_scalar] the tag is empty");
  EXPECT_ERROR_HAS(w.add_scalar("bad\xff", 1, 0), "is not valid UTF-8");
  EXPECT_ERROR_HAS(w.add_text(std::string("a\0", 2), "x", 0), "NUL byte at offset 1");
  EXPECT_ERROR_HAS(w.add_scalar("ok", 1, 0, NAN), "wall_time nan");
  EXPECT_ERROR_HAS(w.add_text("t", "\xc0\x80", 0), "[add_text] 't': the text is not valid UTF-8");
  EXPECT_ERROR_HAS(w.add_text("\xed\xa0\x80", "surrogate", 0), "not valid UTF-8");
  EXPECT_ERROR_HAS(w.add_scalars("m", {{"a/b", 1.0}}, 0), "'a/b' names a sub-run directory");
  EXPECT_ERROR_HAS(w.add_scalars("m", {{"", 1.0}}, 0), "[add_scalars] the tag is empty");
  EXPECT_ERROR_HAS(w.add_scalars(std::string("m\0x", 3), {{"a", 1.0}}, 0),
                   "[add_scalars] the tag contains a NUL byte at offset 1");
  EXPECT_ERROR_HAS(w.add_histogram("h", std::vector<double>{1.0, NAN}, 0),
                   "'h': value nan at index 1 is not finite");
  EXPECT_ERROR_HAS(w.add_histogram("h", from_vector<float>({INFINITY}), 0), "value inf");
  EXPECT_ERROR_HAS(w.add_histogram("h", std::vector<double>{}, 0), "'h': no values");
  EXPECT_ERROR_HAS(w.add_histogram("h", Tensor(), 0), "the tensor is undefined");
  // Nothing was written by the refused calls; valid UTF-8 beyond ASCII is fine.
  w.add_text("\xe2\x82\xac \xf0\x9f\x94\xa5", "ok", 0);
  w.flush();
  EXPECT_EQ(read_records(w.file_path()).size(), 2u);
}

TEST(SummaryWriter, ClosedWriterRefusesCalls) {
  test::ScratchDir dir;
  SummaryWriter w(dir.file("run"));
  w.close();
  w.close();  // a no-op
  EXPECT_ERROR_HAS(w.add_scalar("a", 1, 0), "[add_scalar] the SummaryWriter of '");
  EXPECT_ERROR_HAS(w.flush(), "is closed");
}

}  // namespace
}  // namespace kiln::tensorboard
