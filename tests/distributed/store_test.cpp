// The TCP store: every operation, many threads and two processes, blocking
// get/wait, timeouts, tokens, and hostile raw-socket clients that must be
// rejected without disturbing a well-behaved one. Loopback only; every wait
// is bounded by a timeout of a few seconds at most.
#include "kiln/distributed/store.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "distributed/forked_ranks.h"
#include "runtime/test_util.h"

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;
using kiln::testing::expect_error;
using namespace std::chrono_literals;

Bytes b(const std::string& s) {
  return Bytes(s.begin(), s.end());
}
std::string s(const Bytes& v) {
  return std::string(v.begin(), v.end());
}

TCPStoreServerOptions loopback_server(const std::string& token = "") {
  TCPStoreServerOptions o;
  o.host = "127.0.0.1";
  o.token = token;
  o.hello_timeout = 300ms;
  return o;
}

TCPStoreOptions client(uint16_t port, const std::string& token = "", Millis timeout = 2000ms) {
  TCPStoreOptions o;
  o.port = port;
  o.token = token;
  o.timeout = timeout;
  return o;
}

long ms_since(Clock::time_point t0) {
  return long(std::chrono::duration_cast<Millis>(Clock::now() - t0).count());
}

// A plain blocking TCP connection to the server (for hand-made messages).
int raw_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

void raw_send(int fd, const Bytes& v) {
  EXPECT_EQ(::send(fd, v.data(), v.size(), MSG_NOSIGNAL), ssize_t(v.size()));
}

// A message header: magic "KLNS", version, opcode, token length, payload length.
Bytes header(uint8_t op, uint16_t token_len, uint32_t payload_len, uint8_t version = 1) {
  Bytes h = {'K', 'L', 'N', 'S', version, op, uint8_t(token_len), uint8_t(token_len >> 8)};
  for (int i = 0; i < 4; ++i) h.push_back(uint8_t(payload_len >> (8 * i)));
  return h;
}

// Sends the hello (no token) and reads the 12-byte OK reply.
void raw_hello(int fd) {
  raw_send(fd, header(1, 0, 0));
  uint8_t reply[12];
  pollfd pfd{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 2000), 1);
  ASSERT_EQ(::recv(fd, reply, sizeof(reply), MSG_WAITALL), 12);
  EXPECT_EQ(reply[5], 0) << "hello not accepted";
}

// True once the server closes fd (end of stream or reset) within `limit`.
bool closed_by_server(int fd, Millis limit) {
  auto deadline = Clock::now() + limit;
  char buf[256];
  for (;;) {
    int left = int(std::chrono::duration_cast<Millis>(deadline - Clock::now()).count());
    if (left <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, left) != 1) return false;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;  // 0: closed; <0: reset
  }
}

// A well-behaved client round trip, used to show the server still serves.
void good_client_works(uint16_t port, const std::string& token = "") {
  TCPStore c(client(port, token));
  c.set("alive", b("yes"));
  EXPECT_EQ(s(c.get("alive")), "yes");
}

// set/get/add/compare_set/delete_key/num_keys on one client.
TEST(TCPStore, BasicOperations) {
  TCPStoreServer server(loopback_server());
  TCPStore c(client(server.port()));
  EXPECT_EQ(c.num_keys(), 0);
  c.set("k", b("v1"));
  EXPECT_EQ(s(c.get("k")), "v1");
  c.set("k", b("v2"));
  EXPECT_EQ(s(c.get("k")), "v2");
  c.set("empty", {});
  EXPECT_TRUE(c.get("empty").empty());

  EXPECT_EQ(c.add("n", 5), 5);
  EXPECT_EQ(c.add("n", -7), -2);
  EXPECT_EQ(s(c.get("n")), "-2");  // counters are stored as decimal text
  expect_error([&] { c.add("k", 1); }, {"[store] add(\"k\", 1)", "not an integer"});

  EXPECT_EQ(s(c.compare_set("cas", {}, b("first"))), "first");   // absent + empty: set
  EXPECT_EQ(s(c.compare_set("cas", {}, b("second"))), "first");  // mismatch: current
  EXPECT_EQ(s(c.compare_set("cas", b("first"), b("third"))), "third");
  EXPECT_TRUE(c.compare_set("none", b("x"), b("y")).empty());  // absent, not empty
  EXPECT_EQ(c.num_keys(), 4);

  EXPECT_TRUE(c.delete_key("k"));
  EXPECT_FALSE(c.delete_key("k"));
  EXPECT_EQ(c.num_keys(), 3);

  Bytes big(8 << 20);  // exercises partial reads and writes on both sides
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 131);
  c.set("big", big);
  EXPECT_EQ(c.get("big"), big);
}

// Threads with their own clients and one shared client see consistent counters.
TEST(TCPStore, ManyThreads) {
  TCPStoreServer server(loopback_server());
  TCPStore shared(client(server.port()));
  constexpr int kThreads = 4, kAdds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        TCPStore own(client(server.port()));
        for (int i = 0; i < kAdds; ++i) {
          own.add("own", 1);
          shared.add("shared", 1);
        }
        own.set(kiln::str("done", t), b(std::to_string(t)));
        std::vector<std::string> all;
        for (int k = 0; k < kThreads; ++k) all.push_back(kiln::str("done", k));
        own.wait(all, 3000ms);
        if (s(shared.get(kiln::str("done", (t + 1) % kThreads))) !=
            std::to_string((t + 1) % kThreads))
          ++failures;
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(shared.add("own", 0), kThreads * kAdds);
  EXPECT_EQ(shared.add("shared", 0), kThreads * kAdds);
  EXPECT_EQ(shared.num_keys(), 2 + kThreads);
}

// Two forked processes rendezvous through a server in the parent.
TEST(TCPStore, TwoProcesses) {
  // Forked before the server thread starts (see forked_ranks.h).
  kiln::testing::ForkedRanks ranks(2, [](int rank, uint64_t port) {
    TCPStore c(client(uint16_t(port)));
    c.add("arrived", 1);
    c.set(kiln::str("rank", rank), b(kiln::str("hello from ", rank)));
    if (s(c.get(kiln::str("rank", 1 - rank))) != kiln::str("hello from ", 1 - rank)) return 1;
    c.wait({"rank0", "rank1"}, 3000ms);
    c.compare_set("leader", {}, b(std::to_string(rank)));
    return 0;
  });
  TCPStoreServer server(loopback_server());
  const uint16_t port = server.port();
  ranks.start(port);
  for (int status : ranks.wait(Clock::now() + 8s)) {
    if (status == -1) {
      ADD_FAILURE() << "a child did not finish in time";
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  TCPStore c(client(port));
  EXPECT_EQ(c.add("arrived", 0), 2);
  std::string leader = s(c.get("leader"));
  EXPECT_TRUE(leader == "0" || leader == "1") << leader;
}

// get() of a missing key blocks until another client sets it.
TEST(TCPStore, GetBlocksUntilSet) {
  TCPStoreServer server(loopback_server());
  TCPStore waiter(client(server.port()));
  TCPStore setter(client(server.port()));
  auto t0 = Clock::now();
  std::thread th([&] {
    std::this_thread::sleep_for(200ms);
    setter.set("late", b("value"));
  });
  EXPECT_EQ(s(waiter.get("late")), "value");
  long ms = ms_since(t0);
  th.join();
  EXPECT_GE(ms, 150);
  EXPECT_LT(ms, 1500);
  // wait() likewise returns once the last key appears.
  std::thread th2([&] {
    std::this_thread::sleep_for(100ms);
    setter.add("counter", 1);
  });
  waiter.wait({"late", "counter"}, 2000ms);
  th2.join();
}

// Timeouts of get and wait: the error names the op, missing keys and host:port,
// and arrives within the timeout plus slack.
TEST(TCPStore, TimeoutsNameKeysAndPeer) {
  TCPStoreServer server(loopback_server());
  std::string where = kiln::str("127.0.0.1:", server.port());
  TCPStore c(client(server.port()));
  c.set("a", b("1"));
  auto t0 = Clock::now();
  expect_error(
      [&] {
        c.wait({"a", "b", "c"}, 300ms);
      },
      {"[store] wait([\"a\", \"b\", \"c\"]) timed out after 300 ms", where.c_str(),
       "missing keys: [\"b\", \"c\"]"});
  long ms = ms_since(t0);
  EXPECT_GE(ms, 250);
  EXPECT_LT(ms, 1300);

  c.set_timeout(200ms);
  EXPECT_EQ(c.timeout(), 200ms);
  t0 = Clock::now();
  std::string msg = kiln::str("[store] get(\"nope\") timed out after 200 ms waiting for ", where);
  expect_error([&] { c.get("nope"); }, msg);
  EXPECT_LT(ms_since(t0), 1200);
  // The client stays usable after a timeout.
  EXPECT_EQ(s(c.get("a")), "1");
}

// A wrong or missing token is refused with a clear error; good clients go on.
TEST(TCPStore, TokenMismatchRejected) {
  TCPStoreServer server(loopback_server("s3cret"));
  TCPStore good(client(server.port(), "s3cret"));
  good.set("x", b("1"));
  ::testing::internal::CaptureStderr();
  expect_error([&] { TCPStore bad(client(server.port(), "wrong")); },
               {"[store] connect to 127.0.0.1:", "rejected by the server", "wrong token"});
  expect_error([&] { TCPStore bad(client(server.port())); }, "no token");
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("[kiln store] rejected 127.0.0.1:"), std::string::npos) << log;
  EXPECT_EQ(s(good.get("x")), "1");
  good_client_works(server.port(), "s3cret");
}

// Garbage, a wrong version, oversized lengths, truncated and silent clients on
// raw sockets are each closed and logged while a good client keeps working.
TEST(TCPStore, HostileClientsRejected) {
  TCPStoreServer server(loopback_server());
  uint16_t port = server.port();
  TCPStore good(client(port, "", 5000ms));
  // A good client parked in get() must be answered despite the noise.
  std::thread parked([&] { EXPECT_EQ(s(good.get("after-noise")), "ok"); });

  ::testing::internal::CaptureStderr();
  struct Case {
    const char* name;
    std::function<void(int)> act;
    const char* log;
  };
  std::vector<Case> cases = {
      {"garbage", [](int fd) { raw_send(fd, b("GET / HTTP/1.1\r\n\r\n")); }, "bad magic"},
      {"version", [](int fd) { raw_send(fd, header(1, 0, 0, 9)); }, "protocol version 9"},
      {"long token", [](int fd) { raw_send(fd, header(1, 5000, 0)); }, "token length 5000"},
      {"oversized",
       [](int fd) {
         raw_hello(fd);
         raw_send(fd, header(2, 0, 0xFFFFFFF0u));
       },
       "over the limit"},
      {"truncated",
       [](int fd) {
         raw_hello(fd);
         Bytes m = header(2, 0, 100);
         m.resize(m.size() + 10, 'x');
         raw_send(fd, m);
         ::shutdown(fd, SHUT_WR);
       },
       "truncated message (22 of 112 bytes)"},
      {"malformed",
       [](int fd) {
         raw_hello(fd);
         Bytes m = header(2, 0, 4);
         for (uint8_t x : {0xFF, 0xFF, 0, 0}) m.push_back(x);  // key length past the end
         raw_send(fd, m);
       },
       "malformed set request"},
      {"silent", [](int) {}, "no hello within 300 ms"},
  };
  for (const Case& c : cases) {
    int fd = raw_connect(port);
    c.act(fd);
    EXPECT_TRUE(closed_by_server(fd, 2000ms)) << c.name;
    ::close(fd);
    good_client_works(port);
  }
  // A slow client that stalls mid-message only holds up itself.
  int slow = raw_connect(port);
  raw_hello(slow);
  raw_send(slow, header(2, 0, 100));
  good_client_works(port);
  std::string log = ::testing::internal::GetCapturedStderr();
  for (const Case& c : cases)
    EXPECT_NE(log.find(c.log), std::string::npos) << c.name << " not logged in:\n" << log;
  EXPECT_NE(log.find("[kiln store] rejected 127.0.0.1:"), std::string::npos);

  TCPStore other(client(port));
  other.set("after-noise", b("ok"));
  parked.join();
  ::close(slow);
}

// stop() wakes clients parked in get() with an error instead of a hang.
TEST(TCPStore, StopUnblocksWaiters) {
  TCPStoreServer server(loopback_server());
  TCPStore c(client(server.port(), "", 5000ms));
  auto t0 = Clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(150ms);
    server.stop();
    server.stop();  // idempotent
  });
  expect_error([&] { c.get("never"); }, {"[store] get(\"never\") failed", "closed the connection"});
  stopper.join();
  EXPECT_LT(ms_since(t0), 2000);
  // Later calls try to reconnect and fail naming the op.
  c.set_timeout(200ms);
  expect_error([&] { c.num_keys(); }, {"[store] num_keys() failed: connect to", "timed out"});
}

// Connecting where no server listens retries until the timeout, then names host:port.
TEST(TCPStore, ConnectWithoutServerTimesOut) {
  uint16_t port;
  {  // a port that was just free
    TCPStoreServer probe(loopback_server());
    port = probe.port();
  }
  auto t0 = Clock::now();
  expect_error([&] { TCPStore c(client(port, "", 300ms)); },
               kiln::str("[store] connect to 127.0.0.1:", port, " timed out after 300 ms"));
  long ms = ms_since(t0);
  EXPECT_GE(ms, 200);
  EXPECT_LT(ms, 1500);
}

// A client started before its server connects once the server comes up.
TEST(TCPStore, ConnectRetriesUntilServerStarts) {
  uint16_t port;
  {
    TCPStoreServer probe(loopback_server());
    port = probe.port();
  }
  std::unique_ptr<TCPStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(200ms);
    auto o = loopback_server();
    o.port = port;
    server = std::make_unique<TCPStoreServer>(o);
  });
  TCPStore c(client(port, "", 3000ms));
  starter.join();
  c.set("k", b("v"));
  EXPECT_EQ(s(c.get("k")), "v");
}

// Without a token the server refuses non-loopback peers (needs a non-loopback IPv4).
TEST(TCPStore, NonLoopbackNeedsToken) {
  std::string ip;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i && ip.empty(); i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      auto* a = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
      if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) continue;
      char buf[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
      ip = buf;
    }
    ::freeifaddrs(ifs);
  }
  if (ip.empty()) GTEST_SKIP() << "no non-loopback IPv4 address";
  TCPStoreServerOptions o;
  o.host = ip;
  TCPStoreServer server(o);
  TCPStoreOptions co = client(server.port(), "", 1000ms);
  co.host = ip;
  ::testing::internal::CaptureStderr();
  expect_error([&] { TCPStore c(co); }, {"rejected by the server", "non-loopback"});
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("non-loopback client"), std::string::npos) << log;
}

}  // namespace
}  // namespace kiln::dist
