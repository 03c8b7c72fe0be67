// cuda_probe's data-movement lines (cuda_probe_moves.cpp).
#pragma once

#include <functional>

namespace kiln::cuda {

/// Prints the eager column sums at the old and the new rule's parts and the
/// attention's head copy element by element and 16 bytes a move, timed by
/// `median_ms` (the median time of a launch sequence; a CUDA device is current).
void move_lines(const std::function<double(const std::function<void()>&)>& median_ms);

}  // namespace kiln::cuda
