// A MODEL, not a measurement: how much of DDP's gradient all-reduce would stay
// exposed after backward on 8 GPUs, from a measured backward timeline and a
// published bus bandwidth.
//
// Input: when each DDP bucket becomes ready during backward (its last
// gradient) and its size. By default it is measured here: bench/mlp_step.h's
// MLP (784-1024-1024-10, batch 128) under DDP in a one-rank group on the CPU,
// medians over --iters backward passes; --ready "MS:BYTES,..." --end MS takes
// a timeline measured elsewhere instead: ddp_bench --device cuda --ranks 1
// prints one measured on the GPU as "model input: --ready ... --end ..."
// (ms from backward's start on the compute stream; bench/ddp_timeline.h).
//
// Model: one communication stream runs the buckets in order, bucket b
// starting at max(ready_b, end_{b-1}) and taking
//   alpha + bytes_b * 2 (n - 1) / n / busbw
// (a ring all-reduce: nccl-tests' definition of bus bandwidth, busbw = algbw *
// 2 (n - 1) / n, NVIDIA/nccl-tests doc/PERFORMANCE.md). Default busbw 450 GB/s:
// H100 SXM's NVLink 4 gives 900 GB/s per GPU in both directions together (450
// each way; NVIDIA's H100 datasheet), the bound nccl-tests' busbw is measured
// against; reports of 8x H100 NVLink all_reduce_perf give 460-480 GB/s at large
// sizes (with NVLink SHARP). alpha, the fixed cost per collective, is an
// assumption (--alpha-us, default 15). Backward on an H100 is much shorter than on this
// host: the timeline is also shown scaled down (--scales), which is where
// communication becomes exposed.
//
//   ddp_overlap_model [--iters N] [--ranks N] [--busbw GBPS] [--alpha-us US]
//                     [--bucket-cap-mb X] [--first-bucket-mb X] [--scales A,B,...]
//                     [--ready MS:BYTES,... --end MS]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "ddp_timeline.h"
#include "kiln/distributed/ddp.h"
#include "kiln/thread_pool.h"
#include "mlp_step.h"

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;

using bench::ReadyBucket;

struct Timeline {
  std::vector<ReadyBucket> buckets;  // in launch order
  double end_ms = 0;                 // backward's own compute ends
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The MLP's backward under DDP in a one-rank group: when each bucket was launched.
Timeline measure(int iters, double cap_mb, double first_mb) {
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(kiln::dist::free_loopback_port()).c_str(), 1);
  set_num_threads(1);
  dist::init_process_group();
  bench::MlpStep s;
  dist::DistributedDataParallel ddp(s.model,
                                    {.bucket_cap_mb = cap_mb, .first_bucket_mb = first_mb});
  const size_t nb = ddp.num_buckets();
  std::vector<std::vector<double>> ready(nb);
  std::vector<double> end;
  for (int i = 0; i < iters + 3; ++i) {
    s.opt->zero_grad();
    Tensor loss = cross_entropy(ddp(s.x), s.y);
    const auto t0 = Clock::now();
    loss.backward();
    s.opt->step();
    if (i < 3) continue;
    auto launches = ddp.last_bucket_launch_times();
    for (size_t b = 0; b < nb; ++b)
      ready[b].push_back(std::chrono::duration<double, std::milli>(launches[b] - t0).count());
    end.push_back(std::chrono::duration<double, std::milli>(ddp.last_backward_end() - t0).count());
  }
  Timeline t;
  for (size_t b = 0; b < nb; ++b)
    t.buckets.push_back({median(ready[b]), 4.0 * double(ddp.bucket_buffer(b).numel())});
  t.end_ms = median(end);
  dist::destroy_process_group();
  return t;
}

// Prints the modelled schedule of `t` with its times multiplied by `scale`.
void simulate(const Timeline& t, double scale, int ranks, double busbw_gbps, double alpha_us) {
  const double factor = 2.0 * (ranks - 1) / ranks;
  double prev_end = 0, comm = 0;
  std::printf("  backward scaled x%g: compute ends at %.3f ms\n", scale, t.end_ms * scale);
  for (size_t b = 0; b < t.buckets.size(); ++b) {
    const ReadyBucket& k = t.buckets[b];
    const double ready = k.ready_ms * scale;
    const double dur = alpha_us * 1e-3 + k.bytes * factor / (busbw_gbps * 1e9) * 1e3;
    const double start = std::max(ready, prev_end);
    prev_end = start + dur;
    comm += dur;
    std::printf("    bucket %zu (%.2f MB): ready %.3f, all-reduce %.3f .. %.3f ms (%.3f ms)\n", b,
                k.bytes / 1e6, ready, start, prev_end, dur);
  }
  const double exposed = std::max(0.0, prev_end - t.end_ms * scale);
  std::printf("    communication %.3f ms, exposed after backward %.3f ms (%.0f%% hidden)\n", comm,
              exposed, comm > 0 ? 100.0 * (1.0 - std::min(exposed, comm) / comm) : 100.0);
}

int run(int argc, char** argv) {
  int iters = 20, ranks = 8;
  double busbw = 450, alpha_us = 15, cap_mb = 25, first_mb = 1, end_ms = -1;
  std::string ready, scales = "1,0.1,0.01,0.002";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--iters")
      iters = std::max(1, std::atoi(v));
    else if (a == "--ranks")
      ranks = std::max(2, std::atoi(v));
    else if (a == "--busbw")
      busbw = std::atof(v);
    else if (a == "--alpha-us")
      alpha_us = std::atof(v);
    else if (a == "--bucket-cap-mb")
      cap_mb = std::atof(v);
    else if (a == "--first-bucket-mb")
      first_mb = std::atof(v);
    else if (a == "--scales")
      scales = v;
    else if (a == "--ready")
      ready = v;
    else if (a == "--end")
      end_ms = bench::parse_timeline_number(v, "--end");
    else {
      std::fprintf(stderr,
                   "usage: ddp_overlap_model [--iters N] [--ranks N] [--busbw GBPS] "
                   "[--alpha-us US] [--bucket-cap-mb X] [--first-bucket-mb X] [--scales A,B] "
                   "[--ready MS:BYTES,... --end MS]\n");
      return a == "--help" ? 0 : 2;
    }
    ++i;
  }
  if (busbw <= 0 || (!ready.empty() && end_ms < 0)) {
    std::fprintf(stderr, "ddp_overlap_model: --busbw must be > 0; --ready needs --end\n");
    return 2;
  }
  Timeline t;
  if (ready.empty()) {
    t = measure(iters, cap_mb, first_mb);
  } else {
    t.buckets = bench::parse_ready(ready);
    t.end_ms = end_ms;
  }
  std::printf(
      "MODEL, not a measurement: DDP's bucket all-reduces on %d GPUs, ring all-reduce at %.0f "
      "GB/s bus bandwidth (+%.0f us each, assumed), over the backward timeline %s\n",
      ranks, busbw, alpha_us,
      ready.empty() ? "measured here (MLP 784-1024-1024-10, batch 128, CPU, one thread)"
                    : "given with --ready");
  std::stringstream in(scales);
  std::string item;
  while (std::getline(in, item, ','))
    if (const double s = std::atof(item.c_str()); s > 0) simulate(t, s, ranks, busbw, alpha_us);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // bad --ready/--end (kiln::Error) among them
    std::fprintf(stderr, "ddp_overlap_model: %s\n", e.what());
    return 2;
  }
}
