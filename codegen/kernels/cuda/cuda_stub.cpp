// kiln built without the CUDA toolkit's headers: CUDA is reported unavailable.
#include "kiln/cuda.h"

#include "kiln/error.h"

namespace kiln::cuda {

bool is_available() {
  return false;
}
int device_count() {
  return 0;
}
std::string unavailable_reason() {
  return "kiln was built without the CUDA toolkit (its headers were not found at configure time)";
}

void synchronize(int) {
  KILN_CHECK(false, "[cuda] ", unavailable_reason());
}

namespace {
bool g_tf32 = false;  // kept so the setting reads back; nothing runs on CUDA
}
void set_matmul_allow_tf32(bool allow) {
  g_tf32 = allow;
}
bool matmul_allow_tf32() {
  return g_tf32;
}

// Streams and events: none can exist, so making one is the unavailable error.
Stream::Stream(int, int) {
  KILN_CHECK(false, "[cuda] ", unavailable_reason());
}
int Stream::device() const {
  return 0;
}
int Stream::priority() const {
  return 0;
}
bool Stream::is_default() const {
  return true;
}
uint64_t Stream::id() const {
  return 0;
}
void* Stream::handle() const {
  return nullptr;
}
void Stream::wait(const Event&) const {}
void Stream::wait(const Stream&) const {}
bool Stream::query() const {
  return true;
}
void Stream::synchronize() const {}
Stream default_stream(int) {
  return Stream(0);
}
Stream current_stream(int) {
  return Stream(0);
}
void set_current_stream(const Stream&) {}
StreamGuard::StreamGuard(const Stream& s) : previous_(s) {}
StreamGuard::~StreamGuard() = default;

Event::Event(bool) {}
void Event::record(const Stream&) {
  KILN_CHECK(false, "[cuda] ", unavailable_reason());
}
void Event::record() {
  KILN_CHECK(false, "[cuda] ", unavailable_reason());
}
void Event::wait(const Stream&) const {}
bool Event::query() const {
  return true;
}
void Event::synchronize() const {}
float Event::elapsed_time(const Event&) const {
  KILN_CHECK(false, "[cuda] ", unavailable_reason());
  return 0;
}
void* Event::handle() const {
  return nullptr;
}
void record_stream(const Tensor&, const Stream&) {
  KILN_CHECK(false, "[cuda] ", unavailable_reason());
}

TransferStats transfer_stats() {
  return {};
}
GraphStats graph_stats() {
  return {};
}

}  // namespace kiln::cuda
