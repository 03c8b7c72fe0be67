// The registry of device runtimes (device_runtime.h).
#include "kiln/device_runtime.h"

#include <array>
#include <atomic>

#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln {
namespace {
std::array<std::atomic<DeviceRuntime*>, 2> g_runtimes{};
}  // namespace

Tensor DeviceRuntime::scalar_operand(const Tensor& cpu_scalar, Device d) {
  return cpu_scalar.to(d);
}

void register_device_runtime(DeviceType type, DeviceRuntime* rt) {
  g_runtimes[static_cast<size_t>(type)].store(rt, std::memory_order_release);
}

DeviceRuntime& device_runtime(Device d, const char* op) {
  KILN_ASSERT(!d.is_cpu(), "the CPU has no device runtime");
  DeviceRuntime* rt = g_runtimes[static_cast<size_t>(d.type)].load(std::memory_order_acquire);
  KILN_CHECK(rt != nullptr, "[", op, "] device ", d,
             " needs kiln's CUDA backend, which lives in the codegen library: link kiln::kiln "
             "(kiln_runtime alone runs on the CPU only)");
  const std::string why = rt->unavailable_reason();
  KILN_CHECK(why.empty(), "[", op, "] device ", d, " is not available: ", why);
  KILN_CHECK(d.index >= 0 && d.index < rt->device_count(), "[", op, "] device ", d,
             " does not exist (", rt->device_count(), " device(s) of that type)");
  return *rt;
}

bool is_pinned_allocator(const Allocator* a) {
  if (a == nullptr) return false;
  for (const auto& slot : g_runtimes) {
    DeviceRuntime* rt = slot.load(std::memory_order_acquire);
    if (rt != nullptr && rt->pinned_allocator() == a) return true;
  }
  return false;
}

}  // namespace kiln
