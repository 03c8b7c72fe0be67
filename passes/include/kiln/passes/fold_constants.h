// Constant folding: evaluates nodes whose inputs are all constants.
#pragma once

#include <optional>

#include "kiln/device.h"
#include "kiln/ir/graph.h"

namespace kiln::passes {

/// Replaces nodes whose inputs are all constants (or `full` nodes) by constant
/// nodes computed with the eager kernels; the rules are at the top of
/// fold_constants.cpp. Returns true if a node was folded.
bool fold_constants(ir::Graph& g);

/// While alive, fold_constants on this thread knows the device the graph runs
/// on (the IR records none): folded values are placed there (scopes nest; the
/// innermost wins). Without one, only folds whose device is known are made.
class FoldDeviceScope {
 public:
  explicit FoldDeviceScope(Device device);
  ~FoldDeviceScope();
  FoldDeviceScope(const FoldDeviceScope&) = delete;
  FoldDeviceScope& operator=(const FoldDeviceScope&) = delete;
  /// The device of the innermost scope on this thread, if any.
  static std::optional<Device> current();

 private:
  Device device_;
  FoldDeviceScope* outer_;
};

}  // namespace kiln::passes
