// DistributedDataParallel on the MLP step of bench/mlp_step.h (784-1024-1024-10,
// batch 128 per rank, SGD momentum), 2 ranks over Gloo on one host (shared
// memory; loopback TCP with KILN_SHM=0), one compute thread each. Rows, all per training step
// (median over the timed steps):
//   single   one process alone (the other rank idles at a barrier)
//   local    both ranks step at once, without communicating
//   ddp      DistributedDataParallel (bucketed all-reduce overlapped with backward),
//            with zero_grad() (set_to_none), with zero_grad(false), with the
//            gradients copied into the buckets after zero_grad() instead of
//            computed there (compute_grads_in_buckets=false: the code before
//            session 7), and with the bf16 and fp16 compression hooks
//   naive    backward, then one blocking all-reduce per gradient
//   flat     backward, then one all-reduce of all gradients (no overlap)
//   comm     the all-reduce of the gradients' bytes alone, in a comm buffer (as
//            DDP's buckets) and in a plain tensor
// plus the fraction of DDP's all-reduce time that ran while backward was still
// computing, and the wait after it, from the Work timestamps. A row's time
// per step is the slower rank's. Each row shows it against `single` (each
// rank has one compute thread, as the single process does) and against
// `local` (the same two processes on the same cores, minus the
// communication: what DDP can at best reach when the ranks run at different
// speeds), and the CPU time per rank and step (all its threads). By default every round runs one
// step of every row, so load from other processes hits the rows alike.
//
//   ddp_bench [--iters N] [--rounds N] [--warmup N] [--bucket-cap-mb X]
//             [--first-bucket-mb X] [--compile] [--trace] [--rows S] [--device cuda [--ranks 1]]
// --rows S keeps only the rows whose name contains S (besides single and both).
// --device cuda (ddp_bench_cuda.cpp): the DDP step with CUDA parameters over
// an NCCL group, printing each bucket all-reduce's schedule on the streams
// (ready, start, end against backward's end) instead of the table; on the
// emulated device (PoCL) that is the schedule, not speed. --ranks 1 (with
// --device cuda): one rank, the DDP step against the plain single-GPU step
// (paired) and a one-rank all-reduce's time (NCCL refuses two ranks on one GPU).
// --trace (eager): instead of the table, each rank's step split into phases
// (plain, DDP, DDP with the gradients copied into the buckets), how many
// gradients backward computed in their buckets or copied there per step, and
// the DDP backward's timeline (bucket launches, all-reduce start and end).
// It starts its 2 ranks itself (fork + exec with RANK/WORLD_SIZE/MASTER_* set,
// KILN_NUM_THREADS=1); under kilnrun it runs as the given rank.
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/distributed/ddp.h"
#include "kiln/grad_destination.h"
#include "kiln/thread_pool.h"
#include "mlp_step.h"

namespace kiln::bench {
int ddp_cuda_schedule(int iters, int warmup, double bucket_cap_mb, double first_bucket_mb,
                      bool compiled);
}  // namespace kiln::bench

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;

struct Args {
  int iters = 40;
  int warmup = 3;
  int rounds = 0;  // 0: one per step (every row steps once per round)
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  bool compile = false;
  bool trace = false;
  bool cuda = false;  // --device cuda
  int ranks = 2;      // --ranks (1: the one-rank GPU step, --device cuda only)
  std::string rows;   // --rows S: only the rows whose name contains S (and single, both)
};

double ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// CPU time of this process (every thread: compute, communication) or thread, in ms.
double cpu_ms(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Length of the union of [start, end) intervals, and the part before `cut`.
std::pair<double, double> busy_and_before(
    std::vector<std::pair<Clock::time_point, Clock::time_point>> iv, Clock::time_point cut) {
  std::sort(iv.begin(), iv.end());
  double busy = 0, before = 0;
  Clock::time_point s{}, e{};
  bool open = false;
  auto flush = [&] {
    busy += ms(e - s);
    if (s < cut) before += ms(std::min(e, cut) - s);
  };
  for (auto& [a, b] : iv) {
    if (open && a <= e) {
      e = std::max(e, b);
      continue;
    }
    if (open) flush();
    s = a;
    e = b;
    open = true;
  }
  if (open) flush();
  return {busy, before};
}

// One row of the table: a step, run by every rank (or by rank 0 alone).
struct Row {
  Row(const char* n, std::function<void()> s, bool only0 = false)
      : name(n), step(std::move(s)), rank0_only(only0) {}
  const char* name;
  std::function<void()> step;
  bool rank0_only;
  std::vector<double> times, cpu;  // per timed step: wall, this process's CPU
};

// --trace: where a step's time goes, per rank (medians over the traced steps,
// ms). Plain and DDP steps alternate; both ranks step at once. Times of the DDP
// backward are from its start: when each bucket was launched (its last
// gradient ready), when its all-reduce began and ended on the comm thread, and
// when backward's own compute ended (the final wait began).
void trace(const Args& a, dist::ProcessGroup& pg, bench::MlpStep& plain, bench::MlpStep& wrapped,
           dist::DistributedDataParallel& ddp, bench::MlpStep& copyin,
           dist::DistributedDataParallel& ddp_copyin) {
  // Wall and CPU time (this thread's, and the whole process's: the comm threads too).
  struct Stamp {
    Clock::time_point wall;
    double thread_ms, process_ms;
  };
  auto stamp = [&] {
    return Stamp{Clock::now(), cpu_ms(CLOCK_THREAD_CPUTIME_ID), cpu_ms(CLOCK_PROCESS_CPUTIME_ID)};
  };
  struct Phases {
    std::vector<double> fwd, bwd, opt, fwd_cpu, bwd_cpu, opt_cpu, total, total_cpu;
  } p, d, c;
  Clock::time_point bs;
  auto phase_step = [&](Phases& ph, const std::function<void()>& zero,
                        const std::function<Tensor()>& fwd, const std::function<void()>& opt) {
    Stamp t0 = stamp();
    zero();
    Tensor loss = fwd();
    Stamp t1 = stamp();
    bs = t1.wall;
    loss.backward();
    Stamp t2 = stamp();
    opt();
    Stamp t3 = stamp();
    ph.fwd.push_back(ms(t1.wall - t0.wall));
    ph.bwd.push_back(ms(t2.wall - t1.wall));
    ph.opt.push_back(ms(t3.wall - t2.wall));
    ph.fwd_cpu.push_back(t1.thread_ms - t0.thread_ms);
    ph.bwd_cpu.push_back(t2.thread_ms - t1.thread_ms);
    ph.opt_cpu.push_back(t3.thread_ms - t2.thread_ms);
    ph.total.push_back(ms(t3.wall - t0.wall));
    ph.total_cpu.push_back(t3.process_ms - t0.process_ms);
    return t2.wall;
  };
  const size_t nb = ddp.num_buckets();
  std::vector<std::vector<double>> launch(nb), start(nb), end(nb);
  std::vector<double> compute_end, tail;
  const auto dest0 = autograd::grad_destination_stats();
  for (int i = 0; i < a.iters + a.warmup; ++i) {
    const bool keep = i >= a.warmup;
    Phases scratch;
    pg.barrier()->wait();
    phase_step(
        keep ? p : scratch, [&] { plain.opt->zero_grad(); },
        [&] { return cross_entropy(plain.model->forward(plain.x), plain.y); },
        [&] { plain.opt->step(); });
    // The two DDP variants alternate which goes first (position in the round matters).
    Clock::time_point done{}, ddp_bs{};
    for (int k = 0; k < 2; ++k) {
      pg.barrier()->wait();
      if ((k == 0) == (i % 2 == 0)) {
        done = phase_step(
            keep ? d : scratch, [&] { wrapped.opt->zero_grad(); },
            [&] { return cross_entropy(ddp(wrapped.x), wrapped.y); }, [&] { wrapped.opt->step(); });
        ddp_bs = bs;
      } else {
        phase_step(
            keep ? c : scratch, [&] { copyin.opt->zero_grad(); },
            [&] { return cross_entropy(ddp_copyin(copyin.x), copyin.y); },
            [&] { copyin.opt->step(); });
      }
    }
    bs = ddp_bs;
    if (!keep) continue;
    auto works = ddp.last_bucket_works();
    auto launches = ddp.last_bucket_launch_times();
    for (size_t b = 0; b < nb && b < works.size(); ++b) {
      launch[b].push_back(ms(launches[b] - bs));
      start[b].push_back(ms(works[b]->start_time() - bs));
      end[b].push_back(ms(works[b]->end_time() - bs));
    }
    compute_end.push_back(ms(ddp.last_backward_end() - bs));
    tail.push_back(ms(done - ddp.last_backward_end()));
  }
  auto line = [](const char* name, const Phases& ph) {
    std::printf(
        "  %-6s step %6.2f (process CPU %6.2f) | forward %5.2f (CPU %5.2f)  backward %5.2f (CPU "
        "%5.2f)  optimizer %5.2f (CPU %5.2f)\n",
        name, median(ph.total), median(ph.total_cpu), median(ph.fwd), median(ph.fwd_cpu),
        median(ph.bwd), median(ph.bwd_cpu), median(ph.opt), median(ph.opt_cpu));
  };
  for (int r = 0; r < pg.size(); ++r) {
    pg.barrier()->wait();
    if (r != pg.rank()) continue;
    std::printf(
        "rank %d, medians of %d steps, ms (CPU: the compute thread's, except the step's):\n", r,
        a.iters);
    line("plain", p);
    line("DDP", d);
    line("DDP cp", c);
    const auto dest1 = autograd::grad_destination_stats();
    const double n = static_cast<double>(a.iters + a.warmup);
    std::printf(
        "  gradients per DDP step: %.1f computed in their bucket, %.1f copied there by "
        "autograd; DDP cp: every gradient copied into its bucket by DDP\n",
        static_cast<double>(dest1.computed_in_place - dest0.computed_in_place) / n,
        static_cast<double>(dest1.copied - dest0.copied) / n);
    std::printf("  DDP backward: own compute ends at %.2f, then %.2f waiting for buckets\n",
                median(compute_end), median(tail));
    for (size_t b = 0; b < nb; ++b)
      std::printf(
          "    bucket %zu (%lld elements): launched %.2f, all-reduce %.2f .. %.2f (%.2f; "
          "wake-up %.3f)\n",
          b, static_cast<long long>(ddp.bucket_buffer(b).numel()), median(launch[b]),
          median(start[b]), median(end[b]), median(end[b]) - median(start[b]),
          median(start[b]) - median(launch[b]));
    std::fflush(stdout);
  }
  pg.barrier()->wait();
}

// Forward + backward through `ddp`, compiled unless --compile is off.
auto ddp_fwd_bwd(dist::DistributedDataParallel& ddp, const Args& a, const char* name) {
  return compile(
      [&ddp](const Tensor& x, const Tensor& y) {
        Tensor loss = cross_entropy(ddp(x), y);
        loss.backward();
        return loss;
      },
      {.enabled = a.compile, .name = name});
}

// Overlap of DDP's all-reduces with backward, per timed step.
struct Overlap {
  std::vector<double> hidden, tail, comm;
  // Records the last step, from its Work timestamps.
  void record(const dist::DistributedDataParallel& ddp) {
    std::vector<std::pair<Clock::time_point, Clock::time_point>> iv;
    for (auto& w : ddp.last_bucket_works()) iv.emplace_back(w->start_time(), w->end_time());
    auto [busy, before] = busy_and_before(iv, ddp.last_backward_end());
    Clock::time_point last_end = ddp.last_backward_end();
    for (auto& [b, e] : iv) last_end = std::max(last_end, e);
    hidden.push_back(busy > 0 ? before / busy : 0.0);
    tail.push_back(ms(last_end - ddp.last_backward_end()));
    comm.push_back(busy);
  }
};

// Runs the rows in interleaved rounds (so load from elsewhere hits them alike).
void run_rounds(const Args& a, dist::ProcessGroup& pg, std::vector<Row>& rows, int rounds,
                const dist::DistributedDataParallel& ddp, Overlap& overlap) {
  for (int round = 0; round < rounds; ++round) {
    const int n = a.iters / rounds + (round < a.iters % rounds ? 1 : 0);
    for (Row& row : rows) {
      const bool runs = !row.rank0_only || pg.rank() == 0;
      for (int i = 0; i < (round == 0 ? a.warmup : 0) && runs; ++i) row.step();
      for (int i = 0; i < n; ++i) {
        pg.barrier()->wait();
        if (!runs) continue;
        const double c0 = cpu_ms(CLOCK_PROCESS_CPUTIME_ID);
        auto t0 = Clock::now();
        row.step();
        row.times.push_back(ms(Clock::now() - t0));
        row.cpu.push_back(cpu_ms(CLOCK_PROCESS_CPUTIME_ID) - c0);
        // (a traced step's all-reduces are IR nodes: DDP holds no Works for them)
        if (!a.compile && std::strncmp(row.name, "DDP (", 5) == 0) overlap.record(ddp);
      }
    }
  }
}

// Every rank's step times and CPU reach rank 0. A row's time per step is the
// slower rank's (the job's step; a DDP rank waits for the other anyway).
// Returns, on rank 0, each row's job time and mean CPU per rank.
std::pair<std::vector<double>, std::vector<double>> gather_rows(const Args& a,
                                                                dist::ProcessGroup& pg,
                                                                const std::vector<Row>& rows) {
  const auto nrows = static_cast<int64_t>(rows.size());
  Tensor mine = zeros({nrows, a.iters + 1}, DType::f64);
  for (size_t i = 0; i < rows.size(); ++i) {
    double* m = mine.data<double>() + static_cast<int64_t>(i) * (a.iters + 1);
    for (size_t k = 0; k < rows[i].times.size(); ++k) m[k] = rows[i].times[k];
    m[a.iters] = median(rows[i].cpu);
  }
  std::vector<Tensor> all;
  for (int r = 0; r < pg.size(); ++r) all.push_back(zeros({nrows, a.iters + 1}, DType::f64));
  pg.all_gather(all, mine)->wait();
  std::vector<double> job(rows.size()), cpu(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<double> t(static_cast<size_t>(a.iters), 0.0);
    int n = 0;
    for (const Tensor& x : all) {
      const double* m = x.data<double>() + static_cast<int64_t>(i) * (a.iters + 1);
      if (m[a.iters] == 0.0) continue;  // this rank does not run the row
      for (int k = 0; k < a.iters; ++k) t[size_t(k)] = std::max(t[size_t(k)], m[k]);
      cpu[i] += m[a.iters];
      ++n;
    }
    job[i] = median(t);
    cpu[i] /= std::max(n, 1);
  }
  return {job, cpu};
}

// --rows: drops the rows whose name lacks `part`, but single and both (the ratios' references).
void keep_rows(std::vector<Row>& rows, const std::string& part) {
  if (part.empty()) return;
  std::vector<Row> kept;
  for (size_t i = 0; i < rows.size(); ++i)
    if (i < 2 || std::strstr(rows[i].name, part.c_str())) kept.push_back(rows[i]);
  rows = std::move(kept);
}

int worker(const Args& a) {
  set_num_threads(1);
  dist::init_process_group();
  auto pg = dist::default_group();
  const int rank = pg->rank();
  // `plain` runs the rows without DDP; `wrapped` is DDP's (its hooks stay on its parameters).
  bench::MlpStep plain, wrapped, kept, compressed, halved, copied, copyin;
  int64_t numel = 0;
  for (auto& p : plain.model->parameters()) numel += p.numel();
  dist::DistributedDataParallel ddp(
      wrapped.model, {.bucket_cap_mb = a.bucket_cap_mb, .first_bucket_mb = a.first_bucket_mb});
  auto fwd_bwd = ddp_fwd_bwd(ddp, a, "ddp_bench");
  // zero_grad(false): .grad stays the bucket view (own compiled function: .grad is defined).
  dist::DistributedDataParallel ddp_kept(
      kept.model, {.bucket_cap_mb = a.bucket_cap_mb, .first_bucket_mb = a.first_bucket_mb});
  auto fwd_bwd_kept = ddp_fwd_bwd(ddp_kept, a, "ddp_bench_kept");
  // Paired "before": gradients copied into the buckets (eager: before session 7;
  // compiled: before session 8, copied into a comm buffer and the results out).
  dist::DistributedDataParallel ddp_copyin(copyin.model, {.bucket_cap_mb = a.bucket_cap_mb,
                                                          .first_bucket_mb = a.first_bucket_mb,
                                                          .compute_grads_in_buckets = false});
  auto fwd_bwd_copyin = ddp_fwd_bwd(ddp_copyin, a, "ddp_bench_copyin");
  // The same with the bf16 compression hook (half the bytes on the wire).
  dist::DistributedDataParallel ddp16(compressed.model, {.bucket_cap_mb = a.bucket_cap_mb,
                                                         .first_bucket_mb = a.first_bucket_mb,
                                                         .trace_collectives = false});
  ddp16.register_comm_hook(dist::bf16_compress_hook);
  auto fwd_bwd16 = ddp_fwd_bwd(ddp16, a, "ddp_bench_bf16");
  dist::DistributedDataParallel ddp_f16(halved.model, {.bucket_cap_mb = a.bucket_cap_mb,
                                                       .first_bucket_mb = a.first_bucket_mb,
                                                       .trace_collectives = false});
  ddp_f16.register_comm_hook(dist::fp16_compress_hook);
  auto fwd_bwd_f16 = ddp_fwd_bwd(ddp_f16, a, "ddp_bench_f16");
  // DDP's default reduction once more, as an explicit comm hook, in another
  // row position: how much the position in the round moves a row.
  dist::DistributedDataParallel ddp_copy(copied.model, {.bucket_cap_mb = a.bucket_cap_mb,
                                                        .first_bucket_mb = a.first_bucket_mb,
                                                        .trace_collectives = false});
  ddp_copy.register_comm_hook(dist::allreduce_hook);
  auto fwd_bwd_copy = ddp_fwd_bwd(ddp_copy, a, "ddp_bench_copy");
  auto plain_backward = [&] {
    plain.opt->zero_grad();
    cross_entropy(plain.model->forward(plain.x), plain.y).backward();
  };
  Tensor flat = zeros({numel});
  Tensor flat_comm = pg->make_comm_buffer(numel, DType::f32);  // as DDP's buckets
  if (a.trace && !a.compile) {
    trace(a, *pg, plain, wrapped, ddp, copyin, ddp_copyin);
    dist::destroy_process_group();
    return 0;
  }
  std::vector<Row> rows = {
      {"single process", [&] { plain.step(plain.x, plain.y); }, true},
      {"both ranks, no communication", [&] { plain.step(plain.x, plain.y); }},
      {"DDP (overlapped buckets)",
       [&] {
         wrapped.opt->zero_grad();
         fwd_bwd(wrapped.x, wrapped.y);
         wrapped.opt->step();
       }},
      {"DDP, grads copied into buckets (before)",
       [&] {
         copyin.opt->zero_grad();
         fwd_bwd_copyin(copyin.x, copyin.y);
         copyin.opt->step();
       }},
      // .grad stays the bucket view: backward accumulates into the buckets (no copy)
      {"DDP, zero_grad(set_to_none=false)",
       [&] {
         kept.opt->zero_grad(false);
         fwd_bwd_kept(kept.x, kept.y);
         kept.opt->step();
       }},
      {"DDP + allreduce_hook (= default, other slot)",
       [&] {
         copied.opt->zero_grad();
         fwd_bwd_copy(copied.x, copied.y);
         copied.opt->step();
       }},
      {"DDP + bf16_compress_hook",
       [&] {
         compressed.opt->zero_grad();
         fwd_bwd16(compressed.x, compressed.y);
         compressed.opt->step();
       }},
      {"DDP + fp16_compress_hook",
       [&] {
         halved.opt->zero_grad();
         fwd_bwd_f16(halved.x, halved.y);
         halved.opt->step();
       }},
      {"naive: all-reduce each grad after backward",
       [&] {
         plain_backward();
         for (auto& p : plain.model->parameters())
           pg->all_reduce(p.grad(), dist::ReduceOp::kAvg)->wait();
         plain.opt->step();
       }},
      {"flat: one all-reduce after backward",
       [&] {
         plain_backward();
         std::vector<Tensor> gs;
         for (auto& p : plain.model->parameters()) gs.push_back(p.grad());
         pg->all_reduce_coalesced(gs, dist::ReduceOp::kAvg)->wait();
         plain.opt->step();
       }},
      {"all-reduce of the gradients' size, comm buffer",
       [&] { pg->all_reduce(flat_comm, dist::ReduceOp::kAvg)->wait(); }},
      {"all-reduce of the gradients' size, plain tensor",
       [&] { pg->all_reduce(flat, dist::ReduceOp::kAvg)->wait(); }},
  };
  keep_rows(rows, a.rows);
  Overlap overlap;
  const int rounds = a.rounds > 0 ? std::min(a.rounds, a.iters) : a.iters;
  run_rounds(a, *pg, rows, rounds, ddp, overlap);
  const auto [job, cpu] = gather_rows(a, *pg, rows);
  if (rank == 0) {
    const double single = job[0], local = job[1];
    std::printf(
        "MLP step 784-1024-1024-10, batch 128 per rank, SGD momentum; %d ranks over %s (%s), "
        "1 thread each; %s; %zu DDP bucket(s) (cap %.3g MB, first %.3g MB); "
        "%.1f MB of gradients; median of %d steps per row in %d interleaved rounds; a step "
        "lasts until the slower rank finished it\n"
        "  %-48s %8s  %7s  %7s  %s\n",
        pg->size(), pg->backend().c_str(), pg->transport().c_str(),
        a.compile ? "compiled forward+backward" : "eager", ddp.num_buckets(), a.bucket_cap_mb,
        a.first_bucket_mb, 4.0 * static_cast<double>(numel) / 1e6, a.iters, rounds, "", "wall",
        "/single", "/both", "CPU per rank (all its threads)");
    for (size_t i = 0; i < rows.size(); ++i) {
      if (std::strncmp(rows[i].name, "all-reduce", 10) == 0)
        std::printf("  %-48s %8.2f ms %18s %6.2f ms\n", rows[i].name, job[i], "", cpu[i]);
      else
        std::printf("  %-48s %8.2f ms  %6.3fx  %6.3fx  %6.2f ms\n", rows[i].name, job[i],
                    job[i] / single, job[i] / local, cpu[i]);
    }
    if (a.compile)
      std::printf(
          "  compiled: %d trace(s) and %d plan call(s) of the DDP step; zero_grad(false): %d "
          "and %d\n",
          fwd_bwd.stats().traces, fwd_bwd.stats().compiled_calls, fwd_bwd_kept.stats().traces,
          fwd_bwd_kept.stats().compiled_calls);
    if (!overlap.comm.empty())
      std::printf(
          "  DDP: all-reduces busy %.2f ms per step, %.0f%% of it while backward ran; "
          "%.2f ms of waiting after backward (medians)\n",
          median(overlap.comm), 100.0 * median(overlap.hidden), median(overlap.tail));
  }
  dist::destroy_process_group();
  return 0;
}

// Starts ranks 0 and 1 as copies of this program and waits (bounded) for them.
int launch(char** argv, int ranks) {
  const std::string port = std::to_string(kiln::dist::free_loopback_port());
  std::vector<pid_t> kids;
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::setenv("KILN_NUM_THREADS", "1", 1);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      ::execv("/proc/self/exe", argv);
      ::_exit(127);
    }
    kids.push_back(pid);
  }
  int rc = 0;
  const auto deadline = Clock::now() + std::chrono::minutes(10);
  for (size_t done = 0; done < kids.size();) {
    int status = 0;
    pid_t p = ::waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      ++done;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        rc = 1;
        for (pid_t k : kids) ::kill(k, SIGKILL);  // a failed rank would hang the other
      }
    } else if (Clock::now() > deadline) {
      for (pid_t k : kids) ::kill(k, SIGKILL);
      rc = 1;
    } else {
      ::usleep(10000);
    }
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("0"); };
    if (s == "--iters")
      a.iters = std::max(1, std::atoi(next().c_str()));
    else if (s == "--rounds")
      a.rounds = std::max(1, std::atoi(next().c_str()));
    else if (s == "--warmup")
      a.warmup = std::max(0, std::atoi(next().c_str()));
    else if (s == "--bucket-cap-mb")
      a.bucket_cap_mb = std::atof(next().c_str());
    else if (s == "--first-bucket-mb")
      a.first_bucket_mb = std::atof(next().c_str());
    else if (s == "--compile")
      a.compile = true;
    else if (s == "--trace")
      a.trace = true;
    else if (s == "--rows")
      a.rows = next();
    else if (s == "--ranks")
      a.ranks = std::clamp(std::atoi(next().c_str()), 1, 2);
    else if (s == "--device" && i + 1 < argc && std::string(argv[i + 1]) == "cuda")
      a.cuda = (++i, true);
    else {
      std::fprintf(stderr,
                   "usage: ddp_bench [--iters N] [--rounds N] [--warmup N] [--bucket-cap-mb X] "
                   "[--first-bucket-mb X] [--compile] [--trace] [--rows S] [--device cuda [--ranks "
                   "1]]\n");
      return s == "--help" ? 0 : 2;
    }
  }
  if (a.ranks == 1 && !a.cuda) {
    std::fprintf(stderr, "ddp_bench: --ranks 1 needs --device cuda (the CPU table runs 2 ranks)\n");
    return 2;
  }
  if (!std::getenv("RANK")) return launch(argv, a.ranks);
  try {
    if (a.cuda)
      return kiln::bench::ddp_cuda_schedule(a.iters, a.warmup, a.bucket_cap_mb, a.first_bucket_mb,
                                            a.compile);
    return worker(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK"), e.what());
    return 1;
  }
}
