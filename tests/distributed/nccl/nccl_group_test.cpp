// The NCCL process group on the emulated CUDA device: 2 and 4 forked ranks on
// loopback run every collective on CUDA tensors (compared with the CPU
// result), and the fault cases (a rank that exits mid-collective, a rank that
// never joins, one that never issues its collective, mismatched collectives)
// raise kiln::Error naming the collective within the group's timeout.
//
// Every rank is a forked process that starts CUDA (PoCL) itself: the test
// process never touches CUDA, so forking stays safe. Tensors are tiny (the
// emulated device is slow).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/store_ranks.h"
#include "kiln/cuda.h"
#include "kiln/distributed/ddp.h"
#include "kiln/distributed/process_group.h"
#include "kiln/distributed/store.h"

namespace kiln::dist {
namespace {

using namespace std::chrono_literals;

// A rank's body: returns "" on success, else what went wrong.
using Body = std::function<std::string(int rank, int size, std::shared_ptr<Store> store)>;

std::shared_ptr<Store> client(uint64_t port, std::chrono::milliseconds timeout) {
  TCPStoreOptions co;
  co.host = "127.0.0.1";
  co.port = uint16_t(port);
  co.timeout = timeout;
  return std::make_shared<TCPStore>(co);
}

ProcessGroupOptions group_options(std::chrono::milliseconds timeout, int debug = 0) {
  ProcessGroupOptions po;
  po.timeout = timeout;
  po.host = "127.0.0.1";
  po.debug = debug;
  return po;
}

// Runs `body` on `size` forked ranks; every rank must return "" (its failure
// text is printed by the child) within `limit`.
void run_ranks(int size, const Body& body, std::chrono::seconds limit = 90s) {
  auto status = testing::run_store_ranks(
      size, [&](int rank, uint64_t port) { return body(rank, size, client(port, 20s)); }, limit);
  for (int r = 0; r < size; ++r)
    EXPECT_EQ(status[size_t(r)], 0) << "rank " << r << " failed or timed out (-1) (see stderr)";
}

Tensor on_gpu(const Tensor& t) {
  return t.to(Device::cuda(0));
}
Tensor on_cpu(const Tensor& t) {
  return t.to(Device::cpu());
}

// Rank r's input: values that differ per rank and element.
Tensor input(int rank, int64_t n, DType dt = DType::f32) {
  return (arange(0.0, double(n), 1.0, DType::f64) * 0.5 + double(rank + 1)).to(dt);
}

// "" when a equals b exactly (small integers and halves: every sum is exact).
std::string compare(const char* what, const Tensor& got, const Tensor& want) {
  Tensor g = on_cpu(got).to(DType::f64).reshape({-1});
  Tensor w = want.to(DType::f64).reshape({-1});
  if (g.numel() != w.numel()) return str(what, ": ", g.numel(), " elements, want ", w.numel());
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double a = g.data<double>()[i], b = w.data<double>()[i];
    if (a != b) return str(what, ": element ", i, " is ", a, ", want ", b);
  }
  return "";
}

// The expected all-reduce of every rank's input(r, n) with `op`, on the CPU.
Tensor expected_reduce(int size, int64_t n, ReduceOp op) {
  Tensor acc = input(0, n, DType::f64);
  for (int r = 1; r < size; ++r) {
    Tensor x = input(r, n, DType::f64);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc = acc + x;
        break;
      case ReduceOp::kMax:
        acc = maximum(acc, x);
        break;
      case ReduceOp::kMin:
        acc = minimum(acc, x);
        break;
      case ReduceOp::kProduct:
        acc = acc * x;
        break;
    }
  }
  return op == ReduceOp::kAvg ? acc / double(size) : acc;
}

// Every collective of the group on CUDA tensors against its CPU result. The
// results are read back by copies on the caller's stream after Work::wait():
// the stream order alone makes them see the collective's output.
std::string every_collective(int rank, int size, std::shared_ptr<Store> store) {
  auto pg = make_nccl_group(store, rank, size, rank, group_options(20s), "nccl");
  if (pg->backend() != "nccl") return "backend() is " + pg->backend();
  const int64_t n = 6;
  std::string bad;
  auto check = [&](const char* what, const Tensor& got, const Tensor& want) {
    if (bad.empty()) bad = compare(what, got, want);
  };
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
    Tensor x = on_gpu(input(rank, n));
    pg->all_reduce(x, op)->wait();
    check(to_string(op), x, expected_reduce(size, n, op));
  }
  {
    Tensor x = on_gpu((input(rank, n, DType::f64) * 2.0).to(DType::i64));  // halves doubled
    pg->all_reduce(x)->wait();
    check("all_reduce i64", x, expected_reduce(size, n, ReduceOp::kSum) * 2.0);
  }
  {
    Tensor x = on_gpu(input(rank, n));
    pg->broadcast(x, size - 1)->wait();
    check("broadcast", x, input(size - 1, n));
  }
  {
    Tensor x = on_gpu(input(rank, n));
    pg->reduce(x, 1, ReduceOp::kMax)->wait();
    check("reduce", x, rank == 1 ? expected_reduce(size, n, ReduceOp::kMax) : input(rank, n));
  }
  {
    std::vector<Tensor> outs;
    for (int r = 0; r < size; ++r) outs.push_back(on_gpu(zeros({n})));
    pg->all_gather(outs, on_gpu(input(rank, n)))->wait();
    for (int r = 0; r < size; ++r) check("all_gather", outs[size_t(r)], input(r, n));
  }
  {
    Tensor in = on_gpu(input(rank, n * size));
    Tensor out = on_gpu(zeros({n}));
    pg->reduce_scatter(out, in, ReduceOp::kSum)->wait();
    Tensor all = expected_reduce(size, n * size, ReduceOp::kSum);
    check("reduce_scatter", out, all.narrow(0, rank * n, n));
  }
  {
    Tensor a = on_gpu(input(rank, 3)), b = on_gpu(input(rank, 5));
    pg->all_reduce_coalesced({a, b})->wait();
    check("all_reduce_coalesced a", a, expected_reduce(size, 3, ReduceOp::kSum));
    check("all_reduce_coalesced b", b, expected_reduce(size, 5, ReduceOp::kSum));
  }
  {
    // Ring: each rank sends to the next and receives from the previous.
    Tensor out = on_gpu(input(rank, n)), in = on_gpu(zeros({n}));
    auto s = pg->send(out, (rank + 1) % size, 0);
    auto r = pg->recv(in, (rank + size - 1) % size, 0);
    s->wait();
    r->wait();
    check("send/recv", in, input((rank + size - 1) % size, n));
  }
  pg->barrier()->wait(20000ms);  // host-blocking: every Work has completed by now
  return bad;
}

TEST(NcclGroup, EveryCollectiveTwoRanks) {
  run_ranks(2, every_collective);
}

TEST(NcclGroup, EveryCollectiveFourRanks) {
  run_ranks(4, every_collective);
}

// A collective's input written by a kernel just before it, on the caller's
// stream, and its output read by one just after: the communication stream
// waits for the first, the caller's stream (after wait()) for the collective.
// A non-default current stream checks that the group uses the current one.
TEST(NcclGroup, OrdersAfterAndBeforeTheCallersStream) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = make_nccl_group(store, rank, size, rank, group_options(20s), "order");
    cuda::Stream compute(0);
    cuda::StreamGuard guard(compute);
    Tensor x = on_gpu(input(rank, 4));
    Tensor y = x * 3.0 + 1.0;  // queued on `compute`
    auto w = pg->all_reduce(y);
    w->wait();
    Tensor z = y * 2.0;
    std::string bad = compare(
        "ordered", z, (expected_reduce(size, 4, ReduceOp::kSum) * 3.0 + double(size)) * 2.0);
    w->wait(20000ms);
    if (!w->is_completed()) bad += " (not completed after a blocking wait)";
    return bad;
  });
}

// "auto": CUDA tensors over NCCL, CPU tensors over Gloo, in one group.
TEST(NcclGroup, AutoBackendDispatchesByDevice) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = make_auto_group(store, rank, size, rank, group_options(20s), "auto");
    if (pg->backend() != "auto") return "backend() is " + pg->backend();
    Tensor g = on_gpu(input(rank, 4));
    Tensor c = input(rank, 4);
    pg->all_reduce(g)->wait();
    pg->all_reduce(c)->wait();
    pg->barrier()->wait();
    std::string bad = compare("cuda", g, expected_reduce(size, 4, ReduceOp::kSum));
    if (bad.empty()) bad = compare("cpu", c, expected_reduce(size, 4, ReduceOp::kSum));
    return bad;
  });
}

// init_process_group with backend "nccl" (and "auto") over tcp://: the
// default group and new_group's are NCCL groups; LOCAL_RANK picks the device
// (on the emulated device every rank's is cuda:0).
TEST(NcclGroup, InitProcessGroupWithTheNcclAndAutoBackends) {
  for (const char* backend : {"nccl", "auto"}) {
    const uint16_t port = kiln::dist::free_loopback_port();
    ASSERT_NE(port, 0);
    testing::ForkedRanks ranks(2, [&](int rank, uint64_t) {
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      InitOptions o;
      o.backend = backend;
      o.init_method = str("tcp://127.0.0.1:", port);
      o.rank = rank;
      o.world_size = 2;
      o.timeout = 20s;
      init_process_group(o);
      std::string bad;
      if (default_group()->backend() != backend || get_local_rank() != rank)
        bad = "backend " + default_group()->backend();
      Tensor x = on_gpu(input(rank, 4));
      default_group()->all_reduce(x)->wait();
      auto sub = new_group({0, 1});
      sub->all_reduce(x)->wait();
      if (bad.empty()) bad = compare("init", x, expected_reduce(2, 4, ReduceOp::kSum) * 2.0);
      if (bad.empty() && sub->backend() != backend) bad = "new_group's backend " + sub->backend();
      sub.reset();
      destroy_process_group();
      if (!bad.empty()) std::fprintf(stderr, "rank %d: %s\n", rank, bad.c_str());
      return bad.empty() ? 0 : 1;
    });
    ranks.start(0);
    auto status = ranks.wait(std::chrono::steady_clock::now() + 60s);
    EXPECT_EQ(status, (std::vector<int>{0, 0})) << backend << " (see stderr; -1: timed out)";
  }
}

// Runs `fn`, expecting a kiln::Error whose text holds every one of `parts`.
std::string expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& p : parts)
      if (what.find(p) == std::string::npos) return str("error lacks '", p, "': ", what);
    return "";
  }
  return "no kiln::Error";
}

// Rank 1's process ends while rank 0 waits for it inside an all-reduce: rank
// 0's Work fails naming the collective and the peer, long before the
// timeout, and later collectives fail at once.
TEST(NcclGroup, RankExitingMidCollectiveFailsThePeer) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) -> std::string {
    auto pg = make_nccl_group(store, rank, size, rank, group_options(15s), "exit");
    Tensor x = on_gpu(input(rank, 4));
    pg->all_reduce(x)->wait(15000ms);  // both ranks run one collective
    if (rank == 1) {
      std::this_thread::sleep_for(300ms);  // rank 0 is inside all_reduce #1 by now
      ::_exit(0);
    }
    std::string bad = expect_error([&] { pg->all_reduce(on_gpu(input(rank, 4)))->wait(15000ms); },
                                   {"[all_reduce] all_reduce #1", "rank 1", "exited"});
    if (bad.empty())
      bad = expect_error([&] { pg->barrier()->wait(); }, {"unusable after an earlier failure"});
    return bad;
  });
}

// Rank 1 never creates its group: rank 0's constructor fails within the timeout.
TEST(NcclGroup, RankThatNeverJoinsFailsInit) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) -> std::string {
    if (rank == 1) {
      store->wait({"never/checked"}, 20s);  // alive, but never joins
      return "";
    }
    std::string bad = expect_error(
        [&] { make_nccl_group(store, rank, size, rank, group_options(1500ms), "never"); },
        {"[nccl] ncclCommInitRank failed on rank 0/2", "could not connect"});
    store->set("never/checked", {1});
    return bad;
  });
}

// Rank 1 joins but never issues the collective: rank 0's Work fails (the
// watchdog's timeout) naming it, and the communicator is aborted.
TEST(NcclGroup, CollectiveNeverIssuedByAPeerTimesOut) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) -> std::string {
    auto pg = make_nccl_group(store, rank, size, rank, group_options(1500ms), "stall");
    if (rank == 1) {
      store->wait({"stall/checked"}, 20s);
      return "";
    }
    std::string bad = expect_error([&] { pg->all_reduce(on_gpu(input(rank, 4)))->wait(10000ms); },
                                   {"[all_reduce] all_reduce #0", "failed on rank 0/2"});
    store->set("stall/checked", {1});
    return bad;
  });
}

// Different collectives on the ranks fail on every rank with one message
// naming both; with KILN_DIST_DEBUG the call itself raises before any launch.
TEST(NcclGroup, MismatchedCollectivesFailOnEveryRank) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) -> std::string {
    auto pg = make_nccl_group(store, rank, size, rank, group_options(10s), "mismatch");
    Tensor x = on_gpu(input(rank, rank == 0 ? 4 : 8));
    return expect_error([&] { pg->all_reduce(x)->wait(10000ms); },
                        {"[all_reduce] all_reduce #0", "ranks issued different collectives"});
  });
  run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) -> std::string {
    auto pg = make_nccl_group(store, rank, size, rank, group_options(10s, 1), "debug");
    Tensor x = on_gpu(input(rank, rank == 0 ? 4 : 8));
    return expect_error([&] { pg->all_reduce(x); }, {"KILN_DIST_DEBUG", "all_reduce"});
  });
}

// Arguments are checked at the call: a CPU tensor, a bad root.
TEST(NcclGroup, ArgumentErrorsNameTheOp) {
  run_ranks(1, [](int rank, int size, std::shared_ptr<Store> store) -> std::string {
    auto pg = make_nccl_group(store, rank, size, rank, group_options(10s), "args");
    std::string bad =
        expect_error([&] { pg->all_reduce(zeros({2})); }, {"[all_reduce]", "is on cpu", "cuda:0"});
    if (bad.empty())
      bad = expect_error([&] { pg->broadcast(on_gpu(zeros({2})), 3); }, {"[broadcast] root 3"});
    Tensor x = on_gpu(input(0, 3));
    pg->all_reduce(x, ReduceOp::kAvg)->wait();
    if (bad.empty()) bad = compare("one rank", x, input(0, 3));
    return bad;
  });
}

}  // namespace
}  // namespace kiln::dist
