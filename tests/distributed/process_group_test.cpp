// The Gloo process group with ranks as threads of this process (each with its
// own store client): every collective and ReduceOp against a naive reference,
// several collectives in flight, send/recv, argument errors, a rank that never
// joins, KILN_DIST_DEBUG mismatches, timeouts and the log they print. Loopback
// only; every group has a timeout of a few seconds at most.
#include "kiln/distributed/process_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "distributed/thread_group.h"
#include "kiln/functional.h"
#include "runtime/test_util.h"

namespace kiln::dist {
namespace {

using kiln::testing::expect_error;
using namespace std::chrono_literals;

ProcessGroupOptions fast_options(Millis timeout = 5000ms) {
  return testing::loopback_options(timeout);
}

std::shared_ptr<Store> client(uint16_t port) {
  return testing::store_client(port, 5000ms);
}

std::string unique_prefix() {
  static std::atomic<int> n{0};
  return kiln::str("test", n++);
}

TCPStoreServerOptions loopback_server() {
  TCPStoreServerOptions o;
  o.host = "127.0.0.1";
  return o;
}

// Runs body(rank, group) on `size` threads, each with its own store client and
// group; an exception in a rank is a test failure naming the rank.
void run_ranks(int size, const std::function<void(int, ProcessGroup&)>& body,
               ProcessGroupOptions opts = fast_options()) {
  TCPStoreServer server(loopback_server());
  std::string prefix = unique_prefix();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto pg = make_gloo_group(client(server.port()), r, size, opts, prefix);
        body(r, *pg);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

// A 1-D tensor of `dt` holding f(i).
Tensor make(DType dt, int64_t n, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = f(i);
  return from_vector(v, {n}).to(dt);
}

double tolerance(DType dt) {
  return (dt == DType::f16 || dt == DType::bf16) ? 1e-2 : (dt == DType::f32 ? 1e-6 : 1e-12);
}

// Element i of `t` must equal `want` (rounded to t's dtype) within tolerance.
void expect_values(const Tensor& t, const std::function<double(int64_t)>& want,
                   const std::string& what) {
  Tensor ref = make(t.dtype(), t.numel(), want);
  double tol = tolerance(t.dtype());
  int bad = 0;
  for (int64_t i = 0; i < t.numel() && bad < 3; ++i) {
    double got = element_as_double(t, i), w = element_as_double(ref, i);
    if (std::isnan(w) ? !std::isnan(got) : std::abs(got - w) > tol * std::max(1.0, std::abs(w))) {
      ADD_FAILURE() << what << ": element " << i << " is " << got << ", expected " << w;
      ++bad;
    }
  }
}

// The value rank r contributes at index i for op (small, exact in every dtype).
double contribution(ReduceOp op, DType dt, int r, int64_t i) {
  bool is_signed = dt != DType::u8;
  if (op == ReduceOp::kProduct) {
    double v = double(1 + (i + r) % 4);
    return (is_signed && (i + r) % 5 == 0) ? -v : v;
  }
  double v = double((i * 7 + r * 13) % 23);
  return is_signed ? v - 11 : v;
}

double reference(ReduceOp op, DType dt, int size, int64_t i) {
  double acc = contribution(op, dt, 0, i);
  for (int r = 1; r < size; ++r) {
    double v = contribution(op, dt, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
    }
  }
  return op == ReduceOp::kAvg ? acc / size : acc;
}

const DType kReducible[] = {DType::f32, DType::f64, DType::i32, DType::i64,
                            DType::u8,  DType::f16, DType::bf16};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                         ReduceOp::kProduct};

// all_reduce: every dtype x every op on 3 ranks, vs the naive reference; one
// large f32 buffer crosses Gloo's 1 MB segments; max/min propagate NaN.
TEST(ProcessGroupGloo, AllReduceEveryDtypeAndOp) {
  const int size = 3;
  run_ranks(size, [&](int rank, ProcessGroup& pg) {
    EXPECT_EQ(pg.rank(), rank);
    EXPECT_EQ(pg.size(), size);
    EXPECT_EQ(pg.backend(), "gloo");
    for (DType dt : kReducible) {
      for (ReduceOp op : kOps) {
        if (op == ReduceOp::kAvg && !is_floating(dt)) continue;
        Tensor t = make(dt, 1001, [&](int64_t i) { return contribution(op, dt, rank, i); });
        auto work = pg.all_reduce(t, op);
        work->wait();
        EXPECT_TRUE(work->is_completed());
        ASSERT_EQ(work->result().size(), 1u);
        EXPECT_TRUE(work->result()[0].is_same(t));
        expect_values(
            t, [&](int64_t i) { return reference(op, dt, size, i); },
            kiln::str("all_reduce ", dtype_name(dt), " ", to_string(op)));
      }
    }
    const int64_t big = 700000;  // 2.8 MB: several segments per rank
    Tensor t = make(DType::f32, big, [&](int64_t i) { return double(i % 1000) + rank; });
    pg.all_reduce(t, ReduceOp::kSum)->wait();
    expect_values(
        t, [&](int64_t i) { return 3.0 * double(i % 1000) + 3; }, "large sum");

    // Every rank holds NaN somewhere, so NaN meets each side of the reduce function.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
      auto has_nan = [](int r, int64_t i) { return i % 3 == r && i % 2 == 0; };
      Tensor n = make(DType::f32, 4000, [&](int64_t i) { return has_nan(rank, i) ? nan : 1.0; });
      pg.all_reduce(n, op)->wait();
      expect_values(
          n,
          [&](int64_t i) { return (has_nan(0, i) || has_nan(1, i) || has_nan(2, i)) ? nan : 1.0; },
          "NaN propagation");
    }
  });
}

// broadcast, reduce, all_gather, reduce_scatter, all_reduce_coalesced,
// barrier and send/recv on 3 ranks, including empty tensors.
TEST(ProcessGroupGloo, EveryCollectiveMatchesReference) {
  const int size = 3;
  run_ranks(size, [&](int rank, ProcessGroup& pg) {
    Tensor b = make(DType::i64, 10, [&](int64_t i) { return 100 * rank + i; });
    pg.broadcast(b, 1)->wait();
    expect_values(
        b, [&](int64_t i) { return 100 + i; }, "broadcast from 1");

    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
      auto f = [&](int64_t i) { return contribution(op, DType::f64, rank, i); };
      Tensor t = make(DType::f64, 37, f);
      pg.reduce(t, 2, op)->wait();
      if (rank == 2) {
        expect_values(
            t, [&](int64_t i) { return reference(op, DType::f64, size, i); }, "reduce");
      } else {
        expect_values(t, f, "reduce leaves non-roots unchanged");
      }
    }

    Tensor in = make(DType::bf16, 5, [&](int64_t i) { return rank * 10 + i; });
    std::vector<Tensor> outs;
    for (int r = 0; r < size; ++r) outs.push_back(zeros({5}, DType::bf16));
    auto gw = pg.all_gather(outs, in);
    gw->wait();
    EXPECT_EQ(gw->result().size(), 3u);
    for (int r = 0; r < size; ++r)
      expect_values(
          outs[size_t(r)], [&](int64_t i) { return r * 10 + i; }, "all_gather");

    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      Tensor src =
          make(DType::f32, 3 * 4, [&](int64_t i) { return contribution(op, DType::f32, rank, i); });
      Tensor out = zeros({2, 2}, DType::f32);
      pg.reduce_scatter(out, src, op)->wait();
      expect_values(
          out, [&](int64_t i) { return reference(op, DType::f32, size, 4 * rank + i); },
          "reduce_scatter");
    }

    Tensor c0 = make(DType::f32, 3, [&](int64_t i) { return rank + i; });
    Tensor c1 = make(DType::f32, 6, [&](int64_t i) { return rank * i; }).view({2, 3});
    Tensor c2 = make(DType::f32, 1, [&](int64_t) { return 1; });
    pg.all_reduce_coalesced({c0, c1, c2}, ReduceOp::kSum)->wait();
    expect_values(
        c0, [&](int64_t i) { return 3 + 3 * i; }, "coalesced 0");
    expect_values(
        c1, [&](int64_t i) { return 3.0 * i; }, "coalesced 1");
    expect_values(
        c2, [&](int64_t) { return 3; }, "coalesced 2");

    pg.barrier()->wait();

    // A ring of sends; recvs posted before the sends they match.
    Tensor got = zeros({8}, DType::i32);
    auto rw = pg.recv(got, (rank + size - 1) % size, 7);
    auto sw = pg.send(make(DType::i32, 8, [&](int64_t i) { return rank * 1000 + i; }),
                      (rank + 1) % size, 7);
    sw->wait();
    rw->wait();
    int from = (rank + size - 1) % size;
    expect_values(
        got, [&](int64_t i) { return from * 1000 + i; }, "recv");

    Tensor empty_t = zeros({0}, DType::f32);
    pg.all_reduce(empty_t)->wait();
    pg.broadcast(empty_t, 0)->wait();
    auto er = pg.recv(zeros({0}, DType::f32), (rank + size - 1) % size);
    pg.send(empty_t, (rank + 1) % size)->wait();
    er->wait();
  });
}

// A send and a recv that disagree on dtype or element count fail on both
// ranks with a kiln::Error naming both sides, and the recv's tensor is left
// as it was (a larger send aborted inside Gloo, a smaller one wrote part of
// the tensor); the group stays usable.
TEST(ProcessGroupGloo, SendRecvMismatchFailsBothSides) {
  run_ranks(2, [&](int rank, ProcessGroup& pg) {
    struct Case {
      Tensor sent, received;
      std::string sent_text, received_text;
    };
    std::vector<Case> cases = {
        {ones({200}), zeros({100}), "f32 with 200 elements", "f32 with 100 elements"},
        {ones({3}), zeros({8}), "f32 with 3 elements", "f32 with 8 elements"},
        {ones({4}), zeros({4}, DType::i32), "f32 with 4 elements", "i32 with 4 elements"},
        {zeros({0}), zeros({5}), "f32 with 0 elements", "f32 with 5 elements"},
    };
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      const std::string sent = "the send of rank 0 has " + c.sent_text,
                        received = "the recv of rank 1 has " + c.received_text;
      if (rank == 0) {
        expect_error([&] { pg.send(c.sent, 1, int(k))->wait(); },
                     {"[send]", sent.c_str(), received.c_str(), "group stays usable"});
      } else {
        expect_error([&] { pg.recv(c.received, 0, int(k))->wait(); },
                     {"[recv]", sent.c_str(), received.c_str(), "group stays usable"});
        expect_values(
            c.received, [](int64_t) { return 0.0; }, "a recv that failed");
      }
      // The same tag, matching now: the connection is still in step.
      Tensor got = zeros({6});
      if (rank == 0) {
        pg.send(full({6}, double(k + 1)), 1, int(k))->wait();
      } else {
        pg.recv(got, 0, int(k))->wait();
        expect_values(
            got, [&](int64_t) { return double(k + 1); }, "after a mismatch");
      }
    }
    pg.barrier()->wait();
  });
}

// Each send/recv is posted when issued: a sender that waits for its second
// send before issuing the first completes although the receiver posted (and
// waits for) the recvs in the other order.
TEST(ProcessGroupGloo, SendsWaitedOutOfTheRecvsOrder) {
  run_ranks(2, [&](int rank, ProcessGroup& pg) {
    if (rank == 0) {
      pg.send(full({4}, 2.0), 1, 2)->wait();
      pg.send(full({4}, 1.0), 1, 1)->wait();
    } else {
      Tensor one = zeros({4}), two = zeros({4});
      auto a = pg.recv(one, 0, 1);
      auto b = pg.recv(two, 0, 2);
      a->wait();
      b->wait();
      expect_values(
          one, [](int64_t) { return 1.0; }, "tag 1");
      expect_values(
          two, [](int64_t) { return 2.0; }, "tag 2");
    }
  });
}

// Sixteen collectives of mixed sizes in flight at once on two lanes, plus
// sends matched out of order by tag; each Work reports its timings.
TEST(ProcessGroupGloo, SeveralInFlight) {
  run_ranks(2, [&](int rank, ProcessGroup& pg) {
    std::vector<Tensor> ts;
    std::vector<WorkPtr> works;
    for (int k = 0; k < 16; ++k) {
      int64_t n = (k % 4 == 0) ? 100000 : 100 + k;
      ts.push_back(make(DType::f32, n, [&](int64_t i) { return double(k + rank + i % 7); }));
      works.push_back(pg.all_reduce(ts.back()));
    }
    for (int k = 15; k >= 0; --k) works[size_t(k)]->wait();
    for (int k = 0; k < 16; ++k) {
      expect_values(
          ts[size_t(k)], [&](int64_t i) { return double(2 * k + 1 + 2 * (i % 7)); },
          kiln::str("in flight #", k));
      EXPECT_LE(works[size_t(k)]->start_time(), works[size_t(k)]->end_time());
      EXPECT_NE(works[size_t(k)]->end_time(), Clock::time_point{});
      EXPECT_NE(works[size_t(k)]->describe().find(kiln::str("all_reduce #", k)), std::string::npos);
    }
    if (rank == 0) {
      auto a = pg.send(make(DType::f32, 4, [](int64_t) { return 1; }), 1, 1);
      auto b = pg.send(make(DType::f32, 4, [](int64_t) { return 2; }), 1, 2);
      a->wait();
      b->wait();
    } else {
      Tensor two = zeros({4}), one = zeros({4});
      auto b = pg.recv(two, 0, 2);
      auto a = pg.recv(one, 0, 1);
      b->wait();
      a->wait();
      expect_values(
          one, [](int64_t) { return 1; }, "tag 1");
      expect_values(
          two, [](int64_t) { return 2; }, "tag 2");
    }
  });
}

// Bad arguments raise kiln::Error from the call, naming the op and values
// (a one-rank group needs no peers); the group stays usable.
TEST(ProcessGroupGloo, ArgumentErrors) {
  run_ranks(1, [&](int, ProcessGroup& pg) {
    Tensor i32 = zeros({4}, DType::i32);
    expect_error([&] { pg.all_reduce(i32, ReduceOp::kAvg); },
                 {"[all_reduce]", "avg needs a floating dtype", "i32"});
    expect_error([&] { pg.all_reduce(zeros({2}, DType::b8)); }, {"[all_reduce]", "bool"});
    expect_error([&] { pg.all_reduce(zeros({4, 4}).t()); }, {"[all_reduce]", "contiguous"});
    expect_error([&] { pg.all_reduce(Tensor()); }, {"[all_reduce]", "undefined"});
    expect_error([&] { pg.broadcast(zeros({2}), 1); }, {"[broadcast]", "root 1", "size 1"});
    expect_error([&] { pg.reduce(zeros({2}), -1); }, {"[reduce]", "root -1"});
    expect_error(
        [&] {
          pg.all_gather({zeros({2}), zeros({2})}, zeros({2}));
        },
        {"[all_gather]", "one output per rank (1)", "got 2"});
    expect_error([&] { pg.all_gather({zeros({3})}, zeros({2})); }, {"[all_gather]", "[3]", "[2]"});
    expect_error([&] { pg.reduce_scatter(zeros({3}), zeros({2})); },
                 {"[reduce_scatter]", "input f32[2]", "output f32[3]"});
    expect_error(
        [&] {
          pg.all_reduce_coalesced({zeros({2}), zeros({2}, DType::f64)});
        },
        {"[all_reduce_coalesced]", "tensor 1 is f64"});
    expect_error([&] { pg.all_reduce_coalesced({}); }, {"[all_reduce_coalesced]", "no tensors"});
    expect_error([&] { pg.send(zeros({2}), 0); }, {"[send]", "dst 0", "another rank"});
    expect_error([&] { pg.recv(zeros({2}), 3); }, {"[recv]", "src 3"});
    // A one-rank group still runs every collective.
    Tensor t = make(DType::f32, 3, [](int64_t i) { return double(i); });
    pg.all_reduce(t, ReduceOp::kAvg)->wait();
    pg.reduce(t, 0, ReduceOp::kMax)->wait();
    pg.barrier()->wait();
    expect_values(
        t, [](int64_t i) { return double(i); }, "one rank");
  });
  expect_error([] { make_gloo_group(nullptr, 0, 1, fast_options(), "x"); },
               {"[process_group]", "store is null"});
  TCPStoreServer server(loopback_server());
  expect_error([&] { make_gloo_group(client(server.port()), 2, 2, fast_options(), "x"); },
               {"[process_group]", "rank 2 is out of range"});
  auto opts = fast_options();
  opts.threads = 0;
  expect_error([&] { make_gloo_group(client(server.port()), 0, 1, opts, "x"); },
               {"[process_group]", "threads"});
}

// A rank that never joins: the others get an error naming it after the timeout.
TEST(ProcessGroupGloo, RankThatNeverJoins) {
  TCPStoreServer server(loopback_server());
  auto t0 = Clock::now();
  expect_error([&] { make_gloo_group(client(server.port()), 0, 3, fast_options(800ms), "lonely"); },
               {"[process_group]", "rank 0/3", "rank(s) [1, 2] did not join within 800 ms"});
  EXPECT_LT(Clock::now() - t0, 4s);
}

// Ranks given different world sizes are told each rank's size at once, not
// "Gloo rendezvous failed ... missing keys" after the timeout.
TEST(ProcessGroupGloo, WorldSizeDisagreementNamesEachRanksSize) {
  TCPStoreServer server(loopback_server());
  const std::string prefix = unique_prefix();
  std::vector<std::string> errors(2);
  auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      try {
        make_gloo_group(client(server.port()), r, r == 0 ? 2 : 3, fast_options(10000ms), prefix);
      } catch (const Error& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_LT(Clock::now() - t0, 5s);  // not the 10 s timeout
  for (int r = 0; r < 2; ++r) {
    const std::string& m = errors[size_t(r)];
    for (const char* part :
         {"[process_group]", "different world sizes", "rank 0 announced 2", "rank 1 announced 3"})
      EXPECT_NE(m.find(part), std::string::npos) << "rank " << r << ": " << m;
  }
}

// KILN_DIST_DEBUG: mismatched sizes or ops are reported on every rank naming
// both ranks (and the group stays usable); a rank that never issues the
// collective is named after the timeout. The env var turns the check on.
TEST(ProcessGroupGloo, DebugModeReportsMismatches) {
  ::setenv("KILN_DIST_DEBUG", "1", 1);  // before any rank thread starts
  auto opts = fast_options(1500ms);
  opts.debug = -1;
  std::atomic<bool> reported{false};
  run_ranks(
      2,
      [&](int rank, ProcessGroup& pg) {
        Tensor t = zeros({rank == 0 ? 100 : 200});
        expect_error([&] { pg.all_reduce(t); },
                     {"[all_reduce] KILN_DIST_DEBUG: collective #0 differs across ranks",
                      "rank 0 issued all_reduce(f32, 100 elements, sum)",
                      "rank 1 issued all_reduce(f32, 200 elements, sum)"});
        expect_error([&] { rank == 0 ? pg.broadcast(zeros({4}), 0) : pg.all_reduce(zeros({4})); },
                     {"collective #1", "rank 0 issued broadcast(f32, 4 elements, root=0)",
                      "rank 1 issued all_reduce(f32, 4 elements, sum)"});
        Tensor ok = ones({8});
        pg.all_reduce(ok)->wait();  // still usable: the bad collectives never ran
        expect_values(
            ok, [](int64_t) { return 2; }, "after mismatch");
        pg.barrier()->wait();
        if (rank == 0) {
          ::testing::internal::CaptureStderr();
          expect_error([&] { pg.all_reduce(ones({2})); },
                       {"KILN_DIST_DEBUG: rank(s) [1] did not issue collective #4 within 1500 ms",
                        "rank 0 issued all_reduce(f32, 2 elements, sum)"});
          std::string log = ::testing::internal::GetCapturedStderr();
          EXPECT_NE(log.find("KILN_DIST_DEBUG: waiting for all_reduce #4"), std::string::npos)
              << log;
          EXPECT_NE(log.find("barrier #3: done"), std::string::npos) << log;
          reported = true;
        }
        while (!reported) std::this_thread::sleep_for(10ms);  // rank 1 skips #4
      },
      opts);
  ::unsetenv("KILN_DIST_DEBUG");
}

// Work::wait(timeout) gives up with an error and prints the log, without
// breaking the group; a collective Gloo itself times out fails the group, and
// every later collective fails at once naming the first error.
TEST(ProcessGroupGloo, TimeoutsAndTheLog) {
  run_ranks(2, [&](int rank, ProcessGroup& pg) {
    Tensor t = ones({16});
    if (rank == 0) {
      auto w = pg.all_reduce(t);
      ::testing::internal::CaptureStderr();
      expect_error([&] { w->wait(200ms); }, {"[all_reduce] all_reduce #0 f32[16] sum on rank 0/2",
                                             "did not finish within 200 ms"});
      std::string log = ::testing::internal::GetCapturedStderr();
      EXPECT_NE(log.find("wait timed out on all_reduce #0"), std::string::npos) << log;
      EXPECT_NE(log.find("all_reduce #0 f32[16] sum: RUNNING"), std::string::npos) << log;
      pg.barrier()->wait();  // pairs with rank 1's all_reduce below (#0 runs then)
      w->wait();
    } else {
      std::this_thread::sleep_for(400ms);
      pg.all_reduce(t)->wait();
      pg.barrier()->wait();
    }
    expect_values(
        t, [](int64_t) { return 2; }, "late all_reduce");
  });
}

// A collective the peer never joins times out inside Gloo (or in the
// shared-memory transport): an Error naming the op, the rank and the peer;
// later collectives fail at once.
TEST(ProcessGroupGloo, GlooTimeoutBreaksTheGroup) {
  for (int shm : {0, 1}) {
    auto opts = fast_options(500ms);
    opts.shm = shm;
    run_ranks(
        2,
        [&](int rank, ProcessGroup& pg) {
          EXPECT_EQ(pg.transport(), shm ? "shm" : "tcp");
          if (rank == 1) {
            std::this_thread::sleep_for(1200ms);  // outlives rank 0's timeout, then leaves
            return;
          }
          auto t0 = Clock::now();
          auto w = pg.all_reduce(ones({4}));
          ::testing::internal::CaptureStderr();
          expect_error([&] { w->wait(3000ms); },
                       {"[all_reduce] all_reduce #0 f32[4] sum failed on rank 0/2",
                        shm ? "shared memory:" : "Gloo:", "(peer: rank 1)"});
          std::string log = ::testing::internal::GetCapturedStderr();
          EXPECT_NE(log.find("a collective failed"), std::string::npos) << log;
          EXPECT_LT(Clock::now() - t0, 2500ms);
          expect_error([&] { pg.barrier()->wait(); },
                       {"[barrier]", "unusable after an earlier failure", "all_reduce #0"});
          expect_error([&] { pg.send(ones({1}), 1)->wait(); }, {"[send]", "unusable"});
        },
        opts);
  }
}

// Destroying a group ends a pending recv with an error at once (its buffer
// stays valid until the connections close), instead of waiting for the timeout.
TEST(ProcessGroupGloo, DestroyEndsPendingRecv) {
  WorkPtr pending;
  auto t0 = Clock::now();
  run_ranks(2, [&](int rank, ProcessGroup& pg) {
    if (rank == 0) pending = pg.recv(zeros({4}), 1, 9);  // never sent
    pg.barrier()->wait();
  });
  ASSERT_TRUE(pending);
  expect_error([&] { pending->wait(1000ms); },
               {"[recv] recv #0 f32[4] src=1 tag=9 failed on rank 0/2"});
  EXPECT_LT(Clock::now() - t0, 3s);
}

}  // namespace
}  // namespace kiln::dist
