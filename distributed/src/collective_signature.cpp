// Collective signatures: construction, text, and the cross-rank comparison.
#include "collective_signature.h"

#include <cstring>

#include "kiln/error.h"

namespace kiln::dist::detail {

namespace {

const char* kind_name(uint32_t k) {
  switch (CollectiveKind(k)) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kReduce:
      return "reduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "unknown collective";
}

bool same(const Signature& a, const Signature& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

Signature make_signature(CollectiveKind kind, uint64_t seq, DType dt, uint64_t elems, int op,
                         int64_t root) {
  Signature s;
  s.seq = seq;
  s.kind = uint32_t(kind);
  s.dtype = uint16_t(dt);
  s.op = op < 0 ? Signature::kNone : uint16_t(op);
  s.root = root;
  s.elems = elems;
  return s;
}

Signature barrier_signature(uint64_t seq) {
  Signature s;
  s.seq = seq;
  s.kind = uint32_t(CollectiveKind::kBarrier);
  return s;
}

std::string short_name(const Signature& s) {
  return kiln::str(kind_name(s.kind), " #", s.seq);
}

std::string describe(const Signature& s) {
  std::string out = short_name(s);
  if (s.kind == uint32_t(CollectiveKind::kBarrier)) return out;
  // A peer's bytes are only ever produced by make_signature, but print
  // defensively: an unknown dtype code is shown as a number.
  const bool known_dtype = s.dtype < kNumDTypes;
  out += kiln::str(" (", known_dtype ? dtype_name(DType(s.dtype)) : kiln::str("dtype ", s.dtype),
                   ", ", s.elems, " elements");
  if (s.op != Signature::kNone) out += kiln::str(", ", to_string(ReduceOp(s.op)));
  if (s.root >= 0) out += kiln::str(", root=", s.root);
  if (s.where != 0)
    out += kiln::str(", comm buffer #", (s.where >> 40) - 1, " at byte ",
                     s.where & ((uint64_t(1) << 40) - 1));
  return out + ")";
}

std::string mismatch_message(const std::vector<Signature>& all) {
  bool agree = true;
  for (const auto& s : all) agree = agree && same(s, all[0]);
  if (agree) return {};
  // Distinct signatures in order of their lowest rank, each with its ranks.
  std::vector<std::pair<Signature, std::vector<size_t>>> groups;
  for (size_t r = 0; r < all.size(); ++r) {
    auto it = groups.begin();
    while (it != groups.end() && !same(it->first, all[r])) ++it;
    if (it == groups.end()) {
      groups.push_back({all[r], {r}});
    } else {
      it->second.push_back(r);
    }
  }
  std::string msg = "ranks issued different collectives: ";
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& ranks = groups[g].second;
    if (g) msg += g + 1 == groups.size() && groups.size() == 2 ? " but " : "; ";
    msg += ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (i == 8 && ranks.size() > 9) {
        msg += kiln::str(" and ", ranks.size() - 8, " more");
        break;
      }
      msg += kiln::str(i ? ", " : "", ranks[i]);
    }
    msg += kiln::str(" issued ", describe(groups[g].first));
  }
  return msg;
}

}  // namespace kiln::dist::detail
