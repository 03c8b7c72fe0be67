// Every rank sends its signature to every other rank and receives one from
// each: N-1 fixed-size messages each way, in one hop (an all-gather ring would
// take N-1 hops). The messages have one size on every rank, so whatever the
// ranks disagree on, Gloo never sees mismatched buffers.
#include "signature_check.h"

#include <gloo/types.h>

#include <algorithm>
#include <vector>

#include "kiln/error.h"

namespace kiln::dist::gloo_backend {

namespace {

// Gloo's own collectives use slot prefixes 0x01..0x08 (gloo/types.h).
constexpr uint8_t kSignatureSlotPrefix = 0x6b;

std::chrono::milliseconds left(std::chrono::steady_clock::time_point deadline) {
  auto ms =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

}  // namespace

void check_signatures(const std::shared_ptr<::gloo::Context>& ctx, uint32_t tag,
                      const detail::Signature& mine,
                      std::chrono::steady_clock::time_point deadline) {
  const int n = ctx->size, me = ctx->rank;
  if (n < 2) return;
  detail::Signature out = mine;
  std::vector<detail::Signature> all(static_cast<size_t>(n));
  all[size_t(me)] = mine;
  auto send = ctx->createUnboundBuffer(&out, sizeof out);
  auto recv = ctx->createUnboundBuffer(all.data(), all.size() * sizeof(detail::Signature));
  const uint64_t slot = ::gloo::Slot::build(kSignatureSlotPrefix, tag);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    recv->recv(r, slot, size_t(r) * sizeof(detail::Signature), sizeof(detail::Signature));
    send->send(r, slot);
  }
  for (int i = 0; i < n - 1; ++i)
    if (!recv->waitRecv(nullptr, left(deadline)))
      kiln::throw_error("aborted while exchanging collective signatures");
  for (int i = 0; i < n - 1; ++i)
    if (!send->waitSend(nullptr, left(deadline)))
      kiln::throw_error("aborted while exchanging collective signatures");
  std::string msg = detail::mismatch_message(all);
  if (!msg.empty()) throw detail::MismatchError(msg);
}

}  // namespace kiln::dist::gloo_backend
