#include "event_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "kiln/error.h"
#include "kiln/tensorboard/record.h"

namespace kiln::tensorboard {
namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  std::string name = buf;
  for (char& c : name)
    if (c == '/') c = '_';  // a path separator cannot be part of a file name
  return name;
}

}  // namespace

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

EventFile::EventFile(const std::string& dir, const std::string& suffix) {
  namespace fs = std::filesystem;
  KILN_CHECK(suffix.find('/') == std::string::npos && suffix.find('\0') == std::string::npos,
             "[tensorboard] filename_suffix '", suffix, "' must not contain '/' or NUL");
  std::error_code ec;
  fs::create_directories(dir, ec);
  KILN_CHECK(!ec && fs::is_directory(dir), "[tensorboard] cannot create the log directory '", dir,
             "': ", ec ? ec.message() : "it exists and is not a directory");
  // The counter tells apart the files one process opens within a second.
  static std::atomic<uint64_t> counter{0};
  const std::string name = "events.out.tfevents." + std::to_string(std::time(nullptr)) + "." +
                           host_name() + "." + std::to_string(::getpid()) + "." +
                           std::to_string(counter++) + suffix;
  path_ = (fs::path(dir) / name).string();
  file_ = std::fopen(path_.c_str(), "wbx");  // x: never append to another writer's file
  KILN_CHECK(file_, "[tensorboard] cannot create the event file '", path_,
             "': ", std::strerror(errno));
  proto::Event version;
  version.set_wall_time(now_seconds());
  version.set_file_version("brain.Event:2");
  append(version);
  try {
    write_out();
  } catch (...) {
    std::fclose(file_);
    file_ = nullptr;
    throw;
  }
}

EventFile::~EventFile() {
  if (file_) std::fclose(file_);
}

void EventFile::append(const proto::Event& event) {
  std::string data;
  const bool ok = event.SerializeToString(&data);
  KILN_ASSERT(ok, "serializing an event failed");
  buffer_ += frame_record(data);
  ++pending_;
}

void EventFile::write_out() {
  KILN_CHECK(file_, "[tensorboard] the event file '", path_, "' is closed");
  if (!buffer_.empty()) {
    const size_t size = buffer_.size();
    const size_t n = std::fwrite(buffer_.data(), 1, size, file_);
    // Cleared either way: after a short write, writing the buffer again would
    // repeat its first records.
    buffer_.clear();
    pending_ = 0;
    KILN_CHECK(n == size, "[tensorboard] writing ", size, " bytes to '", path_,
               "' failed: ", std::strerror(errno));
  }
  KILN_CHECK(std::fflush(file_) == 0, "[tensorboard] flushing '", path_,
             "' failed: ", std::strerror(errno));
}

void EventFile::close() {
  if (!file_) return;
  std::string error;
  try {
    write_out();
  } catch (const Error& e) {
    error = e.what();
  }
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  KILN_CHECK(error.empty(), error);
  KILN_CHECK(closed, "[tensorboard] closing '", path_, "' failed: ", std::strerror(errno));
}

}  // namespace kiln::tensorboard
