// The shared-memory transport of Gloo groups whose ranks share this host: every
// collective gives bit for bit what the TCP path gives (every dtype and op,
// sizes 0, 1, odd and larger than a chunk), several collectives in flight, a
// peer that leaves or whose process dies mid-collective, no name left in
// /dev/shm, and the switches that select TCP (KILN_SHM=0, options.shm = 0,
// ranks that disagree). Ranks are threads (or forked processes) on loopback.
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../distributed/src/shm/shm_world.h"  // the chunk size
#include "distributed/forked_ranks.h"
#include "distributed/thread_group.h"
#include "kiln/distributed/collectives.h"
#include "kiln/distributed/process_group.h"
#include "kiln/functional.h"
#include "runtime/test_util.h"

namespace kiln::dist {
namespace {

using kiln::testing::expect_error;
using namespace std::chrono_literals;

ProcessGroupOptions options(int shm, Millis timeout = 10000ms) {
  return testing::loopback_options(timeout, shm);
}

std::shared_ptr<Store> client(uint16_t port) {
  return testing::store_client(port, 10000ms);
}

std::string unique_prefix(const char* what) {
  static std::atomic<int> n{0};
  return kiln::str("shmtest-", what, "-", ::getpid(), "-", n++);
}

TCPStoreServerOptions loopback_server() {
  TCPStoreServerOptions o;
  o.host = "127.0.0.1";
  return o;
}

// Runs body(rank, shm group, tcp group) on `size` threads; exceptions become
// failures naming the rank.
void run_pairs(int size, const std::function<void(int, ProcessGroup&, ProcessGroup&)>& body,
               int threads = 2) {
  TCPStoreServer server(loopback_server());
  const std::string prefix = unique_prefix("pair");
  std::vector<std::thread> ts;
  std::vector<std::string> errors(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    ts.emplace_back([&, r] {
      try {
        auto o1 = options(1), o0 = options(0);
        o1.threads = o0.threads = threads;
        auto shm = make_gloo_group(client(server.port()), r, size, o1, prefix + "s");
        auto tcp = make_gloo_group(client(server.port()), r, size, o0, prefix + "t");
        EXPECT_EQ(shm->transport(), "shm");
        EXPECT_EQ(tcp->transport(), "tcp");
        body(r, *shm, *tcp);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

// Random values of `dt`; with `exact`, small integers (every sum order agrees).
Tensor random_tensor(DType dt, int64_t n, uint32_t seed, bool exact) {
  std::mt19937 rng(seed);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) {
    if (exact || !is_floating(dt)) {
      x = double(int(rng() % 9)) - (dt == DType::u8 ? 0 : 4);
      if (x == 0) x = 1;  // products stay nonzero
    } else {
      x = std::uniform_real_distribution<double>(-3, 3)(rng);
    }
  }
  return from_vector(v, {n}).to(dt);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.numel()) * a.element_size()) == 0;
}

const DType kDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                         DType::i64, DType::i32, DType::u8};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                         ReduceOp::kProduct};

// 2 ranks, random values: every dtype x op x size (one chunk is 1 MB) of
// all_reduce, plus reduce, broadcast, all_gather, reduce_scatter and
// all_reduce_coalesced, equal bit for bit over shm and TCP.
TEST(ShmTransport, MatchesTcpBitForBit) {
  run_pairs(2, [](int rank, ProcessGroup& shm, ProcessGroup& tcp) {
    auto both = [&](const std::function<WorkPtr(ProcessGroup&, Tensor&)>& op, Tensor t,
                    const std::string& what) {
      Tensor a = t.clone(), b = t.clone();
      op(shm, a)->wait();
      op(tcp, b)->wait();
      EXPECT_TRUE(same_bits(a, b)) << what << " on rank " << rank;
    };
    uint32_t seed = 1;
    for (DType dt : kDtypes) {
      const int64_t big = int64_t((shm::World::kChunkBytes * 5 / 2) / dtype_size(dt));  // 3 chunks
      for (int64_t n : {int64_t(0), int64_t(1), int64_t(17), int64_t(1001), big}) {
        for (ReduceOp op : kOps) {
          if (op == ReduceOp::kAvg && !is_floating(dt)) continue;
          if (n == big && op != ReduceOp::kSum && op != ReduceOp::kAvg) continue;
          Tensor t = random_tensor(dt, n, seed++ * 2 + uint32_t(rank), false);
          both([&](ProcessGroup& g, Tensor& x) { return g.all_reduce(x, op); }, t,
               kiln::str("all_reduce ", dtype_name(dt), " ", to_string(op), " n=", n));
        }
        Tensor t = random_tensor(dt, n, seed++ * 2 + uint32_t(rank), false);
        both([&](ProcessGroup& g, Tensor& x) { return g.broadcast(x, 1); }, t,
             kiln::str("broadcast ", dtype_name(dt), " n=", n));
        both([&](ProcessGroup& g, Tensor& x) { return g.reduce(x, 0, ReduceOp::kSum); }, t,
             kiln::str("reduce ", dtype_name(dt), " n=", n));
        // all_gather: every output, bit for bit.
        std::vector<Tensor> so, to;
        for (int r = 0; r < 2; ++r) {
          so.push_back(zeros({n}, dt));
          to.push_back(zeros({n}, dt));
        }
        shm.all_gather(so, t)->wait();
        tcp.all_gather(to, t)->wait();
        for (int r = 0; r < 2; ++r)
          EXPECT_TRUE(same_bits(so[size_t(r)], to[size_t(r)]))
              << "all_gather " << dtype_name(dt) << " n=" << n << " output " << r;
        // reduce_scatter: each rank's block.
        ReduceOp op = is_floating(dt) ? ReduceOp::kAvg : ReduceOp::kMax;
        Tensor in = random_tensor(dt, 2 * n, seed++ * 2 + uint32_t(rank), false);
        Tensor a = zeros({n}, dt), b = zeros({n}, dt);
        shm.reduce_scatter(a, in, op)->wait();
        tcp.reduce_scatter(b, in, op)->wait();
        EXPECT_TRUE(same_bits(a, b)) << "reduce_scatter " << dtype_name(dt) << " n=" << n;
      }
    }
    // all_reduce_coalesced straight from several tensors (one of them empty).
    std::vector<Tensor> xs = {random_tensor(DType::f32, 300000, 7 + uint32_t(rank), false),
                              zeros({0}), random_tensor(DType::f32, 5, 9 + uint32_t(rank), false)};
    std::vector<Tensor> ys;
    for (auto& x : xs) ys.push_back(x.clone());
    shm.all_reduce_coalesced(xs, ReduceOp::kAvg)->wait();
    tcp.all_reduce_coalesced(ys, ReduceOp::kAvg)->wait();
    for (size_t i = 0; i < xs.size(); ++i)
      EXPECT_TRUE(same_bits(xs[i], ys[i])) << "coalesced " << i;
    shm.barrier()->wait();
  });
}

// 3 ranks (integer values, so every reduction order gives the same bits):
// every op, odd and multi-chunk sizes, and the uneven shares of a chunk.
TEST(ShmTransport, ThreeRanksMatchTcp) {
  run_pairs(3, [](int rank, ProcessGroup& shm, ProcessGroup& tcp) {
    uint32_t seed = 100;
    for (DType dt : {DType::f32, DType::f16, DType::i64}) {
      const int64_t big = int64_t((shm::World::kChunkBytes * 3 / 2) / dtype_size(dt)) + 3;
      for (int64_t n : {int64_t(2), int64_t(33), big}) {
        for (ReduceOp op : kOps) {
          if (op == ReduceOp::kAvg && !is_floating(dt)) continue;
          Tensor t = random_tensor(dt, n, seed++ * 3 + uint32_t(rank), true);
          Tensor a = t.clone(), b = t.clone();
          shm.all_reduce(a, op)->wait();
          tcp.all_reduce(b, op)->wait();
          EXPECT_TRUE(same_bits(a, b))
              << dtype_name(dt) << " " << to_string(op) << " n=" << n << " rank " << rank;
        }
        Tensor in = random_tensor(dt, 3 * n, seed++ * 3 + uint32_t(rank), true);
        Tensor a = zeros({n}, dt), b = zeros({n}, dt);
        shm.reduce_scatter(a, in, ReduceOp::kSum)->wait();
        tcp.reduce_scatter(b, in, ReduceOp::kSum)->wait();
        EXPECT_TRUE(same_bits(a, b)) << "reduce_scatter " << dtype_name(dt) << " n=" << n;
        Tensor c = random_tensor(dt, n, seed++ * 3 + uint32_t(rank), true), d = c.clone();
        shm.reduce(c, 2, ReduceOp::kSum)->wait();
        tcp.reduce(d, 2, ReduceOp::kSum)->wait();
        EXPECT_TRUE(same_bits(c, d)) << "reduce " << dtype_name(dt) << " n=" << n;
      }
    }
    shm.barrier()->wait();
  });
}

// Sixteen collectives of mixed kinds and sizes in flight on three lanes,
// waited for in reverse; each Work has its timestamps.
TEST(ShmTransport, SeveralInFlight) {
  run_pairs(
      2,
      [](int rank, ProcessGroup& shm, ProcessGroup&) {
        std::vector<Tensor> ts;
        std::vector<WorkPtr> works;
        for (int k = 0; k < 16; ++k) {
          const int64_t n = (k % 4 == 0) ? 700000 : 100 + k;  // 2.8 MB: 3 chunks
          ts.push_back(full({n}, double(k + rank)));
          works.push_back(k % 5 == 4 ? shm.barrier() : shm.all_reduce(ts.back()));
        }
        for (int k = 15; k >= 0; --k) works[size_t(k)]->wait();
        for (int k = 0; k < 16; ++k) {
          if (k % 5 != 4) {
            EXPECT_EQ(ts[size_t(k)].min().item<float>(), float(2 * k + 1)) << k;
            EXPECT_EQ(ts[size_t(k)].max().item<float>(), float(2 * k + 1)) << k;
          }
          EXPECT_LE(works[size_t(k)]->start_time(), works[size_t(k)]->end_time());
          EXPECT_NE(works[size_t(k)]->end_time(), Clock::time_point{});
        }
      },
      3);
}

// True if p lies in a mapping of a /dev/shm file (from /proc/self/maps).
bool in_dev_shm(const void* p) {
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return false;
  char line[512];
  bool found = false;
  const auto a = reinterpret_cast<uintptr_t>(p);
  while (!found && std::fgets(line, sizeof line, f)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi)
      found = std::strstr(line, "/dev/shm/") != nullptr;
  }
  std::fclose(f);
  return found;
}

// make_comm_buffer: all_reduce of the whole buffer (no staging) and of a
// range of it (staged) equal TCP bit for bit, on 2 and 3 ranks, for sizes
// spanning several 64 KB blocks per share; buffers are zeroed and private to
// each rank outside collectives.
TEST(ShmTransport, CommBuffersMatchTcp) {
  for (int size : {2, 3}) {
    run_pairs(size, [size](int rank, ProcessGroup& shm, ProcessGroup& tcp) {
      uint32_t seed = 500;
      for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32}) {
        for (int64_t n : {int64_t(1), int64_t(1001), int64_t(300001)}) {
          Tensor buf = shm.make_comm_buffer(n, dt);
          EXPECT_EQ(buf.numel(), n);
          EXPECT_TRUE(in_dev_shm(buf.data_ptr()));
          EXPECT_FALSE(in_dev_shm(tcp.make_comm_buffer(n, dt).data_ptr()));
          EXPECT_EQ(buf.abs().max().item<double>(), 0.0);
          for (ReduceOp op : kOps) {
            if (op == ReduceOp::kAvg && !is_floating(dt)) continue;
            Tensor t = random_tensor(dt, n, seed++ * 3 + uint32_t(rank), size > 2);
            buf.copy_(t);
            Tensor ref = t.clone();
            shm.all_reduce(buf, op)->wait();
            tcp.all_reduce(ref, op)->wait();
            EXPECT_TRUE(same_bits(buf, ref))
                << size << " ranks " << dtype_name(dt) << " " << to_string(op) << " n=" << n;
          }
          if (n > 2) {  // a range of the buffer goes through the slots
            Tensor part = buf.narrow(0, 1, n - 2);
            Tensor t = random_tensor(dt, n - 2, seed++ * 3 + uint32_t(rank), true);
            part.copy_(t);
            shm.all_reduce(part, ReduceOp::kSum)->wait();
            tcp.all_reduce(t, ReduceOp::kSum)->wait();
            EXPECT_TRUE(same_bits(part, t)) << "range of a comm buffer, n=" << n;
          }
        }
      }
      // A rank-local write after the collective stays local.
      Tensor buf = shm.make_comm_buffer(8, DType::f32);
      buf.fill_(double(rank));
      shm.barrier()->wait();
      EXPECT_EQ(buf.max().item<float>(), float(rank));
      shm.barrier()->wait();
    });
  }
}

// Threads of this process whose allowed CPUs are exactly {cpu}.
int threads_pinned_to(int cpu) {
  int n = 0;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return -1;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::FILE* f = std::fopen(kiln::str("/proc/self/task/", e->d_name, "/status").c_str(), "r");
    if (!f) continue;
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::strncmp(line, "Cpus_allowed_list:", 18) == 0)
        n += std::atoi(line + 18) == cpu && std::strpbrk(line + 18, ",-") == nullptr;
    std::fclose(f);
  }
  ::closedir(d);
  return n;
}

// When the ranks are as many as the cores, a lane runs on the core of the
// thread that issued its collective (so its reduction takes time from that
// rank only): ranks pinned to cores 0 and 1 find a lane thread pinned beside
// each of them after an all_reduce.
TEST(ShmTransport, LanesRunOnTheIssuingCoreWhenRanksFillTheHost) {
  if (std::thread::hardware_concurrency() != 2) GTEST_SKIP() << "needs a 2-core host";
  std::atomic<int> issued{0};
  run_pairs(2, [&](int rank, ProcessGroup& shm, ProcessGroup&) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rank, &set);
    ASSERT_EQ(::pthread_setaffinity_np(::pthread_self(), sizeof set, &set), 0);
    Tensor t = ones({1000});
    shm.all_reduce(t)->wait();
    EXPECT_EQ(t.max().item<float>(), 2.0f);
    ++issued;
    while (issued.load() < 2) std::this_thread::yield();
    // This rank's thread and the lane that ran its all_reduce (at least).
    EXPECT_GE(threads_pinned_to(rank), 2) << "rank " << rank;
    shm.barrier()->wait();
  });
}

// all_reduce_into: the concatenation of private sources (one of them 2-D) and
// of a source that is dst's own range, reduced into a comm buffer (the copy
// fused with the reduction), into a plain tensor over shm, and over TCP, equals
// the all_reduce of the concatenation bit for bit, on 2 and 3 ranks; sources
// span share and 64 KB block boundaries and stay unchanged.
TEST(ShmTransport, AllReduceIntoMatchesAllReduce) {
  for (int size : {2, 3}) {
    run_pairs(size, [size](int rank, ProcessGroup& shm, ProcessGroup& tcp) {
      uint32_t seed = 900;
      for (DType dt : {DType::f32, DType::bf16, DType::i32}) {
        for (int64_t n : {int64_t(3), int64_t(1001), int64_t(300001)}) {
          Tensor comm = shm.make_comm_buffer(n, dt);
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
            if (op == ReduceOp::kAvg && !is_floating(dt)) continue;
            const int64_t a = n / 3, b = n / 2;  // [0, a) 2-D, [a, b) dst's own range, rest
            Tensor whole = random_tensor(dt, n, seed++ * 3 + uint32_t(rank), size > 2);
            Tensor ref = whole.clone();
            tcp.all_reduce(ref, op)->wait();
            for (int where = 0; where < 3; ++where) {  // comm buffer, plain over shm, TCP
              Tensor dst = where == 0 ? comm : zeros({n}, dt);
              Tensor first = whole.narrow(0, 0, a).clone().reshape({1, a});
              Tensor own = dst.narrow(0, a, b - a);
              own.copy_(whole.narrow(0, a, b - a));
              Tensor last = whole.narrow(0, b, n - b).clone();
              ProcessGroup& pg = where == 2 ? tcp : shm;
              pg.all_reduce_into({first, own, last}, dst, op)->wait();
              EXPECT_TRUE(same_bits(dst, ref)) << size << " ranks " << dtype_name(dt) << " "
                                               << to_string(op) << " n=" << n << " dst " << where;
              EXPECT_TRUE(same_bits(first.reshape({a}), whole.narrow(0, 0, a).contiguous()));
              EXPECT_TRUE(same_bits(last, whole.narrow(0, b, n - b).contiguous()));
            }
          }
        }
      }
    });
  }
}

// all_reduce_into's argument errors name the offending source, on every backend.
TEST(ShmTransport, AllReduceIntoArgumentErrors) {
  run_pairs(2, [](int, ProcessGroup& shm, ProcessGroup& tcp) {
    for (ProcessGroup* pg : {&shm, &tcp}) {
      Tensor dst = pg->make_comm_buffer(8, DType::f32);
      expect_error(
          [&] {
            pg->all_reduce_into({zeros({4}), zeros({3})}, dst);
          },
          {"[all_reduce_into]", "7 elements", "dst has 8"});
      expect_error(
          [&] {
            pg->all_reduce_into({zeros({4}), zeros({4}, DType::f64)}, dst);
          },
          {"[all_reduce_into]", "src 1 is f64"});
      expect_error(
          [&] {
            pg->all_reduce_into({zeros({2, 4}).transpose(0, 1)}, dst);
          },
          {"[all_reduce_into]", "src 0 must be contiguous"});
      expect_error(
          [&] {
            pg->all_reduce_into({dst.narrow(0, 4, 4), zeros({4})}, dst);
          },
          {"[all_reduce_into]", "src 0 overlaps dst"});
      expect_error(
          [&] {
            pg->all_reduce_into({zeros({8})}, zeros({2, 4}));
          },
          {"[all_reduce_into]", "dst must be 1-D"});
      expect_error([&] { pg->all_reduce_into({zeros({8}, DType::b8)}, zeros({8}, DType::b8)); },
                   {"[all_reduce_into]", "bool"});
    }
  });
}

// A comm buffer on one rank and a plain tensor on the other in one all_reduce
// is reported on both ranks, naming both (instead of reducing garbage).
TEST(ShmTransport, CommBufferOnOneRankOnlyIsAnError) {
  run_pairs(2, [](int rank, ProcessGroup& shm, ProcessGroup&) {
    Tensor buf = shm.make_comm_buffer(100, DType::f32);
    Tensor t = rank == 0 ? buf : zeros({100});
    expect_error([&] { shm.all_reduce(t)->wait(); },  // (each rank prints its log)
                 {"[all_reduce]", "ranks issued different collectives",
                  "all_reduce #0 (f32, 100 elements, sum, comm buffer #0 at byte 0)",
                  "all_reduce #0 (f32, 100 elements, sum)"});
  });
}

// The collective ops (what a traced DDP step runs) stage their inputs in a
// ring of two comm buffers per signature: five all-reduces of one signature in
// flight at once (so slots are reused before their results were collected)
// still give every result, on shm and TCP groups alike.
TEST(ShmTransport, CollectiveOpsReuseTheirCommBuffers) {
  run_pairs(2, [](int rank, ProcessGroup& shm, ProcessGroup& tcp) {
    for (ProcessGroup* g : {&shm, &tcp}) {
      // The ops address groups by id through a shared_ptr; this one does not own g.
      std::shared_ptr<ProcessGroup> pg(g, [](ProcessGroup*) {});
      std::vector<Tensor> handles, inputs;
      for (int k = 0; k < 5; ++k) {
        std::vector<Tensor> ts = {full({300}, double(k + rank)), full({2, 7}, double(10 * k))};
        handles.push_back(all_reduce_start(pg, ts, ReduceOp::kSum));
        inputs.push_back(ts[0]);
      }
      for (int k = 0; k < 5; ++k) {
        auto out = all_reduce_wait(pg, handles[size_t(k)], {zeros({300}), zeros({2, 7})});
        ASSERT_EQ(out.size(), 2u);
        EXPECT_EQ(out[0].min().item<float>(), float(2 * k + 1)) << g->transport() << " #" << k;
        EXPECT_EQ(out[0].max().item<float>(), float(2 * k + 1)) << g->transport() << " #" << k;
        EXPECT_EQ(out[1].shape(), (Dims{2, 7}));
        EXPECT_EQ(out[1].max().item<float>(), float(20 * k)) << g->transport() << " #" << k;
        EXPECT_EQ(inputs[size_t(k)].max().item<float>(), float(k + rank));  // inputs untouched
      }
    }
  });
}

// A group id bound to a comm buffer (a DDP bucket in a traced step) reduces
// in that buffer: an input that already is its slice is not copied, the
// results are the buffer's slices (not copies), a second start before the
// first result was collected keeps that result, and tensors of another size
// take the ring as before.
TEST(ShmTransport, CollectiveOpsReduceInABoundBuffer) {
  run_pairs(2, [](int rank, ProcessGroup& shm, ProcessGroup& tcp) {
    for (ProcessGroup* g : {&shm, &tcp}) {
      std::shared_ptr<ProcessGroup> pg(g, [](ProcessGroup*) {});
      Tensor buf = g->make_comm_buffer(314, DType::f32);
      const int64_t id = collective_group_id_in(pg, buf);
      const auto* lo = static_cast<const char*>(buf.data_ptr());
      auto inside = [&](const Tensor& t) {
        const auto* p = static_cast<const char*>(t.data_ptr());
        return t.impl()->storage == buf.impl()->storage && p >= lo &&
               p + t.numel() * 4 <= lo + 314 * 4;
      };
      Tensor first = buf.narrow(0, 0, 300);  // computed in the buffer already
      first.fill_(double(rank + 1));
      Tensor h = all_reduce_start(id, {first, full({2, 7}, double(rank))}, ReduceOp::kSum);
      auto out = all_reduce_wait(pg, h, {zeros({300}), zeros({2, 7})});
      ASSERT_EQ(out.size(), 2u);
      EXPECT_TRUE(inside(out[0]) && inside(out[1])) << g->transport();
      EXPECT_EQ(out[0].data_ptr(), first.data_ptr());
      EXPECT_EQ(out[0].min().item<float>(), 3.0f) << g->transport();
      EXPECT_EQ(out[1].max().item<float>(), 1.0f) << g->transport();
      // Two in flight: the first result is kept (a copy) when the second starts.
      Tensor h1 = all_reduce_start(id, {full({300}, 1.0), full({2, 7}, 2.0)}, ReduceOp::kSum);
      Tensor h2 = all_reduce_start(id, {full({300}, 5.0), full({2, 7}, 6.0)}, ReduceOp::kSum);
      auto r1 = all_reduce_wait(pg, h1, {zeros({300}), zeros({2, 7})});
      auto r2 = all_reduce_wait(pg, h2, {zeros({300}), zeros({2, 7})});
      EXPECT_FALSE(inside(r1[0]));
      EXPECT_EQ(r1[0].max().item<float>(), 2.0f) << g->transport();
      EXPECT_EQ(r1[1].max().item<float>(), 4.0f) << g->transport();
      EXPECT_TRUE(inside(r2[0]) && inside(r2[1]));
      EXPECT_EQ(r2[0].max().item<float>(), 10.0f) << g->transport();
      EXPECT_EQ(r2[1].min().item<float>(), 12.0f) << g->transport();
      // Another size: the ring, results not in the buffer.
      auto r3 =
          all_reduce_wait(pg, all_reduce_start(id, {full({5}, 1.0)}, ReduceOp::kSum), {zeros({5})});
      EXPECT_FALSE(inside(r3[0]));
      EXPECT_EQ(r3[0].max().item<float>(), 2.0f);
    }
  });
}

// Lists /dev/shm names containing `needle`.
std::vector<std::string> shm_names_with(const std::string& needle) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (std::strstr(e->d_name, needle.c_str())) out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

// The segment is unlinked as soon as every rank mapped it: nothing named after
// the group is in /dev/shm while it runs, nor after it is destroyed.
TEST(ShmTransport, NoSegmentLeftInDevShm) {
  TCPStoreServer server(loopback_server());
  const std::string prefix = unique_prefix("leak");
  std::vector<std::thread> ts;
  std::atomic<int> ready{0};
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      auto pg = make_gloo_group(client(server.port()), r, 2, options(1), prefix);
      EXPECT_EQ(pg->transport(), "shm");
      Tensor t = ones({1000});
      pg->all_reduce(t)->wait();
      ++ready;
      EXPECT_EQ(shm_names_with(prefix), std::vector<std::string>{});
      pg->barrier()->wait();
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ready.load(), 2);
  EXPECT_EQ(shm_names_with(prefix), std::vector<std::string>{});
}

// KILN_SHM=0 (read when options.shm is -1), options.shm = 0, and ranks that
// disagree all give TCP groups that still compute the right sums.
TEST(ShmTransport, SwitchesSelectTcp) {
  auto check = [](const std::function<int(int)>& shm_of, const char* env, const char* want) {
    if (env) ::setenv("KILN_SHM", env, 1);
    TCPStoreServer server(loopback_server());
    const std::string prefix = unique_prefix("switch");
    std::vector<std::thread> ts;
    for (int r = 0; r < 2; ++r) {
      ts.emplace_back([&, r] {
        auto pg = make_gloo_group(client(server.port()), r, 2, options(shm_of(r)), prefix);
        EXPECT_EQ(pg->transport(), want) << "rank " << r;
        Tensor t = full({10}, 1.5);
        pg->all_reduce(t)->wait();
        EXPECT_EQ(t.max().item<float>(), 3.0f);
      });
    }
    for (auto& t : ts) t.join();
    if (env) ::unsetenv("KILN_SHM");
  };
  check([](int) { return -1; }, "0", "tcp");
  check([](int) { return -1; }, nullptr, "shm");
  check([](int) { return 0; }, nullptr, "tcp");
  check([](int r) { return r == 0 ? 1 : 0; }, nullptr, "tcp");
}

// A peer that destroys its group while this rank waits in a collective: the
// error names the op, this rank and the peer at once (long before the
// timeout), and the group is unusable afterwards.
TEST(ShmTransport, PeerThatLeavesFailsTheCollective) {
  TCPStoreServer server(loopback_server());
  const std::string prefix = unique_prefix("leave");
  std::atomic<bool> started{false};
  std::thread peer([&] {
    auto pg = make_gloo_group(client(server.port()), 1, 2, options(1), prefix);
    while (!started) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(100ms);
  });  // destroyed without joining all_reduce #0
  auto pg = make_gloo_group(client(server.port()), 0, 2, options(1), prefix);
  auto t0 = Clock::now();
  ::testing::internal::CaptureStderr();
  auto w = pg->all_reduce(ones({3000000}));  // 12 MB: several chunks
  started = true;
  expect_error([&] { w->wait(); },
               {"[all_reduce] all_reduce #0 f32[3000000] sum failed on rank 0/2",
                "shared memory: rank 1 left the group", "(peer: rank 1)"});
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("a collective failed"), std::string::npos) << log;
  EXPECT_LT(Clock::now() - t0, 3s);
  expect_error([&] { pg->barrier()->wait(); }, {"[barrier]", "unusable after an earlier failure"});
  peer.join();
}

// A peer that times out (never joins) fails the collective after the group's
// timeout with an Error naming the peer.
TEST(ShmTransport, TimeoutNamesThePeer) {
  TCPStoreServer server(loopback_server());
  const std::string prefix = unique_prefix("timeout");
  std::atomic<bool> done{false};
  std::thread peer([&] {
    auto pg = make_gloo_group(client(server.port()), 1, 2, options(1, 400ms), prefix);
    while (!done) std::this_thread::sleep_for(1ms);
  });
  auto pg = make_gloo_group(client(server.port()), 0, 2, options(1, 400ms), prefix);
  auto t0 = Clock::now();
  ::testing::internal::CaptureStderr();
  expect_error([&] { pg->broadcast(ones({4}), 1)->wait(3000ms); },
               {"[broadcast] broadcast #0 f32[4] root=1 failed on rank 0/2", "timed out", "rank 1",
                "(peer: rank 1)"});
  ::testing::internal::GetCapturedStderr();
  EXPECT_LT(Clock::now() - t0, 2s);
  done = true;
  peer.join();
}

// Ranks as processes: rank 1's process dies while rank 0 waits for it in an
// all-reduce; rank 0 gets a kiln::Error naming the peer well within the
// timeout (its pid is watched), and destroying the group does not hang.
TEST(ShmTransport, PeerProcessDiesMidCollective) {
  const std::string prefix = unique_prefix("die");
  // Forked before the server thread starts (see forked_ranks.h).
  kiln::testing::ForkedRanks ranks(2, [&](int r, uint64_t port) {
    auto pg = make_gloo_group(client(uint16_t(port)), r, 2, options(1, 8000ms), prefix);
    Tensor t = ones({64});
    pg->all_reduce(t)->wait();
    if (r == 1) {
      std::this_thread::sleep_for(200ms);
      ::kill(::getpid(), SIGKILL);
    }
    auto t0 = Clock::now();
    std::string msg;
    try {
      pg->all_reduce(t)->wait();
    } catch (const Error& e) {
      msg = e.what();
    }
    bool ok = msg.find("all_reduce #1") != std::string::npos &&
              msg.find("failed on rank 0/2") != std::string::npos &&
              msg.find("exited") != std::string::npos &&
              msg.find("(peer: rank 1)") != std::string::npos && Clock::now() - t0 < 3s;
    if (!ok) std::fprintf(stderr, "unexpected: '%s'\n", msg.c_str());
    return ok ? 0 : 1;
  });
  TCPStoreServer server(loopback_server());
  ranks.start(server.port());
  const auto statuses = ranks.wait(Clock::now() + 20s);
  for (size_t r = 0; r < statuses.size(); ++r) {
    const int status = statuses[r];
    if (status == -1) {
      ADD_FAILURE() << "rank " << r << " did not finish in time";
      continue;
    }
    if (r == 0) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exit status " << status;
    } else {
      EXPECT_TRUE(WIFSIGNALED(status)) << "rank 1 should have been killed";
    }
  }
  EXPECT_EQ(shm_names_with(prefix), std::vector<std::string>{});
}

}  // namespace
}  // namespace kiln::dist
