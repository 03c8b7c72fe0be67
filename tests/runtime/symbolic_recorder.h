// Test helper: a tracer stand-in that records op ids, returns symbolic
// (data-less) outputs and fails on any value read, plus scopes that install it.
#pragma once

#include <string>
#include <vector>

#include "kiln/dispatch.h"

namespace kiln::testing {

class SymbolicRecorder : public Recorder {
 public:
  std::vector<OpId> ops;  ///< every recorded primitive, in order
  std::vector<Tensor> record(OpId op, std::span<const Tensor>, const Attrs&,
                             const std::vector<TensorMeta>& out) override {
    ops.push_back(op);
    std::vector<Tensor> r;
    for (const TensorMeta& m : out) {
      auto impl = std::make_shared<TensorImpl>();
      impl->shape = m.shape;
      impl->strides = contiguous_strides(m.shape);
      impl->dtype = m.dtype;
      r.emplace_back(std::move(impl));
    }
    return r;
  }
  void on_value_read(const char* what, const std::source_location&) override {
    throw Error(std::string("[trace] read of ") + what);
  }
  void on_inplace(const Tensor&, const Tensor&) override {}
};

/// Installs a recorder for the scope's lifetime.
struct RecorderScope {
  Recorder* prev;
  explicit RecorderScope(Recorder* r) : prev(set_recorder(r)) {}
  ~RecorderScope() { set_recorder(prev); }
  RecorderScope(const RecorderScope&) = delete;
  RecorderScope& operator=(const RecorderScope&) = delete;
};

/// Owns a SymbolicRecorder and installs it for the scope's lifetime.
struct TraceScope {
  SymbolicRecorder rec;
  RecorderScope scope{&rec};
};

}  // namespace kiln::testing
