// TCPStoreServer: one thread, one poll() over the listening socket, a wake-up
// eventfd and every client. Sockets are non-blocking with per-connection input
// and output buffers, so a slow or hostile client only ever stalls itself.
// Requests that must wait (get of a missing key, wait(keys)) are parked on
// their connection and answered when a write makes the keys present, or with
// a TIMEOUT reply at their deadline.
//
// Bounds against hostile or broken clients: connections that have not said
// hello are capped (the oldest is closed for a new one, so they cannot use
// up the descriptors authenticated clients need) and closed after
// hello_timeout; a reply holds the stored value by reference, so clients that
// never read their replies pin one copy of a value, not one copy each; and a
// condition that repeats (a flood of bad connections, accept failing for
// lack of descriptors) is logged once, not once per connection or retry.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kiln/distributed/store.h"
#include "kiln/error.h"
#include "store_protocol.h"

namespace kiln::dist {

namespace {

using Clock = std::chrono::steady_clock;
namespace p = proto;

// A protocol violation: the connection is closed with this reason.
struct Reject {
  std::string reason;
};

std::string peer_name(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return kiln::str(host, ":", port);
}

bool is_loopback(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr);
    return (a >> 24) == 127;
  }
  if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

// Compares without an early exit so the time taken does not reveal how much
// of the token an attacker got right.
bool token_equal(const std::string& a, const std::string& b) {
  size_t n = std::max(a.size(), b.size());
  unsigned diff = unsigned(a.size() != b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? uint8_t(a[i]) : 0;
    unsigned char y = i < b.size() ? uint8_t(b[i]) : 0;
    diff |= unsigned(x ^ y);
  }
  return diff == 0;
}

// Stored values are immutable and shared with the replies still sending them.
using Value = std::shared_ptr<const Bytes>;

struct Conn {
  int fd = -1;
  std::string peer;
  bool authed = false;
  bool loopback = false;
  Clock::time_point hello_deadline;
  std::vector<uint8_t> in;
  std::vector<uint8_t> out;  // the reply being sent: header (and small payload)
  Value out_value;           // then these bytes, if set (a stored value)
  size_t out_off = 0;        // bytes of out + *out_value sent so far
  bool sending() const { return !out.empty(); }
  bool dead = false;
  // A parked get/wait: its keys and deadline.
  bool parked = false;
  uint8_t park_op = 0;
  std::vector<std::string> park_keys;
  Clock::time_point park_deadline;

  // Length of the complete first message in `in`, or 0.
  size_t complete_message() const {
    if (in.size() < p::kHeaderSize) return 0;
    p::Header h = p::decode_header(in.data());
    size_t n = p::kHeaderSize + h.token_len + size_t(h.payload_len);
    return in.size() >= n ? n : 0;
  }
};

// The kind of a log line: its text with digit runs folded ("no hello within
// # ms"), so repeats of one condition share a kind whatever their numbers.
std::string log_kind(const std::string& text) {
  std::string k;
  for (char c : text) {
    bool digit = c >= '0' && c <= '9';
    if (!digit)
      k += c;
    else if (k.empty() || k.back() != '#')
      k += '#';
  }
  return k;
}

// Prints each kind of line at most once per kLogEvery; the next line of that
// kind says how many were suppressed meanwhile.
class LogLimiter {
 public:
  void print(const std::string& line) {
    State& st = kinds_[log_kind(line)];
    auto now = Clock::now();
    if (st.printed && now - st.last < kLogEvery) {
      ++st.suppressed;
      return;
    }
    std::string out = "[kiln store] " + line;
    if (st.suppressed)
      out +=
          kiln::str(" (and ", st.suppressed, " more like it in the last ",
                    std::chrono::duration_cast<std::chrono::seconds>(now - st.last).count(), " s)");
    out += "\n";
    std::fputs(out.c_str(), stderr);
    st = State{true, now, 0};
  }

 private:
  static constexpr auto kLogEvery = std::chrono::seconds(10);
  struct State {
    bool printed = false;
    Clock::time_point last;
    uint64_t suppressed = 0;
  };
  std::unordered_map<std::string, State> kinds_;
};

}  // namespace

struct TCPStoreServer::Impl {
  TCPStoreServerOptions opts;
  int listen_fd = -1;
  int wake_fd = -1;
  uint16_t port = 0;
  std::thread thread;
  std::mutex stop_mu;  // stop() may be called from several threads
  bool stopped = false;
  std::vector<std::unique_ptr<Conn>> conns;
  std::unordered_map<std::string, Value> data;
  Clock::time_point accept_paused_until{};
  bool accept_failing = false;  // logged once until an accept succeeds again
  size_t max_unauthed = 64;     // from opts and the descriptor limit
  LogLimiter log;

  void run();
  void accept_all();
  bool evict_oldest_unauthed(const char* why);
  void on_readable(Conn& c);
  void on_writable(Conn& c);
  void check_header(Conn& c);
  void process(Conn& c);
  void handle(Conn& c, const p::Header& h, const uint8_t* token, const uint8_t* payload);
  void reply(Conn& c, p::Writer w, Value value = nullptr);
  bool try_answer_parked(Conn& c, bool timed_out);
  void wake_parked();
  void reject(Conn& c, const std::string& reason);
  void close_conn(Conn& c);
};

void TCPStoreServer::Impl::reject(Conn& c, const std::string& reason) {
  if (c.dead) return;
  log.print(kiln::str("rejected ", c.peer, ": ", reason));
  // Best effort: tell the peer why (never blocks; it may be lost).
  p::Writer w(p::kError);
  w.raw(reason.data(), reason.size());
  auto msg = w.take();
  [[maybe_unused]] ssize_t r = ::send(c.fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close_conn(c);
}

void TCPStoreServer::Impl::close_conn(Conn& c) {
  if (c.dead) return;
  ::close(c.fd);
  c.fd = -1;
  c.dead = true;
  c.in = {};
  c.out = {};
  c.out_value.reset();
}

// Closes the connection that has waited longest for its hello; false if
// every connection said hello.
bool TCPStoreServer::Impl::evict_oldest_unauthed(const char* why) {
  Conn* oldest = nullptr;
  for (auto& c : conns)
    if (!c->dead && !c->authed && (!oldest || c->hello_deadline < oldest->hello_deadline))
      oldest = c.get();
  if (!oldest) return false;
  log.print(kiln::str("closing connections that have not sent a hello (", why,
                      "): the oldest goes for each new one, e.g. ", oldest->peer));
  close_conn(*oldest);
  return true;
}

void TCPStoreServer::Impl::accept_all() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd =
        ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: a connection still owing its hello makes room;
        // else stop polling the listener briefly instead of spinning.
        if ((errno == EMFILE || errno == ENFILE) && evict_oldest_unauthed("out of descriptors"))
          continue;
        if (!accept_failing)
          std::fprintf(stderr,
                       "[kiln store] cannot accept connections: %s; retrying every 100 ms "
                       "(logged once)\n",
                       std::strerror(errno));
        accept_failing = true;
        accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
      }
      return;
    }
    if (accept_failing) std::fputs("[kiln store] accepting connections again\n", stderr);
    accept_failing = false;
    size_t unauthed = 0;
    for (auto& c : conns) unauthed += !c->dead && !c->authed;
    if (unauthed >= max_unauthed) evict_oldest_unauthed(kiln::str("over ", max_unauthed).c_str());
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->peer = peer_name(ss);
    c->loopback = is_loopback(ss);
    c->hello_deadline = Clock::now() + opts.hello_timeout;
    Conn& conn = *c;
    conns.push_back(std::move(c));
    // A client sends its hello right after connecting: read it now, so it is
    // authenticated before a flood of new connections could evict it.
    try {
      on_readable(conn);
      process(conn);
    } catch (const Reject& r) {
      reject(conn, r.reason);
    } catch (const std::exception& e) {
      reject(conn, kiln::str("internal error: ", e.what()));
    }
  }
}

// Validates a header as soon as its 12 bytes arrive, before any payload is
// buffered, so oversized or foreign messages are refused without allocating.
void TCPStoreServer::Impl::check_header(Conn& c) {
  if (c.in.size() < 4) return;
  uint32_t magic = p::get_u32(c.in.data());
  if (magic != p::kMagic) throw Reject{kiln::str("bad magic (not a kiln store client)")};
  if (c.in.size() < p::kHeaderSize) return;
  p::Header h = p::decode_header(c.in.data());
  if (h.version != p::kVersion)
    throw Reject{
        kiln::str("protocol version ", int(h.version), " (server speaks ", int(p::kVersion), ")")};
  if (!p::op_name(h.op)) throw Reject{kiln::str("unknown opcode ", int(h.op))};
  if (!c.authed) {
    if (h.op != p::kHello) throw Reject{"first message is not a hello"};
    if (h.token_len > p::kMaxToken) throw Reject{kiln::str("token length ", h.token_len)};
    if (h.payload_len != 0) throw Reject{kiln::str("hello with a payload")};
  } else {
    if (h.op == p::kHello) throw Reject{"second hello"};
    if (h.token_len != 0) throw Reject{"token after the hello"};
    if (h.payload_len > p::kMaxPayload)
      throw Reject{kiln::str("payload length ", h.payload_len, " over the limit")};
  }
}

void TCPStoreServer::Impl::on_readable(Conn& c) {
  // Bounded per wake-up so one fast sender cannot starve the others.
  constexpr size_t kChunk = 64 * 1024, kBudget = 4 * 1024 * 1024;
  size_t got_total = 0;
  while (got_total < kBudget && !c.complete_message()) {
    size_t old = c.in.size();
    if (old >= p::kHeaderSize) {
      // Reserve once for the whole announced message (already bounded).
      p::Header h = p::decode_header(c.in.data());
      c.in.reserve(p::kHeaderSize + h.token_len + size_t(h.payload_len));
    }
    // Never read past the current message: the next one is read after this
    // one is answered (one outstanding request per connection).
    size_t want = kChunk;
    if (old >= p::kHeaderSize) {
      p::Header h = p::decode_header(c.in.data());
      want = std::min(want, p::kHeaderSize + h.token_len + size_t(h.payload_len) - old);
    } else {
      want = p::kHeaderSize - old;
    }
    c.in.resize(old + want);
    ssize_t n = ::recv(c.fd, c.in.data() + old, want, 0);
    if (n < 0) {
      c.in.resize(old);
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      n = 0;  // ECONNRESET and friends: handled like end of stream
    }
    c.in.resize(old + size_t(n));
    if (n == 0) {
      if (!c.in.empty()) {
        size_t expect = p::kHeaderSize;
        if (c.in.size() >= p::kHeaderSize) {
          p::Header h = p::decode_header(c.in.data());
          expect += h.token_len + size_t(h.payload_len);
        }
        reject(c, kiln::str("truncated message (", c.in.size(), " of ", expect, " bytes)"));
      } else {
        close_conn(c);  // an orderly goodbye
      }
      return;
    }
    got_total += size_t(n);
    check_header(c);
  }
}

void TCPStoreServer::Impl::on_writable(Conn& c) {
  const size_t total = c.out.size() + (c.out_value ? c.out_value->size() : 0);
  while (c.out_off < total) {
    iovec iov[2];
    int n_iov = 0;
    if (c.out_off < c.out.size())
      iov[n_iov++] = {c.out.data() + c.out_off, c.out.size() - c.out_off};
    if (c.out_value && !c.out_value->empty()) {
      size_t skip = c.out_off > c.out.size() ? c.out_off - c.out.size() : 0;
      iov[n_iov++] = {const_cast<uint8_t*>(c.out_value->data()) + skip, c.out_value->size() - skip};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = size_t(n_iov);
    ssize_t n = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close_conn(c);  // the peer went away; nothing to tell it
      return;
    }
    c.out_off += size_t(n);
  }
  c.out.clear();
  c.out_value.reset();
  c.out_off = 0;
}

void TCPStoreServer::Impl::reply(Conn& c, p::Writer w, Value value) {
  c.out = w.take(value ? value->size() : 0);
  c.out_value = std::move(value);
  c.out_off = 0;
  on_writable(c);
}

// Answers c's parked request if its keys are present (or it timed out).
bool TCPStoreServer::Impl::try_answer_parked(Conn& c, bool timed_out) {
  std::vector<std::string> missing;
  for (const auto& k : c.park_keys)
    if (!data.count(k)) missing.push_back(k);
  if (!missing.empty() && !timed_out) return false;
  c.parked = false;
  if (!missing.empty()) {
    p::Writer w(p::kTimeout);
    w.u32(uint32_t(missing.size()));
    for (const auto& k : missing) w.str(k);
    reply(c, std::move(w));
  } else {
    reply(c, p::Writer(p::kOk), c.park_op == p::kGet ? data[c.park_keys[0]] : nullptr);
  }
  c.park_keys.clear();
  return true;
}

void TCPStoreServer::Impl::wake_parked() {
  for (auto& c : conns)
    if (!c->dead && c->parked) try_answer_parked(*c, false);
}

void TCPStoreServer::Impl::handle(Conn& c, const p::Header& h, const uint8_t* token,
                                  const uint8_t* payload) {
  if (h.op == p::kHello) {
    // Refused at the hello rather than at accept so the reason reaches the
    // client (closing with its hello unread would reset the connection).
    if (opts.token.empty() && !c.loopback)
      throw Reject{"non-loopback client and the server has no token (set KILN_STORE_TOKEN)"};
    std::string tok(reinterpret_cast<const char*>(token), h.token_len);
    if (!token_equal(tok, opts.token)) {
      if (opts.token.empty()) throw Reject{"the client sent a token but the server has none"};
      if (tok.empty()) throw Reject{"no token (the server requires KILN_STORE_TOKEN)"};
      throw Reject{"wrong token (KILN_STORE_TOKEN mismatch)"};
    }
    c.authed = true;
    reply(c, p::Writer(p::kOk));
    return;
  }
  p::Reader r(payload, h.payload_len);
  auto bad = [&] { return Reject{kiln::str("malformed ", p::op_name(h.op), " request")}; };
  auto done = [&] {
    if (!r.ok() || !r.at_end()) throw bad();
  };
  switch (h.op) {
    case p::kSet: {
      std::string key = r.str(p::kMaxKey);
      Bytes value = r.bytes(p::kMaxValue);
      done();
      data[key] = std::make_shared<const Bytes>(std::move(value));
      reply(c, p::Writer(p::kOk));
      wake_parked();
      return;
    }
    case p::kGet:
    case p::kWait: {
      uint32_t timeout_ms = r.u32();
      std::vector<std::string> keys;
      if (h.op == p::kGet) {
        keys.push_back(r.str(p::kMaxKey));
      } else {
        uint32_t n = r.u32();
        if (n > r.remaining() / 4) throw bad();  // each key takes at least 4 bytes
        keys.reserve(n);
        for (uint32_t i = 0; i < n && r.ok(); ++i) keys.push_back(r.str(p::kMaxKey));
      }
      done();
      c.parked = true;
      c.park_op = h.op;
      c.park_keys = std::move(keys);
      c.park_deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
      try_answer_parked(c, false);
      return;
    }
    case p::kAdd: {
      std::string key = r.str(p::kMaxKey);
      int64_t delta = int64_t(r.u64());
      done();
      int64_t cur = 0;
      auto it = data.find(key);
      if (it != data.end()) {
        const Bytes& v = *it->second;
        const char* b = reinterpret_cast<const char*>(v.data());
        auto [ptr, ec] = std::from_chars(b, b + v.size(), cur);
        if (ec != std::errc() || ptr != b + v.size() || v.empty()) {
          std::string msg = "the value at the key is not an integer";
          p::Writer w(p::kError);
          w.raw(msg.data(), msg.size());
          reply(c, std::move(w));
          return;
        }
      }
      int64_t next = 0;
      if (__builtin_add_overflow(cur, delta, &next)) {
        std::string msg = kiln::str("overflow: ", cur, " + ", delta);
        p::Writer w(p::kError);
        w.raw(msg.data(), msg.size());
        reply(c, std::move(w));
        return;
      }
      // Stored as decimal text so get() of a counter is readable.
      std::string text = std::to_string(next);
      data[key] = std::make_shared<const Bytes>(text.begin(), text.end());
      p::Writer w(p::kOk);
      w.u64(uint64_t(next));
      reply(c, std::move(w));
      wake_parked();
      return;
    }
    case p::kCompareSet: {
      std::string key = r.str(p::kMaxKey);
      Bytes expected = r.bytes(p::kMaxValue);
      Bytes desired = r.bytes(p::kMaxValue);
      done();
      auto it = data.find(key);
      // Empty `expected` matches an absent key (and an empty value).
      bool match = it == data.end() ? expected.empty() : *it->second == expected;
      Value now = it == data.end() ? nullptr : it->second;
      if (match) now = data[key] = std::make_shared<const Bytes>(std::move(desired));
      reply(c, p::Writer(p::kOk), now);
      if (match) wake_parked();
      return;
    }
    case p::kDelete: {
      std::string key = r.str(p::kMaxKey);
      done();
      p::Writer w(p::kOk);
      w.u8(data.erase(key) ? 1 : 0);
      reply(c, std::move(w));
      return;
    }
    case p::kNumKeys: {
      done();
      p::Writer w(p::kOk);
      w.u64(uint64_t(data.size()));
      reply(c, std::move(w));
      return;
    }
    default:
      throw bad();
  }
}

// Handles buffered requests while the connection is free to answer them.
void TCPStoreServer::Impl::process(Conn& c) {
  while (!c.dead && !c.parked && !c.sending()) {
    size_t n = c.complete_message();
    if (!n) return;
    p::Header h = p::decode_header(c.in.data());
    // Take the message out so the buffer can receive the next one.
    std::vector<uint8_t> msg;
    if (n == c.in.size()) {
      msg.swap(c.in);
    } else {
      msg.assign(c.in.begin(), c.in.begin() + ptrdiff_t(n));
      c.in.erase(c.in.begin(), c.in.begin() + ptrdiff_t(n));
    }
    const uint8_t* token = msg.data() + p::kHeaderSize;
    handle(c, h, token, token + h.token_len);
    if (!c.dead && !c.in.empty()) check_header(c);
  }
}

void TCPStoreServer::Impl::run() {
  std::vector<pollfd> fds;
  for (;;) {
    auto now = Clock::now();
    // Deadlines: unauthenticated connections and parked requests.
    auto next = Clock::time_point::max();
    for (auto& c : conns) {
      if (c->dead) continue;
      if (!c->authed && now >= c->hello_deadline) {
        reject(*c, kiln::str("no hello within ", opts.hello_timeout.count(), " ms"));
        continue;
      }
      if (c->parked && now >= c->park_deadline) try_answer_parked(*c, true);
      if (!c->authed) next = std::min(next, c->hello_deadline);
      if (c->parked) next = std::min(next, c->park_deadline);
    }
    std::erase_if(conns, [](const auto& c) { return c->dead; });

    bool listen_paused = now < accept_paused_until;
    if (listen_paused) next = std::min(next, accept_paused_until);
    int timeout = -1;
    if (next != Clock::time_point::max()) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
      timeout = int(std::clamp<int64_t>(ms, 0, 60000));
    }

    fds.clear();
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({listen_paused ? -1 : listen_fd, POLLIN, 0});
    for (auto& c : conns) {
      short ev = 0;
      // Read only while no complete message waits its turn (backpressure).
      if (!c->complete_message()) ev |= POLLIN;
      if (c->sending()) ev |= POLLOUT;
      fds.push_back({c->fd, ev, 0});
    }
    int rc = ::poll(fds.data(), fds.size(), timeout);
    if (rc < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "[kiln store] poll failed: %s\n", std::strerror(errno));
      return;
    }
    if (fds[0].revents) return;     // stop()
    size_t n_conns = conns.size();  // accept_all() appends; new ones wait a turn
    if (fds[1].revents & POLLIN) accept_all();
    for (size_t i = 0; i < n_conns; ++i) {
      Conn& c = *conns[i];
      short re = fds[i + 2].revents;
      if (c.dead || !re) continue;
      try {
        if (re & POLLOUT) on_writable(c);
        if (!c.dead && (re & (POLLIN | POLLHUP | POLLERR))) on_readable(c);
        process(c);
        // Hung up or errored with a request still buffered: nothing more can be
        // delivered, and keeping it would make poll() report it forever.
        if (!c.dead && (re & (POLLHUP | POLLERR))) close_conn(c);
      } catch (const Reject& r) {
        reject(c, r.reason);
      } catch (const std::exception& e) {  // e.g. bad_alloc: drop this client only
        reject(c, kiln::str("internal error: ", e.what()));
      }
    }
    // A write may have unparked others that have requests buffered.
    for (auto& c : conns) {
      if (c->dead || c->parked || c->sending()) continue;
      try {
        process(*c);
      } catch (const Reject& r) {
        reject(*c, r.reason);
      } catch (const std::exception& e) {
        reject(*c, kiln::str("internal error: ", e.what()));
      }
    }
  }
}

TCPStoreServer::TCPStoreServer(TCPStoreServerOptions opts) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opts = std::move(opts);
  KILN_CHECK(m.opts.token.size() <= proto::kMaxToken, "[store] server token of ",
             m.opts.token.size(), " bytes exceeds the ", proto::kMaxToken, "-byte limit");
  KILN_CHECK(m.opts.max_unauthenticated >= 1, "[store] max_unauthenticated must be >= 1; got ",
             m.opts.max_unauthenticated);
  std::string where = kiln::str(m.opts.host, ":", m.opts.port);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(m.opts.host.empty() ? nullptr : m.opts.host.c_str(),
                          std::to_string(m.opts.port).c_str(), &hints, &res);
  KILN_CHECK(gai == 0, "[store] server cannot resolve ", where, ": ", gai_strerror(gai));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, freeaddrinfo);

  m.listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  KILN_CHECK(m.listen_fd >= 0, "[store] server socket(): ", std::strerror(errno));
  int one = 1;
  // SO_REUSEADDR: a restarted job can rebind while old connections sit in TIME_WAIT.
  ::setsockopt(m.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(m.listen_fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(m.listen_fd, 1024) != 0) {
    int err = errno;
    ::close(m.listen_fd);
    kiln::throw_error(
        kiln::str("[store] server cannot listen on ", where, ": ", std::strerror(err)));
  }
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  m.port = ntohs(bound.sin_port);

  // Connections owing their hello hold at most a quarter of the descriptors.
  m.max_unauthed = size_t(m.opts.max_unauthenticated);
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    m.max_unauthed = std::clamp<size_t>(size_t(lim.rlim_cur / 4), 1, m.max_unauthed);
  m.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m.wake_fd < 0) {
    int err = errno;
    ::close(m.listen_fd);
    kiln::throw_error(kiln::str("[store] server eventfd(): ", std::strerror(err)));
  }
  m.thread = std::thread([&m] { m.run(); });
}

TCPStoreServer::~TCPStoreServer() {
  stop();
  ::close(impl_->wake_fd);
}

uint16_t TCPStoreServer::port() const {
  return impl_->port;
}

void TCPStoreServer::stop() {
  Impl& m = *impl_;
  std::lock_guard lock(m.stop_mu);
  if (m.stopped) return;
  m.stopped = true;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(m.wake_fd, &one, sizeof(one));
  if (m.thread.joinable()) m.thread.join();
  // Closing every client socket is what unblocks clients parked in get/wait.
  for (auto& c : m.conns) m.close_conn(*c);
  m.conns.clear();
  ::close(m.listen_fd);
  m.listen_fd = -1;
}

}  // namespace kiln::dist
