// All-reduce bandwidth of the Gloo process group on one host: 2 ranks
// (threads of this process, each with its own store client, Gloo context and
// sockets), f32 sum, in place; over shared memory, or over loopback TCP with
// KILN_SHM=0. Algorithm bandwidth = bytes / time (for 2 ranks
// the bus bandwidth, bytes * 2(n-1)/n / time, is the same number). Prints a
// table; the median of several timed iterations after warm-up. Each size is
// measured on a plain tensor and on one from make_comm_buffer (over shared
// memory: reduced in place in the ranks' shared buffers, without staging).
//
//   allreduce_bench [--ranks N] [--sizes-mb 1,25,100]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kiln/distributed/process_group.h"
#include "kiln/functional.h"

using namespace kiln;
using namespace kiln::dist;
using Seconds = std::chrono::duration<double>;

namespace {

struct Row {
  double mb;
  int iters;
  double median_s, best_s;
  bool comm_buffer;  // the tensor came from make_comm_buffer
};

std::vector<double> parse_sizes(const std::string& s) {
  std::vector<double> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    out.push_back(std::atof(s.substr(pos, comma - pos).c_str()));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2;
  std::vector<double> sizes = {1, 25, 100};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--ranks") ranks = std::atoi(argv[i + 1]);
    if (a == "--sizes-mb") sizes = parse_sizes(argv[i + 1]);
  }
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  TCPStoreServer server(so);
  std::vector<Row> rows(2 * sizes.size());
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::string transport;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        TCPStoreOptions co;
        co.port = server.port();
        ProcessGroupOptions po;
        po.host = "127.0.0.1";
        po.timeout = std::chrono::milliseconds(60000);
        po.debug = 0;
        auto pg = make_gloo_group(std::make_shared<TCPStore>(co), r, ranks, po, "bench");
        if (r == 0) transport = pg->transport();
        for (size_t k = 0; k < rows.size(); ++k) {
          const size_t s = k / 2;
          const bool comm = k % 2 == 1;
          int64_t n = int64_t(sizes[s] * 1e6 / 4);
          Tensor t = comm ? pg->make_comm_buffer(n, DType::f32) : ones({n});
          if (comm) t.fill_(1.0);
          int iters = sizes[s] <= 2 ? 40 : (sizes[s] <= 30 ? 12 : 5);
          for (int w = 0; w < 2; ++w) pg->all_reduce(t)->wait();
          std::vector<double> times;
          for (int it = 0; it < iters; ++it) {
            pg->barrier()->wait();  // start together
            auto t0 = std::chrono::steady_clock::now();
            pg->all_reduce(t)->wait();
            times.push_back(Seconds(std::chrono::steady_clock::now() - t0).count());
          }
          std::sort(times.begin(), times.end());
          if (r == 0) rows[k] = {sizes[s], iters, times[times.size() / 2], times[0], comm};
        }
        pg->barrier()->wait();
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    if (!errors[size_t(r)].empty()) {
      std::fprintf(stderr, "rank %d: %s\n", r, errors[size_t(r)].c_str());
      return 1;
    }
  }
  std::printf("Gloo all_reduce (f32 sum, in place), %d ranks as threads, %s\n", ranks,
              transport == "shm" ? "shared memory" : "loopback TCP");
  std::printf("%10s %-12s %6s %12s %12s %20s %18s\n", "size (MB)", "tensor", "iters", "median (ms)",
              "best (ms)", "algbw median (GB/s)", "algbw best (GB/s)");
  for (const Row& row : rows)
    std::printf("%10.0f %-12s %6d %12.2f %12.2f %20.3f %18.3f\n", row.mb,
                row.comm_buffer ? "comm buffer" : "plain", row.iters, row.median_s * 1e3,
                row.best_s * 1e3, row.mb * 1e6 / row.median_s / 1e9,
                row.mb * 1e6 / row.best_s / 1e9);
  std::printf("(reference from the issue: PyTorch's Gloo reaches ~1.0 GB/s at 25 MB here)\n");
  return 0;
}
