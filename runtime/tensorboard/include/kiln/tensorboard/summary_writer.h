// TensorBoard logging, as PyTorch's torch.utils.tensorboard.SummaryWriter:
//
//   kiln::tensorboard::SummaryWriter tb("runs/exp1");
//   tb.add_scalar("loss/train", loss.item<double>(), step);
//   tb.add_histogram("fc1/weight", model->fc1->weight, step);
//
// then `tensorboard --logdir runs`. Each writer appends to one event file,
// logdir/events.out.tfevents.<secs>.<hostname>.<pid>.<n>: TFRecord-framed
// Event protocol buffers (see record.h), the first holding "brain.Event:2".
// Events are buffered and reach the file when `max_queue` are pending, every
// `flush_secs` (a background thread), on flush() and on close(). A crash can
// lose the buffered events and leave a truncated last record, which
// TensorBoard's reader skips. All methods are thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace kiln {
class Tensor;
}

namespace kiln::tensorboard {

/// When buffered events are written out (the names and defaults are PyTorch's).
struct WriterOptions {
  int max_queue = 10;                ///< pending events that trigger a write (>= 1)
  double flush_secs = 120;           ///< the background flush's period in seconds (> 0)
  std::string filename_suffix = "";  ///< appended to every event file's name
};

/// Writes scalars, histograms and text for TensorBoard under one log directory.
class SummaryWriter {
 public:
  /// Creates `logdir` (and parents) and its event file; kiln::Error naming the
  /// path and the system's reason when that fails.
  explicit SummaryWriter(std::string logdir, WriterOptions options = {});
  /// Closes; an error at that point is printed to stderr (a destructor cannot throw).
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  /// One point of the curve `tag` (stored as float32, as TensorBoard's
  /// simple_value; NaN and infinities are kept: a diverging loss should show).
  /// `wall_time` (seconds since the epoch) defaults to now.
  void add_scalar(const std::string& tag, double value, int64_t step,
                  std::optional<double> wall_time = std::nullopt);

  /// Several curves in one chart, as PyTorch: the value of `tag` goes to the
  /// sub-run logdir/<main_tag with '/' as '_'>_<tag>, under the tag `main_tag`.
  void add_scalars(const std::string& main_tag, const std::map<std::string, double>& values,
                   int64_t step, std::optional<double> wall_time = std::nullopt);

  /// The distribution of `values` (any real dtype, any device; every element
  /// must be finite, and there must be at least one), binned like TensorFlow's
  /// default histogram: see histogram_bucket_limits().
  void add_histogram(const std::string& tag, const Tensor& values, int64_t step,
                     std::optional<double> wall_time = std::nullopt);
  /// The same from plain numbers.
  void add_histogram(const std::string& tag, std::span<const double> values, int64_t step,
                     std::optional<double> wall_time = std::nullopt);

  /// A text (UTF-8, Markdown as TensorBoard's text plugin renders it) at `step`.
  void add_text(const std::string& tag, const std::string& text, int64_t step,
                std::optional<double> wall_time = std::nullopt);

  /// Writes every buffered event to disk (kiln::Error on a write failure).
  void flush();
  /// Flushes and closes every event file; further add_* calls raise kiln::Error.
  /// Closing twice is a no-op.
  void close();

  /// The log directory given at construction.
  const std::string& logdir() const;
  /// Path of the main run's event file.
  std::string file_path() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// The bucket right edges add_histogram uses: TensorFlow's default, 0 and
/// +/-1e-12 * 1.1^k up to 1e20, closed by +/-DBL_MAX. Bucket i counts values
/// v with limit[i-1] <= v < limit[i]; runs of empty buckets are merged into one.
std::span<const double> histogram_bucket_limits();

}  // namespace kiln::tensorboard
