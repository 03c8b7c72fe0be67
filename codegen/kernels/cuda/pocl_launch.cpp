// The emulated device's modules and launches (see pocl_internal.h): module
// images are OpenCL C source built by PoCL; a launch maps grid x block to
// global x local work sizes.
#include "kernels/cuda/pocl_internal.h"

#include <algorithm>

#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_batch.h"
#include "kiln/error.h"

#ifdef KILN_HAVE_OPENCL
namespace kiln::cuda::pocl {
namespace emu {

// ---------------- modules and launches ----------------
// A module image is OpenCL C source (opencl_prelude() + printed kernels).
CUresult CUDAAPI cuModuleLoadData(CUmodule* m, const void* image) {
  const char* src = static_cast<const char*>(image);
  cl_int e = CL_SUCCESS;
  cl_program prog = g->cl.clCreateProgramWithSource(g->ctx, 1, &src, nullptr, &e);
  if (e != CL_SUCCESS) return cl_fail(e, "clCreateProgramWithSource");
  // Division and sqrt correctly rounded, as CUDA's defaults (prec-div/-sqrt).
  e = g->cl.clBuildProgram(prog, 1, &g->dev,
                           "-cl-std=CL1.2 -cl-kernel-arg-info -cl-opt-disable -w "
                           "-cl-fp32-correctly-rounded-divide-sqrt",
                           nullptr, nullptr);
  if (e != CL_SUCCESS) {
    size_t n = 0;
    g->cl.clGetProgramBuildInfo(prog, g->dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
    std::string log(n, '\0');
    g->cl.clGetProgramBuildInfo(prog, g->dev, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
    g->cl.clReleaseProgram(prog);
    return fail(CUDA_ERROR_INVALID_SOURCE,
                str("emulated device: OpenCL C build failed (", e, "):\n", log.c_str()));
  }
  auto* mod = new Mod;
  mod->prog = prog;
  *m = reinterpret_cast<CUmodule>(mod);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule m) {
  auto* mod = reinterpret_cast<Mod*>(m);
  if (!mod) return CUDA_ERROR_INVALID_HANDLE;
  if (!exiting()) {
    for (auto& [name, f] : mod->fns) g->cl.clReleaseKernel(f->k);  // queued launches keep theirs
    g->cl.clReleaseProgram(mod->prog);
  }
  delete mod;
  return CUDA_SUCCESS;
}

// The bytes of a by-value kernel parameter of OpenCL type `type`.
size_t value_size(const std::string& type) {
  if (type == "kiln_i64" || type == "kiln_u64" || type == "long" || type == "ulong" ||
      type == "double")
    return 8;
  if (type == "int" || type == "uint" || type == "float") return 4;
  if (type == "KilnStrides" || type == "struct KilnStrides") return sizeof(KilnStrides);
  if (type == "KilnIndexGeom" || type == "struct KilnIndexGeom") return sizeof(KilnIndexGeom);
  if (type == "KilnBatch" || type == "struct KilnBatch") return sizeof(int64_t) * kBatchWordsOpenCl;
  return 0;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* out, CUmodule m, const char* name) {
  auto* mod = reinterpret_cast<Mod*>(m);
  if (!mod) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(mod->mu);
  auto& slot = mod->fns[name];
  if (!slot) {
    cl_int e = CL_SUCCESS;
    cl_kernel k = g->cl.clCreateKernel(mod->prog, name, &e);
    if (e != CL_SUCCESS) {
      mod->fns.erase(name);
      return CUDA_ERROR_NOT_FOUND;
    }
    auto f = std::make_unique<Function>();
    f->k = k;
    f->name = name;
    cl_uint nargs = 0;
    g->cl.clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, nullptr);
    for (cl_uint i = 0; i < nargs; ++i) {
      cl_kernel_arg_address_qualifier aq = 0;
      g->cl.clGetKernelArgInfo(k, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof aq, &aq, nullptr);
      char type[256] = {};
      g->cl.clGetKernelArgInfo(k, i, CL_KERNEL_ARG_TYPE_NAME, sizeof type - 1, type, nullptr);
      ArgKind a;
      a.pointer = aq == CL_KERNEL_ARG_ADDRESS_GLOBAL;
      a.size = a.pointer ? sizeof(void*) : value_size(type);
      if (a.size == 0) {
        g->cl.clReleaseKernel(k);
        mod->fns.erase(name);
        return fail(CUDA_ERROR_NOT_SUPPORTED,
                    str("emulated device: kernel '", name, "' parameter ", i, " has type '", type,
                        "', which launches do not know"));
      }
      f->args.push_back(a);
    }
    slot = std::move(f);
  }
  *out = reinterpret_cast<CUfunction>(slot.get());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction fn) {
  auto* f = reinterpret_cast<Function*>(fn);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  size_t x = 0;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      g->cl.clGetKernelWorkGroupInfo(f->k, g->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof x, &x,
                                     nullptr);
      *v = static_cast<int>(std::min(x, kMaxBlock));
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: {
      cl_ulong l = 0;
      g->cl.clGetKernelWorkGroupInfo(f->k, g->dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof l, &l, nullptr);
      *v = static_cast<int>(l);
      return CUDA_SUCCESS;
    }
    default:
      *v = 0;  // registers, spills, binary versions: nothing to report
      return CUDA_SUCCESS;
  }
}

CUresult CUDAAPI cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                unsigned by, unsigned bz, unsigned shared, CUstream s,
                                void** params, void** extra) {
  auto* f = reinterpret_cast<Function*>(fn);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (extra || (!params && !f->args.empty()))
    return fail(CUDA_ERROR_NOT_SUPPORTED, "emulated device: launches take kernelParams only");
  if (shared) return fail(CUDA_ERROR_NOT_SUPPORTED, "emulated device: no dynamic shared memory");
  if (gx * gy * gz == 0 || bx * by * bz == 0 || size_t{bx} * by * bz > kMaxBlock)
    return fail(CUDA_ERROR_INVALID_VALUE,
                str("emulated device: launch of '", f->name, "' with grid ", gx, "x", gy, "x", gz,
                    " and block ", bx, "x", by, "x", bz));
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  if (!capturing(s)) return launch_now(f, grid, block, params, s);
  // Captured: the parameters' bytes are copied now (they live on the caller's
  // stack), their pointers checked now and again at each replay.
  CaptureOp op;
  op.kind = CaptureOp::Kind::kKernel;
  op.f = f;
  std::copy(grid, grid + 3, op.grid);
  std::copy(block, block + 3, op.block);
  for (size_t i = 0; i < f->args.size(); ++i) {
    void* h = nullptr;
    if (f->args[i].pointer)
      if (const CUdeviceptr p = *static_cast<CUdeviceptr*>(params[i]))
        if (CUresult r = to_host(p, 0, "a kernel argument", &h)) return r;
    const auto* b = static_cast<const char*>(params[i]);
    op.args.emplace_back(b, b + f->args[i].size);
  }
  record_op(s, std::move(op));
  return CUDA_SUCCESS;
}

}  // namespace emu

CUresult launch_now(Function* f, const unsigned grid[3], const unsigned block[3],
                    void* const* params, CUstream s) {
  std::lock_guard<std::mutex> lock(f->mu);
  for (size_t i = 0; i < f->args.size(); ++i) {
    cl_int e;
    const auto idx = static_cast<cl_uint>(i);
    if (f->args[i].pointer) {
      const CUdeviceptr p = *static_cast<CUdeviceptr*>(params[i]);
      if (p == 0) {
        e = g->cl.clSetKernelArg(f->k, idx, sizeof(cl_mem), nullptr);
      } else {  // the kernel addresses the SVM block
        void* h = nullptr;
        if (CUresult r = to_host(p, 0, "a kernel argument", &h)) return r;
        e = g->cl.clSetKernelArgSVMPointer(f->k, idx, h);
      }
    } else {
      e = g->cl.clSetKernelArg(f->k, idx, f->args[i].size, params[i]);
    }
    if (e != CL_SUCCESS) return cl_fail(e, "clSetKernelArg");
  }
  const size_t local[3] = {block[0], block[1], block[2]};
  const size_t global[3] = {size_t{grid[0]} * block[0], size_t{grid[1]} * block[1],
                            size_t{grid[2]} * block[2]};
  cl_event ev = nullptr;
  const cl_int e = g->cl.clEnqueueNDRangeKernel(enqueue_point(s), f->k, 3, nullptr, global, local,
                                                0, nullptr, &ev);
  return enqueued(s, e, ev, "clEnqueueNDRangeKernel");
}

}  // namespace kiln::cuda::pocl
#endif
