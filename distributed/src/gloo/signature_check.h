// The TCP transport's cross-rank check of each collective (see
// collective_signature.h): a fixed-size exchange of signatures before the
// payload, so ranks that disagree get an error instead of a Gloo abort.
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "collective_signature.h"

namespace kiln::dist::gloo_backend {

/// Sends `mine` to every other rank of `ctx` and receives theirs (one hop,
/// on a slot of its own derived from `tag`), then compares them all: throws
/// detail::MismatchError naming the ranks that disagree (the same text on
/// every rank). A transport failure or `deadline` passing throws Gloo's error.
void check_signatures(const std::shared_ptr<::gloo::Context>& ctx, uint32_t tag,
                      const detail::Signature& mine,
                      std::chrono::steady_clock::time_point deadline);

}  // namespace kiln::dist::gloo_backend
