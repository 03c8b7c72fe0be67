#include "kiln/tensorboard/summary_writer.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "event_file.h"
#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::tensorboard {
namespace {

// A proto3 string must be valid UTF-8, or TensorBoard's (Python) reader
// refuses the whole record.
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra = c < 0x80           ? 0
                : (c >> 5) == 0x6  ? 1
                : (c >> 4) == 0xe  ? 2
                : (c >> 3) == 0x1e ? 3
                                   : -1;
    if (extra < 0 || s.size() - i <= static_cast<size_t>(extra)) return false;
    uint32_t cp = extra == 0 ? c : c & (0x3f >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return false;
    i += extra + 1;
  }
  return true;
}

void check_tag(const char* op, const std::string& tag) {
  KILN_CHECK(!tag.empty(), "[", op, "] the tag is empty");
  // A NUL would also cut the tag short in messages and sub-run directory names.
  KILN_CHECK(tag.find('\0') == std::string::npos, "[", op,
             "] the tag contains a NUL byte at offset ", tag.find('\0'));
  KILN_CHECK(valid_utf8(tag), "[", op, "] the tag '", tag, "' is not valid UTF-8");
}

std::vector<double> make_bucket_limits() {
  std::vector<double> pos;
  for (double v = 1e-12; v < 1e20; v *= 1.1) pos.push_back(v);
  std::vector<double> limits;
  limits.reserve(2 * pos.size() + 3);
  limits.push_back(-DBL_MAX);
  for (auto it = pos.rbegin(); it != pos.rend(); ++it) limits.push_back(-*it);
  limits.push_back(0.0);
  limits.insert(limits.end(), pos.begin(), pos.end());
  limits.push_back(DBL_MAX);
  return limits;
}

// TensorFlow's Histogram::EncodeToProto without preserved zero buckets: a run
// of empty buckets is written as one, ending at the run's last edge.
void fill_histogram(const std::string& tag, std::span<const double> values,
                    proto::HistogramProto* h) {
  KILN_CHECK(!values.empty(), "[add_histogram] '", tag, "': no values");
  const std::span<const double> limits = histogram_bucket_limits();
  std::vector<double> counts(limits.size(), 0.0);
  double lo = values[0], hi = values[0], sum = 0, sum_sq = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    KILN_CHECK(std::isfinite(v), "[add_histogram] '", tag, "': value ", v, " at index ", i,
               " is not finite (a histogram needs finite values)");
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum_sq += v * v;
    size_t b = std::upper_bound(limits.begin(), limits.end(), v) - limits.begin();
    counts[std::min(b, limits.size() - 1)] += 1;
  }
  h->set_min(lo);
  h->set_max(hi);
  h->set_num(static_cast<double>(values.size()));
  h->set_sum(sum);
  h->set_sum_squares(sum_sq);
  for (size_t i = 0; i < counts.size();) {
    double end = limits[i], count = counts[i];
    ++i;
    if (count == 0)
      while (i < counts.size() && counts[i] == 0) end = limits[i++];
    h->add_bucket_limit(end);
    h->add_bucket(count);
  }
}

}  // namespace

std::span<const double> histogram_bucket_limits() {
  static const std::vector<double> limits = make_bucket_limits();
  return limits;
}

struct SummaryWriter::State {
  std::mutex mu;
  std::condition_variable_any wake;
  std::string logdir;
  WriterOptions options;
  std::unique_ptr<EventFile> main;
  std::map<std::string, std::unique_ptr<EventFile>> sub_runs;  // add_scalars' directories
  bool closed = false;
  std::exception_ptr deferred;  // a failed background flush, raised by the next call
  std::jthread flusher;

  // Under mu: raises the background flush's error, refuses a closed writer.
  void check_usable(const char* op) {
    if (deferred) std::rethrow_exception(std::exchange(deferred, nullptr));
    KILN_CHECK(!closed, "[", op, "] the SummaryWriter of '", logdir, "' is closed");
  }
  void write_all() {
    main->write_out();
    for (auto& [dir, file] : sub_runs) file->write_out();
  }
  void add(EventFile& file, proto::Event& event, std::optional<double> wall_time, int64_t step) {
    KILN_CHECK(!wall_time || std::isfinite(*wall_time), "[tensorboard] wall_time ", *wall_time,
               " is not finite");
    event.set_wall_time(wall_time ? *wall_time : now_seconds());
    event.set_step(step);
    file.append(event);
    if (file.pending() >= options.max_queue) file.write_out();
  }
  void flush_periodically(std::stop_token stop) {
    const auto period = std::chrono::duration<double>(options.flush_secs);
    std::unique_lock lock(mu);
    while (!wake.wait_for(lock, stop, period, [] { return false; }) && !stop.stop_requested()) {
      try {
        write_all();
      } catch (...) {
        deferred = std::current_exception();
      }
    }
  }
};

SummaryWriter::SummaryWriter(std::string logdir, WriterOptions options)
    : state_(std::make_unique<State>()) {
  KILN_CHECK(!logdir.empty(), "[SummaryWriter] the log directory is empty");
  KILN_CHECK(logdir.find('\0') == std::string::npos,
             "[SummaryWriter] the log directory contains a NUL byte at offset ", logdir.find('\0'));
  KILN_CHECK(options.max_queue >= 1, "[SummaryWriter] max_queue ", options.max_queue,
             " must be at least 1");
  KILN_CHECK(options.flush_secs > 0 && std::isfinite(options.flush_secs),
             "[SummaryWriter] flush_secs ", options.flush_secs, " must be positive and finite");
  state_->logdir = std::move(logdir);
  state_->options = std::move(options);
  state_->main = std::make_unique<EventFile>(state_->logdir, state_->options.filename_suffix);
  state_->flusher =
      std::jthread([s = state_.get()](std::stop_token st) { s->flush_periodically(st); });
}

SummaryWriter::~SummaryWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: SummaryWriter of '%s': %s\n", state_->logdir.c_str(), e.what());
  }
}

void SummaryWriter::add_scalar(const std::string& tag, double value, int64_t step,
                               std::optional<double> wall_time) {
  check_tag("add_scalar", tag);
  proto::Event event;
  proto::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  std::lock_guard lock(state_->mu);
  state_->check_usable("add_scalar");
  state_->add(*state_->main, event, wall_time, step);
}

void SummaryWriter::add_scalars(const std::string& main_tag,
                                const std::map<std::string, double>& values, int64_t step,
                                std::optional<double> wall_time) {
  check_tag("add_scalars", main_tag);
  std::string prefix = main_tag;
  std::replace(prefix.begin(), prefix.end(), '/', '_');
  for (const auto& [tag, value] : values) {
    check_tag("add_scalars", tag);
    KILN_CHECK(tag.find('/') == std::string::npos, "[add_scalars] the tag '", tag,
               "' names a sub-run directory: it must not contain '/'");
  }
  std::lock_guard lock(state_->mu);
  state_->check_usable("add_scalars");
  for (const auto& [tag, value] : values) {
    const std::string dir = state_->logdir + "/" + prefix + "_" + tag;
    std::unique_ptr<EventFile>& file = state_->sub_runs[dir];
    if (!file) {
      try {
        file = std::make_unique<EventFile>(dir, state_->options.filename_suffix);
      } catch (...) {
        state_->sub_runs.erase(dir);
        throw;
      }
    }
    proto::Event event;
    proto::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(main_tag);
    v->set_simple_value(static_cast<float>(value));
    state_->add(*file, event, wall_time, step);
  }
}

void SummaryWriter::add_histogram(const std::string& tag, const Tensor& values, int64_t step,
                                  std::optional<double> wall_time) {
  KILN_CHECK(values.defined(), "[add_histogram] '", tag, "': the tensor is undefined");
  Tensor cpu = values.device().is_cpu() ? values : values.to(Device::cpu());
  const std::vector<double> v = cpu.to_vector<double>();
  add_histogram(tag, std::span<const double>(v), step, wall_time);
}

void SummaryWriter::add_histogram(const std::string& tag, std::span<const double> values,
                                  int64_t step, std::optional<double> wall_time) {
  check_tag("add_histogram", tag);
  proto::Event event;
  proto::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  fill_histogram(tag, values, v->mutable_histo());
  std::lock_guard lock(state_->mu);
  state_->check_usable("add_histogram");
  state_->add(*state_->main, event, wall_time, step);
}

void SummaryWriter::add_text(const std::string& tag, const std::string& text, int64_t step,
                             std::optional<double> wall_time) {
  check_tag("add_text", tag);
  KILN_CHECK(valid_utf8(text), "[add_text] '", tag, "': the text is not valid UTF-8");
  // The text plugin's format: a string tensor of shape [1] owned by "text".
  proto::Event event;
  proto::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  proto::TensorProto* t = v->mutable_tensor();
  t->set_dtype(proto::DT_STRING);
  t->mutable_tensor_shape()->add_dim()->set_size(1);
  t->add_string_val(text);
  std::lock_guard lock(state_->mu);
  state_->check_usable("add_text");
  state_->add(*state_->main, event, wall_time, step);
}

void SummaryWriter::flush() {
  std::lock_guard lock(state_->mu);
  state_->check_usable("flush");
  state_->write_all();
}

void SummaryWriter::close() {
  {
    std::lock_guard lock(state_->mu);
    if (state_->closed) return;
    state_->closed = true;
  }
  // Joined without the lock, which the flusher takes.
  state_->flusher.request_stop();
  if (state_->flusher.joinable()) state_->flusher.join();
  std::lock_guard lock(state_->mu);
  std::exception_ptr first = std::exchange(state_->deferred, nullptr);
  auto close_one = [&](EventFile& f) {
    try {
      f.close();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  };
  close_one(*state_->main);
  for (auto& [dir, file] : state_->sub_runs) close_one(*file);
  if (first) std::rethrow_exception(first);
}

const std::string& SummaryWriter::logdir() const {
  return state_->logdir;
}

std::string SummaryWriter::file_path() const {
  std::lock_guard lock(state_->mu);
  return state_->main->path();
}

}  // namespace kiln::tensorboard
