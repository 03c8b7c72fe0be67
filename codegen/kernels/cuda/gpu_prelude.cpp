// The GPU printer's preludes (gpu_printer.h): one printed kernel text compiles
// as CUDA C through NVRTC, as OpenCL C on the emulated device (PoCL) and as
// C++ under ThreadSanitizer and ASan (tests/codegen/cuda_cpp/). Each
// dialect's head defines the names the printer uses (KILN_KERNEL, KILN_GLOBAL,
// kiln_i64/kiln_u64, thread and block ids, __syncthreads, __shared__, warp
// shuffles, bit casts, the f16 conversions); the body after it (bf16, integer
// rules, the strided copy's shape) is shared text.
#include <string>

#include "kernels/cuda/gpu_printer.h"

namespace kiln::cuda {
namespace {

const char* kCudaHead = R"(// kiln GPU prelude (CUDA)
typedef long long kiln_i64;
typedef unsigned long long kiln_u64;
#define KILN_KERNEL extern "C" __global__
#define KILN_GLOBAL
#define KILN_CONSTANT __constant__
#define KILN_FN __device__ __forceinline__
// Local memory for the emulated warp shuffles (none on a real GPU).
#define KILN_SHUFFLE_SCRATCH
// A pointer into shared memory (a generic pointer here).
#define KILN_SHARED_PTR
// The printer's unrolled loops load every lane's elements, then hold them
// here: an empty asm that reads and rewrites the values, so NVVM cannot sink
// a load to its first use. Sunk below an expanded division (ptxas's div.rn
// has a branch, and ptxas hoists no load across it), the loads of a thread
// are one in flight at a time (an H200 ran GELU at 64% of copy that way).
#define KILN_ISSUE(...) asm volatile("" : __VA_ARGS__)
// Orders a row reduction's shared partials: a block's barrier when several
// warps share a row; in warp rows (32 x rows) each warp's own, so the warps
// of a block wait for no one.
#define KILN_ROW_SYNC() do { if (blockDim.x > 32) __syncthreads(); else __syncwarp(); } while (0)
// Row kernels take their held path (rows in registers) where the row fits.
#define KILN_HELD_ROWS 1
// *p + 1 into *p, the old value returned (p in shared memory).
KILN_FN int kiln_shared_inc(int* p) { return atomicAdd(p, 1); }
// n / d where n, d and the quotient are normal and far from the exponent
// range's ends (kir::normal_divisions): div.rn.f32's fast path alone (the
// reciprocal, then the same five fma), without its FCHK and the branch to its
// slow path, which such operands never take: the same correctly rounded bits.
KILN_FN float kiln_fdiv_fast(float n, float d) {
  float r; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  const float e = fmaf(-d, r, 1.0f);
  r = fmaf(r, e, r);
  const float q0 = fmaf(n, r, 0.0f);
  return fmaf(r, fmaf(-d, q0, n), q0);
}
KILN_FN float kiln_f16_to_f32(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
KILN_FN unsigned short kiln_f32_to_f16(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
)";

// OpenCL C 1.2 as PoCL compiles it. Its long long is 128-bit, so 64-bit
// integers are long. A warp shuffle goes through local memory with two
// barriers: exact (each lane reads its partner's value) provided every thread
// of the work-group executes it, which the row kernels guarantee (uniform
// control flow). No cl_khr_fp16: f16 travels through vload_half /
// vstore_half_rte, bit-exact with CUDA's cvt.rn.
const char* kOpenClHead = R"(// kiln GPU prelude (OpenCL C, the emulated device)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
typedef long kiln_i64;
typedef ulong kiln_u64;
#define KILN_KERNEL __kernel
#define KILN_GLOBAL __global
#define KILN_CONSTANT __constant
#define KILN_FN static inline
#define __shared__ __local
#define KILN_SHARED_PTR __local
#define threadIdx ((uint3)((uint)get_local_id(0), (uint)get_local_id(1), (uint)get_local_id(2)))
#define blockIdx ((uint3)((uint)get_group_id(0), (uint)get_group_id(1), (uint)get_group_id(2)))
#define blockDim ((uint3)((uint)get_local_size(0), (uint)get_local_size(1), (uint)get_local_size(2)))
#define gridDim ((uint3)((uint)get_num_groups(0), (uint)get_num_groups(1), (uint)get_num_groups(2)))
#define __syncthreads() barrier(CLK_LOCAL_MEM_FENCE)
// Unconditional: a barrier under a branch costs PoCL a copy of the code after it.
#define KILN_ROW_SYNC() barrier(CLK_LOCAL_MEM_FENCE)
// Row kernels' held path (rows in registers): dead code here unless a program
// defines it first (the held-row tests). PoCL 3.1 crashed on it (a float4 in
// its work-item context arrays misaligned: 32 held per lane, blocks of 32 x 4)
// and compiled its barriers' copies twice as long; the streaming path has the
// same results for the same block.
#ifndef KILN_HELD_ROWS
#define KILN_HELD_ROWS 0
#endif
KILN_FN int kiln_shared_inc(volatile __local int* p) { return atomic_inc(p); }
#define __int_as_float(x) as_float((int)(x))
#define __uint_as_float(x) as_float((uint)(x))
#define __float_as_uint(x) as_uint((float)(x))
#define __float_as_int(x) as_int((float)(x))
#define __longlong_as_double(x) as_double((long)(x))
#define __double_as_longlong(x) as_long((double)(x))
#define expf(x) exp(x)
#define logf(x) log(x)
#define log1pf(x) log1p(x)
#define sqrtf(x) sqrt(x)
#define tanhf(x) tanh(x)
#define sinf(x) sin(x)
#define cosf(x) cos(x)
#define erff(x) erf(x)
#define powf(x, y) pow(x, y)
#define fmaf(x, y, z) fma(x, y, z)
#define fabsf(x) fabs(x)
#define floorf(x) floor(x)
#define rintf(x) rint(x)
#define truncf(x) trunc(x)
#define ldexpf(x, e) ldexp(x, e)
#define KILN_SHUFFLE_SCRATCH __local kiln_u64 kiln_shfl[1024]
#define KILN_ISSUE(...)
KILN_FN float kiln_fdiv_fast(float n, float d) { return n / d; }
#define __shfl_xor_sync(mask, v, off) kiln_shuffle(kiln_shfl, (v), (off))
// Lane t ^ off's value: warps are runs of 32 in the work-group's linear order
// (x fastest, as CUDA's).
#define KILN_SHUFFLE(T, TO_BITS, FROM_BITS)                                              \
  __attribute__((overloadable)) T kiln_shuffle(__local kiln_u64* s, T v, int off) {      \
    const uint t = (uint)(get_local_id(1) * get_local_size(0) + get_local_id(0));        \
    s[t] = TO_BITS(v);                                                                   \
    barrier(CLK_LOCAL_MEM_FENCE);                                                        \
    const T r = FROM_BITS(s[t ^ (uint)off]);                                             \
    barrier(CLK_LOCAL_MEM_FENCE);                                                        \
    return r;                                                                            \
  }
#define KILN_AS_U64(v) ((kiln_u64)(v))
#define KILN_AS_U64_F(v) ((kiln_u64)as_uint(v))
#define KILN_AS_U64_D(v) as_ulong(v)
#define KILN_FROM_INT(b) ((int)(uint)(b))
#define KILN_FROM_I64(b) ((kiln_i64)(b))
#define KILN_FROM_U64(b) (b)
#define KILN_FROM_F(b) as_float((uint)(b))
#define KILN_FROM_D(b) as_double(b)
KILN_SHUFFLE(int, KILN_AS_U64, KILN_FROM_INT)
KILN_SHUFFLE(kiln_i64, KILN_AS_U64, KILN_FROM_I64)
KILN_SHUFFLE(kiln_u64, KILN_AS_U64, KILN_FROM_U64)
KILN_SHUFFLE(float, KILN_AS_U64_F, KILN_FROM_F)
KILN_SHUFFLE(double, KILN_AS_U64_D, KILN_FROM_D)
KILN_FN float kiln_f16_to_f32(ushort h) { return vload_half(0, (const __private half*)&h); }
KILN_FN ushort kiln_f32_to_f16(float f) {
  ushort h; vstore_half_rte(f, 0, (__private half*)&h); return h;
}
)";

// The C++ dialect (cpp_prelude): printed kernels compiled as plain C++ with one OS thread per GPU
// thread, so ThreadSanitizer and AddressSanitizer check them (tests/codegen/cuda_cpp/). A missing
// barrier around shared memory, a shuffle read before its write or a thread writing past its row
// are invisible to NVRTC and to the emulated device (PoCL runs a work-group's items as loops
// between barriers: deterministic) but are races or overflows here.
//
// Shared memory: printed kernels declare `__shared__ T name[N];` in the kernel
// body, and a block's threads must see one object. `__shared__` is `static`:
// one object per kernel function, which is one per block because the launcher
// runs such a kernel's blocks one after another (each block's threads are
// joined before the next block starts, so the reuse is ordered, not a race).
// Blocks running at once would each need their own copy, which a prefix macro
// cannot give a declaration; so races between blocks of one launch (two
// blocks writing one element) are seen only in kernels without shared memory,
// whose blocks all run at once (kiln_cpp::launch's `together`). Shared memory
// keeps the previous block's values where a GPU's would be undefined.
//
// Barriers are a std::barrier per block (TSan sees its synchronization); warp
// shuffles go through per-block scratch between two barriers as on the
// emulated device, so every thread of the block must reach them (the row
// kernels' control flow is uniform). f16 converts through _Float16: round to
// nearest even, as CUDA's cvt.rn. Contraction must be off (-ffp-contract=off)
// for the expansions' bits.
const char* kCppHead = R"(// kiln GPU prelude (C++: one thread per GPU thread, for the sanitizers)
#include <math.h>
#include <atomic>
#include <barrier>
#include <bit>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
typedef long long kiln_i64;
typedef unsigned long long kiln_u64;
#define KILN_KERNEL static
#define KILN_GLOBAL
#define KILN_CONSTANT static const
#define KILN_FN static inline
#define __shared__ static
#define KILN_SHARED_PTR
#define KILN_SHUFFLE_SCRATCH static kiln_u64 kiln_shfl[1024]
#define KILN_ISSUE(...)
struct kiln_dim3 {
  unsigned x, y, z;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline thread_local kiln_dim3 threadIdx, blockIdx, blockDim, gridDim;
inline thread_local std::barrier<>* kiln_block_barrier = nullptr;
#define __syncthreads() kiln_block_barrier->arrive_and_wait()
#define KILN_ROW_SYNC() __syncthreads()
#define KILN_HELD_ROWS 1
#define __int_as_float(x) std::bit_cast<float>((int)(x))
#define __uint_as_float(x) std::bit_cast<float>((unsigned)(x))
#define __float_as_uint(x) std::bit_cast<unsigned>((float)(x))
#define __float_as_int(x) std::bit_cast<int>((float)(x))
#define __longlong_as_double(x) std::bit_cast<double>((long long)(x))
#define __double_as_longlong(x) std::bit_cast<long long>((double)(x))
KILN_FN float kiln_fdiv_fast(float n, float d) { return n / d; }
// Lane t ^ off's value (warps in the block's linear order, as the OpenCL head's).
template <typename T>
T kiln_shuffle(kiln_u64* s, T v, int off) {
  const unsigned t = threadIdx.y * blockDim.x + threadIdx.x;
  kiln_u64 b = 0;
  std::memcpy(&b, &v, sizeof v);
  s[t] = b;
  __syncthreads();
  b = s[t ^ (unsigned)off];
  __syncthreads();
  T r;
  std::memcpy(&r, &b, sizeof r);
  return r;
}
#define __shfl_xor_sync(mask, v, off) kiln_shuffle(kiln_shfl, (v), (off))
KILN_FN int kiln_shared_inc(int* p) { return std::atomic_ref<int>(*p).fetch_add(1); }
KILN_FN int atomicCAS(int* p, int expected, int desired) {
  std::atomic_ref<int>(*p).compare_exchange_strong(expected, desired);
  return expected;
}
KILN_FN float kiln_f16_to_f32(unsigned short h) {
  return (float)std::bit_cast<_Float16>(h);
}
KILN_FN unsigned short kiln_f32_to_f16(float f) {
  return std::bit_cast<unsigned short>((_Float16)f);
}
namespace kiln_cpp {
// A device pointer argument: converts to the kernel parameter's pointer type.
struct Ptr {
  void* p;
  template <typename T>
  operator T*() const { return static_cast<T*>(p); }
};
// A block's shape: x threads (32 in warp rows) by y.
struct Block {
  unsigned x, y;
  Block(unsigned x_, unsigned y_ = 1) : x(x_), y(y_) {}
};
// Runs kernel f(args...) over `grid` blocks of `block` threads, each GPU
// thread an OS thread: all blocks at once when `together` (kernels without
// shared memory), else one block at a time (see the prelude's __shared__).
template <typename F, typename... A>
void launch(unsigned grid, Block block, bool together, F f, A... args) {
  const unsigned wave = together ? grid : 1;
  const unsigned size = block.x * block.y;
  for (unsigned first = 0; first < grid; first += wave) {
    std::vector<std::unique_ptr<std::barrier<>>> bars;
    std::vector<std::thread> threads;
    for (unsigned b = first; b < first + wave; ++b) {
      bars.push_back(std::make_unique<std::barrier<>>(size));
      std::barrier<>* bar = bars.back().get();
      for (unsigned t = 0; t < size; ++t)
        threads.emplace_back([&, b, t, bar] {
          threadIdx = {t % block.x, t / block.x, 0};
          blockIdx = {b, 0, 0};
          blockDim = {block.x, block.y, 1};
          gridDim = {grid, 1, 1};
          kiln_block_barrier = bar;
          f(args...);
        });
    }
    for (std::thread& t : threads) t.join();
  }
}
}  // namespace kiln_cpp
)";

// The prelude's integer helpers follow runtime/src/ops/scalar_ops.h: floor
// division with x / 0 = 0 and x / -1 = -x wrapped; pow by squaring in the
// unsigned type (wrapping), negative exponents as the scalar rule. bf16
// rounds to nearest even in integer arithmetic (quiet NaNs stay NaN).
const char* kCommonBody = R"(KILN_FN float kiln_bf16_to_f32(unsigned short h) {
  return __uint_as_float(((unsigned)h) << 16);
}
KILN_FN unsigned short kiln_f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
KILN_FN float kiln_rt_f16(float f) { return kiln_f16_to_f32(kiln_f32_to_f16(f)); }
KILN_FN float kiln_rt_bf16(float f) { return kiln_bf16_to_f32(kiln_f32_to_bf16(f)); }
#define KILN_SIGNED_INT_RULES(S, T, U)                                          \
  KILN_FN T kiln_div_##S(T a, T b) {                                            \
    if (b == 0) return 0;                                                       \
    if (b == -1) return (T)((U)0 - (U)a);                                       \
    T q = a / b;                                                                \
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;                              \
    return q;                                                                   \
  }                                                                             \
  KILN_FN T kiln_pow_##S(T a, T b) {                                            \
    if (b < 0) return a == 1 ? 1 : (a == (T)-1 ? ((b % 2) ? (T)-1 : (T)1) : 0); \
    U r = 1, base = (U)a;                                                       \
    for (T e = b; e > 0; e >>= 1) {                                             \
      if (e & 1) r = r * base;                                                  \
      base = base * base;                                                       \
    }                                                                           \
    return (T)r;                                                                \
  }
KILN_SIGNED_INT_RULES(i64, kiln_i64, kiln_u64)
KILN_SIGNED_INT_RULES(i32, int, unsigned)
KILN_FN unsigned char kiln_div_u8(unsigned char a, unsigned char b) {
  return b == 0 ? 0 : (unsigned char)(a / b);
}
KILN_FN unsigned char kiln_pow_u8(unsigned char a, unsigned char b) {
  unsigned r = 1, base = a;
  for (unsigned e = b; e > 0; e >>= 1) {
    if (e & 1) r = r * base;
    base = base * base;
  }
  return (unsigned char)r;
}
KILN_FN bool kiln_div_b8(bool a, bool b) { return a && b; }
KILN_FN bool kiln_pow_b8(bool a, bool b) { return a || !b; }
// Sizes and element strides of a strided copy (print_strided_copy), by value.
typedef struct KilnStrides {
  kiln_i64 size[8], dst[8], src[8];
} KilnStrides;
// Sizes and element strides of the indexing kernels (print_gather, ...).
typedef struct KilnIndexGeom {
  kiln_i64 size[8], out[8], x[8], idx[8];
} KilnIndexGeom;
)";

}  // namespace

std::string cuda_prelude() {
  return std::string(kCudaHead) + kCommonBody;
}

std::string opencl_prelude() {
  return std::string(kOpenClHead) + kCommonBody;
}

std::string cpp_prelude() {
  return std::string(kCppHead) + kCommonBody;
}

}  // namespace kiln::cuda
