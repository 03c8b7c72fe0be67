// The in-process thread group: a World holds one rendezvous slot per
// collective sequence number. Each rank's worker deposits its tensors in the
// slot; the last rank to arrive computes every rank's result from snapshots of
// all inputs; then each rank copies its own result into its own tensors. So no
// rank ever reads memory another rank is writing.
#include "distributed/thread_group.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "kiln/error.h"

namespace kiln::testing {
namespace {

using dist::Clock;
using dist::ReduceOp;
using Buffer = std::vector<char>;
using Millis = std::chrono::milliseconds;

// Raw bytes of a contiguous tensor.
Buffer snapshot(const Tensor& t) {
  Buffer b(t.numel() * t.element_size());
  if (!b.empty()) std::memcpy(b.data(), t.data_ptr(), b.size());
  return b;
}

void write_back(const Tensor& t, const Buffer& b) {
  KILN_ASSERT(b.size() == static_cast<size_t>(t.numel()) * t.element_size(), "size mismatch");
  if (!b.empty()) std::memcpy(t.data_ptr(), b.data(), b.size());
}

template <typename T>
double load(const Buffer& b, size_t i) {
  const T v = reinterpret_cast<const T*>(b.data())[i];
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}

// Element-wise reduction of the same-dtype buffers `in` (one per rank), in double.
Buffer reduce_buffers(const std::vector<const Buffer*>& in, DType dt, ReduceOp op) {
  Buffer out(in[0]->size());
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    T* o = reinterpret_cast<T*>(out.data());
    for (size_t i = 0; i < out.size() / sizeof(T); ++i) {
      double acc = load<T>(*in[0], i);
      for (size_t r = 1; r < in.size(); ++r) {
        const double v = load<T>(*in[r], i);
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg:
            acc += v;
            break;
          case ReduceOp::kMax:
            acc = std::max(acc, v);
            break;
          case ReduceOp::kMin:
            acc = std::min(acc, v);
            break;
          case ReduceOp::kProduct:
            acc *= v;
            break;
        }
      }
      if (op == ReduceOp::kAvg) acc /= static_cast<double>(in.size());
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        o[i] = T(static_cast<float>(acc));
      else
        o[i] = static_cast<T>(acc);
    }
  });
  return out;
}

// One collective as seen by all ranks.
struct Slot {
  std::vector<std::vector<Buffer>> inputs;   // [rank][tensor]
  std::vector<std::vector<Buffer>> results;  // [rank][tensor]; empty = unchanged
  std::vector<bool> arrived;
  int num_arrived = 0, num_departed = 0;
  bool computed = false;
  std::string error;  // set by the computing rank if inputs disagree
};

// What a collective does once every rank's inputs are in.
using Compute = std::function<void(Slot&)>;

class World {
 public:
  World(int size, Millis timeout) : size_(size), timeout_(timeout) {}

  // Deposits rank's inputs for collective `seq`, waits for the others, returns its results.
  std::vector<Buffer> rendezvous(uint64_t seq, int rank, std::vector<Buffer> inputs,
                                 const Compute& compute, const std::string& what) {
    std::unique_lock<std::mutex> lock(mu_);
    Slot& s = slots_[seq];
    if (s.inputs.empty()) {
      s.inputs.resize(static_cast<size_t>(size_));
      s.results.resize(static_cast<size_t>(size_));
      s.arrived.assign(static_cast<size_t>(size_), false);
    }
    s.inputs[static_cast<size_t>(rank)] = std::move(inputs);
    s.arrived[static_cast<size_t>(rank)] = true;
    if (++s.num_arrived == size_) {
      try {
        compute(s);
      } catch (const std::exception& e) {
        s.error = e.what();
      }
      s.inputs.clear();
      s.computed = true;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, timeout_, [&] { return s.computed; })) {
      std::string missing;
      for (int r = 0; r < size_; ++r)
        if (!s.arrived[static_cast<size_t>(r)])
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      // Leave the slot for late ranks; they time out on their own.
      throw Error(str("[thread_group] ", what, " timed out after ", timeout_.count(),
                      " ms on rank ", rank, ": rank(s) ", missing, " did not join"));
    }
    std::vector<Buffer> mine = std::move(s.results[static_cast<size_t>(rank)]);
    std::string err = s.error;
    if (++s.num_departed == size_) slots_.erase(seq);
    if (!err.empty()) throw Error(err);
    return mine;
  }

  int size() const { return size_; }

 private:
  int size_;
  Millis timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Slot> slots_;
};

class ThreadWork final : public dist::Work {
 public:
  explicit ThreadWork(std::string what, std::vector<Tensor> outs, Millis default_timeout)
      : what_(std::move(what)), outs_(std::move(outs)), default_timeout_(default_timeout) {}

  void wait(Millis timeout) override {
    if (timeout.count() < 0) timeout = default_timeout_;
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return done_; }))
      throw Error(str("[thread_group] ", what_, " did not finish within ", timeout.count(), " ms"));
    if (error_) std::rethrow_exception(error_);
  }
  bool is_completed() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  std::vector<Tensor> result() const override { return outs_; }
  Clock::time_point start_time() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return start_;
  }
  Clock::time_point end_time() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return end_;
  }
  std::string describe() const override { return what_; }

  void mark_started() {
    std::lock_guard<std::mutex> lock(mu_);
    start_ = Clock::now();
  }
  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      end_ = Clock::now();
      error_ = e;
      done_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::string what_;
  std::vector<Tensor> outs_;
  Millis default_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  Clock::time_point start_{}, end_{};
};

void check_dense(const Tensor& t, const char* op) {
  KILN_CHECK(t.defined(), "[thread_group] ", op, ": undefined tensor");
  KILN_CHECK(t.is_contiguous(), "[thread_group] ", op, ": tensor of shape ", t.shape(),
             " is not contiguous");
  KILN_CHECK(!t.is_symbolic(), "[thread_group] ", op, ": symbolic tensor");
}

class ThreadGroup final : public dist::ProcessGroup {
 public:
  ThreadGroup(std::shared_ptr<World> world, int rank, dist::ProcessGroupOptions opts)
      : world_(std::move(world)), rank_(rank), opts_(opts) {
    for (int i = 0; i < std::max(1, opts_.threads); ++i) workers_.emplace_back([this] { loop(); });
  }
  ~ThreadGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  std::string backend() const override { return "threads"; }
  const dist::ProcessGroupOptions& options() const override { return opts_; }

  dist::WorkPtr all_reduce(Tensor t, ReduceOp op) override { return all_reduce_coalesced({t}, op); }
  dist::WorkPtr all_reduce_coalesced(std::vector<Tensor> ts, ReduceOp op) override {
    for (auto& t : ts) check_dense(t, "all_reduce");
    std::vector<DType> dts;
    for (auto& t : ts) dts.push_back(t.dtype());
    const int n = size();
    return post("all_reduce", ts, ts, [dts, op, n](Slot& s) {
      for (int r = 1; r < n; ++r)
        KILN_CHECK(s.inputs[r].size() == s.inputs[0].size(), "[thread_group] all_reduce: rank ", r,
                   " gave ", s.inputs[r].size(), " tensors, rank 0 gave ", s.inputs[0].size());
      std::vector<Buffer> out;
      for (size_t k = 0; k < dts.size(); ++k) {
        std::vector<const Buffer*> in;
        for (int r = 0; r < n; ++r) {
          KILN_CHECK(s.inputs[r][k].size() == s.inputs[0][k].size(),
                     "[thread_group] all_reduce: "
                     "tensor ",
                     k, " has ", s.inputs[r][k].size(), " bytes on rank ", r, " and ",
                     s.inputs[0][k].size(), " on rank 0");
          in.push_back(&s.inputs[r][k]);
        }
        out.push_back(reduce_buffers(in, dts[k], op));
      }
      for (int r = 0; r < n; ++r) s.results[r] = out;
    });
  }
  dist::WorkPtr broadcast(Tensor t, int root) override {
    check_dense(t, "broadcast");
    check_rank(root, "broadcast");
    const int n = size();
    return post("broadcast", {t}, {t}, [root, n](Slot& s) {
      for (int r = 0; r < n; ++r)
        if (r != root) s.results[r] = s.inputs[root];
    });
  }
  dist::WorkPtr reduce(Tensor t, int root, ReduceOp op) override {
    check_dense(t, "reduce");
    check_rank(root, "reduce");
    const int n = size();
    DType dt = t.dtype();
    return post("reduce", {t}, {t}, [root, n, dt, op](Slot& s) {
      std::vector<const Buffer*> in;
      for (int r = 0; r < n; ++r) in.push_back(&s.inputs[r][0]);
      s.results[root] = {reduce_buffers(in, dt, op)};
    });
  }
  dist::WorkPtr all_gather(std::vector<Tensor> outs, Tensor in) override {
    check_dense(in, "all_gather");
    KILN_CHECK(static_cast<int>(outs.size()) == size(), "[thread_group] all_gather: ", outs.size(),
               " outputs for ", size(), " ranks");
    for (auto& o : outs) {
      check_dense(o, "all_gather");
      KILN_CHECK(o.numel() == in.numel() && o.dtype() == in.dtype(),
                 "[thread_group] all_gather: output of shape ", o.shape(),
                 " does not match input of shape ", in.shape());
    }
    const int n = size();
    return post("all_gather", {in}, outs, [n](Slot& s) {
      std::vector<Buffer> all;
      for (int r = 0; r < n; ++r) all.push_back(s.inputs[r][0]);
      for (int r = 0; r < n; ++r) s.results[r] = all;
    });
  }
  dist::WorkPtr reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    check_dense(out, "reduce_scatter");
    check_dense(in, "reduce_scatter");
    KILN_CHECK(in.numel() == out.numel() * size() && in.dtype() == out.dtype(),
               "[thread_group] reduce_scatter: input of shape ", in.shape(),
               " is not world size x output of shape ", out.shape());
    const int n = size();
    DType dt = in.dtype();
    return post("reduce_scatter", {in}, {out}, [n, dt, op](Slot& s) {
      std::vector<const Buffer*> ins;
      for (int r = 0; r < n; ++r) ins.push_back(&s.inputs[r][0]);
      Buffer all = reduce_buffers(ins, dt, op);
      const size_t chunk = all.size() / static_cast<size_t>(n);
      for (int r = 0; r < n; ++r)
        s.results[r] = {Buffer(all.begin() + static_cast<std::ptrdiff_t>(chunk * r),
                               all.begin() + static_cast<std::ptrdiff_t>(chunk * (r + 1)))};
    });
  }
  dist::WorkPtr barrier() override {
    return post("barrier", {}, {}, [](Slot&) {});
  }
  dist::WorkPtr send(Tensor, int, int) override {
    throw Error("[thread_group] send is not implemented by the test thread group");
  }
  dist::WorkPtr recv(Tensor, int, int) override {
    throw Error("[thread_group] recv is not implemented by the test thread group");
  }

 private:
  struct Task {
    uint64_t seq;
    std::vector<Tensor> ins, outs;
    Compute compute;
    std::shared_ptr<ThreadWork> work;
  };

  void check_rank(int r, const char* op) const {
    KILN_CHECK(r >= 0 && r < size(), "[thread_group] ", op, ": root ", r,
               " is not a rank of a group of size ", size());
  }

  dist::WorkPtr post(const char* op, std::vector<Tensor> ins, std::vector<Tensor> outs,
                     Compute compute) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t seq = next_seq_++;
    auto work = std::make_shared<ThreadWork>(str(op, " #", seq), outs, opts_.timeout);
    queue_.push_back({seq, std::move(ins), std::move(outs), std::move(compute), work});
    cv_.notify_one();
    return work;
  }

  void loop() {
    while (true) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task.work->mark_started();
      std::exception_ptr err;
      try {
        std::vector<Buffer> in;
        for (auto& t : task.ins) in.push_back(snapshot(t));
        std::vector<Buffer> res =
            world_->rendezvous(task.seq, rank_, std::move(in), task.compute, task.work->describe());
        for (size_t k = 0; k < res.size() && k < task.outs.size(); ++k)
          write_back(task.outs[k], res[k]);
      } catch (...) {
        err = std::current_exception();
      }
      task.work->finish(err);
    }
  }

  std::shared_ptr<World> world_;
  int rank_;
  dist::ProcessGroupOptions opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool quit_ = false;
  uint64_t next_seq_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace

std::vector<std::shared_ptr<dist::ProcessGroup>> make_thread_groups(
    int size, dist::ProcessGroupOptions opts) {
  KILN_CHECK(size >= 1, "[thread_group] size must be >= 1, got ", size);
  auto world = std::make_shared<World>(size, opts.timeout);
  std::vector<std::shared_ptr<dist::ProcessGroup>> groups;
  for (int r = 0; r < size; ++r) groups.push_back(std::make_shared<ThreadGroup>(world, r, opts));
  return groups;
}

namespace {

// Runs fn(rank) on `size` threads; rethrows the first exception of any rank.
void on_threads(int size, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

dist::ProcessGroupOptions test_group_options() {
  dist::ProcessGroupOptions o;
  o.timeout = std::chrono::milliseconds(30000);
  return o;
}

void run_ranks(int size, const std::function<void(int, dist::ProcessGroup&)>& fn,
               dist::ProcessGroupOptions opts) {
  auto groups = make_thread_groups(size, opts);
  on_threads(size, [&](int r) { fn(r, *groups[static_cast<size_t>(r)]); });
}

void run_gloo_ranks(int size, const std::function<void(int, dist::ProcessGroup&)>& fn,
                    std::chrono::milliseconds timeout, int shm) {
  dist::TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  dist::TCPStoreServer server(so);
  static std::atomic<int> job{0};
  const std::string prefix = str("ddp_test", job++);
  on_threads(size, [&](int r) {
    auto pg = dist::make_gloo_group(store_client(server.port(), timeout), r, size,
                                    loopback_options(timeout, shm), prefix);
    fn(r, *pg);
  });
}

dist::ProcessGroupOptions loopback_options(std::chrono::milliseconds timeout, int shm) {
  dist::ProcessGroupOptions o;
  o.timeout = timeout;
  o.host = "127.0.0.1";
  o.debug = 0;
  o.shm = shm;
  return o;
}

std::shared_ptr<dist::Store> store_client(uint16_t port, std::chrono::milliseconds timeout) {
  dist::TCPStoreOptions o;
  o.port = port;
  o.timeout = timeout;
  return std::make_shared<dist::TCPStore>(o);
}

}  // namespace kiln::testing
