// One event file: buffered, framed Event records appended to
// logdir/events.out.tfevents.<secs>.<hostname>.<pid>.<n><suffix>.
// Not thread-safe: SummaryWriter serializes access.
#pragma once

#include <cstdio>
#include <string>

#include "tensorboard.pb.h"

namespace kiln::tensorboard {

class EventFile {
 public:
  /// Creates `dir` if needed and a new event file in it holding the
  /// file-version record, already on disk (kiln::Error naming the path).
  EventFile(const std::string& dir, const std::string& suffix);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  /// Buffers one event.
  void append(const proto::Event& event);
  /// Events buffered since the last write_out().
  int pending() const { return pending_; }
  /// Writes the buffer and flushes the stream (kiln::Error on failure).
  void write_out();
  /// write_out(), then closes the file (closed even if writing failed).
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::string buffer_;
  int pending_ = 0;
};

/// Seconds since the Unix epoch, as Event.wall_time holds them.
double now_seconds();

}  // namespace kiln::tensorboard
