// The store server's bounds against clients that hold resources: hundreds of
// idle connections that never say hello must not lock a real client out when
// descriptors are scarce (and the condition is logged once, not per
// connection or retry), and clients that GET a large value and never read
// the reply must not each pin a copy of it. Loopback only, bounded waits.
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "distributed/wait_child.h"
#include "kiln/distributed/store.h"

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

int raw_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A request header: magic "KLNS", version 1, opcode, token length, payload length.
std::vector<uint8_t> header(uint8_t op, uint32_t payload_len) {
  std::vector<uint8_t> h = {'K', 'L', 'N', 'S', 1, op, 0, 0};
  for (int i = 0; i < 4; ++i) h.push_back(uint8_t(payload_len >> (8 * i)));
  return h;
}

void send_all(int fd, const std::vector<uint8_t>& v) {
  ASSERT_EQ(::send(fd, v.data(), v.size(), MSG_NOSIGNAL), ssize_t(v.size()));
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// A server in a child process whose descriptor limit is 128; 300 idle
// connections that never send a hello; a real client must still connect and
// work within 3 s (the hello timeout is 10 s), and the server logs the flood
// a few times at most.
TEST(StoreLimits, IdleConnectionsDoNotLockOutClients) {
  char dir_tmpl[] = "/tmp/kiln_store_limits_XXXXXX";
  ASSERT_NE(::mkdtemp(dir_tmpl), nullptr);
  const std::string log_path = std::string(dir_tmpl) + "/server.err";
  int port_pipe[2], stop_pipe[2];
  ASSERT_EQ(::pipe(port_pipe), 0);
  ASSERT_EQ(::pipe(stop_pipe), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(port_pipe[0]);
    ::close(stop_pipe[1]);
    std::FILE* err = std::freopen(log_path.c_str(), "w", stderr);
    rlimit lim{};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = 128;
    if (!err || ::setrlimit(RLIMIT_NOFILE, &lim) != 0) ::_exit(3);
    TCPStoreServerOptions so;
    so.host = "127.0.0.1";
    TCPStoreServer server(so);
    uint16_t port = server.port();
    if (::write(port_pipe[1], &port, sizeof port) != sizeof port) ::_exit(4);
    char c;
    [[maybe_unused]] ssize_t n = ::read(stop_pipe[0], &c, 1);  // until the parent is done
    std::fflush(stderr);
    ::_exit(0);
  }
  ::close(port_pipe[1]);
  ::close(stop_pipe[0]);
  uint16_t port = 0;
  ASSERT_EQ(::read(port_pipe[0], &port, sizeof port), ssize_t(sizeof port));
  ::close(port_pipe[0]);

  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    int fd = raw_connect(port);
    if (fd >= 0) idle.push_back(fd);
  }
  EXPECT_GE(idle.size(), 250u);
  auto t0 = Clock::now();
  std::string error;
  try {
    TCPStoreOptions co;
    co.port = port;
    co.timeout = 3000ms;
    TCPStore c(co);
    c.set("alive", {1});
    EXPECT_EQ(c.get("alive"), Bytes{1});
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "") << "a real client was locked out";
  EXPECT_LT(Clock::now() - t0, 3s);
  for (int fd : idle) ::close(fd);
  ::close(stop_pipe[1]);
  const int status = kiln::testing::wait_child(pid, Clock::now() + 10s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const std::string log = slurp(log_path);
  const size_t lines = count(log, "\n");
  EXPECT_LE(lines, 4u) << log.substr(0, 2000);
  EXPECT_NE(log.find("have not sent a hello"), std::string::npos) << log.substr(0, 2000);
  std::remove(log_path.c_str());
  ::rmdir(dir_tmpl);
}

// The cap itself must allow a connection.
TEST(StoreLimits, MaxUnauthenticatedIsChecked) {
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  so.max_unauthenticated = 0;
  try {
    TCPStoreServer server(so);
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_unauthenticated must be >= 1; got 0"),
              std::string::npos)
        << e.what();
  }
}

size_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * size_t(::sysconf(_SC_PAGESIZE));
}

// 16 clients GET a 16 MiB value and never read: the server's memory must not
// grow by a copy per client (it grew by 16 x 16 MiB).
TEST(StoreLimits, SlowReadersDoNotEachCopyAValue) {
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  TCPStoreServer server(so);
  TCPStoreOptions co;
  co.port = server.port();
  co.timeout = 5000ms;
  TCPStore c(co);
  const std::string key = "big";
  c.set(key, Bytes(16u << 20, 7));
  EXPECT_EQ(c.get(key).size(), 16u << 20);  // the client's own buffers exist now
  const size_t before = resident_bytes();

  std::vector<int> readers;
  for (int i = 0; i < 16; ++i) {
    int fd = raw_connect(server.port());
    ASSERT_GE(fd, 0);
    send_all(fd, header(1, 0));  // hello, no token
    uint8_t ok[12];
    pollfd pfd{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 2000), 1);
    ASSERT_EQ(::recv(fd, ok, sizeof ok, MSG_WAITALL), 12);
    // get: u32 timeout_ms, then the key (u32 length + bytes).
    std::vector<uint8_t> get = header(3, 4 + 4 + uint32_t(key.size()));
    for (uint32_t v : {1000u, uint32_t(key.size())})
      for (int b = 0; b < 4; ++b) get.push_back(uint8_t(v >> (8 * b)));
    get.insert(get.end(), key.begin(), key.end());
    send_all(fd, get);
    readers.push_back(fd);
  }
  // Every reply has started (its first bytes are readable): the server has
  // queued all of them. Nothing more is read.
  for (int fd : readers) {
    pollfd pfd{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&pfd, 1, 3000), 1);
  }
  c.num_keys();  // one more round trip through the serving loop
  const size_t grown = resident_bytes() - std::min(resident_bytes(), before);
  EXPECT_LT(grown, size_t(64) << 20) << "grew by " << (grown >> 20) << " MiB";
  for (int fd : readers) ::close(fd);
  c.set("after", {1});  // the server is fine
}

}  // namespace
}  // namespace kiln::dist
