// TCPStore: the client. One request at a time per client (a mutex), each
// send and receive bounded by a deadline (poll before every read and write).
// After any I/O failure the socket is dropped, because the stream may be out
// of step with the server; the next call reconnects.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/distributed/store.h"
#include "kiln/error.h"
#include "store_protocol.h"

namespace kiln::dist {

namespace {

using Clock = std::chrono::steady_clock;
namespace p = proto;

// Extra time the client allows beyond a server-side wait before giving up on
// the server itself (the server answers TIMEOUT at the wait's deadline).
constexpr Millis kServerSlack{1000};

// A key for error messages: quoted and cut short if long.
std::string quote(const std::string& key) {
  constexpr size_t kMax = 80;
  if (key.size() <= kMax) return kiln::str('"', key, '"');
  return kiln::str('"', key.substr(0, kMax), "\"... (", key.size(), " bytes)");
}

std::string quote_list(const std::vector<std::string>& keys) {
  std::string s = "[";
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i == 8) {
      s += kiln::str(", ... (", keys.size(), " keys)");
      break;
    }
    if (i) s += ", ";
    s += quote(keys[i]);
  }
  return s + "]";
}

// Timeouts travel as u32 milliseconds (~49 days); longer ones are clamped, and
// clamping also keeps `now + timeout` from overflowing.
Millis clamp_ms(Millis t) {
  return Millis(std::clamp<int64_t>(t.count(), 0, UINT32_MAX));
}
uint32_t wire_ms(Millis t) {
  return uint32_t(clamp_ms(t).count());
}

int ms_left(Clock::time_point deadline) {
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<int64_t>(ms, 0, INT32_MAX));
}

// Why an exchange failed; turned into a message naming the op by the caller.
enum class Fail { kNone, kTimeout, kClosed, kIo, kProtocol };

struct Reply {
  uint8_t status = 0;
  Bytes payload;
};

}  // namespace

struct TCPStore::Impl {
  TCPStoreOptions opts;
  std::string addr;  // "host:port" for messages
  std::mutex mu;     // one request at a time on the socket
  // Atomic, not under mu, so timeout()/set_timeout() never wait behind a long get().
  std::atomic<int64_t> timeout_ms{0};
  int fd = -1;
  int last_errno = 0;
  std::string fail_detail;

  ~Impl() { disconnect(); }

  void disconnect() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  // Sends all of buf before the deadline.
  Fail send_all(const Bytes& buf, Clock::time_point deadline) {
    size_t off = 0;
    while (off < buf.size()) {
      ssize_t n = ::send(fd, buf.data() + off, buf.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        off += size_t(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        last_errno = errno;
        return errno == EPIPE || errno == ECONNRESET ? Fail::kClosed : Fail::kIo;
      }
      pollfd pfd{fd, POLLOUT, 0};
      int rc = ::poll(&pfd, 1, ms_left(deadline));
      if (rc < 0 && errno != EINTR) return last_errno = errno, Fail::kIo;
      if (rc == 0) return Fail::kTimeout;
    }
    return Fail::kNone;
  }

  // Reads exactly n bytes into out before the deadline.
  Fail recv_all(uint8_t* out, size_t n, Clock::time_point deadline) {
    size_t off = 0;
    while (off < n) {
      pollfd pfd{fd, POLLIN, 0};
      int rc = ::poll(&pfd, 1, ms_left(deadline));
      if (rc < 0) {
        if (errno == EINTR) continue;
        return last_errno = errno, Fail::kIo;
      }
      if (rc == 0) return Fail::kTimeout;
      ssize_t got = ::recv(fd, out + off, n - off, MSG_DONTWAIT);
      if (got == 0) return Fail::kClosed;
      if (got < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        last_errno = errno;
        return errno == ECONNRESET ? Fail::kClosed : Fail::kIo;
      }
      off += size_t(got);
    }
    return Fail::kNone;
  }

  // One request and its reply on the current connection.
  Fail exchange(const Bytes& msg, Clock::time_point deadline, Reply& reply) {
    if (Fail f = send_all(msg, deadline); f != Fail::kNone) return f;
    uint8_t hdr[p::kHeaderSize];
    if (Fail f = recv_all(hdr, sizeof(hdr), deadline); f != Fail::kNone) return f;
    p::Header h = p::decode_header(hdr);
    if (h.magic != p::kMagic || h.version != p::kVersion || h.token_len != 0 ||
        h.payload_len > p::kMaxPayload) {
      fail_detail = "malformed reply header";
      return Fail::kProtocol;
    }
    reply.status = h.op;
    reply.payload.resize(h.payload_len);
    return recv_all(reply.payload.data(), reply.payload.size(), deadline);
  }

  [[noreturn]] void fail(const std::string& what, Fail f, Millis waited) {
    disconnect();
    switch (f) {
      case Fail::kTimeout:
        kiln::throw_error(kiln::str("[store] ", what, " timed out after ", waited.count(),
                                    " ms waiting for ", addr));
      case Fail::kClosed:
        kiln::throw_error(kiln::str("[store] ", what, " failed: ", addr,
                                    " closed the connection (server stopped or restarted?)"));
      case Fail::kProtocol:
        kiln::throw_error(kiln::str("[store] ", what, " failed: ", fail_detail, " from ", addr));
      default:
        kiln::throw_error(kiln::str("[store] ", what, " failed talking to ", addr, ": ",
                                    std::strerror(last_errno)));
    }
  }

  // Connects and says hello, retrying refused connections until `limit`
  // elapses (a server that is still starting refuses connections).
  void connect(Millis limit) {
    limit = clamp_ms(limit);
    auto deadline = Clock::now() + limit;
    std::string what = kiln::str("connect to ", addr);
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    Millis backoff{10};
    std::string last = "no attempt";
    for (;;) {
      addrinfo* res = nullptr;
      int gai = ::getaddrinfo(opts.host.c_str(), std::to_string(opts.port).c_str(), &hints, &res);
      if (gai == 0) {
        std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, freeaddrinfo);
        std::string err;
        if (try_connect(res->ai_addr, res->ai_addrlen, deadline, err)) break;
        last = err;
      } else if (gai == EAI_NONAME || gai == EAI_SERVICE || gai == EAI_FAIL) {
        // A name that will not resolve: retrying cannot help.
        kiln::throw_error(kiln::str("[store] ", what, " failed: cannot resolve host \"", opts.host,
                                    "\": ", gai_strerror(gai)));
      } else {
        last = gai_strerror(gai);
      }
      if (Clock::now() >= deadline)
        kiln::throw_error(kiln::str("[store] ", what, " timed out after ", limit.count(),
                                    " ms (last error: ", last, ")"));
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
      backoff = std::min(backoff * 2, Millis(500));
    }
    // The hello: the token; a server refusing it replies with the reason.
    Reply r;
    Fail f = exchange(p::Writer(p::kHello, opts.token).take(), deadline, r);
    if (f == Fail::kNone && r.status == p::kOk) return;
    disconnect();
    if (f == Fail::kNone) {
      std::string why(r.payload.begin(), r.payload.end());
      kiln::throw_error(kiln::str("[store] ", what, " rejected by the server: ", why));
    }
    if (f == Fail::kClosed)
      kiln::throw_error(kiln::str("[store] ", what,
                                  " failed: the server closed the connection "
                                  "during the handshake (token mismatch?)"));
    fail(what, f, limit);
  }

  bool try_connect(const sockaddr* sa, socklen_t len, Clock::time_point deadline,
                   std::string& err) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = std::strerror(errno);
      return false;
    }
    int rc = ::connect(fd, sa, len);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      int prc;
      do {
        prc = ::poll(&pfd, 1, ms_left(deadline));
      } while (prc < 0 && errno == EINTR);
      int so_err = 0;
      socklen_t sl = sizeof(so_err);
      if (prc == 1) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_err, &sl);
      rc = prc == 1 && so_err == 0 ? 0 : -1;
      errno = prc == 1 ? so_err : ETIMEDOUT;
    }
    if (rc != 0) {
      err = std::strerror(errno);
      disconnect();
      return false;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return true;
  }

  // Sends one request and returns the reply; throws on any failure. `wait`
  // is how long the server may legitimately hold the request (get/wait).
  Reply request(const std::string& what, p::Writer w, std::optional<Millis> wait = {}) {
    auto msg = w.take();
    std::lock_guard lock(mu);
    Millis timeout(timeout_ms.load());
    if (fd < 0) {  // dropped after an earlier failure: reconnect, naming this op
      try {
        connect(timeout);
      } catch (const kiln::Error& e) {
        std::string why = e.what();
        if (why.rfind("[store] ", 0) == 0) why = why.substr(8);
        kiln::throw_error(kiln::str("[store] ", what, " failed: ", why));
      }
    }
    Millis shown = clamp_ms(wait ? *wait : timeout);
    Millis limit = wait ? shown + kServerSlack : shown;
    Reply r;
    Fail f = exchange(msg, Clock::now() + limit, r);
    if (f != Fail::kNone) fail(what, f, shown);
    if (r.status == p::kError) {
      std::string why(r.payload.begin(), r.payload.end());
      kiln::throw_error(kiln::str("[store] ", what, " failed: ", why));
    }
    if (r.status != p::kOk && r.status != p::kTimeout) {
      fail_detail = kiln::str("unknown reply status ", int(r.status));
      fail(what, Fail::kProtocol, limit);
    }
    return r;
  }

  void check_key(const char* op, const std::string& key) const {
    KILN_CHECK(key.size() <= p::kMaxKey, "[store] ", op, ": key of ", key.size(),
               " bytes exceeds the ", p::kMaxKey, "-byte limit");
  }
  void check_value(const char* op, const std::string& key, const Bytes& v) const {
    KILN_CHECK(v.size() <= p::kMaxValue, "[store] ", op, "(", quote(key), "): value of ", v.size(),
               " bytes exceeds the ", p::kMaxValue, "-byte limit");
  }
};

namespace {
int64_t as_i64(const Bytes& b) {
  return b.size() == 8 ? int64_t(p::get_u64(b.data())) : 0;
}
}  // namespace

TCPStore::TCPStore(TCPStoreOptions opts) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opts = std::move(opts);
  m.addr = kiln::str(m.opts.host, ":", m.opts.port);
  m.timeout_ms = m.opts.timeout.count();
  KILN_CHECK(m.opts.token.size() <= p::kMaxToken, "[store] token of ", m.opts.token.size(),
             " bytes exceeds the ", p::kMaxToken, "-byte limit");
  std::lock_guard lock(m.mu);
  m.connect(m.opts.timeout);
}

TCPStore::~TCPStore() = default;

void TCPStore::set(const std::string& key, const Bytes& value) {
  impl_->check_key("set", key);
  impl_->check_value("set", key, value);
  p::Writer w(p::kSet);
  w.str(key);
  w.bytes(value.data(), value.size());
  impl_->request(kiln::str("set(", quote(key), ")"), std::move(w));
}

Bytes TCPStore::get(const std::string& key) {
  impl_->check_key("get", key);
  Millis t = clamp_ms(timeout());
  p::Writer w(p::kGet);
  w.u32(wire_ms(t));
  w.str(key);
  std::string what = kiln::str("get(", quote(key), ")");
  Reply r = impl_->request(what, std::move(w), t);
  if (r.status == p::kTimeout)
    throw StoreTimeout(kiln::str("[store] ", what, " timed out after ", t.count(),
                                 " ms waiting for ", impl_->addr));
  return std::move(r.payload);
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  impl_->check_key("add", key);
  p::Writer w(p::kAdd);
  w.str(key);
  w.u64(uint64_t(delta));
  Reply r = impl_->request(kiln::str("add(", quote(key), ", ", delta, ")"), std::move(w));
  return as_i64(r.payload);
}

void TCPStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  timeout = clamp_ms(timeout);
  for (const auto& k : keys) impl_->check_key("wait", k);
  p::Writer w(p::kWait);
  w.u32(wire_ms(timeout));
  w.u32(uint32_t(keys.size()));
  for (const auto& k : keys) w.str(k);
  std::string what = kiln::str("wait(", quote_list(keys), ")");
  Reply r = impl_->request(what, std::move(w), timeout);
  if (r.status != p::kTimeout) return;
  p::Reader rd(r.payload.data(), r.payload.size());
  std::vector<std::string> missing;
  uint32_t n = rd.u32();
  for (uint32_t i = 0; i < n && rd.ok(); ++i) missing.push_back(rd.str(p::kMaxKey));
  throw StoreTimeout(kiln::str("[store] ", what, " timed out after ", timeout.count(),
                               " ms waiting for ", impl_->addr,
                               "; missing keys: ", quote_list(missing)));
}

Bytes TCPStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  impl_->check_key("compare_set", key);
  impl_->check_value("compare_set", key, expected);
  impl_->check_value("compare_set", key, desired);
  p::Writer w(p::kCompareSet);
  w.str(key);
  w.bytes(expected.data(), expected.size());
  w.bytes(desired.data(), desired.size());
  return impl_->request(kiln::str("compare_set(", quote(key), ")"), std::move(w)).payload;
}

bool TCPStore::delete_key(const std::string& key) {
  impl_->check_key("delete_key", key);
  p::Writer w(p::kDelete);
  w.str(key);
  Reply r = impl_->request(kiln::str("delete_key(", quote(key), ")"), std::move(w));
  return r.payload.size() == 1 && r.payload[0] != 0;
}

int64_t TCPStore::num_keys() {
  return as_i64(impl_->request("num_keys()", p::Writer(p::kNumKeys)).payload);
}

Millis TCPStore::timeout() const {
  return Millis(impl_->timeout_ms.load());
}

void TCPStore::set_timeout(Millis t) {
  impl_->timeout_ms = t.count();
}

uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  KILN_CHECK(fd >= 0, "[free_loopback_port] socket() failed: ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int err = errno;
  ::close(fd);
  KILN_CHECK(ok && a.sin_port != 0,
             "[free_loopback_port] binding 127.0.0.1:0 failed: ", std::strerror(err));
  return ntohs(a.sin_port);
}

}  // namespace kiln::dist
