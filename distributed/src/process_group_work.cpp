// Work handles, the ring log of recent collectives, and argument checks shared
// by every process-group backend.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "kiln/error.h"
#include "kiln/profiler.h"
#include "process_group_impl.h"

namespace kiln::dist::detail {

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The collective's bytes per rank ("f32" x numel); 0 when it has no dtype.
int64_t bytes_of(const CollectiveInfo& info) {
  for (int d = 0; d < kNumDTypes; ++d)
    if (info.dtype == dtype_name(DType(d)))
      return info.numel * static_cast<int64_t>(dtype_size(DType(d)));
  return 0;
}

// A finished collective as a span on the thread that ran it (a lane).
void profile_collective(const CollectiveInfo& info, Clock::time_point start,
                        Clock::time_point end) {
  const int64_t bytes = bytes_of(info);
  const double secs = std::chrono::duration<double>(end - start).count();
  std::string args = kiln::str("\"seq\":", info.seq, ",\"bytes\":", bytes);
  if (!info.dtype.empty())
    args +=
        kiln::str(",\"dtype\":\"", info.dtype, "\",\"shape\":", profiler::json_quote(info.shape));
  if (!info.detail.empty()) args += ",\"detail\":" + profiler::json_quote(info.detail);
  if (bytes > 0 && secs > 0) args += kiln::str(",\"GB/s\":", double(bytes) / secs / 1e9);
  profiler::record_span("collective", info.op, ns_of(start), ns_of(end), std::move(args));
}

}  // namespace

std::string CollectiveInfo::str() const {
  std::string s = kiln::str(op, " #", seq);
  if (!dtype.empty()) s += kiln::str(" ", dtype, shape);
  if (!detail.empty()) s += kiln::str(" ", detail);
  return s;
}

std::string CollectiveInfo::signature() const {
  std::string s = op + "(";
  if (!dtype.empty()) s += kiln::str(dtype, ", ", numel, " elements");
  if (!detail.empty()) s += kiln::str(dtype.empty() ? "" : ", ", detail);
  return s + ")";
}

// ---- CollectiveLog ----

uint64_t CollectiveLog::add(const std::string& what) {
  std::lock_guard lock(mu_);
  uint64_t id = next_id_++;
  entries_.push_back({id, what, State::kQueued, Clock::now(), {}, {}, {}});
  while (entries_.size() > capacity_) entries_.pop_front();
  return id;
}

CollectiveLog::Entry* CollectiveLog::find(uint64_t id) {
  for (auto& e : entries_)
    if (e.id == id) return &e;
  return nullptr;  // already rotated out
}

void CollectiveLog::started(uint64_t id) {
  std::lock_guard lock(mu_);
  if (Entry* e = find(id)) {
    e->state = State::kRunning;
    e->start = Clock::now();
  }
}

void CollectiveLog::finished(uint64_t id, const std::string& error) {
  std::lock_guard lock(mu_);
  if (Entry* e = find(id)) {
    e->state = error.empty() ? State::kDone : State::kFailed;
    e->end = Clock::now();
    e->error = error;
  }
}

std::string CollectiveLog::dump(const std::string& header) const {
  std::lock_guard lock(mu_);
  auto now = Clock::now();
  std::string s = kiln::str(header, " (last ", entries_.size(), " ops, oldest first):\n");
  for (const auto& e : entries_) {
    s += "  " + e.what + ": ";
    switch (e.state) {
      case State::kQueued:
        s += kiln::str("queued ", ms_between(e.queued, now), " ms ago, not started");
        break;
      case State::kRunning:
        s += kiln::str("RUNNING for ", ms_between(e.start, now), " ms");
        break;
      case State::kDone:
        s += kiln::str("done in ", ms_between(e.start, e.end), " ms");
        break;
      case State::kFailed:
        s += "FAILED: " + e.error;
        break;
    }
    s += "\n";
  }
  return s;
}

void print_log(const CollectiveLog& log, const std::string& where, const std::string& why) {
  std::string text = log.dump(kiln::str("[kiln.dist] ", where, ": ", why));
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

// ---- WorkImpl ----

WorkImpl::WorkImpl(CollectiveInfo info, std::string where, std::vector<Tensor> results,
                   Millis default_timeout, std::shared_ptr<CollectiveLog> log, uint64_t log_id)
    : info_(std::move(info)),
      where_(std::move(where)),
      results_(std::move(results)),
      default_timeout_(default_timeout),
      log_(std::move(log)),
      log_id_(log_id) {}

std::string WorkImpl::failure(const std::string& why) const {
  return kiln::str("[", info_.op, "] ", info_.str(), " failed on ", where_, ": ", why);
}

void WorkImpl::wait(Millis timeout) {
  profiler::Span span("collective", profiler::enabled() ? "wait " + info_.op : std::string());
  span.arg("seq", static_cast<int64_t>(info_.seq));
  if (timeout.count() < 0) timeout = default_timeout_;
  timeout = std::min<Millis>(timeout, std::chrono::hours(24 * 365));  // now + max overflows
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return state_ != State::kPending; })) {
    bool running = start_ != Clock::time_point{};
    lock.unlock();
    std::string msg =
        kiln::str("[", info_.op, "] ", info_.str(), " on ", where_, " did not finish within ",
                  timeout.count(), " ms (", running ? "running" : "still queued", ")");
    print_log(*log_, where_, "wait timed out on " + info_.str());
    throw Error(msg);
  }
  if (state_ == State::kFailed) throw Error(error_);
}

bool WorkImpl::is_completed() const {
  std::lock_guard lock(mu_);
  return state_ != State::kPending;
}

std::vector<Tensor> WorkImpl::result() const {
  std::lock_guard lock(mu_);
  return results_;
}

Clock::time_point WorkImpl::start_time() const {
  std::lock_guard lock(mu_);
  return start_;
}

Clock::time_point WorkImpl::end_time() const {
  std::lock_guard lock(mu_);
  return end_;
}

std::string WorkImpl::describe() const {
  return info_.str();
}

void WorkImpl::mark_started() {
  // The thread that runs collectives (a backend's lane), named in traces.
  if (profiler::enabled()) [[unlikely]]
    profiler::set_thread_name("collective lane");
  {
    std::lock_guard lock(mu_);
    start_ = Clock::now();
  }
  log_->started(log_id_);
}

void WorkImpl::mark_done() {
  {
    std::lock_guard lock(mu_);
    end_ = Clock::now();
    if (start_ == Clock::time_point{}) start_ = end_;
    state_ = State::kDone;
  }
  if (profiler::enabled()) [[unlikely]]
    profile_collective(info_, start_time(), end_time());
  log_->finished(log_id_);
  cv_.notify_all();
}

void WorkImpl::mark_failed(const std::string& message, const std::function<void()>& before_wake) {
  log_->finished(log_id_, message);
  if (before_wake) before_wake();
  {
    std::lock_guard lock(mu_);
    end_ = Clock::now();
    if (start_ == Clock::time_point{}) start_ = end_;
    state_ = State::kFailed;
    error_ = message;
  }
  cv_.notify_all();
}

std::shared_ptr<WorkImpl> failed_work(CollectiveInfo info, const std::string& where,
                                      std::shared_ptr<CollectiveLog> log,
                                      const std::string& message) {
  uint64_t id = log->add(info.str());
  auto w = std::make_shared<WorkImpl>(std::move(info), where, std::vector<Tensor>{}, Millis(0),
                                      std::move(log), id);
  w->mark_failed(message);
  return w;
}

// ---- argument checks ----

std::string shape_str(const Tensor& t) {
  return kiln::str(t.shape());
}

CollectiveInfo tensor_op(const char* op, const Tensor& t, std::string detail) {
  CollectiveInfo i;
  i.op = op;
  i.dtype = dtype_name(t.dtype());
  i.shape = shape_str(t);
  i.numel = t.numel();
  i.detail = std::move(detail);
  return i;
}

CollectiveInfo coalesced_info(const std::vector<Tensor>& ts, ReduceOp rop,
                              const std::function<void(const char*, const Tensor&)>& check) {
  KILN_CHECK(!ts.empty(), "[all_reduce_coalesced] no tensors given");
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    check("all_reduce_coalesced", ts[i]);
    KILN_CHECK(ts[i].dtype() == ts[0].dtype(), "[all_reduce_coalesced] tensor ", i, " is ",
               ts[i].dtype(), " but tensor 0 is ", ts[0].dtype(), "; all must share a dtype");
    total += ts[i].numel();
  }
  check_reducible("all_reduce_coalesced", ts[0].dtype(), rop);
  CollectiveInfo info = tensor_op("all_reduce_coalesced", ts[0], to_string(rop));
  info.numel = total;
  info.shape = kiln::str("[", total, " in ", ts.size(), " tensors]");
  return info;
}

void check_cpu_tensor(const char* op, const Tensor& t, const char* name) {
  KILN_CHECK(t.defined(), "[", op, "] ", name, " is undefined");
  KILN_CHECK(!t.is_symbolic(), "[", op, "] ", name,
             " is symbolic (collectives cannot run while tracing)");
  KILN_CHECK(t.device().is_cpu(), "[", op, "] ", name, " is on ", t.device(),
             "; the gloo backend takes CPU tensors");
  KILN_CHECK(t.is_contiguous(), "[", op, "] ", name, " must be contiguous; got shape ", t.shape(),
             " strides ", t.strides());
}

void check_all_reduce_into(const std::vector<Tensor>& srcs, const Tensor& dst) {
  constexpr const char* kOp = "[all_reduce_into] ";
  KILN_CHECK(dst.defined() && !dst.is_symbolic(), kOp, "dst is undefined or symbolic");
  KILN_CHECK(dst.dim() == 1 && dst.is_contiguous(), kOp, "dst must be 1-D and contiguous; got ",
             "shape ", dst.shape(), " strides ", dst.strides());
  int64_t total = 0;
  for (size_t i = 0; i < srcs.size(); ++i) {
    const Tensor& s = srcs[i];
    KILN_CHECK(s.defined() && !s.is_symbolic(), kOp, "src ", i, " is undefined or symbolic");
    KILN_CHECK(s.dtype() == dst.dtype() && s.device() == dst.device(), kOp, "src ", i, " is ",
               s.dtype(), " on ", s.device(), " but dst is ", dst.dtype(), " on ", dst.device());
    KILN_CHECK(s.is_contiguous(), kOp, "src ", i, " must be contiguous; got shape ", s.shape(),
               " strides ", s.strides());
    if (s.numel() > 0 && s.impl()->storage == dst.impl()->storage) {
      const auto* at =
          static_cast<const std::byte*>(dst.data_ptr()) + size_t(total) * dtype_size(dst.dtype());
      KILN_CHECK(s.data_ptr() == at, kOp, "src ", i,
                 " overlaps dst other than as its own range (elements ", total, "..",
                 total + s.numel(), " of dst)");
    }
    total += s.numel();
  }
  KILN_CHECK(total == dst.numel(), kOp, "the srcs hold ", total, " elements in all but dst has ",
             dst.numel());
}

void check_reducible(const char* op, DType dt, ReduceOp rop) {
  KILN_CHECK(uint8_t(rop) <= uint8_t(ReduceOp::kProduct), "[", op, "] unknown ReduceOp ", int(rop));
  KILN_CHECK(dt != DType::b8, "[", op, "] cannot reduce dtype bool (use f32, f64, f16, bf16, ",
             "i64, i32 or u8)");
  KILN_CHECK(rop != ReduceOp::kAvg || is_floating(dt), "[", op,
             "] ReduceOp avg needs a floating dtype; got ", dt,
             " (use sum and divide, or convert to f32)");
}

}  // namespace kiln::dist::detail
