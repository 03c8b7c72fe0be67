// A one-line training progress bar (steps, running mean loss, samples/s, ETA)
// redrawn with '\r'. Silent unless the stream is a terminal or it is forced on.
#pragma once

#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>

namespace kiln::data {

/// Progress of one epoch: `update` after each step, `close` at the end.
class ProgressBar {
 public:
  /// `total_steps` = expected updates (0 = unknown: no bar, no ETA). Enabled iff
  /// `os` is std::cerr/std::clog/std::cout and that stream's file is a terminal.
  explicit ProgressBar(int64_t total_steps, std::ostream& os = std::cerr,
                       std::string description = "");
  /// Calls close().
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// Records one step of `batch_size` samples with loss `step_loss`, then redraws.
  void update(double step_loss, int64_t batch_size);
  /// Ends the line with '\n' (once; no-op if nothing was drawn or disabled).
  void close();
  /// Forces drawing on or off (e.g. on for an std::ostringstream in tests).
  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }
  /// The line the last update drew (without '\r' and padding).
  std::string line() const;

  int64_t steps() const { return steps_; }
  int64_t samples() const { return samples_; }
  /// Mean of the losses passed to update (0 before the first).
  double mean_loss() const { return steps_ ? loss_sum_ / static_cast<double>(steps_) : 0.0; }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_;
  std::ostream& os_;
  std::string desc_;
  bool enabled_;
  bool drawn_ = false;
  bool closed_ = false;
  int64_t steps_ = 0;
  int64_t samples_ = 0;
  double loss_sum_ = 0.0;
  size_t last_len_ = 0;
  Clock::time_point start_;
};

}  // namespace kiln::data
