// The CUDA driver opened with dlopen and resolved with cuGetProcAddress (see
// driver.h). Loading happens once per process under a mutex; its outcome (the
// table or the reason it failed) is kept, so every later call answers at once.
#include "kernels/cuda/driver.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "kernels/cuda/pocl_driver.h"
#include "kiln/env.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

struct Loaded {
  Driver d;
  std::string error;                // "" = usable
  std::vector<CUcontext> contexts;  // per device: retained primary context (or null)
};

std::string load_into(Driver& d) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    return str("no NVIDIA driver: libcuda.so.1 could not be loaded (", why ? why : "?",
               "); CUDA tensors and kernels need a machine with an NVIDIA GPU and its driver");
  }
  using GetProc =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2"));
  if (!get_proc)
    return "libcuda.so.1 has no cuGetProcAddress_v2: the NVIDIA driver is older than CUDA 12 "
           "(kiln needs a driver for CUDA " +
           std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10) +
           ", release 580 or newer)";
  // Each symbol at the ABI version its member's type was declared for.
  std::string missing;
#define KILN_CUDA_RESOLVE(name, version)                                                           \
  {                                                                                                \
    void* fn = nullptr;                                                                            \
    CUdriverProcAddressQueryResult found{};                                                        \
    if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || !fn) \
      missing += (missing.empty() ? "" : ", ") + std::string(#name);                               \
    d.name = reinterpret_cast<decltype(d.name)>(fn);                                               \
  }
  KILN_CUDA_DRIVER_FUNCS(KILN_CUDA_RESOLVE)
#undef KILN_CUDA_RESOLVE
  if (d.cuInit) {
    const CUresult r = d.cuInit(0);
    if (r == CUDA_ERROR_STUB_LIBRARY)
      return "the CUDA toolkit's stub libcuda.so was loaded instead of the NVIDIA driver "
             "(check LD_LIBRARY_PATH for .../lib64/stubs)";
    if (r == CUDA_ERROR_NO_DEVICE) return "the NVIDIA driver reports no CUDA device";
    if (r != CUDA_SUCCESS) return "cuInit failed: " + error_name(r);
  }
  if (d.cuDriverGetVersion) d.cuDriverGetVersion(&d.version);
  if (!missing.empty() || d.version < CUDA_VERSION)
    return str("the NVIDIA driver supports CUDA ", d.version / 1000, ".", d.version % 1000 / 10,
               " but kiln was built for CUDA ", CUDA_VERSION / 1000, ".", CUDA_VERSION % 1000 / 10,
               " (driver release 580 or newer)",
               missing.empty() ? "" : "; missing entry points: ", missing);
  if (d.cuDeviceGetCount(&d.devices) != CUDA_SUCCESS || d.devices <= 0)
    return "the NVIDIA driver reports no CUDA device";
  return "";
}

// The real driver, or the emulated device (KILN_CUDA_EMULATE).
std::string load_selected(Driver& d) {
  const std::string mode = env::get("KILN_CUDA_EMULATE");
  if (mode == "pocl") return load_emulated_driver(d);
  if (!mode.empty() && mode != "pocl-if-no-gpu")
    return str("KILN_CUDA_EMULATE='", mode, "' is not one of pocl, pocl-if-no-gpu");
  std::string error = load_into(d);
  if (error.empty() || mode.empty()) return error;
  d = Driver{};  // drop what the unusable driver filled in
  const std::string emulated = load_emulated_driver(d);
  return emulated.empty() ? "" : error + "; " + emulated;
}

Loaded& loaded() {
  static Loaded* l = [] {
    auto* x = new Loaded;  // never freed: the driver stays loaded until exit
    x->error = load_selected(x->d);
    if (!x->error.empty()) x->d.devices = 0;
    x->contexts.assign(static_cast<size_t>(x->d.devices), nullptr);
    return x;
  }();
  return *l;
}

}  // namespace

const Driver& driver() {
  const Loaded& l = loaded();
  KILN_CHECK(l.error.empty(), "[cuda] CUDA is not available: ", l.error);
  return l.d;
}

bool is_available() {
  return loaded().error.empty();
}
int device_count() {
  return loaded().d.devices;
}
std::string unavailable_reason() {
  return loaded().error;
}

std::string error_name(CUresult r) {
  switch (r) {
#define KILN_CUDA_NAME(e) \
  case e:                 \
    return #e;
    KILN_CUDA_NAME(CUDA_SUCCESS)
    KILN_CUDA_NAME(CUDA_ERROR_INVALID_VALUE)
    KILN_CUDA_NAME(CUDA_ERROR_OUT_OF_MEMORY)
    KILN_CUDA_NAME(CUDA_ERROR_NOT_INITIALIZED)
    KILN_CUDA_NAME(CUDA_ERROR_DEINITIALIZED)
    KILN_CUDA_NAME(CUDA_ERROR_STUB_LIBRARY)
    KILN_CUDA_NAME(CUDA_ERROR_NO_DEVICE)
    KILN_CUDA_NAME(CUDA_ERROR_INVALID_DEVICE)
    KILN_CUDA_NAME(CUDA_ERROR_INVALID_IMAGE)
    KILN_CUDA_NAME(CUDA_ERROR_INVALID_CONTEXT)
    KILN_CUDA_NAME(CUDA_ERROR_NO_BINARY_FOR_GPU)
    KILN_CUDA_NAME(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    KILN_CUDA_NAME(CUDA_ERROR_INVALID_PTX)
    KILN_CUDA_NAME(CUDA_ERROR_INVALID_SOURCE)
    KILN_CUDA_NAME(CUDA_ERROR_NOT_FOUND)
    KILN_CUDA_NAME(CUDA_ERROR_NOT_SUPPORTED)
    KILN_CUDA_NAME(CUDA_ERROR_NOT_READY)
    KILN_CUDA_NAME(CUDA_ERROR_ILLEGAL_ADDRESS)
    KILN_CUDA_NAME(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    KILN_CUDA_NAME(CUDA_ERROR_LAUNCH_TIMEOUT)
    KILN_CUDA_NAME(CUDA_ERROR_LAUNCH_FAILED)
    KILN_CUDA_NAME(CUDA_ERROR_INVALID_HANDLE)
    KILN_CUDA_NAME(CUDA_ERROR_ILLEGAL_INSTRUCTION)
    KILN_CUDA_NAME(CUDA_ERROR_MISALIGNED_ADDRESS)
    KILN_CUDA_NAME(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
    KILN_CUDA_NAME(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)
    KILN_CUDA_NAME(CUDA_ERROR_ILLEGAL_STATE)
    KILN_CUDA_NAME(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    KILN_CUDA_NAME(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    KILN_CUDA_NAME(CUDA_ERROR_STREAM_CAPTURE_ISOLATION)
    KILN_CUDA_NAME(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
    KILN_CUDA_NAME(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
    KILN_CUDA_NAME(CUDA_ERROR_CAPTURED_EVENT)
    KILN_CUDA_NAME(CUDA_ERROR_UNKNOWN)
#undef KILN_CUDA_NAME
    default:
      return "CUresult " + std::to_string(static_cast<int>(r));
  }
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  std::string detail = take_emulated_detail();
  // The real driver says only the code: say what a capture refuses.
  const bool capture = r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED ||
                       r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
                       r == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD ||
                       r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || r == CUDA_ERROR_CAPTURED_EVENT;
  if (detail.empty() && capture)
    detail =
        "a stream is capturing a CUDA graph, which cannot hold host reads of device memory, "
        "synchronizations or allocations outside the graph's memory pool";
  KILN_CHECK(false, "[cuda] ", what, " failed: ", error_name(r), " (", static_cast<int>(r), ")",
             detail.empty() ? "" : "; ", detail);
}

DeviceInfo device_info(int index) {
  const Driver& d = driver();
  KILN_CHECK(index >= 0 && index < d.devices, "[cuda] device ", index, " does not exist (",
             d.devices, " device(s))");
  CUdevice dev{};
  check(d.cuDeviceGet(&dev, index), "cuDeviceGet");
  DeviceInfo info;
  char name[256] = {};
  check(d.cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
  info.name = name;
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    check(d.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
    return v;
  };
  info.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.multiprocessors = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  info.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  info.memory_clock_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  info.memory_bus_bits = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  size_t total = 0;
  check(d.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  info.total_memory = static_cast<int64_t>(total);
  return info;
}

void set_device(int index) {
  static std::mutex mu;
  const Driver& d = driver();
  KILN_CHECK(index >= 0 && index < d.devices, "[cuda] device ", index, " does not exist (",
             d.devices, " device(s))");
  std::lock_guard<std::mutex> lock(mu);
  CUcontext& ctx = loaded().contexts[static_cast<size_t>(index)];
  if (!ctx) {
    CUdevice dev{};
    check(d.cuDeviceGet(&dev, index), "cuDeviceGet");
    check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  }
  check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

}  // namespace kiln::cuda
