// A small TransformerEncoder that learns to reverse short digit sequences:
// token embedding + learned positions -> encoder layers -> per-position logits.
#pragma once

#include <ostream>
#include <vector>

#include "kiln/device.h"

namespace kiln::examples {

/// Task and model size.
struct ReverseOptions {
  int64_t vocab = 10;  ///< digits 0..9
  int64_t seq_len = 8;
  int64_t d_model = 64;
  int64_t nhead = 4;
  int64_t layers = 2;
  int64_t batch_size = 64;
  int steps = 600;
  double lr = 1e-3;
  uint64_t seed = 0;
  Device device = Device::cpu();  ///< where the model trains (batches are drawn on the CPU)
};

/// Figures of a run.
struct ReverseResult {
  std::vector<double> losses;    ///< per step
  double token_accuracy = 0;     ///< on 1024 fresh sequences
  double sequence_accuracy = 0;  ///< fraction reversed exactly
};

/// Trains on random sequences, printing progress to `log`, and evaluates.
ReverseResult train_reverse(const ReverseOptions& opts, std::ostream& log);

}  // namespace kiln::examples
