// What one rank does in a collective, compared across the ranks before any
// payload moves (private to kiln_distributed). Both transports of the Gloo
// group use it: the shared-memory channel keeps it in each step's descriptor,
// and over TCP every rank sends its signature to every other rank first (a
// fixed-size message, so a disagreement cannot make Gloo abort). Both report
// a disagreement with the same message, naming every rank and what it issued.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/distributed/process_group.h"

namespace kiln::dist::detail {

/// The collectives a signature can describe.
enum class CollectiveKind : uint32_t {
  kAllReduce = 1,
  kReduce,
  kBroadcast,
  kAllGather,
  kReduceScatter,
  kBarrier,
};

/// Fixed-size and free of padding, so ranks compare signatures byte for byte
/// and send them over the wire as they are (the ranks share one build).
struct Signature {
  uint64_t seq = 0;   ///< collective number within the group
  uint32_t kind = 0;  ///< CollectiveKind
  uint16_t dtype = kNone;
  uint16_t op = kNone;  ///< ReduceOp, or kNone
  int64_t root = -1;    ///< broadcast/reduce; -1 otherwise
  uint64_t elems = 0;   ///< elements of the input (per rank)
  uint64_t where = 0;   ///< shm comm buffer: (id + 1) << 40 | byte offset; else 0
  static constexpr uint16_t kNone = 0xffff;
};
static_assert(sizeof(Signature) == 40, "Signature must have no padding");

/// The signature of collective `seq` of `kind` over `elems` elements of `dt`.
Signature make_signature(CollectiveKind kind, uint64_t seq, DType dt, uint64_t elems, int op = -1,
                         int64_t root = -1);
/// A barrier's signature.
Signature barrier_signature(uint64_t seq);

/// "all_reduce #5 (f32, 100 elements, sum)", "broadcast #2 (f64, 4 elements, root=1)".
std::string describe(const Signature& s);
/// "all_reduce #5".
std::string short_name(const Signature& s);

/// Empty when every signature equals the first; else "ranks issued different
/// collectives: rank 0 issued A; ranks 1, 2 issued B" (all[r] is rank r's),
/// the same text on every rank that holds the same list.
std::string mismatch_message(const std::vector<Signature>& all);

/// Ranks issued different collectives: the group becomes unusable (their later
/// collectives are out of step too). The message comes from mismatch_message.
struct MismatchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace kiln::dist::detail
