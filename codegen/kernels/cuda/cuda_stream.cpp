// Streams and events (kiln/cuda.h, stream.h) over the driver table: the real
// driver's cuStream*/cuEvent*, or the emulated device's in-order queues and
// markers (pocl_driver.h). Current streams are per thread and per device, as
// PyTorch's. The host's waits raise the errors kernels recorded (device_errors.h).
#include <atomic>
#include <mutex>
#include <vector>

#include "kernels/cuda/device_errors.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/stream.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

std::atomic<uint64_t> g_next_id{1};
std::atomic<bool> g_streams_in_use{false};

// Each thread's current stream per device; empty slots mean the default stream.
thread_local std::vector<StreamPtr> t_current;

void check_device(int device, const char* what) {
  const Driver& d = driver();
  KILN_CHECK(device >= 0 && device < d.devices, "[", what, "] device ", device, " does not exist (",
             d.devices, " CUDA device(s))");
}

// The default streams, one per device, made once and never destroyed.
const std::vector<StreamPtr>& default_streams() {
  static const std::vector<StreamPtr>* all = [] {
    auto* v = new std::vector<StreamPtr>;
    for (int i = 0; i < driver().devices; ++i) {
      auto s = std::make_shared<Stream::Impl>();
      s->device = i;
      v->push_back(std::move(s));
    }
    return v;
  }();
  return *all;
}

}  // namespace

Stream::Impl::~Impl() {
  if (handle) driver().cuStreamDestroy(handle);  // queued work still completes
}

void use_device(int index) {
  thread_local int current = -1;
  if (current == index) return;
  set_device(index);
  current = index;
}

bool streams_in_use() {
  return g_streams_in_use.load(std::memory_order_relaxed);
}

StreamPtr current_stream_impl(int device) {
  const auto i = static_cast<size_t>(device);
  if (i < t_current.size() && t_current[i]) return t_current[i];
  check_device(device, "current_stream");
  return default_streams()[i];
}

CUstream current_cu_stream(int device) {
  const auto i = static_cast<size_t>(device);
  return i < t_current.size() && t_current[i] ? t_current[i]->handle : nullptr;
}

// ---------------- Stream ----------------
Stream::Stream(int device, int priority) {
  check_device(device, "Stream");
  use_device(device);
  CUstream h = nullptr;
  // Non-blocking, as PyTorch's streams: no implicit order with the default stream.
  check(driver().cuStreamCreateWithPriority(&h, CU_STREAM_NON_BLOCKING, priority),
        "cuStreamCreateWithPriority");
  auto s = std::make_shared<Impl>();
  s->device = device;
  s->priority = priority;
  s->id = g_next_id.fetch_add(1);
  s->handle = h;
  impl_ = std::move(s);
  g_streams_in_use.store(true, std::memory_order_relaxed);
}

int Stream::device() const {
  return impl_->device;
}
int Stream::priority() const {
  return impl_->priority;
}
bool Stream::is_default() const {
  return impl_->handle == nullptr;
}
uint64_t Stream::id() const {
  return impl_->id;
}
void* Stream::handle() const {
  return impl_->handle;
}

void Stream::wait(const Event& e) const {
  if (!e.handle()) return;  // never recorded: nothing to wait for
  use_device(impl_->device);
  check(driver().cuStreamWaitEvent(impl_->handle, static_cast<CUevent>(e.handle()), 0),
        "cuStreamWaitEvent");
}

void Stream::wait(const Stream& other) const {
  if (other == *this) return;
  Event e;
  e.record(other);
  wait(e);
}

bool Stream::query() const {
  use_device(impl_->device);
  const CUresult r = driver().cuStreamQuery(impl_->handle);
  if (r == CUDA_ERROR_NOT_READY) return false;
  check(r, "cuStreamQuery");
  return true;
}

void Stream::synchronize() const {
  use_device(impl_->device);
  check(driver().cuStreamSynchronize(impl_->handle), "cuStreamSynchronize");
  check_device_errors(impl_->device, "Stream::synchronize");
}

Stream default_stream(int device) {
  check_device(device, "default_stream");
  return Stream(default_streams()[static_cast<size_t>(device)]);
}

Stream current_stream(int device) {
  return Stream(current_stream_impl(device));
}

void set_current_stream(const Stream& s) {
  const auto i = static_cast<size_t>(s.device());
  if (t_current.size() <= i) t_current.resize(i + 1);
  t_current[i] = s.impl();
}

StreamGuard::StreamGuard(const Stream& s) : previous_(current_stream(s.device())) {
  set_current_stream(s);
}
StreamGuard::~StreamGuard() {
  set_current_stream(previous_);
}

// ---------------- Event ----------------
struct Event::Impl {
  bool timing = false;
  int device = -1;
  CUevent ev = nullptr;
  ~Impl() {
    if (ev) driver().cuEventDestroy(ev);  // pending work releases it when done
  }
};

Event::Event(bool enable_timing) : impl_(std::make_shared<Impl>()) {
  impl_->timing = enable_timing;
}

void Event::record(const Stream& s) {
  use_device(s.device());
  if (!impl_->ev) {
    check(driver().cuEventCreate(&impl_->ev,
                                 impl_->timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING),
          "cuEventCreate");
    impl_->device = s.device();
  }
  KILN_CHECK(impl_->device == s.device(),
             "[Event::record] the event belongs to cuda:", impl_->device,
             " but the stream to cuda:", s.device());
  check(driver().cuEventRecord(impl_->ev, static_cast<CUstream>(s.handle())), "cuEventRecord");
}

void Event::record() {
  record(current_stream(0));
}

void Event::wait(const Stream& s) const {
  s.wait(*this);
}

bool Event::query() const {
  if (!impl_->ev) return true;
  const CUresult r = driver().cuEventQuery(impl_->ev);
  if (r == CUDA_ERROR_NOT_READY) return false;
  check(r, "cuEventQuery");
  return true;
}

void Event::synchronize() const {
  if (!impl_->ev) return;
  check(driver().cuEventSynchronize(impl_->ev), "cuEventSynchronize");
  check_device_errors(impl_->device, "Event::synchronize");
}

float Event::elapsed_time(const Event& end) const {
  KILN_CHECK(impl_->timing && end.impl_->timing,
             "[Event::elapsed_time] both events need enable_timing = true");
  KILN_CHECK(impl_->ev && end.impl_->ev,
             "[Event::elapsed_time] both events must be recorded first");
  float ms = 0;
  const CUresult r = driver().cuEventElapsedTime(&ms, impl_->ev, end.impl_->ev);
  KILN_CHECK(r != CUDA_ERROR_NOT_READY,
             "[Event::elapsed_time] an event has not completed yet (synchronize it first)");
  check(r, "cuEventElapsedTime");
  return ms;
}

void* Event::handle() const {
  return impl_->ev;
}

}  // namespace kiln::cuda
