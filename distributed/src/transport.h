// The transports a process group's collectives run over: one interface, two
// implementations — TCP through Gloo (gloo/gloo_transport.*) and shared memory
// between the ranks of one host (shm/). The group checks arguments, builds the
// signature and queues the op; the transport moves and reduces the bytes.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "collective_signature.h"
#include "kiln/distributed/process_group.h"

namespace kiln::dist::detail {

/// A contiguous byte range of one tensor.
struct Span {
  std::byte* data = nullptr;
  size_t bytes = 0;
};

/// A failure of the transport that leaves it mid-collective (a peer left,
/// exited or timed out): the group becomes unusable.
struct TransportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The collectives of one worker lane. Every call takes the op's signature
/// (a transport that compares it in-band throws MismatchError naming the ranks
/// that disagree) and the op's deadline.
class Transport {
 public:
  virtual ~Transport() = default;
  /// Reduces the concatenation of `data` (one dtype) in place on every rank.
  virtual void all_reduce(const std::vector<Span>& data, DType dt, ReduceOp op,
                          const Signature& sig, Clock::time_point deadline) = 0;
  /// Reduces the concatenation of `srcs` (only read) into `dst` on every rank.
  virtual void all_reduce_into(const std::vector<Span>& srcs, Span dst, DType dt, ReduceOp op,
                               const Signature& sig, Clock::time_point deadline) = 0;
  /// As all_reduce, but only `root` receives the result (the others' data stays).
  virtual void reduce(Span data, DType dt, ReduceOp op, int root, const Signature& sig,
                      Clock::time_point deadline) = 0;
  /// Copies root's `data` into `data` on every rank.
  virtual void broadcast(Span data, int root, const Signature& sig, Clock::time_point deadline) = 0;
  /// outs[r] receives rank r's `in`.
  virtual void all_gather(const std::vector<Span>& outs, Span in, const Signature& sig,
                          Clock::time_point deadline) = 0;
  /// `out` receives the reduction of block rank() of every rank's `in`.
  virtual void reduce_scatter(Span out, Span in, DType dt, ReduceOp op, const Signature& sig,
                              Clock::time_point deadline) = 0;
  /// Returns once every rank entered it.
  virtual void barrier(const Signature& sig, Clock::time_point deadline) = 0;
};

}  // namespace kiln::dist::detail
