// safetensors checkpoints for kiln tensors: atomic saves (temp file, fsync,
// rename, fsync of the directory; a killed save's temp file is removed by the
// next save, the target's mode and symlinks are kept) and loads that validate
// the whole header before reading any tensor bytes, with bounded reads only.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "kiln/serialize.h"
#include "serialize/safetensors_format.h"

namespace kiln {

// The format is little-endian; tensor bytes are copied as they are in memory.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

namespace {

using safetensors::Entry;
using safetensors::Header;

std::string errno_text() {
  return std::strerror(errno);
}

// Header bytes plus the tensors to write after them, in file order.
struct Prepared {
  std::string header;
  std::vector<Tensor> tensors;
};

// Validates everything a save needs before any byte is written.
Prepared prepare(const StateDict& dict, const SafetensorsMetadata& metadata,
                 const std::string& where) {
  std::vector<std::pair<Entry, Tensor>> items;
  items.reserve(dict.size());
  for (const auto& [name, t] : dict) {
    KILN_CHECK(t.defined(), where, ": tensor '", name, "' is undefined");
    KILN_CHECK(!t.is_symbolic(), where, ": tensor '", name,
               "' is symbolic (created while tracing) and has no data to save");
    KILN_CHECK(t.device().is_cpu(), where, ": tensor '", name, "' is on ", t.device(),
               "; only CPU tensors can be saved");
    items.emplace_back(Entry{name, t.dtype(), t.shape(), 0, 0}, t);
  }
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return safetensors::write_before(a.first, b.first);
  });
  std::vector<Entry> entries;
  entries.reserve(items.size());
  Prepared p;
  p.tensors.reserve(items.size());
  uint64_t offset = 0;
  for (auto& [e, t] : items) {
    e.begin = offset;
    offset += static_cast<uint64_t>(t.numel()) * t.element_size();
    e.end = offset;
    entries.push_back(std::move(e));
    p.tensors.push_back(t);
  }
  p.header = safetensors::build_header(entries, metadata, where);
  return p;
}

// The tensor's bytes, row-major: a contiguous copy when t is strided.
Tensor contiguous_data(const Tensor& t) {
  return t.detach().contiguous();
}

// Builds the tensors of a validated header; read(offset, dst, n) copies n bytes
// of the data buffer starting at offset.
template <typename Read>
StateDict materialize(const Header& h, Read&& read) {
  StateDict out;
  for (const Entry& e : h.entries) {
    Tensor t = make_tensor(e.shape, e.dtype);
    const uint64_t n = e.end - e.begin;
    if (n > 0) read(e.begin, t.data_ptr(), n);
    if (e.dtype == DType::b8 && n > 0) {
      // Any non-zero byte is true (as in NumPy); a C++ bool must hold 0 or 1.
      auto* p = static_cast<unsigned char*>(t.data_ptr());
      for (uint64_t i = 0; i < n; ++i) p[i] = p[i] != 0;
    }
    out.set(e.name, t);
  }
  return out;
}

// ---- files ----

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly n bytes at `offset` (pread loop; EINTR and short reads handled).
void read_exact(int fd, uint64_t offset, void* dst, uint64_t n, const std::string& where) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1u << 30));
    ssize_t r = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    KILN_CHECK(r >= 0, where, ": read failed at byte ", offset, ": ", errno_text());
    KILN_CHECK(r > 0, where, ": unexpected end of file at byte ", offset,
               " (was the file truncated while loading?)");
    p += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
}

// Temp files are named "<target>.tmp.<pid>.<16 hex digits>" and held under an
// exclusive flock() while written: one that nobody holds locked belongs to a
// save that died (killed, power loss) and is removed by the next save.
bool is_temp_name(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string rest = name.substr(prefix.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string::npos || rest.size() - dot - 1 != 16) return false;
  for (size_t i = 0; i < rest.size(); ++i)
    if (i != dot && !(i < dot ? std::isdigit(static_cast<unsigned char>(rest[i]))
                              : std::isxdigit(static_cast<unsigned char>(rest[i]))))
      return false;
  return true;
}

// Removes the temp files of earlier saves to `target` whose writers are gone.
// Best effort: a file that cannot be opened, locked or removed stays.
void remove_stale_temps(const std::string& target) {
  const std::filesystem::path t(target);
  const std::string dir = t.has_parent_path() ? t.parent_path().string() : ".";
  const std::string prefix = t.filename().string() + ".tmp.";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_temp_name(name, prefix)) continue;
    const std::string path = e.path().string();
    Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat held {};
    struct stat now {};
    if (fd.get() < 0 || ::fstat(fd.get(), &held) != 0 || !S_ISREG(held.st_mode)) continue;
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // a live save holds it
    if (::lstat(path.c_str(), &now) == 0 && now.st_ino == held.st_ino && now.st_dev == held.st_dev)
      ::unlink(path.c_str());
  }
}

// The file a save to `path` replaces: a symlink is followed (the link stays,
// its target gets the new contents), also when the target does not exist yet.
std::string resolve_links(const std::string& path, const std::string& where) {
  std::filesystem::path p(path);
  for (int hops = 0; hops < 40; ++hops) {  // Linux's own limit (ELOOP)
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p.string();
    std::error_code ec;
    std::filesystem::path to = std::filesystem::read_symlink(p, ec);
    KILN_CHECK(!ec, where, ": cannot read symbolic link '", p.string(), "': ", ec.message());
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  throw_error(str(where, ": too many levels of symbolic links"));
}

// A temporary file next to the target; removed unless commit() renamed it.
// It gets an existing target's permission bits (and, where allowed, owner and
// group), and is never more accessible than the target while it is written.
class TempFile {
 public:
  TempFile(const std::string& target, const std::string& where) : where_(where) {
    struct stat old {};
    const bool replaces = ::stat(target.c_str(), &old) == 0 && S_ISREG(old.st_mode);
    const mode_t mode = replaces ? (old.st_mode & 07777) : 0666;  // the umask applies too
    static std::atomic<uint64_t> counter{0};
    std::random_device rd;
    for (int attempt = 0; attempt < 16; ++attempt) {
      uint64_t r =
          (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
          static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
          (counter++ * 0x9e3779b97f4a7c15ull);
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
      path_ = target + ".tmp." + std::to_string(::getpid()) + "." + hex;
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
      if (fd_ < 0 && errno == EEXIST) continue;
      if (fd_ < 0 || !lost_to_cleanup()) break;
      // Another save's cleanup took the new file for a stale one: use another name.
      ::close(fd_);
      fd_ = -1;
    }
    KILN_CHECK(fd_ >= 0, where, ": cannot create temporary file '", path_, "': ", errno_text());
    if (replaces) {
      // Best effort: only root may give a file away, and only to groups it is in.
      [[maybe_unused]] const int owned = ::fchown(fd_, old.st_uid, old.st_gid);
      KILN_CHECK(::fchmod(fd_, old.st_mode & 07777) == 0, where, ": cannot set the mode of '",
                 path_, "': ", errno_text());
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (!committed_) ::unlink(path_.c_str());
    if (fd_ >= 0) ::close(fd_);
  }

  // Appends n bytes (write loop; EINTR and short writes handled).
  void write(const void* data, uint64_t n) {
    auto* p = static_cast<const char*>(data);
    while (n > 0) {
      if (const auto& hook = safetensors::write_hook()) hook(written_);
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1u << 30));
      ssize_t r = ::write(fd_, p, chunk);
      if (r < 0 && errno == EINTR) continue;
      KILN_CHECK(r > 0, where_, ": write to '", path_,
                 "' failed: ", r < 0 ? errno_text() : "no progress");
      p += r;
      n -= static_cast<uint64_t>(r);
      written_ += static_cast<uint64_t>(r);
    }
  }

  // fsync, rename over `target` and close; the temp file is gone afterwards.
  // The rename comes before the close, which would drop the lock.
  void commit(const std::string& target) {
    KILN_CHECK(::fsync(fd_) == 0, where_, ": fsync of '", path_, "' failed: ", errno_text());
    KILN_CHECK(::rename(path_.c_str(), target.c_str()) == 0, where_, ": renaming '", path_,
               "' to the target failed: ", errno_text());
    committed_ = true;
    int fd = fd_;
    fd_ = -1;
    KILN_CHECK(::close(fd) == 0, where_, ": closing '", target, "' failed: ", errno_text());
  }

 private:
  // Locks the new file (see remove_stale_temps). True if another save's cleanup
  // got to it first (holds its lock or has unlinked it). A file system without
  // locks (ENOLCK) keeps the file unlocked: its stale temps are never removed.
  bool lost_to_cleanup() {
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) return errno == EWOULDBLOCK;
    struct stat st {};
    return ::fstat(fd_, &st) == 0 && st.st_nlink == 0;
  }

  std::string where_;
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Makes the rename durable. Filesystems that cannot sync directories say EINVAL.
void sync_directory(const std::string& target, const std::string& where) {
  std::string dir = std::filesystem::path(target).parent_path().string();
  if (dir.empty()) dir = ".";
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  KILN_CHECK(fd.get() >= 0, where, ": saved, but cannot open directory '", dir,
             "' to sync it: ", errno_text());
  KILN_CHECK(::fsync(fd.get()) == 0 || errno == EINVAL, where, ": saved, but fsync of directory '",
             dir, "' failed: ", errno_text());
}

}  // namespace

std::string serialize_safetensors(const StateDict& tensors, const SafetensorsMetadata& metadata) {
  const std::string where = "[save] <memory>";
  Prepared p = prepare(tensors, metadata, where);
  std::string out = std::move(p.header);
  for (const Tensor& t : p.tensors) {
    Tensor c = contiguous_data(t);
    out.append(static_cast<const char*>(c.data_ptr()),
               static_cast<size_t>(c.numel()) * c.element_size());
  }
  return out;
}

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const SafetensorsMetadata& metadata) {
  const std::string where = "[save] " + path;
  Prepared p = prepare(tensors, metadata, where);
  const std::string target = resolve_links(path, where);
  remove_stale_temps(target);
  TempFile tmp(target, where);
  tmp.write(p.header.data(), p.header.size());
  for (const Tensor& t : p.tensors) {
    Tensor c = contiguous_data(t);  // one strided tensor copied at a time
    tmp.write(c.data_ptr(), static_cast<uint64_t>(c.numel()) * c.element_size());
  }
  tmp.commit(target);
  sync_directory(target, where);
}

StateDict parse_safetensors(std::string_view bytes, const std::string& name_for_errors,
                            SafetensorsMetadata* metadata) {
  const std::string where = "[load] " + name_for_errors;
  KILN_CHECK(bytes.size() >= 8, where, ": ", bytes.size(),
             " bytes is shorter than the 8-byte header length");
  uint64_t n = safetensors::header_length(reinterpret_cast<const unsigned char*>(bytes.data()),
                                          bytes.size(), where);
  Header h = safetensors::parse_header(bytes.substr(8, n), bytes.size() - 8 - n, where);
  const char* data = bytes.data() + 8 + n;
  StateDict out = materialize(h, [&](uint64_t off, void* dst, uint64_t len) {
    std::memcpy(dst, data + off, len);  // off + len <= data length: checked by parse_header
  });
  if (metadata) *metadata = std::move(h.metadata);
  return out;
}

StateDict load_safetensors(const std::string& path, SafetensorsMetadata* metadata) {
  const std::string where = "[load] " + path;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  KILN_CHECK(fd.get() >= 0, where, ": cannot open: ", errno_text());
  struct stat st {};
  KILN_CHECK(::fstat(fd.get(), &st) == 0, where, ": cannot stat: ", errno_text());
  KILN_CHECK(S_ISREG(st.st_mode), where, ": not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  KILN_CHECK(size >= 8, where, ": file is ", size, " bytes, shorter than the 8-byte header length");
  unsigned char prefix[8];
  read_exact(fd.get(), 0, prefix, 8, where);
  uint64_t n = safetensors::header_length(prefix, size, where);
  std::string text(n, '\0');
  read_exact(fd.get(), 8, text.data(), n, where);
  Header h = safetensors::parse_header(text, size - 8 - n, where);
  StateDict out = materialize(h, [&](uint64_t off, void* dst, uint64_t len) {
    read_exact(fd.get(), 8 + n + off, dst, len, where);
  });
  if (metadata) *metadata = std::move(h.metadata);
  return out;
}

}  // namespace kiln
