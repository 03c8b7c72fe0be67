// ProgressBar: redraws one line with '\r', padding over the previous line.
#include "kiln/data/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <sstream>

#include "kiln/error.h"

namespace kiln::data {
namespace {

// Only the standard streams have a file descriptor we can ask isatty about.
bool stream_is_tty(const std::ostream& os) {
  if (&os == &std::cerr || &os == &std::clog) return isatty(fileno(stderr)) != 0;
  if (&os == &std::cout) return isatty(fileno(stdout)) != 0;
  return false;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(int64_t total_steps, std::ostream& os, std::string description)
    : total_(total_steps),
      os_(os),
      desc_(std::move(description)),
      enabled_(stream_is_tty(os)),
      start_(Clock::now()) {
  KILN_CHECK(total_steps >= 0, "[ProgressBar] total_steps must be >= 0, got ", total_steps);
}

ProgressBar::~ProgressBar() {
  try {
    close();
  } catch (...) {  // a destructor must not throw; the stream's state says enough
  }
}

void ProgressBar::update(double step_loss, int64_t batch_size) {
  KILN_CHECK(batch_size >= 0, "[ProgressBar] batch_size must be >= 0, got ", batch_size);
  ++steps_;
  samples_ += batch_size;
  loss_sum_ += step_loss;
  if (!enabled_ || closed_) return;
  std::string l = line();
  // Pad with spaces so a shorter line fully covers the previous one.
  size_t pad = last_len_ > l.size() ? last_len_ - l.size() : 0;
  os_ << '\r' << l << std::string(pad, ' ') << std::flush;
  last_len_ = l.size();
  drawn_ = true;
}

std::string ProgressBar::line() const {
  double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  std::ostringstream s;
  if (!desc_.empty()) s << desc_ << ' ';
  if (total_ > 0) {
    constexpr int kWidth = 20;
    int64_t done = std::min(steps_, total_);
    auto filled = static_cast<int>(done * kWidth / total_);
    s << std::string(static_cast<size_t>(filled), '#')
      << std::string(static_cast<size_t>(kWidth - filled), '.') << ' ' << steps_ << '/' << total_;
  } else {
    s << steps_;
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, " | loss %.4f", mean_loss());
  s << buf;
  if (elapsed > 0 && steps_ > 0) {
    std::snprintf(buf, sizeof buf, " | %.1f samples/s", static_cast<double>(samples_) / elapsed);
    s << buf;
  } else {
    s << " | - samples/s";
  }
  if (total_ > 0) {
    double eta = steps_ > 0 ? elapsed / static_cast<double>(steps_) *
                                  static_cast<double>(std::max<int64_t>(0, total_ - steps_))
                            : -1.0;
    s << " | ETA " << format_duration(eta);
  }
  return s.str();
}

void ProgressBar::close() {
  if (closed_) return;
  closed_ = true;
  if (enabled_ && drawn_) os_ << '\n' << std::flush;
}

}  // namespace kiln::data
