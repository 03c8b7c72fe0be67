// The CUDA device runtime (kiln/device_runtime.h): device memory through a
// caching allocator, copies in every direction, and eager ops as one-op
// kernels of the kernel IR printed for the GPU, compiled once per signature.
// Registered for DeviceType::kCUDA when libkiln_codegen loads.
//
// Every kernel, copy and allocation goes to the current stream of its device
// (stream.h; the default stream unless a StreamGuard chose another); copies
// to the host wait for that stream, copies between pinned memory and the
// device may not (non_blocking).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/cuda_allocator.h"
#include "kernels/cuda/cuda_constants.h"
#include "kernels/cuda/cuda_graphs.h"
#include "kernels/cuda/device_errors.h"
#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_batch.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/stream.h"
#include "kernels/device_kernels.h"
#include "kiln/device_runtime.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "kiln/tensor.h"
#include "ops/helpers.h"

namespace kiln::cuda {
namespace {

// ---------------- compiled kernels, one per source ----------------
class Kernels {
 public:
  CUfunction get(int device, const std::string& source, const std::string& symbol) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++printed_;  // the caller printed `source` to look it up
    }
    std::lock_guard<std::mutex> lock(compile_mu_);  // one compile per source
    if (CUfunction fn = find(device, source)) return fn;
    const std::vector<char> image =
        compile_for_device(device_prelude() + source, symbol + ".cu", device);
    auto mod = std::make_shared<Module>(image.data());
    const CUfunction fn = mod->function(symbol);
    insert(device, source, mod, fn);
    return fn;
  }
  /// get() for the source `print` returns, found by `key` (a short string
  /// naming that source) without printing it again: printing a one-op kernel
  /// took 0.09 ms (mul) to 0.9 ms (tanh, its expansion) of host time, paid by
  /// every eager op on a device before this cache.
  CUfunction get_keyed(int device, const std::string& key, const std::string& symbol,
                       const std::function<std::string()>& print) {
    const std::string k = std::to_string(device) + "\n" + key;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = keyed_.find(k);
      if (it != keyed_.end()) return it->second;
    }
    const CUfunction fn = get(device, print(), symbol);
    std::lock_guard<std::mutex> lock(mu_);
    keyed_.emplace(k, fn);
    return fn;
  }
  /// Sources printed to be looked up so far (get's calls: get_keyed's first per key).
  int64_t printed() {
    std::lock_guard<std::mutex> lock(mu_);
    return printed_;
  }
  /// The function compiled for `source` on `device`, or nullptr.
  CUfunction find(int device, const std::string& source) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(std::to_string(device) + "\n" + source);
    return it == cache_.end() ? nullptr : it->second.fn;
  }
  /// Records `fn` (in `mod`) as what `source` compiles to on `device`.
  void insert(int device, const std::string& source, std::shared_ptr<Module> mod, CUfunction fn) {
    std::lock_guard<std::mutex> lock(mu_);
    cache_.emplace(std::to_string(device) + "\n" + source, Entry{std::move(mod), fn});
  }

 private:
  struct Entry {
    std::shared_ptr<Module> mod;
    CUfunction fn = nullptr;
  };
  std::mutex compile_mu_, mu_;
  std::unordered_map<std::string, Entry> cache_;
  std::unordered_map<std::string, CUfunction> keyed_;  // get_keyed's keys (modules kept by cache_)
  int64_t printed_ = 0;
};

CUdeviceptr dptr(const Tensor& t) {
  return reinterpret_cast<CUdeviceptr>(t.data_ptr());
}

std::atomic<int64_t> g_uploads{0}, g_upload_bytes{0}, g_downloads{0}, g_download_bytes{0};

thread_local int t_uncounted = 0;

void count_transfer(bool up, size_t bytes) {
  if (t_uncounted > 0) return;
  (up ? g_uploads : g_downloads).fetch_add(1, std::memory_order_relaxed);
  (up ? g_upload_bytes : g_download_bytes)
      .fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

// ---------------- the runtime ----------------
class CudaRuntime final : public DeviceRuntime {
 public:
  std::string unavailable_reason() override { return cuda::unavailable_reason(); }
  int device_count() override { return cuda::device_count(); }

  Allocator& allocator(int index) override { return device_allocator(index); }
  Allocator* pinned_allocator() override { return &pinned_host_allocator(); }

  void synchronize(int index) override {
    use_device(index);
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
    check_device_errors(index, "cuda::synchronize");
  }

  void copy(const Tensor& dst, const Tensor& src) override;
  void copy_non_blocking(const Tensor& dst, const Tensor& src) override;
  void run(OpId op, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out) override;
  /// The device's pooled constant (cuda_constants.h), else a copy.
  Tensor scalar_operand(const Tensor& cpu_scalar, Device d) override {
    if (Tensor t = pooled_constant(cpu_scalar, d.index); t.defined()) return t;
    return cpu_scalar.to(d);
  }
  /// The compiled kernels (shared with compiled graphs' fused kernels).
  Kernels& kernels() { return kernels_; }

 private:
  void device_copy(const Tensor& dst, const Tensor& src);
  void elementwise(OpId op, std::span<const Tensor> in, const Tensor& out);
  void reduce(OpId op, const Tensor& x, const Attrs& attrs, const Tensor& out);
  void launch(const kir::Kernel& k, const std::vector<Tensor>& args,
              const std::vector<int64_t>& sizes, int device);

  Kernels kernels_;
};

bool dense_same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous();
}

// Host -> device on the current stream. The host memory may be reused when
// this returns: the driver stages pageable memory before returning, and a
// pinned source, which it reads later, is waited for.
// While a graph is captured, the copy reads a pinned copy of today's host
// data kept with the graph (constants; inputs that change are refreshed by
// the graph runner outside the graph).
void upload(CUdeviceptr d, const Tensor& host, size_t bytes, int device) {
  const CUstream s = current_cu_stream(device);
  count_transfer(true, bytes);
  if (capturing_graph()) {
    Allocator& pinned = pinned_host_allocator();
    std::shared_ptr<void> staged(pinned.allocate(bytes),
                                 [&pinned, bytes](void* p) { pinned.deallocate(p, bytes); });
    std::memcpy(staged.get(), host.data_ptr(), bytes);
    check(driver().cuMemcpyHtoDAsync(d, staged.get(), bytes, s), "cuMemcpyHtoDAsync");
    keep_for_graph(std::move(staged));
    return;
  }
  check(driver().cuMemcpyHtoDAsync(d, host.data_ptr(), bytes, s), "cuMemcpyHtoDAsync");
  if (host.is_pinned()) check(driver().cuStreamSynchronize(s), "cuStreamSynchronize");
}

// `src` (as broadcast to `shape`) without its repeats: size 1 in every dim
// where it broadcasts (missing or of stride 0), a view of the same memory.
Tensor broadcast_base(const Tensor& src, const Dims& shape) {
  const Dims st = ops::broadcast_byte_strides(src, shape);
  Dims base_shape = shape, base_strides = st;
  for (size_t d = 0; d < shape.size(); ++d)
    if (st[d] == 0) base_shape[d] = 1;
  const auto es = static_cast<int64_t>(src.element_size());
  for (int64_t& b : base_strides) b /= es;
  return as_strided(src, base_shape, base_strides, src.offset());
}

// Device -> host on the current stream, complete when this returns: the
// host's synchronization every read of a device value goes through, where
// the kernels' recorded errors surface (device_errors.h).
void download(void* h, CUdeviceptr d, size_t bytes, int device) {
  const CUstream s = current_cu_stream(device);
  count_transfer(false, bytes);
  check(driver().cuMemcpyDtoHAsync(h, d, bytes, s), "cuMemcpyDtoHAsync");
  check(driver().cuStreamSynchronize(s), "cuStreamSynchronize");
  check_device_errors(device, "a copy to the host");
}

std::atomic<int64_t> g_quad_copies{0};  // quad_copies()
std::atomic<int64_t> g_quad_fills{0};   // quad_fills()

// out (contiguous, 16-byte aligned, a whole number of 16-byte quads) filled
// with `value`'s bits by a kernel taking the pattern as parameters: no
// upload, no coordinates (a [8192, 1000] zero fill took 43 us on an H200 as
// an uploaded element broadcast by the strided copy). False: not such an out.
bool fill_quads(const Tensor& out, const Tensor& value) {
  const size_t es = dtype_size(out.dtype()), bytes = static_cast<size_t>(out.numel()) * es;
  const CUdeviceptr d = dptr(out);
  if (!out.is_contiguous() || bytes == 0 || bytes % 16 != 0 || d % 16 != 0) return false;
  unsigned char pattern[16];
  for (size_t k = 0; k < 16; k += es) std::memcpy(pattern + k, value.data_ptr(), es);
  unsigned w[4];
  std::memcpy(w, pattern, 16);
  long long n = static_cast<long long>(bytes / 16);
  CUdeviceptr p = d;
  std::vector<void*> params = {&p, &n, &w[0], &w[1], &w[2], &w[3]};
  launch_printed([] { return print_quad_fill("kiln_fill_quads"); }, "kiln_fill_quads",
                 out.device().index, n, params);
  g_quad_fills.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void CudaRuntime::copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  const Device dd = dst.device(), sd = src.device();
  const int device = dd.is_cpu() ? sd.index : dd.index;
  use_device(device);
  if (!dd.is_cpu() && !sd.is_cpu()) {
    KILN_CHECK(dd == sd, "[copy] copies between two CUDA devices (", sd, " -> ", dd,
               ") are not supported yet: go through the CPU");
    device_copy(dst, src);
    return;
  }
  const size_t bytes = static_cast<size_t>(dst.numel()) * dtype_size(dst.dtype());
  if (sd.is_cpu()) {  // host -> device: cast/broadcast/compact on the host, then one upload
    // A broadcast source (a fill's scalar, a bias row) uploads its distinct
    // elements only; the device broadcasts them.
    if (Tensor base = broadcast_base(src, dst.shape()); base.numel() < dst.numel()) {
      // One value (fill_, zeros on the device): its bits as kernel parameters.
      if (base.numel() == 1 && fill_quads(dst, base.to(dst.dtype()).contiguous())) return;
      Tensor staged = make_tensor(base.shape(), dst.dtype(), dd);
      copy(staged, base);
      device_copy(dst, staged);
      return;
    }
    Tensor host = src;
    if (!dense_same(dst, src)) {
      host = make_tensor(dst.shape(), dst.dtype());
      ops::copy_into(host, src);
    }
    if (dst.is_contiguous()) {
      upload(dptr(dst), host, bytes, device);
    } else {
      Tensor staged = make_tensor(dst.shape(), dst.dtype(), dd);
      upload(dptr(staged), host, bytes, device);
      device_copy(dst, staged);
    }
    return;
  }
  // device -> host: compact (and cast) on the device, one download, then the host copy.
  Tensor dev = src;
  if (!(src.is_contiguous() && src.dtype() == dst.dtype() && src.shape() == dst.shape())) {
    dev = make_tensor(dst.shape(), dst.dtype(), sd);
    device_copy(dev, src);
  }
  if (dst.is_contiguous()) {
    download(dst.data_ptr(), dptr(dev), bytes, device);
  } else {
    Tensor host = make_tensor(dst.shape(), dst.dtype());
    download(host.data_ptr(), dptr(dev), bytes, device);
    ops::copy_into(dst, host);
  }
}

// Between pinned host memory and a device tensor of the same layout, either
// way: queued on the current stream and left running (PyTorch's non_blocking:
// a host result is valid once that stream is synchronized or an event
// recorded after the copy waited for); the pinned block is not handed out
// again before the copy ran. Every other copy is copy()'s.
void CudaRuntime::copy_non_blocking(const Tensor& dst, const Tensor& src) {
  const bool up = src.device().is_cpu() && dst.device().is_cuda() && src.is_pinned();
  const bool down = src.device().is_cuda() && dst.device().is_cpu() && dst.is_pinned();
  if (!((up || down) && dense_same(dst, src))) return copy(dst, src);
  const int device = up ? dst.device().index : src.device().index;
  use_device(device);
  const StreamPtr s = current_stream_impl(device);
  const size_t bytes = static_cast<size_t>(dst.numel()) * dtype_size(dst.dtype());
  count_transfer(up, bytes);
  if (up) {
    check(driver().cuMemcpyHtoDAsync(dptr(dst), src.data_ptr(), bytes, s->handle),
          "cuMemcpyHtoDAsync");
    pinned_record_use(src.data_ptr(), s);
  } else {
    check(driver().cuMemcpyDtoHAsync(dst.data_ptr(), dptr(src), bytes, s->handle),
          "cuMemcpyDtoHAsync");
    pinned_record_use(dst.data_ptr(), s);
  }
}

// dst = src on one device, any strides, broadcasting src to dst's shape.
void CudaRuntime::device_copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;  // nothing to copy (a grid of 0 blocks is a launch error)
  const Dims& shape = dst.shape();
  const auto rank = static_cast<int>(shape.size());
  KILN_CHECK(rank <= 8, "[copy] CUDA copies handle at most 8 dims, got shape ", shape);
  const Dims sst = ops::broadcast_byte_strides(src, shape);
  const auto es = static_cast<int64_t>(src.element_size());
  // Dims of size 1 dropped, runs contiguous on both sides merged: fewer
  // coordinate divisions per element (a permuted copy keeps its rank).
  struct Dim {
    int64_t size, dst, src;
  };
  std::vector<Dim> dims;
  for (int d = 0; d < rank; ++d) {
    const Dim x{shape[static_cast<size_t>(d)], dst.strides()[static_cast<size_t>(d)],
                sst[static_cast<size_t>(d)] / es};
    if (x.size == 1) continue;
    if (!dims.empty() && dims.back().dst == x.dst * x.size && dims.back().src == x.src * x.size)
      dims.back() = {dims.back().size * x.size, x.dst, x.src};
    else
      dims.push_back(x);
  }
  if (dims.empty()) dims.push_back({1, 1, 1});
  long long n = dst.numel();
  CUdeviceptr d = dptr(dst), s = dptr(src);
  // 16 bytes a move (a float4's bits) where the inner run is contiguous on
  // both sides and every stride and both addresses fall on 16 bytes: a
  // quarter of the coordinate work and of the memory instructions for f32
  // (the attention's head copies keep an inner run of 64).
  const int64_t per = 16 / es;
  bool quads = src.dtype() == dst.dtype() && per >= 2 && dims.back().dst == 1 &&
               dims.back().src == 1 && dims.back().size % per == 0 && d % 16 == 0 && s % 16 == 0;
  for (size_t k = 0; quads && k + 1 < dims.size(); ++k)
    quads = dims[k].dst % per == 0 && dims[k].src % per == 0;
  if (quads) {
    dims.back().size /= per;
    for (size_t k = 0; k + 1 < dims.size(); ++k) {
      dims[k].dst /= per;
      dims[k].src /= per;
    }
    n /= per;
  }
  KilnStrides g{};
  for (size_t k = 0; k < dims.size(); ++k) {
    g.size[k] = dims[k].size;
    g.dst[k] = dims[k].dst;
    g.src[k] = dims[k].src;
  }
  const std::string sym =
      quads ? std::string("kiln_copy_quads")
            : str("kiln_copy_", dtype_name(src.dtype()), "_", dtype_name(dst.dtype()));
  // The symbol and the index limit fix the copy's text.
  const CUfunction fn =
      kernels_.get_keyed(dst.device().index, str(sym, " narrow ", narrow_index_limit()), sym, [&] {
        return quads ? print_quad_copy(sym) : print_strided_copy(src.dtype(), dst.dtype(), sym);
      });
  if (quads) g_quad_copies.fetch_add(1, std::memory_order_relaxed);
  int r = static_cast<int>(dims.size());
  void* params[] = {&d, &s, &n, &r, &g};
  const long long blocks = std::min<long long>((n + 255) / 256, 1 << 16);
  check(driver().cuLaunchKernel(fn, static_cast<unsigned>(blocks), 1, 1, 256, 1, 1, 0,
                                current_cu_stream(dst.device().index), params, nullptr),
        "cuLaunchKernel (copy)");
  after_launch(sym);
}

// Whether `t` can be a kernel IR argument over `shape` as it is: padded on
// the left to the rank, each dim either broadcast (size 1 or stride 0) or
// dense, the dense dims laid out row-major without gaps.
bool kernel_layout(const Tensor& t, const Dims& shape, std::vector<bool>& dense) {
  const size_t rank = shape.size(), pad = rank - t.shape().size();
  dense.assign(rank, false);
  int64_t expect = 1;
  for (size_t d = rank; d-- > 0;) {
    const int64_t s = d < pad ? 1 : t.shape()[d - pad];
    const int64_t st = d < pad ? 0 : t.strides()[d - pad];
    if (s == 1 || st == 0) continue;  // broadcast (or a single row: either works)
    if (st != expect) return false;
    dense[d] = true;
    expect *= s;
  }
  return true;
}

void CudaRuntime::launch(const kir::Kernel& k, const std::vector<Tensor>& args,
                         const std::vector<int64_t>& sizes, int device) {
  const std::string sym = "kiln_eager";
  // The kernel IR's canonical text and the one printer input that can change
  // at run time name the printed source.
  const std::string key = str(kir::to_string(k), "narrow ", narrow_index_limit());
  KernelFns fns{kernels_.get_keyed(device, key, sym, [&] { return print_kernel(k, sym); }), {}};
  // A row kernel's held twin of each count, compiled at the first launch
  // holding rows with it.
  auto twin = [&](int h) {
    const std::string held = sym + kHeldTwin;
    return kernels_.get_keyed(device, str(key, " held ", h), held,
                              [&] { return print_held_twin(k, held, h); });
  };
  if (held_of(k) > 0) fns.held = std::ref(twin);
  std::vector<CUdeviceptr> ptrs;
  for (const Tensor& t : args) ptrs.push_back(dptr(t));
  launch_kernel(fns, k, ptrs, sizes.data(), current_cu_stream(device));
}

// The dtype an elementwise op computes in: the eager kernels' rule (a
// predicate's operands promoted, a cast's source, else the output's).
DType compute_dtype(OpId op, std::span<const Tensor> in, DType out) {
  const bool predicate = op_info(op).has(kPredicate);
  if (op == OpId::cast || (predicate && in.size() == 1)) return in[0].dtype();
  return predicate ? ops::result_type(in.first(2)) : out;
}

void CudaRuntime::elementwise(OpId op, std::span<const Tensor> in, const Tensor& out) {
  if (out.numel() == 0) return;
  const Dims shape = out.dim() == 0 ? Dims{1} : out.shape();
  const DType ct = compute_dtype(op, in, out.dtype());
  kir::Kernel k;
  k.name = op_name(op);
  k.rank = static_cast<int>(shape.size());
  std::vector<Tensor> args;
  std::vector<int> vals;
  for (size_t i = 0; i < in.size(); ++i) {
    Tensor t = in[i];
    std::vector<bool> dense;
    if (!kernel_layout(t, shape, dense)) {
      t = t.contiguous();  // a copy kernel on the device
      KILN_ASSERT(kernel_layout(t, shape, dense), "contiguous tensor without a kernel layout");
    }
    k.args.push_back({t.dtype(), false, dense});
    args.push_back(t);
    int v = static_cast<int>(k.exprs.size());
    k.exprs.push_back(kir::Expr::load(static_cast<int>(i), t.dtype()));
    // where's condition is bool; every other operand computes in ct.
    const DType want = op == OpId::where && i == 0 ? DType::b8 : ct;
    if (t.dtype() != want) {
      k.exprs.push_back(kir::Expr::make_op(OpId::cast, want, v));
      v = static_cast<int>(k.exprs.size()) - 1;
    }
    vals.push_back(v);
  }
  k.exprs.push_back(kir::Expr::make_op(op, out.dtype(), vals[0], vals.size() > 1 ? vals[1] : -1,
                                       vals.size() > 2 ? vals[2] : -1));
  k.args.push_back({out.dtype(), true, std::vector<bool>(shape.size(), true)});
  args.push_back(out);
  k.stores.push_back({static_cast<int>(k.args.size()) - 1, static_cast<int>(k.exprs.size()) - 1});
  launch(k, args, std::vector<int64_t>(shape.begin(), shape.end()), out.device().index);
}

// sum/max/min over `dims`: a column sum's own kernels (sums over leading
// dims), else the reduced dims moved last and made one inner dim, then a row
// kernel (one block per output element).
void CudaRuntime::reduce(OpId op, const Tensor& x, const Attrs& attrs, const Tensor& out) {
  if (out.numel() == 0) return;
  const Dims dims =
      ops::normalize_dims(attrs.has("dims") ? attrs.dims("dims") : Dims{}, x.dim(), op_name(op));
  Dims perm, kept;
  int64_t inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
      perm.push_back(d);
      kept.push_back(x.shape()[static_cast<size_t>(d)]);
    }
  for (int64_t d : dims) {
    perm.push_back(d);
    inner *= x.shape()[static_cast<size_t>(d)];
  }
  if (op == OpId::sum && device_column_sum(x, dims, out)) return;
  int64_t rows = 1;
  for (int64_t s : kept) rows *= s;
  const Tensor xc = kiln::permute(x, perm).contiguous();
  kir::Kernel k;
  k.name = op_name(op);
  k.rank = 2;
  k.args = {{x.dtype(), false, {true, true}}, {out.dtype(), true, {true, false}}};
  k.exprs.push_back(kir::Expr::load(0, x.dtype()));
  k.reductions.push_back({op, 0, 0, out.dtype()});
  kir::Expr red;
  red.kind = kir::ExprKind::kReduced;
  red.arg = 0;
  red.dtype = out.dtype();
  k.exprs.push_back(red);
  k.stores.push_back({1, 1});
  launch(k, {xc, out}, {rows, inner}, out.device().index);
}

void CudaRuntime::run(OpId op, std::span<const Tensor> in, const Attrs& attrs,
                      std::span<Tensor> out) {
  const OpInfo& info = op_info(op);
  use_device(out[0].device().index);
  if (op == OpId::copy) return device_copy(out[0], in[0]);
  if (info.has(kElementwise)) return elementwise(op, in, out[0]);
  if (op == OpId::sum || op == OpId::max || op == OpId::min)
    return reduce(op, in[0], attrs, out[0]);
  if (op == OpId::matmul)  // with a bias (a third input) and "relu"/"gelu": an epilogue
    return device_matmul(in[0], in[1], out[0],
                         gemm_epilogue(in.size() > 2, attrs.has("relu") && attrs.b("relu"),
                                       attrs.has("gelu") && attrs.b("gelu")),
                         in.size() > 2 ? in[2] : Tensor());
  if (op == OpId::rand_uniform || op == OpId::rand_normal)
    return device_random(op == OpId::rand_normal, attrs, out[0]);
  if (op == OpId::full)  // a host value broadcast: copy() fills quads of its bits
    return copy(out[0], scalar_tensor(ops::full_scalar(attrs), out[0].dtype(), "full"));
  if (info.has(kFactory)) {  // the others (arange): made on the host, then uploaded
    std::vector<Tensor> host{make_tensor(out[0].shape(), out[0].dtype())};
    info.kernel(in, attrs, host);
    return copy(out[0], host[0]);
  }
  // Built from fills and strided copies into views of their output
  // (copy_into goes to this runtime's copy): their kernels run as they are.
  if (info.has(kCopies)) return info.kernel(in, attrs, out);
  // collective_start/wait: their kernels hand the tensors to the collective
  // backend, which orders the communication on streams (runtime/src/ops/collective.cpp).
  if (info.has(kCollective)) return info.kernel(in, attrs, out);
  if (op == OpId::gather) return device_gather(in[0], attrs.i("dim"), in[1], out[0]);
  if (op == OpId::index_select) return device_index_select(in[0], attrs.i("dim"), in[1], out[0]);
  if (op == OpId::argmax || op == OpId::argmin)
    return device_arg_extreme(op == OpId::argmax, in[0], attrs.i("dim"), attrs.b("keepdim"),
                              attrs.b("flat"), out[0]);
  if (op == OpId::scatter_add)
    return device_scatter_add(in[0], attrs.i("dim"), in[1], in[2], out[0]);
  if (op == OpId::cumsum || op == OpId::cumprod)
    return device_scan(op == OpId::cumprod, in[0], attrs, out[0]);
  if (op == OpId::argsort) return device_argsort(in[0], attrs, out[0]);
  if (op == OpId::multinomial) return device_multinomial(in[0], in[1], attrs, out[0]);
  if (op == OpId::conv2d) return device_conv2d(in[0], in[1], attrs, out[0]);
  if (op == OpId::conv2d_grad_input) return device_conv2d_grad_input(in[0], in[1], attrs, out[0]);
  if (op == OpId::conv2d_grad_weight) return device_conv2d_grad_weight(in[0], in[1], attrs, out[0]);
  if (op == OpId::max_pool2d) return device_max_pool2d(in[0], attrs, out[0], out[1]);
  if (op == OpId::avg_pool2d) return device_avg_pool2d(in[0], attrs, out[0]);
  if (op == OpId::avg_pool2d_grad) return device_avg_pool2d_grad(in[0], attrs, out[0]);
  KILN_CHECK(false, "[", info.name,
             "] is not implemented for CUDA tensors yet (on CUDA kiln runs "
             "elementwise ops, sum/max/min/argmax/argmin, cumsum/cumprod, argsort/sort/topk, "
             "multinomial, "
             "matmul, conv2d, pooling, gather/index_select/scatter_add, pad/cat, views and "
             "copies so far); move the "
             "operands to the CPU with .cpu()");
}

// ---------------- fused kernels of compiled graphs ----------------
// The executor's kernels on CUDA. The executor asks for a graph's kernels one
// by one before running it, so new ones wait in a batch that the first launch
// of any of them compiles as one program: one NVRTC call and one module for
// the graph (20 kernels: 0.5 s batched against 2.6 s one by one, measured on this project's hosts).
// Kernels already compiled (by an earlier graph) are reused from the cache.
std::atomic<int64_t> g_batch_programs{0}, g_batch_kernels{0}, g_column_sum_launches{0},
    g_instances{0}, g_launches{0}, g_batched_launches{0};

class GraphBatch {
 public:
  GraphBatch(Kernels& kernels, int device) : kernels_(kernels), device_(device) {}

  /// Adds `k` (printed alone as `single`, the cache's key); its index here.
  size_t add(const kir::Kernel& k, const std::string& single) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < singles_.size(); ++i)
      if (singles_[i] == single) return i;
    bodies_.push_back(print_kernel(k, str("kiln_fused_", bodies_.size())));
    singles_.push_back(single);
    return bodies_.size() - 1;
  }
  /// False once compiled: later kernels start a new batch.
  bool open() {
    std::lock_guard<std::mutex> lock(mu_);
    return fns_.empty();
  }
  /// The function of kernel `i`, compiling the whole batch the first time.
  CUfunction function(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fns_.empty()) {
      std::string source = device_prelude();
      for (const std::string& b : bodies_) source += b;
      use_device(device_);
      const std::vector<char> image = compile_for_device(source, "kiln_graph.cu", device_);
      auto mod = std::make_shared<Module>(image.data());
      std::vector<CUfunction> fns;
      for (size_t j = 0; j < bodies_.size(); ++j) {
        fns.push_back(mod->function(str("kiln_fused_", j)));
        kernels_.insert(device_, singles_[j], mod, fns.back());
      }
      fns_ = std::move(fns);
      mod_ = std::move(mod);
      ++g_batch_programs;
      g_batch_kernels += static_cast<int64_t>(fns_.size());
    }
    return fns_[i];
  }

 private:
  Kernels& kernels_;
  int device_;
  std::mutex mu_;
  std::vector<std::string> bodies_, singles_;
  std::shared_ptr<Module> mod_;
  std::vector<CUfunction> fns_;
};

class CudaGraphKernel final : public detail::DeviceKernel {
 public:
  CudaGraphKernel(kir::Kernel k, CUfunction fn, std::shared_ptr<GraphBatch> batch, size_t index,
                  int device)
      : k_(std::move(k)),
        fn_(fn),
        batch_(std::move(batch)),
        index_(index),
        device_(device),
        sums_(has_column_sums(k_)),
        twin_(held_of(k_) > 0) {}
  void launch(void* const* ptrs, const int64_t* sizes,
              std::span<const DType> sum_dtypes) const override {
    use_device(device_);
    CUfunction fn = fn_.load(std::memory_order_acquire);
    if (!fn) {
      fn = batch_->function(index_);
      fn_.store(fn, std::memory_order_release);
    }
    std::vector<CUdeviceptr> p(k_.args.size());
    for (size_t i = 0; i < p.size(); ++i) p[i] = reinterpret_cast<CUdeviceptr>(ptrs[i]);
    ++g_instances;
    ++g_launches;
    if (sums_) {
      ++g_column_sum_launches;
      return launch_column_sums(fn, k_, std::move(p), sizes, sum_dtypes, device_);
    }
    KernelFns f{fn, {}};
    if (twin_) f.held = [this](int h) { return held_twin(h); };
    launch_kernel(f, k_, p, sizes, current_cu_stream(device_));
  }
  // A pointwise kernel's instances through its batched form (compiled at the
  // first batched launch: only kernels that run several instances per step
  // need it), up to batch_capacity() per launch.
  void launch_batch(std::span<void* const* const> ptrs,
                    std::span<const int64_t* const> sizes) const override {
    if (ptrs.size() < 2 || !batchable(k_)) return DeviceKernel::launch_batch(ptrs, sizes);
    use_device(device_);
    CUfunction fn = batched_.load(std::memory_order_acquire);
    if (!fn) {
      fn = cached_kernel(device_, print_batched_kernel(k_, "kiln_batched", batch_words()),
                         "kiln_batched");
      batched_.store(fn, std::memory_order_release);
    }
    const int64_t n = launch_batched(fn, k_, ptrs, sizes, current_cu_stream(device_));
    g_instances += static_cast<int64_t>(ptrs.size());
    g_launches += n;
    g_batched_launches += n;
  }

 private:
  kir::Kernel k_;
  mutable std::atomic<CUfunction> fn_;
  mutable std::atomic<CUfunction> batched_{nullptr};
  // The held twin of count h (print_held_twin), compiled alone at the first
  // launch holding rows with it: a plan's first run is not captured (its
  // sizes are the replays'), so neither is this.
  CUfunction held_twin(int h) const {
    std::lock_guard<std::mutex> lock(held_mu_);
    CUfunction& fn = held_fns_[h];
    if (!fn) fn = cached_kernel(device_, print_held_twin(k_, "kiln_held", h), "kiln_held");
    return fn;
  }
  mutable std::mutex held_mu_;
  mutable std::map<int, CUfunction> held_fns_;
  std::shared_ptr<GraphBatch> batch_;
  size_t index_;
  int device_;
  bool sums_, twin_;
};

class CudaGraphCompiler final : public detail::DeviceKernelCompiler {
 public:
  explicit CudaGraphCompiler(Kernels& kernels) : kernels_(kernels) {}
  std::shared_ptr<const detail::DeviceKernel> compile(const kir::Kernel& k,
                                                      Device device) override {
    const std::string single = print_kernel(k, "kiln_fused");  // refuses invalid kernels now
    use_device(device.index);
    if (CUfunction fn = kernels_.find(device.index, single))
      return std::make_shared<CudaGraphKernel>(k, fn, nullptr, 0, device.index);
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<GraphBatch>& batch = open_[device.index];
    if (!batch || !batch->open()) batch = std::make_shared<GraphBatch>(kernels_, device.index);
    const size_t i = batch->add(k, single);
    return std::make_shared<CudaGraphKernel>(k, nullptr, batch, i, device.index);
  }

 private:
  Kernels& kernels_;
  std::mutex mu_;
  std::map<int, std::shared_ptr<GraphBatch>> open_;  // per device: the batch taking kernels
};

CudaRuntime g_runtime;
CudaGraphCompiler g_graph_compiler(g_runtime.kernels());
const bool g_registered = [] {
  register_device_runtime(DeviceType::kCUDA, &g_runtime);
  detail::register_device_kernel_compiler(DeviceType::kCUDA, &g_graph_compiler);
  return true;
}();

}  // namespace

GraphProgramStats graph_program_stats() {
  return {g_batch_programs.load(), g_batch_kernels.load(), g_column_sum_launches.load(),
          g_instances.load(),      g_launches.load(),      g_batched_launches.load()};
}

CUfunction cached_kernel(int device, const std::string& source, const std::string& symbol) {
  use_device(device);
  return g_runtime.kernels().get(device, source, symbol);
}

CUfunction cached_kernel(int device, const std::string& key, const std::string& symbol,
                         const std::function<std::string()>& print) {
  use_device(device);
  return g_runtime.kernels().get_keyed(device, key, symbol, print);
}

int64_t printed_kernel_sources() {
  return g_runtime.kernels().printed();
}

void synchronize(int device) {
  device_runtime(Device::cuda(device), "synchronize").synchronize(device);
}

UncountedTransfers::UncountedTransfers() {
  ++t_uncounted;
}
UncountedTransfers::~UncountedTransfers() {
  --t_uncounted;
}

int64_t quad_copies() {
  return g_quad_copies.load(std::memory_order_relaxed);
}

int64_t quad_fills() {
  return g_quad_fills.load(std::memory_order_relaxed);
}

TransferStats transfer_stats() {
  return {g_uploads.load(), g_upload_bytes.load(), g_downloads.load(), g_download_bytes.load()};
}

}  // namespace kiln::cuda
