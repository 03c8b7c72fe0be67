// The TCP transport: the collectives over one lane's Gloo context, for one op
// (its tag). Ranks on several hosts, or where shared memory is off, use it.
#pragma once
#include <gloo/context.h>

#include <memory>

#include "transport.h"

namespace kiln::dist::gloo_backend {

using CtxPtr = std::shared_ptr<::gloo::Context>;
using detail::Signature;

/// One op's view of a lane's Gloo context. Gloo bounds each wait by the
/// group's timeout, not the op's deadline; signatures are compared before
/// the op (signature_check.h), not in-band.
class GlooTransport final : public detail::Transport {
 public:
  GlooTransport(const CtxPtr& ctx, uint32_t tag, Millis timeout)
      : ctx_(ctx), tag_(tag), timeout_(timeout) {}
  void all_reduce(const std::vector<detail::Span>& data, DType dt, ReduceOp op,
                  const Signature& sig, Clock::time_point deadline) override;
  void all_reduce_into(const std::vector<detail::Span>& srcs, detail::Span dst, DType dt,
                       ReduceOp op, const Signature& sig, Clock::time_point deadline) override;
  void reduce(detail::Span data, DType dt, ReduceOp op, int root, const Signature& sig,
              Clock::time_point deadline) override;
  void broadcast(detail::Span data, int root, const Signature& sig,
                 Clock::time_point deadline) override;
  void all_gather(const std::vector<detail::Span>& outs, detail::Span in, const Signature& sig,
                  Clock::time_point deadline) override;
  void reduce_scatter(detail::Span out, detail::Span in, DType dt, ReduceOp op,
                      const Signature& sig, Clock::time_point deadline) override;
  void barrier(const Signature& sig, Clock::time_point deadline) override;

 private:
  // Reduces n elements at p in place on every rank.
  void all_reduce_raw(void* p, size_t n, DType dt, ReduceOp op);

  const CtxPtr& ctx_;
  uint32_t tag_;
  Millis timeout_;
};

}  // namespace kiln::dist::gloo_backend
