// Internal: the CUDA driver API, opened at run time. kiln never links
// libcuda: the driver is dlopen'ed on first use and each entry point resolved
// with cuGetProcAddress for the ABI of the CUDA headers kiln was built with, so
// a binary built here starts on machines without a driver and CPU users pay
// nothing. Every failure is a kiln::Error that says what is missing.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "kiln/cuda.h"

namespace kiln::cuda {

// The driver entry points kiln calls, each with the ABI version it is resolved
// at (cuGetProcAddress returns the newest variant otherwise: at 13000,
// cuCtxSynchronize is cuCtxSynchronize_v2(CUcontext)). The member's type is
// cudaTypedefs.h's PFN_<name>_v<version>.
// clang-format off
#define KILN_CUDA_DRIVER_FUNCS(X) \
  X(cuInit, 2000) \
  X(cuDriverGetVersion, 2020) \
  X(cuDeviceGetCount, 2000) \
  X(cuDeviceGet, 2000) \
  X(cuDeviceGetName, 2000) \
  X(cuDeviceGetAttribute, 2000) \
  X(cuDeviceTotalMem, 3020) \
  X(cuDevicePrimaryCtxRetain, 7000) \
  X(cuDevicePrimaryCtxRelease, 11000) \
  X(cuCtxSetCurrent, 4000) \
  X(cuCtxGetCurrent, 4000) \
  X(cuCtxSynchronize, 2000) \
  X(cuMemAlloc, 3020) \
  X(cuMemFree, 3020) \
  X(cuMemGetInfo, 3020) \
  X(cuMemcpyHtoD, 3020) \
  X(cuMemcpyDtoH, 3020) \
  X(cuMemcpyDtoD, 3020) \
  X(cuMemcpyHtoDAsync, 3020) \
  X(cuMemcpyDtoHAsync, 3020) \
  X(cuMemsetD8, 3020) \
  X(cuMemHostAlloc, 2020) \
  X(cuMemFreeHost, 2000) \
  X(cuModuleLoadData, 2000) \
  X(cuModuleUnload, 2000) \
  X(cuModuleGetFunction, 2000) \
  X(cuFuncGetAttribute, 2020) \
  X(cuLaunchKernel, 4000) \
  X(cuStreamCreateWithPriority, 5050) \
  X(cuStreamDestroy, 4000) \
  X(cuStreamSynchronize, 2000) \
  X(cuStreamQuery, 2000) \
  X(cuStreamWaitEvent, 3020) \
  X(cuEventCreate, 2000) \
  X(cuEventRecord, 2000) \
  X(cuEventSynchronize, 2000) \
  X(cuEventQuery, 2000) \
  X(cuEventElapsedTime, 2000) \
  X(cuEventDestroy, 4000) \
  X(cuMemcpyDtoDAsync, 3020) \
  X(cuLaunchHostFunc, 10000) \
  X(cuStreamBeginCapture, 10010) \
  X(cuStreamEndCapture, 10000) \
  X(cuStreamIsCapturing, 10000) \
  X(cuThreadExchangeStreamCaptureMode, 10010) \
  X(cuGraphInstantiateWithFlags, 11040) \
  X(cuGraphLaunch, 10000) \
  X(cuGraphExecDestroy, 10000) \
  X(cuGraphDestroy, 10000)
// clang-format on

/// The resolved driver entry points, named as the cuda.h functions.
struct Driver {
#define KILN_CUDA_MEMBER(name, version) PFN_##name##_v##version name = nullptr;
  KILN_CUDA_DRIVER_FUNCS(KILN_CUDA_MEMBER)
#undef KILN_CUDA_MEMBER
  int version = 0;        ///< cuDriverGetVersion, e.g. 13000
  int devices = 0;        ///< cuDeviceGetCount
  bool emulated = false;  ///< the PoCL device (pocl_driver.h): modules are OpenCL C source
};

/// The loaded driver; the first call loads it. Throws kiln::Error naming why
/// CUDA is unusable (no libcuda.so.1, the toolkit's stub library, a driver older
/// than the headers kiln was built with, no device). KILN_CUDA_EMULATE=pocl
/// loads the emulated device instead; =pocl-if-no-gpu loads it when the real
/// driver is unusable.
const Driver& driver();

/// The CUresult's enumerator name ("CUDA_ERROR_OUT_OF_MEMORY"): kiln's own table,
/// since cuGetErrorName does not work with the stub library.
std::string error_name(CUresult r);
/// Throws kiln::Error "[cuda] <what> failed: <name> (<code>)" unless r is success.
void check(CUresult r, const char* what);

/// Facts about one device, read from the driver.
struct DeviceInfo {
  std::string name;
  int cc_major = 0, cc_minor = 0;  ///< compute capability
  int multiprocessors = 0;
  int max_threads_per_block = 0;
  int l2_bytes = 0;
  int64_t total_memory = 0;
  int memory_clock_khz = 0;  ///< peak memory clock
  int memory_bus_bits = 0;   ///< global memory bus width
};
/// DeviceInfo of device `index` (kiln::Error if it does not exist).
DeviceInfo device_info(int index);

/// Makes the primary context of device `index` current on this thread (retained
/// once per process, shared with other CUDA users of the process).
void set_device(int index);

}  // namespace kiln::cuda
