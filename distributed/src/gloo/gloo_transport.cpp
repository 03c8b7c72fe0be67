// The TCP transport over Gloo's collectives (gloo_transport.h). Gloo reduces
// one flat buffer: several spans are copied into one and back; reduce-scatter
// is an all-reduce of a copy (Gloo has no options-API reduce-scatter: twice
// the traffic of a ring, but simple and exact).
#include "gloo_transport.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>

#include <cstring>

#include "kiln/error.h"
#include "kiln/functional.h"
#include "reduce_kernels.h"

namespace kiln::dist::gloo_backend {

namespace {

// Gloo's option setters are templated on the element type only for its size.
template <typename F>
void with_element(size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
  }
  KILN_ASSERT(false, "element size ", bytes);
}

size_t total_bytes(const std::vector<detail::Span>& spans) {
  size_t b = 0;
  for (const auto& s : spans) b += s.bytes;
  return b;
}

// A scratch buffer of `bytes` (aligned for every dtype).
Tensor scratch(size_t bytes, DType dt) {
  return empty({int64_t(bytes / dtype_size(dt))}, dt);
}

}  // namespace

void GlooTransport::all_reduce_raw(void* p, size_t n, DType dt, ReduceOp op) {
  if (n == 0) return;
  ::gloo::AllreduceOptions o(ctx_);
  with_element(dtype_size(dt), [&](auto e) {
    using T = decltype(e);
    o.setOutput(static_cast<T*>(p), n);
  });
  o.setReduceFunction(detail::reduce_fn(dt, op));
  o.setTag(tag_);
  o.setTimeout(timeout_);
  ::gloo::allreduce(o);
  if (op == ReduceOp::kAvg) detail::divide_in_place(p, dt, n, ctx_->size);
}

void GlooTransport::all_reduce(const std::vector<detail::Span>& data, DType dt, ReduceOp op,
                               const Signature&, Clock::time_point) {
  const size_t elem = dtype_size(dt);
  if (data.size() == 1) return all_reduce_raw(data[0].data, data[0].bytes / elem, dt, op);
  const size_t bytes = total_bytes(data);
  Tensor flat = scratch(bytes, dt);
  auto* p = static_cast<std::byte*>(flat.data_ptr());
  for (const auto& s : data) p = static_cast<std::byte*>(std::memcpy(p, s.data, s.bytes)) + s.bytes;
  all_reduce_raw(flat.data_ptr(), bytes / elem, dt, op);
  p = static_cast<std::byte*>(flat.data_ptr());
  for (const auto& s : data) {
    std::memcpy(s.data, p, s.bytes);
    p += s.bytes;
  }
}

void GlooTransport::all_reduce_into(const std::vector<detail::Span>& srcs, detail::Span dst,
                                    DType dt, ReduceOp op, const Signature&, Clock::time_point) {
  std::byte* p = dst.data;
  for (const auto& s : srcs) {
    if (s.data != p) std::memcpy(p, s.data, s.bytes);
    p += s.bytes;
  }
  all_reduce_raw(dst.data, dst.bytes / dtype_size(dt), dt, op);
}

void GlooTransport::reduce(detail::Span data, DType dt, ReduceOp op, int root, const Signature&,
                           Clock::time_point) {
  if (data.bytes == 0) return;
  const size_t n = data.bytes / dtype_size(dt);
  const bool is_root = ctx_->rank == root;
  // Gloo uses the output as scratch on every rank: non-roots keep `data` intact.
  Tensor tmp = is_root ? Tensor() : scratch(data.bytes, dt);
  void* out = is_root ? static_cast<void*>(data.data) : tmp.data_ptr();
  ::gloo::ReduceOptions o(ctx_);
  with_element(dtype_size(dt), [&](auto e) {
    using T = decltype(e);
    if (!is_root) o.setInput(reinterpret_cast<T*>(data.data), n);
    o.setOutput(static_cast<T*>(out), n);
  });
  o.setRoot(root);
  o.setReduceFunction(detail::reduce_fn(dt, op));
  o.setTag(tag_);
  o.setTimeout(timeout_);
  ::gloo::reduce(o);
  if (is_root && op == ReduceOp::kAvg) detail::divide_in_place(data.data, dt, n, ctx_->size);
}

void GlooTransport::broadcast(detail::Span data, int root, const Signature&, Clock::time_point) {
  if (data.bytes == 0) return;
  ::gloo::BroadcastOptions o(ctx_);
  // Any element type moves the bytes; bytes need no alignment.
  o.setOutput(reinterpret_cast<uint8_t*>(data.data), data.bytes);
  o.setRoot(root);
  o.setTag(tag_);
  o.setTimeout(timeout_);
  ::gloo::broadcast(o);
}

void GlooTransport::all_gather(const std::vector<detail::Span>& outs, detail::Span in,
                               const Signature&, Clock::time_point) {
  if (in.bytes == 0) return;
  std::vector<std::byte> flat(in.bytes * size_t(ctx_->size));
  ::gloo::AllgatherOptions o(ctx_);
  o.setInput(reinterpret_cast<uint8_t*>(in.data), in.bytes);
  o.setOutput(reinterpret_cast<uint8_t*>(flat.data()), flat.size());
  o.setTag(tag_);
  o.setTimeout(timeout_);
  ::gloo::allgather(o);
  for (size_t r = 0; r < outs.size(); ++r)
    std::memcpy(outs[r].data, flat.data() + r * in.bytes, in.bytes);
}

void GlooTransport::reduce_scatter(detail::Span out, detail::Span in, DType dt, ReduceOp op,
                                   const Signature&, Clock::time_point) {
  if (in.bytes == 0) return;
  Tensor tmp = scratch(in.bytes, dt);
  std::memcpy(tmp.data_ptr(), in.data, in.bytes);
  all_reduce_raw(tmp.data_ptr(), in.bytes / dtype_size(dt), dt, op);
  std::memcpy(out.data, static_cast<std::byte*>(tmp.data_ptr()) + size_t(ctx_->rank) * out.bytes,
              out.bytes);
}

void GlooTransport::barrier(const Signature&, Clock::time_point) {
  ::gloo::BarrierOptions o(ctx_);
  o.setTag(tag_);
  o.setTimeout(timeout_);
  ::gloo::barrier(o);
}

}  // namespace kiln::dist::gloo_backend
