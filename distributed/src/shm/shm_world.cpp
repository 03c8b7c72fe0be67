// The shared-memory segment: negotiation through the store, layout, peer
// liveness (left flags and pidfds). The collectives are in shm_channel.cpp.
#include "shm/shm_world.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kiln/error.h"
#include "shm_registry.h"

namespace kiln::dist::shm {

namespace {

constexpr uint64_t kMagic = 0x6b696c6e73686d31ull;  // "kilnshm1"
constexpr size_t kPage = 4096;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string read_link(const char* path) {
  char buf[256];
  ssize_t n = ::readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// Ranks with equal ids share /dev/shm, futexes and pids: same machine (host
// name and boot), same pid and mount namespaces.
std::string host_id() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return kiln::str(host, "|", read_first_line("/proc/sys/kernel/random/boot_id"), "|",
                   read_link("/proc/self/ns/pid"), "|", read_link("/proc/self/ns/mnt"));
}

Bytes to_bytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}
std::string from_bytes(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

// Creates, sizes (pages reserved now: a full /dev/shm is an error here, not a
// SIGBUS later) and maps the segment. nullptr and `why` on failure. The name
// is tracked (unlinked on SIGTERM) until detail::unlink_segment.
std::byte* create_segment(const std::string& name, size_t bytes, std::string& why) {
  // Tracked before it exists: a SIGTERM between shm_open and tracking would
  // leave it in /dev/shm (unlinking a name not yet created is harmless).
  detail::track_segment(name);
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {  // left by a crashed process with the same pid: ours now
    ::shm_unlink(name.c_str());
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0) {
    why = kiln::str("shm_open(", name, "): ", std::strerror(errno));
    detail::untrack_segment(name);
    return nullptr;
  }
  int err = ::ftruncate(fd, off_t(bytes)) == 0 ? 0 : errno;
  if (err == 0) err = ::posix_fallocate(fd, 0, off_t(bytes));
  void* p = MAP_FAILED;
  if (err == 0) {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) err = errno;
  }
  ::close(fd);
  if (err != 0) {
    detail::unlink_segment(name);
    why = kiln::str("cannot allocate ", bytes >> 20, " MB in /dev/shm for ", name, ": ",
                    std::strerror(err));
    return nullptr;
  }
  return static_cast<std::byte*>(p);
}

std::byte* open_segment(const std::string& name, size_t bytes, std::string& why,
                        bool check_magic = true) {
  int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    why = kiln::str("shm_open(", name, "): ", std::strerror(errno));
    return nullptr;
  }
  struct stat st {};
  void* p = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && size_t(st.st_size) == bytes)
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    why = kiln::str("cannot map ", name);
    return nullptr;
  }
  if (check_magic && *reinterpret_cast<const uint64_t*>(p) != kMagic) {
    ::munmap(p, bytes);
    why = kiln::str(name, " is not a kiln segment");
    return nullptr;
  }
  return static_cast<std::byte*>(p);
}

// Header layout: magic, then one 64-byte line per rank holding its left flag.
constexpr size_t kRankLine = 64;
size_t header_bytes(int size) {
  return round_up(kRankLine * size_t(size + 1), kPage);
}

// Per lane: the ranks' control blocks, then per rank two slots of kChunkBytes.
size_t lane_bytes(int size) {
  return round_up(kControlBytes * size_t(size), kPage) + size_t(size) * 2 * World::kChunkBytes;
}

}  // namespace

size_t segment_bytes(int size, int lanes) {
  return header_bytes(size) + size_t(lanes) * lane_bytes(size);
}

World::World(int rank, int size, int lanes, std::byte* base, size_t bytes)
    : rank_(rank), size_(size), lanes_(lanes), base_(base), bytes_(bytes) {
  for (int l = 0; l < lanes_; ++l)
    channels_.push_back(std::make_unique<Channel>(*this, base_ + lane_offset(l), l));
}

World::~World() {
  mark_left();
  for (int fd : pidfds_)
    if (fd >= 0) ::close(fd);
  ::munmap(base_, bytes_);
}

size_t World::lane_offset(int lane) const {
  return header_bytes(size_) + size_t(lane) * lane_bytes(size_);
}

uint32_t* World::left_flag(int r) const {
  return reinterpret_cast<uint32_t*>(base_ + kRankLine * size_t(r + 1));
}

void World::mark_left() {
  std::atomic_ref<uint32_t> left(*left_flag(rank_));
  if (left.exchange(1) != 0) return;
  // Wake every peer sleeping on one of this rank's counters, so it sees the flag.
  for (int l = 0; l < lanes_; ++l) {
    auto* c = reinterpret_cast<uint32_t*>(base_ + lane_offset(l) + kControlBytes * size_t(rank_));
    ::syscall(SYS_futex, c, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
  }
}

void World::check_peer(int r, const std::string& what) const {
  if (std::atomic_ref<uint32_t>(*left_flag(r)).load() != 0)
    throw TransportError(kiln::str("rank ", r, " left the group (destroyed it, or one of its ",
                                   "collectives failed) while this rank waited for it to ", what,
                                   " (peer: rank ", r, ")"));
  int fd = pidfds_.empty() ? -1 : pidfds_[size_t(r)];
  if (fd < 0) return;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) > 0)
    throw TransportError(kiln::str("the process of rank ", r, " (pid ", pids_[size_t(r)],
                                   ") exited while this rank waited for it to ", what,
                                   " (peer: rank ", r, ")"));
}

std::unique_ptr<World> World::connect(Store& store, const std::string& prefix, int rank, int size,
                                      int lanes, bool want, Millis timeout) {
  if (size < 2) return nullptr;
  const std::string base = prefix + "/shm/";
  const std::string me = host_id();
  store.set(kiln::str(base, "host/", rank),
            to_bytes(kiln::str(want ? 1 : 0, " ", ::getpid(), " ", me)));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(kiln::str(base, "host/", r));
  store.wait(keys, timeout);
  bool use = true;
  std::vector<int> pids(size_t(size), 0);
  for (int r = 0; r < size; ++r) {
    std::istringstream in(from_bytes(store.get(keys[size_t(r)])));
    int wants = 0;
    std::string host;
    in >> wants >> pids[size_t(r)];
    in.get();
    std::getline(in, host);
    use = use && wants == 1 && host == me;
  }
  if (!use) return nullptr;

  const size_t bytes = segment_bytes(size, lanes);
  std::string name, why;
  // Rank 0 unlinks its segment once every rank mapped it (or gave up), or on
  // any error (a store failure included): nothing stays in /dev/shm. The
  // mapping goes too unless the World takes it.
  struct Cleanup {
    std::string name;
    std::byte* mem = nullptr;
    size_t bytes = 0;
    ~Cleanup() {
      if (!name.empty()) detail::unlink_segment(name);
      if (mem) ::munmap(mem, bytes);
    }
  } cleanup;
  cleanup.bytes = bytes;
  if (rank == 0) {
    name = detail::new_segment_name(prefix);
    cleanup.mem = create_segment(name, bytes, why);
    if (cleanup.mem) {
      *reinterpret_cast<uint64_t*>(cleanup.mem) = kMagic;
      cleanup.name = name;
    } else {
      name.clear();
    }
    store.set(base + "name", to_bytes(name));
  } else {
    name = from_bytes(store.get(base + "name"));
    if (!name.empty()) cleanup.mem = open_segment(name, bytes, why);
  }
  store.set(kiln::str(base, "mapped/", rank), to_bytes(cleanup.mem ? "1" : "0"));
  bool ok = false;
  if (rank == 0) {
    std::vector<std::string> mapped;
    for (int r = 0; r < size; ++r) mapped.push_back(kiln::str(base, "mapped/", r));
    store.wait(mapped, timeout);
    ok = true;
    for (const auto& k : mapped) ok = ok && from_bytes(store.get(k)) == "1";
    store.set(base + "ok", to_bytes(ok ? "1" : "0"));
  } else {
    ok = from_bytes(store.get(base + "ok")) == "1";
  }
  if (!ok) {
    if (!why.empty())
      std::fprintf(stderr, "[kiln.dist] rank %d: shared memory unavailable (%s); using TCP\n", rank,
                   why.c_str());
    return nullptr;
  }
  std::byte* mem = std::exchange(cleanup.mem, nullptr);
  std::unique_ptr<World> w(new World(rank, size, lanes, mem, bytes));
  w->pids_ = pids;
  for (int r = 0; r < size; ++r) {
    int fd = -1;
    if (pids[size_t(r)] != ::getpid()) fd = int(::syscall(SYS_pidfd_open, pids[size_t(r)], 0));
    w->pidfds_.push_back(fd);
  }
  return w;
}

SymBuffer::~SymBuffer() {
  for (std::byte* b : bases)
    if (b) ::munmap(b, bytes);
}

std::shared_ptr<SymBuffer> World::make_symmetric(Store& store, const std::string& key, size_t bytes,
                                                 Millis timeout) {
  auto buf = std::make_shared<SymBuffer>();
  buf->bytes = round_up(std::max<size_t>(bytes, 1), kPage);
  buf->bases.assign(size_t(size_), nullptr);
  {
    std::lock_guard lock(sym_mu_);
    buf->id = next_sym_++;
  }
  // Each rank creates its own buffer; the others map it; its creator unlinks
  // it when all did, or on any error.
  const std::string mine = detail::new_segment_name(kiln::str(key, "/r", rank_));
  std::string why;
  std::byte* own = create_segment(mine, buf->bytes, why);
  buf->bases[size_t(rank_)] = own;
  struct Unlink {
    std::string name;
    ~Unlink() {
      if (!name.empty()) detail::unlink_segment(name);
    }
  } unlink{own ? mine : std::string()};
  store.set(kiln::str(key, "/name/", rank_), to_bytes(own ? mine : std::string()));
  std::vector<std::string> names;
  for (int r = 0; r < size_; ++r) names.push_back(kiln::str(key, "/name/", r));
  store.wait(names, timeout);
  bool ok = own != nullptr;
  for (int r = 0; r < size_ && ok; ++r) {
    if (r == rank_) continue;
    const std::string name = from_bytes(store.get(names[size_t(r)]));
    if (!name.empty()) buf->bases[size_t(r)] = open_segment(name, buf->bytes, why, false);
    ok = buf->bases[size_t(r)] != nullptr;
  }
  store.set(kiln::str(key, "/mapped/", rank_), to_bytes(ok ? "1" : "0"));
  std::vector<std::string> mapped;
  for (int r = 0; r < size_; ++r) mapped.push_back(kiln::str(key, "/mapped/", r));
  store.wait(mapped, timeout);
  for (const auto& k : mapped) ok = ok && from_bytes(store.get(k)) == "1";
  if (!ok) {
    if (!why.empty())
      std::fprintf(stderr, "[kiln.dist] rank %d: no shared comm buffer (%s); using plain memory\n",
                   rank_, why.c_str());
    return nullptr;  // buf unmaps what it mapped
  }
  std::lock_guard lock(sym_mu_);
  std::erase_if(syms_, [](const std::weak_ptr<SymBuffer>& w) { return w.expired(); });
  syms_.push_back(buf);
  return buf;
}

std::shared_ptr<SymBuffer> World::find_symmetric(const std::byte* p, size_t bytes,
                                                 size_t& offset) const {
  std::lock_guard lock(sym_mu_);
  for (const auto& w : syms_) {
    auto b = w.lock();
    if (!b) continue;
    const std::byte* base = b->bases[size_t(rank_)];
    if (p >= base && p + bytes <= base + b->bytes) {
      offset = size_t(p - base);
      return b;
    }
  }
  return nullptr;
}

}  // namespace kiln::dist::shm
